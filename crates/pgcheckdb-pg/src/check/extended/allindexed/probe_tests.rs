//! Tests of the scan side of heap -> index ([`super`]): keys read in place, leaf walks.

use super::*;

/// A leaf tuple with heap TID (1, 2), `t_info` flags `flags` and data `data` after the
/// 8-byte header.
fn tuple(flags: u16, data: &[u8]) -> Vec<u8> {
    let mut t = vec![0, 0, 1, 0, 2, 0, 0, 0];
    t.extend(data);
    let info = t.len() as u16 | flags;
    t[6..8].copy_from_slice(&info.to_le_bytes());
    t
}

#[test]
fn a_plain_fixed_key_is_what_the_full_decoding_finds() {
    for (attlen, align) in [(4i16, 4usize), (8, 8), (16, 1), (2, 2)] {
        let stored = [StoredAs { attlen, align }];
        let data: Vec<u8> = (1..=attlen as u8).collect();
        let t = tuple(0, &data);
        let mut decoded = KeyTuple::EMPTY;
        decode_into(&t, &stored, 8, &mut decoded).expect("decodes");
        assert_eq!(plain_fixed_key(&stored, &t, 8), decoded.key(0));
        assert_eq!(plain_fixed_key(&stored, &t, 8), Some(&data[..]));
    }
    let int4 = [StoredAs {
        attlen: 4,
        align: 4,
    }];
    // NULL bitmap, posting list or pivot, a size that disagrees, a key past the end, two
    // columns, a variable-length column: decoded in full instead.
    assert_eq!(plain_fixed_key(&int4, &tuple(0x8000, &[0; 8]), 8), None);
    assert_eq!(plain_fixed_key(&int4, &tuple(0x2000, &[0; 8]), 8), None);
    let mut wrong_size = tuple(0, &[0; 4]);
    wrong_size.push(0);
    assert_eq!(plain_fixed_key(&int4, &wrong_size, 8), None);
    assert_eq!(plain_fixed_key(&int4, &tuple(0, &[0; 2]), 8), None);
    assert_eq!(plain_fixed_key(&[int4[0]; 2], &tuple(0, &[0; 8]), 8), None);
    let text = [StoredAs {
        attlen: -1,
        align: 4,
    }];
    assert_eq!(
        plain_fixed_key(&text, &tuple(0, &[5 << 1 | 1, 1, 2, 3, 4]), 8),
        None
    );
}

/// A B-tree leaf tuple with heap TID `tid` (or a posting list's place and size), `t_info`
/// flags `flags` and data `data` after the 8-byte header.
fn leaf_tuple(tid: (u32, u16), flags: u16, data: &[u8]) -> Vec<u8> {
    // ip_blkid as bi_hi, bi_lo; ip_posid; t_info (set below).
    let mut t = ((tid.0 >> 16) as u16).to_le_bytes().to_vec();
    t.extend((tid.0 as u16).to_le_bytes());
    t.extend(tid.1.to_le_bytes());
    t.extend([0, 0]);
    t.extend(data);
    let info = t.len() as u16 | flags;
    t[6..8].copy_from_slice(&info.to_le_bytes());
    t
}

/// A rightmost leaf page holding `tuples` with line pointer flags, and its line pointers.
fn leaf_page(tuples: &[(LpFlags, Vec<u8>)]) -> (Vec<u8>, Vec<ItemId>) {
    let special = 8192 - 16;
    let mut page = vec![0u8; 8192];
    let mut upper = special;
    let mut items = Vec::new();
    for (i, (flags, t)) in tuples.iter().enumerate() {
        upper -= t.len().next_multiple_of(8);
        page[upper..upper + t.len()].copy_from_slice(t);
        let item = ItemId {
            offnum: i as u16 + 1,
            lp_off: upper as u16,
            lp_flags: *flags,
            lp_len: t.len() as u16,
        };
        let word = u32::from(item.lp_off) | (*flags as u32) << 15 | u32::from(item.lp_len) << 17;
        page[24 + 4 * i..28 + 4 * i].copy_from_slice(&word.to_le_bytes());
        items.push(item);
    }
    page[12..14].copy_from_slice(&((24 + 4 * tuples.len()) as u16).to_le_bytes());
    page[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
    page[16..18].copy_from_slice(&(special as u16).to_le_bytes());
    page[special + 12] = crate::format::btree::flags::BTP_LEAF as u8;
    (page, items)
}

/// The header and the B-tree special space of a page made by [`leaf_page`].
fn header_and_opaque(page: &[u8]) -> (crate::format::page::PageHeader, BtPageOpaque) {
    let h = crate::format::page::PageHeader::parse(page).expect("header");
    let opaque = BtPageOpaque::parse(page, h.pd_special as usize).expect("opaque");
    (h, opaque)
}

/// A leaf page as [`insert_leaf`] reads it (8-byte `MAXALIGN`).
fn leaf_of<'p>(page: &'p [u8], opaque: &'p BtPageOpaque, items: &'p [ItemId]) -> LeafPage<'p> {
    LeafPage {
        page,
        opaque,
        items,
        max_align: 8,
    }
}

