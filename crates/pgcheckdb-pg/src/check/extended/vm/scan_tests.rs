//! Tests of the scan side of the visibility and hint-bit checks ([`super`]).

use super::*;
use crate::check::standard::ClusterFacts;
use crate::finding::Severity;
use std::collections::HashMap;

fn facts() -> ClusterFacts {
    ClusterFacts {
        blcksz: 8192,
        max_align: 8,
        next_xid: 1000,
        next_multi: 10,
        oldest_xid: 3,
        oldest_multi: 1,
        clog_exact: true,
        xid_severity: Severity::Error,
    }
}

/// A commit log where 100 committed, 101 aborted, 102 is in progress.
fn clog() -> CommitLog {
    let mut seg = vec![0u8; 8192];
    let set = |seg: &mut Vec<u8>, xid: usize, v: u8| seg[xid / 4] |= v << (2 * (xid % 4));
    set(&mut seg, 100, 1);
    set(&mut seg, 101, 2);
    CommitLog::from_segments(8192, HashMap::from([(0, seg)]))
}

fn header(xmin: u32, xmax: u32, mask: u16) -> HeapTupleHeader {
    HeapTupleHeader::for_tests(xmin, xmax, mask)
}

#[test]
fn visibility_to_everyone_follows_hints_then_pg_xact() {
    let (f, log) = (facts(), clog());
    let (w, c) = (XidWindow::new(50, &f), Statuses::new(&log));
    let seen = |h: HeapTupleHeader| match seen_by_everyone(&h, &w, &c) {
        Seen::Everyone => "everyone",
        Seen::NotEveryone(..) => "not",
        Seen::Unknown => "unknown",
    };
    assert_eq!(seen(header(100, 0, im::HEAP_XMAX_INVALID)), "everyone");
    assert_eq!(seen(header(101, 0, im::HEAP_XMAX_INVALID)), "not");
    assert_eq!(seen(header(102, 0, im::HEAP_XMAX_INVALID)), "not");
    assert_eq!(seen(header(100, 100, 0)), "not");
    assert_eq!(seen(header(100, 101, 0)), "everyone");
    // A deleter that never committed may have crashed: the row may be live.
    assert_eq!(seen(header(100, 102, 0)), "unknown");
    assert_eq!(seen(header(100, 100, im::HEAP_XMAX_LOCK_ONLY)), "everyone");
    assert_eq!(seen(header(100, 5, im::HEAP_XMAX_IS_MULTI)), "unknown");
    // Outside relfrozenxid..nextXid pg_xact is not asked.
    assert_eq!(seen(header(20, 0, im::HEAP_XMAX_INVALID)), "unknown");
    assert_eq!(seen(header(5000, 0, im::HEAP_XMAX_INVALID)), "unknown");
    let frozen = im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID | im::HEAP_XMAX_INVALID;
    assert_eq!(seen(header(101, 0, frozen)), "everyone");
}

#[test]
fn freezing_follows_heap_tuple_needs_eventual_freeze() {
    let frozen = im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID;
    assert_eq!(needs_freeze(&header(100, 0, frozen)), None);
    assert_eq!(needs_freeze(&header(2, 0, 0)), None);
    assert_eq!(
        needs_freeze(&header(100, 0, im::HEAP_XMIN_COMMITTED)),
        Some((Why::XminNotFrozen, 100))
    );
    assert_eq!(
        needs_freeze(&header(100, 7, frozen | im::HEAP_XMAX_INVALID)),
        Some((Why::XmaxNotFrozen, 7))
    );
    assert_eq!(
        needs_freeze(&header(100, 1, frozen | im::HEAP_XMAX_IS_MULTI)),
        Some((Why::MultiNotFrozen, 1))
    );
}

