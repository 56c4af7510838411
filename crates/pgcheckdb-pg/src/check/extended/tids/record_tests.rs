//! Tests of the TID check's fact records ([`super`]): written, then read back.

use super::*;

fn round_trip(tids: &[(u32, u16)]) -> Vec<(u32, u16)> {
    let mut buf = Vec::new();
    write_group(&mut buf, 3, 4, 17, tids);
    let (head, mut r) = Reader::open(&buf).unwrap();
    assert_eq!((head.unit, head.family), (3, Family::Tids));
    assert_eq!(head.blkno, chunk_of(tids[0].0));
    match read(head.blkno, &mut r).unwrap() {
        TidRecord::Index(g) => {
            assert_eq!((g.index_fork, g.index_block), (4, 17));
            let mut out = Vec::new();
            g.for_each_block(&mut Vec::new(), |b, offs| {
                out.extend(offs.iter().map(|&o| (b, o)))
            })
            .unwrap();
            out
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn groups_round_trip_as_one_offset_list_or_bitmap() {
    let dense: Vec<(u32, u16)> = (1..=61).map(|o| (9, o)).collect();
    assert_eq!(round_trip(&dense), dense);
    assert_eq!(round_trip(&[(9, 7)]), vec![(9, 7)]);
    let spread = [(8192, 0), (8192, 3), (8192, 65535), (9000, 5), (16383, 2)];
    assert_eq!(round_trip(&spread), spread.to_vec());
    // The dense group is a bitmap: 8 bytes for 61 offsets.
    let mut buf = Vec::new();
    write_group(&mut buf, 3, 4, 17, &dense);
    assert_eq!(buf.len(), 9 + 1 + 8 + 2 + 1 + 2 + 8);
    // One TID per heap block (an index not in table order): 5 bytes each.
    let lone: Vec<(u32, u16)> = (0..100).map(|b| (b * 50, 7)).collect();
    write_group(&mut buf, 3, 4, 17, &lone);
    assert_eq!(buf.len(), 9 + 1 + 8 + 100 * 5);
}

#[test]
fn the_heap_summaries_sort_before_the_groups_of_their_chunk() {
    let mut heap = Vec::new();
    write_heap_lines(&mut heap, 3, 9, PageState::Sound, 4, &[0b0010_0100]);
    let mut later_heap = Vec::new();
    write_heap_lines(&mut later_heap, 3, 8000, PageState::Sound, 4, &[]);
    let mut group = Vec::new();
    write_group(&mut group, 3, 0, 0, &[(9, 1)]);
    let mut next_heap = Vec::new();
    write_heap_lines(&mut next_heap, 3, CHUNK_BLOCKS, PageState::New, 0, &[]);
    assert!(heap < later_heap && later_heap < group && group < next_heap);
    let (head, mut r) = Reader::open(&heap).unwrap();
    let Some(TidRecord::Heap(h)) = read(head.blkno, &mut r) else {
        panic!()
    };
    assert_eq!(h.blkno, 9);
    assert_eq!(h.target(1), Some(LpTarget::Valid));
    assert_eq!(h.target(2), Some(LpTarget::Unused));
    assert_eq!(h.target(3), Some(LpTarget::HeapOnly));
    assert_eq!(h.target(4), Some(LpTarget::Valid));
    assert_eq!(h.target(5), None);
    assert_eq!(h.target(0), None);
}

#[test]
fn bitmap_offsets_are_the_set_bits_in_order() {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for len in 0..40 {
        let bits: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let expected: Vec<u16> = (0..len * 8)
            .filter(|&i| bits[i / 8] & (1 << (i % 8)) != 0)
            .map(|i| i as u16)
            .collect();
        let mut got = vec![77];
        bitmap_offsets(&bits, &mut got);
        assert_eq!(got[1..], expected[..], "{bits:?}");
    }
}

#[test]
fn tids_group_by_chunk() {
    let mut tids = vec![(5, 2), (CHUNK_BLOCKS + 1, 9), (5, 1), (1, 9), (1, 9)];
    let mut seen = Vec::new();
    for_each_chunk_group(&mut tids, |t| seen.push(t.to_vec()));
    assert_eq!(
        seen,
        vec![vec![(1, 9), (5, 1), (5, 2)], vec![(CHUNK_BLOCKS + 1, 9)]]
    );
}

/// A record read back: its tag, its chunk and its TIDs.
type ReadBack = (u8, u32, Vec<(u32, u16)>);

/// The records `write_page_tids` writes for `tids`, read back.
fn page_records(tids: &[(u32, u16)]) -> Vec<ReadBack> {
    let mut records = Vec::new();
    let mut tids = tids.to_vec();
    write_page_tids(&mut Vec::new(), (3, 4, 17), &mut tids, |r| {
        records.push(r.to_vec())
    });
    records
        .iter()
        .map(|rec| {
            let (head, mut r) = Reader::open(rec).unwrap();
            let tag = rec[9]; // the body's first byte, after unit, family and block
            let TidRecord::Index(g) = read(head.blkno, &mut r).unwrap() else {
                panic!("not an index group");
            };
            assert_eq!((g.index_fork, g.index_block), (4, 17));
            let mut out = Vec::new();
            g.for_each_block(&mut Vec::new(), |b, offs| {
                out.extend(offs.iter().map(|&o| (b, o)))
            })
            .unwrap();
            (tag, head.blkno, out)
        })
        .collect()
}

/// The unsorted records as one filtering pass per chunk writes them.
fn unsorted_by_filtering(tids: &[(u32, u16)], chunks: &[u32]) -> Vec<Vec<u8>> {
    let mut records = Vec::new();
    for &chunk in chunks {
        let mut buf = Vec::new();
        let w = &mut Writer::start(&mut buf, 3, Family::Tids, chunk);
        w.u8(Tag::IndexUnsorted as u8).u32(17).u32(4);
        let mut any = false;
        for &(block, offset) in tids.iter().filter(|t| chunk_of(t.0) == chunk) {
            w.u16((block - chunk * CHUNK_BLOCKS) as u16).u16(offset);
            any = true;
        }
        if any {
            records.push(buf);
        }
    }
    records
}

#[test]
fn the_counting_sort_writes_what_filtering_per_chunk_writes() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        state >> 33
    };
    // Chunks in a window (some with no TID), far apart, and too many to stay unsorted.
    let layouts: [&[u32]; 4] = [&[0, 1, 2, 3], &[5, 7], &[0, 9, 30, 31, 400], &[2]];
    let mut compared = 0;
    for layout in layouts {
        for n in [1usize, 2, 7, 250] {
            let tids: Vec<(u32, u16)> = (0..n)
                .map(|_| {
                    let chunk = layout[next() as usize % layout.len()];
                    let block = chunk * CHUNK_BLOCKS + (next() % CHUNK_BLOCKS as u64) as u32;
                    (block, (next() % 300) as u16 + 1)
                })
                .collect();
            let mut written = Vec::new();
            let mut copy = tids.clone();
            write_page_tids(&mut Vec::new(), (3, 4, 17), &mut copy, |r| {
                written.push(r.to_vec())
            });
            let PageOrder::Unsorted(chunks) = page_order(&tids) else {
                continue;
            };
            assert_eq!(written, unsorted_by_filtering(&tids, &chunks), "{tids:?}");
            compared += 1;
        }
    }
    assert!(compared >= 10, "only {compared} unsorted pages compared");
    // A window holds every chunk from the lowest to the highest; far chunks only those named.
    let far = |c: u32| (c * CHUNK_BLOCKS, 1u16);
    assert_eq!(
        page_order(&[far(3), far(1)]),
        PageOrder::Unsorted(vec![1, 2, 3])
    );
    assert_eq!(
        page_order(&[far(30), far(1)]),
        PageOrder::Unsorted(vec![1, 30])
    );
    let spread: Vec<(u32, u16)> = (0..9u32).rev().map(|c| far(c * 20)).collect();
    assert_eq!(page_order(&spread), PageOrder::ToSort);
}

#[test]
fn pages_out_of_table_order_are_written_unsorted_per_chunk() {
    let far = CHUNK_BLOCKS + 5;
    let shuffled = [(9, 3), (far, 1), (2, 7), (far, 2), (9, 1)];
    let records = page_records(&shuffled);
    assert_eq!(
        records,
        vec![
            (Tag::IndexUnsorted as u8, 0, vec![(9, 3), (2, 7), (9, 1)]),
            (Tag::IndexUnsorted as u8, 1, vec![(far, 1), (far, 2)]),
        ]
    );
    // In table order: grouped by heap block, one record per chunk.
    let ordered = [(2, 7), (9, 1), (9, 3), (far, 1), (far, 2)];
    let tags: Vec<(u8, u32)> = page_records(&ordered)
        .iter()
        .map(|(tag, chunk, _)| (*tag, *chunk))
        .collect();
    assert_eq!(
        tags,
        vec![(Tag::IndexGroup as u8, 0), (Tag::IndexGroup as u8, 1)]
    );
    // Spread over more chunks than an unsorted page may name: sorted instead.
    let spread: Vec<(u32, u16)> = (0..10u32).rev().map(|c| (c * CHUNK_BLOCKS, 1)).collect();
    let records = page_records(&spread);
    assert_eq!(records.len(), 10);
    assert!(records
        .iter()
        .all(|(tag, _, _)| *tag == Tag::IndexGroup as u8));
}