/// An int4 index of table columns 1..=columns, for heap -> index by a filter.
fn int4_index(columns: usize) -> AllIndexed {
    int4_index_by(columns, Method::Filter(Bloom::with_bits(1 << 16, 16)))
}

fn int4_index_by(columns: usize, method: Method) -> AllIndexed {
    use super::super::keys::KeyColumn;
    let stored = StoredAs {
        attlen: 4,
        align: 4,
    };
    let column = |n| KeyColumn {
        heap_attnum: n,
        form: ValueForm::Fixed,
    };
    AllIndexed {
        name: "i".into(),
        heap_fork: 0,
        index_fork: 1,
        columns: (1..=columns).map(column).collect(),
        stored: vec![stored; columns],
        heap_attrs: vec![attr(4, 4); columns].into(),
        upto: columns,
        heap_word: None,
        method,
        incomplete: std::sync::atomic::AtomicBool::new(false),
        entries: Default::default(),
        tids_confirmed: Default::default(),
        tuples_checked: Default::default(),
        tuples_not_checked: Default::default(),
        lacking: Default::default(),
        lacking_count: Default::default(),
    }
}

#[test]
fn the_leaf_walk_collects_the_tids_the_tid_check_reads() {
    use crate::check::extended::tids::decode::page_tids;
    use crate::check::extended::tids::IndexAm;
    use crate::format::btree::BT_IS_POSTING;
    use crate::format::index_tuple::INDEX_ALT_TID_MASK;
    let key = |k: i32, more: usize| k.to_le_bytes().repeat(more + 1);
    let posting = |more: usize| {
        // Posting list after the 8-byte header and the key (MAXALIGNed), two TIDs.
        let at = (8 + 4 * (more + 1)).next_multiple_of(8) as u32;
        let mut data = key(9, more);
        data.resize(at as usize - 8, 0);
        data.extend([0, 0, 5, 0, 1, 0, 0, 0, 5, 0, 3, 0]);
        leaf_tuple((at, BT_IS_POSTING | 2), INDEX_ALT_TID_MASK, &data)
    };
    for more in [0, 1] {
        let idx = int4_index(more + 1);
        let mut broken = posting(more);
        broken.truncate(broken.len() - 6); // its list runs past its end
        let (page, items) = leaf_page(&[
            (LpFlags::Normal, leaf_tuple((3, 4), 0, &key(7, more))),
            (LpFlags::Normal, posting(more)),
            (LpFlags::Dead, leaf_tuple((8, 2), 0, &key(1, more))),
            (LpFlags::Dead, broken),
            (LpFlags::Normal, leaf_tuple((1 << 17, 1), 0, &key(2, more))),
        ]);
        let (h, opaque) = header_and_opaque(&page);
        let mut expected = Vec::new();
        let undecoded = page_tids(IndexAm::Btree, &page, &h, &items, &mut expected);
        let leaf = leaf_of(&page, &opaque, &items);
        let mut got = Vec::new();
        let walked = insert_leaf(&idx, leaf, &mut Scratch::default(), Some(&mut got));
        assert_eq!(walked, Some(undecoded), "{more} more columns");
        assert_eq!(undecoded, 1);
        assert_eq!(got, expected);
        assert_eq!(got, [(3, 4), (5, 1), (5, 3), (8, 2), (1 << 17, 1)]);
        assert!(!idx.incomplete.load(Ordering::Relaxed));
        // A live entry that does not decode stops the walk: the caller decodes the page again.
        let mut bad = posting(more);
        bad.truncate(bad.len() - 6);
        let (page, items) = leaf_page(&[(LpFlags::Normal, bad)]);
        let leaf = LeafPage {
            page: &page,
            items: &items,
            ..leaf
        };
        assert_eq!(
            insert_leaf(&idx, leaf, &mut Scratch::default(), Some(&mut got)),
            None
        );
        assert!(idx.incomplete.load(Ordering::Relaxed));
    }
}

