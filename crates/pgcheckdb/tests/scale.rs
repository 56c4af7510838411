//! Large clusters by simulation: a real PostgreSQL 18 cluster whose table is given 1,200
//! segments as sparse files (`set_len`, like `truncate -s`: 1.2 TB apparent, nothing written),
//! with a run of 100 segments missing in the middle, a partial segment and empty ones after it.
//! The plan must hold every segment in one fork, count its blocks, report the missing run as
//! one `segment_gap` finding and nothing else, and stay within a memory bound per file: the
//! heap used while planning is measured by a counting allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs::OpenOptions;
use std::sync::atomic::{AtomicUsize, Ordering};

use pgcheckdb_cluster::ClusterOptions;
use pgcheckdb_pg::finding::FindingKind;
use pgcheckdb_pg::format::control::ControlFile;
use pgcheckdb_pg::format::relfile::ForkNumber;
use pgcheckdb_pg::plan::Plan;
use pgcheckdb_testkit::loaded;

/// The allocator of this test binary: the system's, counting live and peak bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            if new_size > layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Segments 0..SEGMENTS of the table; MISSING are absent; PARTIAL has 3 blocks; EMPTY are empty.
const SEGMENTS: u32 = 1200;
const MISSING: std::ops::RangeInclusive<u32> = 600..=699;
const PARTIAL: u32 = 1200;
const EMPTY: std::ops::RangeInclusive<u32> = 1201..=1204;
/// Heap bytes the planning may use per listed relation file at its peak (the whole plan, with
/// the listing's sort and the fork grouping; a file itself keeps 48 bytes).
const PEAK_BYTES_PER_FILE: usize = 200;

#[test]
fn a_table_of_1200_sparse_segments_is_planned_with_one_gap_and_little_memory_pg18() {
    let mut c = loaded::started_with(&ClusterOptions::new(18, true));
    let fill = "CREATE TABLE big (id int); INSERT INTO big VALUES (1); CHECKPOINT;";
    let rel = loaded::load_and_stop(&mut c, fill, &["big"]).remove(0);
    let datadir = c.datadir().to_path_buf();
    let control = ControlFile::read_from_datadir(&datadir).expect("pg_control");
    let seg_bytes = control.relseg_size as u64 * control.blcksz as u64;
    let bs = control.blcksz as u64;
    let relfilenode: u32 = rel
        .rsplit('/')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("filenode");
    let segment = |segno: u32| {
        let name = if segno == 0 {
            rel.clone()
        } else {
            format!("{rel}.{segno}")
        };
        datadir.join(name)
    };
    let sized = |segno: u32, len: u64| {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(segment(segno))
            .expect("segment");
        f.set_len(len).expect("sparse length");
    };
    for segno in (0..SEGMENTS).filter(|s| !MISSING.contains(s)) {
        sized(segno, seg_bytes);
    }
    sized(PARTIAL, 3 * bs);
    for segno in EMPTY {
        sized(segno, 0);
    }

    let live_before = LIVE.load(Ordering::Relaxed);
    PEAK.store(live_before, Ordering::Relaxed);
    let relseg_size = control.relseg_size as u64;
    let plan = Plan::build(&datadir, control);
    let peak = PEAK.load(Ordering::Relaxed) - live_before;

    let present = SEGMENTS as usize - MISSING.count() + 1 + EMPTY.count();
    let (fi, fork) = plan
        .forks
        .iter()
        .enumerate()
        .find(|(_, f)| f.relfilenode == relfilenode && f.fork == ForkNumber::Main)
        .expect("the table's main fork is planned");
    assert_eq!(
        fork.segments().len(),
        present,
        "every segment file in one fork"
    );
    let full = (SEGMENTS as u64 - MISSING.count() as u64) * relseg_size;
    assert_eq!(plan.fork_blocks[fi], full + 3, "blocks of the fork");

    let gaps: Vec<_> = plan
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::SegmentGap)
        .collect();
    assert_eq!(gaps.len(), 1, "one finding for the missing run: {gaps:#?}");
    let gap = gaps[0];
    assert_eq!(gap.file, format!("{rel}.{}", MISSING.start()), "{gap:#?}");
    assert_eq!(gap.detail["missing_segment"], *MISSING.start(), "{gap:#?}");
    assert_eq!(
        gap.detail["last_missing_segment"],
        *MISSING.end(),
        "{gap:#?}"
    );
    assert_eq!(gap.detail["missing_segments"], MISSING.count(), "{gap:#?}");
    let others: Vec<_> = plan
        .findings
        .iter()
        .filter(|f| f.kind != FindingKind::SegmentGap)
        .filter(|f| f.severity != pgcheckdb_pg::finding::Severity::Info)
        .collect();
    assert!(others.is_empty(), "no other problem: {others:#?}");

    let files = plan.dir.files.len();
    assert!(files > present, "the catalogs' files are listed too");
    eprintln!("planning {files} files: peak heap {peak} bytes");
    assert!(
        peak <= PEAK_BYTES_PER_FILE * files,
        "planning {files} files took {peak} bytes of heap at its peak, more than {PEAK_BYTES_PER_FILE} per file"
    );
}
