//! Tests of [`super::ValueChecker`]: values judged from hand-made facts.

use super::*;
use crate::check::extended::facts::Writer;

const MAX: u32 = 1996;

fn pointer(valueid: u32, extsize: u32) -> Vec<u8> {
    let mut b = Vec::new();
    PointerFact {
        valueid,
        extsize,
        rawsize: extsize + 4,
        block: 5,
        offset: 2,
        attnum: 2,
    }
    .write(&mut b, 1);
    b
}

fn chunk(valueid: u32, seq: u32, size: u32, life: ChunkLife, block: u32, offset: u16) -> Vec<u8> {
    let mut b = Vec::new();
    ChunkFact {
        valueid,
        seq,
        life,
        form: ChunkForm::Plain,
        size,
        block,
        offset,
    }
    .write(&mut b, 1);
    b
}

/// Runs records through a checker in byte order, as the merge yields them.
fn check(mut records: Vec<Vec<u8>>) -> ToastOutcome {
    records.sort();
    let mut c = ValueChecker::new(MAX, "db: public.t");
    for r in &records {
        c.add(r);
    }
    c.finish()
}

fn places(o: &ToastOutcome) -> Vec<Place> {
    o.problems.iter().map(|p| p.place).collect()
}

use ChunkLife::{Certain, Possible};

#[test]
fn a_whole_value_is_clean_and_gaps_are_found_where_the_sequence_breaks() {
    // 5000 bytes: 1996 + 1996 + 1008.
    let whole = vec![
        pointer(10, 5000),
        chunk(10, 0, MAX, Certain, 0, 1),
        chunk(10, 1, MAX, Certain, 0, 2),
        chunk(10, 2, 1008, Possible, 0, 3),
    ];
    let o = check(whole.clone());
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    assert_eq!(o.values_checked, 1);
    // Chunk 1 gone: reported after chunk 0.
    let mut gap = whole.clone();
    gap.remove(2);
    let o = check(gap);
    assert_eq!(
        places(&o),
        vec![Place::Toast {
            block: 0,
            offset: 1
        }]
    );
    assert!(
        o.problems[0].message.contains("chunk 1 is missing"),
        "{}",
        o.problems[0].message
    );
    // Chunk 0 gone: at the next chunk. No chunk at all: at the pointer.
    let o = check(vec![whole[0].clone(), whole[2].clone(), whole[3].clone()]);
    assert_eq!(
        places(&o),
        vec![Place::Toast {
            block: 0,
            offset: 2
        }]
    );
    let o = check(vec![pointer(10, 5000)]);
    assert_eq!(
        places(&o),
        vec![Place::Main {
            block: 5,
            offset: 2,
            attnum: 2
        }]
    );
    // A damaged TOAST page: presence is not judged.
    let mut damaged = vec![pointer(10, 5000)];
    let mut mark = Vec::new();
    Writer::start(&mut mark, 1, Family::ToastDamaged, 3);
    damaged.push(mark);
    let o = check(damaged);
    assert!(o.problems.is_empty());
    assert_eq!(o.presence_unchecked, 1);
}

#[test]
fn duplicates_sizes_and_extra_chunks_are_found_at_the_chunk() {
    let base = vec![
        pointer(10, 5000),
        chunk(10, 0, MAX, Certain, 0, 1),
        chunk(10, 1, MAX, Certain, 0, 2),
        chunk(10, 2, 1008, Certain, 1, 1),
    ];
    let mut dup = base.clone();
    dup.push(chunk(10, 1, MAX, Certain, 0, 3));
    let o = check(dup);
    assert_eq!(
        places(&o),
        vec![Place::Toast {
            block: 0,
            offset: 3
        }]
    );
    // A possibly live duplicate is not blamed.
    let mut dup = base.clone();
    dup.push(chunk(10, 1, MAX, Possible, 0, 3));
    assert!(check(dup).problems.is_empty());
    let mut short = base.clone();
    short[3] = chunk(10, 2, 1000, Certain, 1, 1);
    let o = check(short);
    assert_eq!(
        places(&o),
        vec![Place::Toast {
            block: 1,
            offset: 1
        }]
    );
    assert!(o.problems[0]
        .message
        .contains("holds 1000 bytes, expected 1008"));
    let mut extra = base.clone();
    extra.push(chunk(10, 3, 10, Certain, 1, 2));
    let o = check(extra);
    assert_eq!(
        places(&o),
        vec![Place::Toast {
            block: 1,
            offset: 2
        }]
    );
}

#[test]
fn chunks_without_a_live_pointer_are_only_counted() {
    let o = check(vec![
        chunk(7, 0, MAX, Certain, 4, 1),
        chunk(7, 1, 20, ChunkLife::Dead, 4, 2),
        pointer(10, 20),
        chunk(10, 0, 20, Certain, 2, 1),
        chunk(12, 0, 20, Certain, 3, 1),
    ]);
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    assert_eq!((o.unreferenced_chunks, o.unreferenced_values), (3, 2));
    assert_eq!(o.unreferenced_dead, 1);
    assert_eq!(o.first_unreferenced_block, Some(3));
    assert_eq!(o.values_checked, 1);
}