#[test]
fn hint_bits_are_checked_against_pg_xact_inside_the_window() {
    let (f, log) = (facts(), clog());
    let (w, c) = (XidWindow::new(50, &f), Statuses::new(&log));
    let conflicts = |h: HeapTupleHeader| -> Vec<HintConflict> {
        hint_conflicts(&h, &w, &c)
            .into_iter()
            .flatten()
            .map(|x| x.0)
            .collect()
    };
    assert!(conflicts(header(
        100,
        101,
        im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID
    ))
    .is_empty());
    assert_eq!(
        conflicts(header(101, 0, im::HEAP_XMIN_COMMITTED)),
        vec![HintConflict::XminCommittedButAborted]
    );
    assert_eq!(
        conflicts(header(100, 0, im::HEAP_XMIN_INVALID)),
        vec![HintConflict::XminInvalidButCommitted]
    );
    // Both xmin bits: frozen, not a claim about pg_xact.
    assert!(conflicts(header(
        101,
        0,
        im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID
    ))
    .is_empty());
    assert_eq!(
        conflicts(header(
            100,
            101,
            im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_COMMITTED
        )),
        vec![HintConflict::XmaxCommittedButAborted]
    );
    assert_eq!(
        conflicts(header(
            100,
            100,
            im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID
        )),
        vec![HintConflict::XmaxInvalidButCommitted]
    );
    // A committed locker's xmax is marked invalid once it ended: no conflict.
    let lock = im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID | im::HEAP_XMAX_LOCK_ONLY;
    assert!(conflicts(header(100, 100, lock)).is_empty());
    // Outside the window pg_xact is not asked.
    assert!(conflicts(header(20, 0, im::HEAP_XMIN_INVALID)).is_empty());
}

#[test]
fn commit_hints_on_xids_in_progress_count_after_a_clean_shutdown_only() {
    // As `clog()`, and 103 sub-committed.
    let mut seg = vec![0u8; 8192];
    for (xid, v) in [(100usize, 1u8), (101, 2), (103, 3)] {
        seg[xid / 4] |= v << (2 * (xid % 4));
    }
    let log = CommitLog::from_segments(8192, HashMap::from([(0, seg)]));
    let conflicts = |h: HeapTupleHeader, exact: bool| -> Vec<HintConflict> {
        let f = ClusterFacts {
            clog_exact: exact,
            ..facts()
        };
        let (w, c) = (XidWindow::new(50, &f), Statuses::new(&log));
        hint_conflicts(&h, &w, &c)
            .into_iter()
            .flatten()
            .map(|x| x.0)
            .collect()
    };
    let xmin_committed = im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID;
    assert_eq!(
        conflicts(header(102, 0, xmin_committed), true),
        vec![HintConflict::XminCommittedButInProgress]
    );
    // Not shut down cleanly: pg_xact may lag, "in progress" proves nothing.
    assert!(conflicts(header(102, 0, xmin_committed), false).is_empty());
    // Sub-committed, frozen, outside the window (before relfrozenxid, at or past nextXid):
    // nothing.
    assert!(conflicts(header(103, 0, xmin_committed), true).is_empty());
    let frozen = im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID | im::HEAP_XMAX_INVALID;
    assert!(conflicts(header(102, 0, frozen), true).is_empty());
    assert!(conflicts(header(20, 0, xmin_committed), true).is_empty());
    assert!(conflicts(header(1000, 0, xmin_committed), true).is_empty());
    // An updater's or deleter's xmax.
    let xmax_committed = im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_COMMITTED;
    assert_eq!(
        conflicts(header(100, 102, xmax_committed), true),
        vec![HintConflict::XmaxCommittedButInProgress]
    );
    assert!(conflicts(header(100, 102, xmax_committed), false).is_empty());
    // A locker's xmax, or a multixact: not judged by "in progress".
    let locker = xmax_committed | im::HEAP_XMAX_LOCK_ONLY;
    assert!(conflicts(header(100, 102, locker), true).is_empty());
    let multi = im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_IS_MULTI;
    assert!(conflicts(header(100, 102, multi), true).is_empty());
    // In-progress xids without a commit hint are no conflict.
    assert!(conflicts(header(102, 102, 0), true).is_empty());
    assert!(conflicts(header(100, 102, im::HEAP_XMIN_COMMITTED), true).is_empty());
}

