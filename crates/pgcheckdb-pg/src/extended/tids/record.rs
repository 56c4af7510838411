//! The TID check's fact records, all in the heap's unit and family `Tids`, keyed by heap
//! block. The body starts with a [`Tag`]: the heap page's line-pointer summary (tag 0) sorts
//! before the index groups naming that block (tag 1), so the merge meets each heap page's
//! summary first and then every index entry that points into it.
//!
//! * Heap summary: page state, `nlines` (the line pointer count), and, only when some line
//!   pointer may not be named by an index, 2 bits per line pointer ([`LpTarget`]).
//! * Index group: index block and fork, then the offsets of the TIDs into this heap block,
//!   as a list of `u16` or as a bitmap of offsets, whichever is smaller (a page of a
//!   clustered index names ~60 offsets of a block: 8 bytes).

use super::super::facts::{Family, Reader, Writer};
use crate::layout::heap::{infomask2 as im2, HeapTupleHeader};
use crate::layout::itemid::{ItemId, LpFlags};

/// What a record is (first body byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    HeapLines = 0,
    IndexGroup = 1,
    /// Index entries that did not decode, counted as not checked (at block `u32::MAX`).
    Undecoded = 2,
}

/// Writes a count of index entries that did not decode.
pub fn write_undecoded(buf: &mut Vec<u8>, unit: u32, count: u64) {
    Writer::start(buf, unit, Family::Tids, u32::MAX)
        .u8(Tag::Undecoded as u8)
        .u64(count);
}

/// The state of a heap page as the scan saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PageState {
    /// Passed the physical and standard checks.
    Sound = 0,
    /// All zero.
    New = 1,
    /// Failed a check: nothing is concluded about TIDs into it.
    Damaged = 2,
}

/// Whether an index entry may name a line pointer (2 bits each in the summary's map).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LpTarget {
    /// `LP_NORMAL` (not heap-only), `LP_REDIRECT` or `LP_DEAD`.
    Valid = 0,
    Unused = 1,
    /// `LP_NORMAL` holding a tuple with `HEAP_ONLY_TUPLE`.
    HeapOnly = 2,
}

impl LpTarget {
    pub fn name(self) -> &'static str {
        match self {
            LpTarget::Valid => "valid",
            LpTarget::Unused => "unused",
            LpTarget::HeapOnly => "heap_only",
        }
    }
}

/// The 2-bit target map of a heap page's line pointers into `map` (cleared first); returns
/// whether any line pointer is not a valid target (when not, the map is left empty).
pub fn target_map(page: &[u8], items: &[ItemId], map: &mut Vec<u8>) -> bool {
    map.clear();
    let mut any = false;
    for (i, it) in items.iter().enumerate() {
        let t = lp_target(page, it);
        if t == LpTarget::Valid {
            continue;
        }
        if !any {
            map.resize((items.len() * 2).div_ceil(8), 0);
            any = true;
        }
        map[i / 4] |= (t as u8) << ((i % 4) * 2);
    }
    any
}

fn lp_target(page: &[u8], it: &ItemId) -> LpTarget {
    match it.lp_flags {
        LpFlags::Unused => LpTarget::Unused,
        LpFlags::Normal => {
            let (off, len) = (it.lp_off as usize, it.lp_len as usize);
            let heap_only = page
                .get(off..off + len)
                .and_then(HeapTupleHeader::parse)
                .is_some_and(|h| h.t_infomask2 & im2::HEAP_ONLY_TUPLE != 0);
            if heap_only {
                LpTarget::HeapOnly
            } else {
                LpTarget::Valid
            }
        }
        _ => LpTarget::Valid,
    }
}

/// Writes a heap page's summary.
pub fn write_heap_lines(
    buf: &mut Vec<u8>,
    unit: u32,
    blkno: u32,
    state: PageState,
    nlines: u16,
    map: &[u8],
) {
    Writer::start(buf, unit, Family::Tids, blkno)
        .u8(Tag::HeapLines as u8)
        .u8(state as u8)
        .u16(nlines)
        .bytes(map);
}