#[test]
fn by_sums_a_leaf_subtracts_and_confirms_only_the_tids_of_live_roots() {
    use super::super::exact::{LiveMap, Sums};
    // Heap blocks 0..10; live roots (3,4) and (5,3); (5,1) and (8,2) are not live.
    let live = std::sync::Arc::new(LiveMap::new(10, 8192));
    live.store(3, &[0b1000]);
    live.store(5, &[0b100]);
    let idx = int4_index_by(
        1,
        Method::Exact {
            live: live.clone(),
            sums: Sums::new(10),
        },
    );
    let (_, sums) = idx.exact().expect("by sums");
    let fp = |k: i32, tid: (u32, u16)| {
        let mut h = KeyHasher::default();
        h.push(Some(&k.to_le_bytes()), ValueForm::Fixed)
            .expect("keyed");
        fingerprint(h.finish(), tid.0, tid.1)
    };
    // What the heap pages added for their live roots.
    sums.store_heap(3, fp(7, (3, 4)));
    sums.store_heap(5, fp(9, (5, 3)));
    let (page, items) = leaf_page(&[
        (LpFlags::Normal, leaf_tuple((3, 4), 0, &7i32.to_le_bytes())),
        (LpFlags::Normal, leaf_tuple((5, 1), 0, &9i32.to_le_bytes())),
        (LpFlags::Normal, leaf_tuple((5, 3), 0, &9i32.to_le_bytes())),
        (LpFlags::Dead, leaf_tuple((8, 2), 0, &1i32.to_le_bytes())),
    ]);
    let (_, opaque) = header_and_opaque(&page);
    let leaf = leaf_of(&page, &opaque, &items);
    let mut scratch = Scratch::default();
    let mut tids = Vec::new();
    assert_eq!(
        insert_leaf(&idx, leaf, &mut scratch, Some(&mut tids)),
        Some(0)
    );
    scratch.flush();
    // The TIDs of live roots are valid on the spot; the others go on to the TID check.
    assert_eq!(tids, [(5, 1), (8, 2)]);
    assert_eq!(idx.tids_confirmed.load(Ordering::Relaxed), 2);
    assert!(sums.unbalanced().is_empty());
    // The same page once more: each live root now has two entries.
    insert_leaf(&idx, leaf, &mut scratch, None);
    assert_eq!(sums.unbalanced(), vec![3, 5]);
}

fn attr(attlen: i16, align: usize) -> crate::catalog::attributes::Attribute {
    crate::catalog::attributes::Attribute {
        name: "c".into(),
        type_name: None,
        attlen,
        align,
        dropped: false,
    }
}

/// A heap tuple of `natts` attributes with `data` after a 24-byte header (`t_hoff` 24).
fn heap_tuple(natts: u16, infomask: u16, data: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; 24];
    t[18..20].copy_from_slice(&natts.to_le_bytes());
    t[20..22].copy_from_slice(&infomask.to_le_bytes());
    t[22] = 24;
    t.extend(data);
    t
}

#[test]
fn a_key_at_its_fixed_place_hashes_as_the_walked_tuple() {
    use super::super::keys::KeyColumn;
    // (a int4, b int8, c text, d int8, e uuid): b sits at 8, after a and its padding; d
    // follows a varlena (no fixed place); e is longer than a word.
    let attrs = [attr(4, 4), attr(8, 8), attr(-1, 4), attr(8, 8), attr(16, 1)];
    let col = |heap_attnum, form| KeyColumn { heap_attnum, form };
    assert_eq!(
        super::super::heap_word(&[col(2, ValueForm::Fixed)], &attrs),
        Some((8, 8))
    );
    assert_eq!(
        super::super::heap_word(&[col(1, ValueForm::Fixed)], &attrs),
        Some((0, 4))
    );
    assert_eq!(
        super::super::heap_word(&[col(4, ValueForm::Fixed)], &attrs),
        None
    );
    assert_eq!(
        super::super::heap_word(&[col(5, ValueForm::Fixed)], &attrs),
        None
    );
    let two = [col(1, ValueForm::Fixed), col(2, ValueForm::Fixed)];
    assert_eq!(super::super::heap_word(&two, &attrs), None);

    let mut data = 7i32.to_le_bytes().to_vec();
    data.extend([0; 4]);
    data.extend(0x0102_0304_0506_0708i64.to_le_bytes());
    data.extend([3 << 1 | 1, b'x', b'y']);
    let t = heap_tuple(3, 0, &data);
    let h = HeapTupleHeader::parse(&t).expect("header");
    let mut spans = Vec::new();
    deform_into(&t, &h, &attrs, 2, &mut spans).expect("walks");
    let mut walked = KeyHasher::default();
    walked
        .push(spans[1].and_then(|s| s.of(&t)), ValueForm::Fixed)
        .expect("keyed");
    assert_eq!(heap_word_key(&t, &h, 2, (8, 8)), Some(walked.finish()));
    // A tuple with NULLs, or one without the attribute (added later): walked instead.
    let with_nulls = heap_tuple(3, 0x0001, &data);
    let h = HeapTupleHeader::parse(&with_nulls).expect("header");
    assert_eq!(heap_word_key(&with_nulls, &h, 2, (8, 8)), None);
    let short = heap_tuple(1, 0, &data[..4]);
    let h = HeapTupleHeader::parse(&short).expect("header");
    assert_eq!(heap_word_key(&short, &h, 2, (8, 8)), None);
}