#[test]
fn summaries_round_trip_and_healthy_pages_give_none() {
    let healthy = PageSummary {
        pd_all_visible: true,
        ..PageSummary::default()
    };
    assert!(!healthy.matters());
    let s = PageSummary {
        pd_all_visible: true,
        all_zero: false,
        not_visible: None,
        not_frozen: Some(Offence {
            offnum: 7,
            why: Why::XmaxNotFrozen,
            xid: 1234,
        }),
    };
    assert!(s.matters());
    let mut buf = Vec::new();
    s.write(&mut Writer::start(
        &mut buf,
        3,
        crate::check::extended::facts::Family::Visibility,
        9,
    ));
    let (head, mut r) = Reader::open(&buf).unwrap();
    assert_eq!((head.unit, head.blkno), (3, 9));
    assert_eq!(r.u8(), Some(Tag::HeapPage as u8));
    assert_eq!(PageSummary::read(&mut r), Some(s));
}

#[test]
fn map_runs_join_equal_neighbours() {
    let mut page = vec![0u8; 8192];
    // Heap blocks 0..=5 all-visible and all-frozen, 6 all-visible, 9 all-visible.
    page[24] = 0xFF;
    page[25] = 0x0F | (0x1 << 4);
    page[26] = 0x1 << 2;
    let mut runs = Vec::new();
    map_runs(&page, 1, 8192, &mut runs);
    let base = heapblocks_per_page(8192) as u32;
    assert_eq!(
        runs,
        vec![
            MapRun {
                start: base,
                end: base + 6,
                bits: 3
            },
            MapRun {
                start: base + 6,
                end: base + 7,
                bits: 1
            },
            MapRun {
                start: base + 9,
                end: base + 10,
                bits: 1
            },
        ]
    );
}

#[test]
fn tuples_passed_over_change_nothing() {
    // A page whose tuples repeat commit fields, in runs, with offences late in a run: the walk
    // that passes over repeats finds what checking every tuple finds.
    use crate::test_pages::{heap_page_with_tuples, TupleSpec, TUPLE_LEN};
    let (f, log) = (facts(), clog());
    let committed = im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID;
    let frozen = committed | im::HEAP_XMIN_INVALID;
    let fields: Vec<(u32, u32, u16)> = [
        (100, 0, frozen),
        (100, 0, frozen),
        (100, 0, committed),
        (100, 0, committed),
        (101, 0, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID),
        (101, 0, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID),
        (102, 0, im::HEAP_XMAX_INVALID),
        (100, 100, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID),
        (100, 100, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID),
        (100, 0, frozen),
    ]
    .to_vec();
    let specs: Vec<TupleSpec> = fields
        .iter()
        .enumerate()
        .map(|(i, &(xmin, xmax, _))| TupleSpec {
            xmax,
            xmin,
            ..TupleSpec::inserted(0, i as u16 + 1)
        })
        .collect();
    let mut page = heap_page_with_tuples(&specs);
    for (i, &(_, _, mask)) in fields.iter().enumerate() {
        let at = 8192 - TUPLE_LEN * (i + 1) + 20;
        page[at..at + 2].copy_from_slice(&mask.to_le_bytes());
    }
    let header = crate::format::page::PageHeader::parse(&page).expect("header");
    let mut items = Vec::new();
    crate::format::itemid::line_pointers_into(&page, &header, &mut items);
    let tuples = HeapTuples {
        page: &page,
        blkno: 0,
        items: &items,
    };
    let work = HeapPageWork {
        summary: true,
        hints: true,
        window: XidWindow::new(50, &f),
        clog: &log,
    };
    let (mut summary, mut hints) = (PageSummary::default(), Vec::new());
    heap_page(&tuples, PD_ALL_VISIBLE, &work, &mut summary, &mut hints);
    // Every tuple checked, one by one.
    let statuses = Statuses::new(&log);
    let mut expected = PageSummary {
        pd_all_visible: true,
        ..PageSummary::default()
    };
    let mut expected_hints = Vec::new();
    for item in &items {
        let (_, h) = tuples.tuple(item.offnum).expect("tuple");
        note_tuple(&h, item.offnum, &work.window, &statuses, &mut expected);
        for (conflict, xid) in hint_conflicts(&h, &work.window, &statuses)
            .into_iter()
            .flatten()
        {
            expected_hints.push(HintProblem {
                offnum: item.offnum,
                conflict,
                xid,
            });
        }
    }
    assert_eq!(summary, expected);
    assert_eq!(hints, expected_hints);
    assert!(expected.not_visible.is_some() && expected.not_frozen.is_some());
    assert_eq!(expected_hints.len(), 4, "{expected_hints:?}");
}