/// A heap page's summary, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapLines<'a> {
    pub state: PageState,
    pub nlines: u16,
    map: &'a [u8],
}

impl HeapLines<'_> {
    /// What an index entry naming `offset` finds: `None` when it is beyond the line pointers.
    pub fn target(&self, offset: u16) -> Option<LpTarget> {
        target_in(self.nlines, self.map, offset)
    }

    /// The 2-bit map (empty when every line pointer is a valid target).
    pub fn map(&self) -> &[u8] {
        self.map
    }
}

/// What `offset` finds on a page of `nlines` line pointers with the 2-bit `map`.
pub fn target_in(nlines: u16, map: &[u8], offset: u16) -> Option<LpTarget> {
    if offset == 0 || offset > nlines {
        return None;
    }
    let i = offset as usize - 1;
    let bits = map.get(i / 4).map_or(0, |b| (b >> ((i % 4) * 2)) & 3);
    Some(match bits {
        1 => LpTarget::Unused,
        2 => LpTarget::HeapOnly,
        _ => LpTarget::Valid,
    })
}

/// Offsets at or above this are always written as a list.
const BITMAP_LIMIT: u16 = 2048;

/// Writes one index group: the `offsets` (sorted, no repeats) of TIDs into heap block
/// `heap_block` held by block `index_block` of index fork `index_fork`.
pub fn write_group(
    buf: &mut Vec<u8>,
    unit: u32,
    heap_block: u32,
    index_fork: u32,
    index_block: u32,
    offsets: &[u16],
) {
    let w = &mut Writer::start(buf, unit, Family::Tids, heap_block);
    // The index block before the fork: records sort by their first 16 bytes first, and these
    // then hold the whole (heap block, index block) pair, so groups rarely tie on that prefix.
    w.u8(Tag::IndexGroup as u8).u32(index_block).u32(index_fork);
    let max = offsets.last().copied().unwrap_or(0);
    let bitmap_len = (max as usize + 1).div_ceil(8);
    if max < BITMAP_LIMIT && bitmap_len < 2 * offsets.len() {
        let mut bits = [0u8; BITMAP_LIMIT as usize / 8];
        for &o in offsets {
            bits[o as usize / 8] |= 1 << (o % 8);
        }
        w.u8(1).bytes(&bits[..bitmap_len]);
    } else {
        w.u8(0).u16(offsets.len() as u16);
        for &o in offsets {
            w.u16(o);
        }
    }
}

/// An index group, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group<'a> {
    pub index_fork: u32,
    pub index_block: u32,
    encoding: GroupOffsets<'a>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GroupOffsets<'a> {
    List(Vec<u16>),
    Bitmap(&'a [u8]),
}

impl Group<'_> {
    /// The offsets, ascending.
    pub fn offsets(&self) -> Vec<u16> {
        match &self.encoding {
            GroupOffsets::List(v) => v.clone(),
            GroupOffsets::Bitmap(bits) => (0..bits.len() * 8)
                .filter(|&i| bits[i / 8] & (1 << (i % 8)) != 0)
                .map(|i| i as u16)
                .collect(),
        }
    }

    pub fn count(&self) -> u64 {
        match &self.encoding {
            GroupOffsets::List(v) => v.len() as u64,
            GroupOffsets::Bitmap(bits) => bits.iter().map(|b| b.count_ones() as u64).sum(),
        }
    }
}

/// One record of the family, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TidRecord<'a> {
    Heap(HeapLines<'a>),
    Index(Group<'a>),
    Undecoded(u64),
}

/// Reads the body of a `Tids` record; `None` when it does not decode.
pub fn read<'a>(r: &mut Reader<'a>) -> Option<TidRecord<'a>> {
    match r.u8()? {
        0 => {
            let state = match r.u8()? {
                0 => PageState::Sound,
                1 => PageState::New,
                2 => PageState::Damaged,
                _ => return None,
            };
            let nlines = r.u16()?;
            let map = r.bytes()?;
            Some(TidRecord::Heap(HeapLines { state, nlines, map }))
        }
        1 => {
            let index_block = r.u32()?;
            let index_fork = r.u32()?;
            let encoding = match r.u8()? {
                0 => {
                    let n = r.u16()?;
                    GroupOffsets::List((0..n).map(|_| r.u16()).collect::<Option<_>>()?)
                }
                1 => GroupOffsets::Bitmap(r.bytes()?),
                _ => return None,
            };
            Some(TidRecord::Index(Group {
                index_fork,
                index_block,
                encoding,
            }))
        }
        2 => Some(TidRecord::Undecoded(r.u64()?)),
        _ => None,
    }
}

/// Sorts `tids` (heap block, offset) and writes one group per heap block through `emit`.
pub fn for_each_block_group(tids: &mut Vec<(u32, u16)>, mut emit: impl FnMut(u32, &[u16])) {
    tids.sort_unstable();
    tids.dedup();
    let mut offsets: Vec<u16> = Vec::new();
    let mut i = 0;
    while i < tids.len() {
        let block = tids[i].0;
        offsets.clear();
        while i < tids.len() && tids[i].0 == block {
            offsets.push(tids[i].1);
            i += 1;
        }
        emit(block, &offsets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(offsets: &[u16]) -> Vec<u16> {
        let mut buf = Vec::new();
        write_group(&mut buf, 3, 9, 4, 17, offsets);
        let (head, mut r) = Reader::open(&buf).unwrap();
        assert_eq!((head.unit, head.family, head.blkno), (3, Family::Tids, 9));
        match read(&mut r).unwrap() {
            TidRecord::Index(g) => {
                assert_eq!((g.index_fork, g.index_block), (4, 17));
                assert_eq!(g.count(), offsets.len() as u64);
                g.offsets()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn groups_round_trip_as_list_or_bitmap() {
        let dense: Vec<u16> = (1..=61).collect();
        assert_eq!(round_trip(&dense), dense);
        assert_eq!(round_trip(&[7]), vec![7]);
        assert_eq!(round_trip(&[0, 3, 65535]), vec![0, 3, 65535]);
        // The dense group is a bitmap: 8 bytes for 61 offsets.
        let mut buf = Vec::new();
        write_group(&mut buf, 3, 9, 4, 17, &dense);
        assert!(buf.len() < 9 + 1 + 8 + 1 + 2 + 8 + 1, "{}", buf.len());
    }

    #[test]
    fn the_heap_summary_sorts_before_the_groups_of_its_block() {
        let mut heap = Vec::new();
        write_heap_lines(&mut heap, 3, 9, PageState::Sound, 4, &[0b0010_0100]);
        let mut group = Vec::new();
        write_group(&mut group, 3, 9, 0, 0, &[1]);
        let mut next_heap = Vec::new();
        write_heap_lines(&mut next_heap, 3, 10, PageState::New, 0, &[]);
        assert!(heap < group && group < next_heap);
        let (_, mut r) = Reader::open(&heap).unwrap();
        let Some(TidRecord::Heap(h)) = read(&mut r) else {
            panic!()
        };
        assert_eq!(h.target(1), Some(LpTarget::Valid));
        assert_eq!(h.target(2), Some(LpTarget::Unused));
        assert_eq!(h.target(3), Some(LpTarget::HeapOnly));
        assert_eq!(h.target(4), Some(LpTarget::Valid));
        assert_eq!(h.target(5), None);
        assert_eq!(h.target(0), None);
    }

    #[test]
    fn tids_group_by_heap_block() {
        let mut tids = vec![(5, 2), (1, 9), (5, 1), (1, 9)];
        let mut seen = Vec::new();
        for_each_block_group(&mut tids, |b, o| seen.push((b, o.to_vec())));
        assert_eq!(seen, vec![(1, vec![9]), (5, vec![1, 2])]);
    }
}
