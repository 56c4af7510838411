//! The TID check's fact records, all in the heap's unit and family `Tids`, keyed by the
//! chunk of [`CHUNK_BLOCKS`] heap blocks they are about. The body starts with a [`Tag`]: the
//! heap pages' line-pointer summaries (tag 0) sort before the index groups naming the chunk
//! (tag 1), so the merge holds one chunk's summaries and then checks every index entry that
//! points into it.
//!
//! * Heap summary: the heap block, page state, `nlines` (the line pointer count), and, only
//!   when some line pointer may not be named by an index, 2 bits per line pointer
//!   ([`LpTarget`]).
//! * Index group: index block and fork, then for each heap block of the chunk the page names,
//!   the block (relative to the chunk) and the offsets of the TIDs into it: one offset, a list
//!   of `u16`, or a bitmap of offsets, whichever is smallest. A chunk rather than a block per
//!   record: an index whose order is not the table's names one TID per heap block on each of
//!   its pages, and a record per TID made the facts of such an index larger than the index.
//! * Unsorted index group (the page of an index whose order is not the table's): index block
//!   and fork, then each TID as it comes, (block relative to the chunk, offset). Such a page
//!   names about one TID per heap block: grouping by block would save nothing and cost a sort
//!   of every page.

use super::super::facts::{Family, Reader, Writer};
use crate::check::extended::heap::HeapTuples;
use crate::format::enums::byte_enum;
use crate::format::heap::infomask2 as im2;
use crate::format::itemid::{ItemId, LpFlags};

byte_enum! {
    /// What a record is (first body byte).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Tag {
        HeapLines = 0,
        IndexGroup = 1,
        /// Index entries that did not decode, counted as not checked (at block `u32::MAX`).
        Undecoded = 2,
        /// An index group of TIDs in the page's order.
        IndexUnsorted = 3,
    }
}

/// Writes a count of index entries that did not decode.
pub fn write_undecoded(buf: &mut Vec<u8>, unit: u32, count: u64) {
    Writer::start(buf, unit, Family::Tids, u32::MAX)
        .u8(Tag::Undecoded as u8)
        .u64(count);
}

byte_enum! {
    /// The state of a heap page as the scan saw it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum PageState {
        /// Passed the physical and standard checks.
        Sound = 0,
        /// All zero.
        New = 1,
        /// Failed a check: nothing is concluded about TIDs into it.
        Damaged = 2,
    }
}

byte_enum! {
    /// Whether an index entry may name a line pointer (2 bits each in the summary's map).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum LpTarget {
        /// `LP_NORMAL` (not heap-only), `LP_REDIRECT` or `LP_DEAD`.
        Valid = 0,
        Unused = 1,
        /// `LP_NORMAL` holding a tuple with `HEAP_ONLY_TUPLE`.
        HeapOnly = 2,
    }
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
pub fn target_map(tuples: &HeapTuples<'_>, map: &mut Vec<u8>) -> bool {
    map.clear();
    let mut any = false;
    for (i, it) in tuples.items.iter().enumerate() {
        let t = lp_target(tuples, it);
        if t == LpTarget::Valid {
            continue;
        }
        if !any {
            map.resize((tuples.items.len() * 2).div_ceil(8), 0);
            any = true;
        }
        map[i / 4] |= (t as u8) << ((i % 4) * 2);
    }
    any
}

fn lp_target(tuples: &HeapTuples<'_>, it: &ItemId) -> LpTarget {
    match it.lp_flags {
        LpFlags::Unused => LpTarget::Unused,
        LpFlags::Normal => {
            let heap_only = tuples
                .tuple(it.offnum)
                .is_some_and(|(_, h)| h.t_infomask2 & im2::HEAP_ONLY_TUPLE != 0);
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
    Writer::start(buf, unit, Family::Tids, chunk_of(blkno))
        .u8(Tag::HeapLines as u8)
        .u32(blkno)
        .u8(state as u8)
        .u16(nlines)
        .bytes(map);
}

/// A heap page's summary, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapLines<'a> {
    pub blkno: u32,
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
    // 0 and the unused 3 read as valid.
    Some(LpTarget::from_byte(bits).unwrap_or(LpTarget::Valid))
}

/// Heap blocks per chunk of the TID facts (512 MiB of table at 8 kB blocks; a block within a
/// chunk fits the `u16` of a group entry): the merge holds one chunk's page summaries at a
/// time, at most 2 MiB.
pub const CHUNK_BLOCKS: u32 = 1 << 16;

/// The chunk heap block `blkno` belongs to.
pub fn chunk_of(blkno: u32) -> u32 {
    blkno / CHUNK_BLOCKS
}

/// Offsets at or above this are always written as a list.
const BITMAP_LIMIT: u16 = 2048;

byte_enum! {
    /// How one heap block's offsets are written in a group.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum OffsetsForm {
        List = 0,
        Bitmap = 1,
        One = 2,
    }
}

/// Writes one index group: the TIDs `tids` (sorted, no repeats, all in one chunk) held by
/// block `index_block` of index fork `index_fork`.
pub fn write_group(
    buf: &mut Vec<u8>,
    unit: u32,
    index_fork: u32,
    index_block: u32,
    tids: &[(u32, u16)],
) {
    let chunk = tids.first().map_or(0, |t| chunk_of(t.0));
    let w = &mut Writer::start(buf, unit, Family::Tids, chunk);
    // The index block before the fork: records sort by their first 16 bytes first, and these
    // then hold the whole (chunk, index block) pair, so groups rarely tie on that prefix.
    w.u8(Tag::IndexGroup as u8).u32(index_block).u32(index_fork);
    let mut rest = tids;
    while let Some(&(block, _)) = rest.first() {
        let n = rest.iter().take_while(|t| t.0 == block).count();
        let (these, after) = rest.split_at(n);
        w.u16((block - chunk * CHUNK_BLOCKS) as u16);
        write_offsets(w, these);
        rest = after;
    }
}

fn write_offsets(w: &mut Writer<'_>, tids: &[(u32, u16)]) {
    let max = tids.last().map_or(0, |t| t.1);
    let bitmap_len = (max as usize + 1).div_ceil(8);
    if let [(_, only)] = tids {
        w.u8(OffsetsForm::One as u8).u16(*only);
    } else if max < BITMAP_LIMIT && bitmap_len < 2 * tids.len() {
        let mut bits = [0u8; BITMAP_LIMIT as usize / 8];
        for &(_, o) in tids {
            bits[o as usize / 8] |= 1 << (o % 8);
        }
        w.u8(OffsetsForm::Bitmap as u8).bytes(&bits[..bitmap_len]);
    } else {
        w.u8(OffsetsForm::List as u8).u16(tids.len() as u16);
        for &(_, o) in tids {
            w.u16(o);
        }
    }
}

/// An index group, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group<'a> {
    pub index_fork: u32,
    pub index_block: u32,
    chunk: u32,
    /// Written unsorted: each entry is one TID.
    unsorted: bool,
    /// The (block, offsets) entries, still encoded.
    entries: &'a [u8],
}

impl Group<'_> {
    /// Calls `f` with each heap block the group names and its offsets (ascending), decoded
    /// into `scratch`; `None` when the entries do not decode (nothing is called for the
    /// entry that failed and those after it). An unsorted group names its blocks in the
    /// page's order, one TID at a time.
    pub fn for_each_block(
        &self,
        scratch: &mut Vec<u16>,
        mut f: impl FnMut(u32, &[u16]),
    ) -> Option<()> {
        let mut r = Reader::body(self.entries);
        while !r.at_end() {
            let block = self.chunk * CHUNK_BLOCKS + u32::from(r.u16()?);
            scratch.clear();
            if self.unsorted {
                scratch.push(r.u16()?);
                f(block, scratch);
                continue;
            }
            match OffsetsForm::from_byte(r.u8()?)? {
                OffsetsForm::List => {
                    let n = r.u16()?;
                    for _ in 0..n {
                        scratch.push(r.u16()?);
                    }
                }
                OffsetsForm::Bitmap => bitmap_offsets(r.bytes()?, scratch),
                OffsetsForm::One => scratch.push(r.u16()?),
            }
            f(block, scratch);
        }
        Some(())
    }
}

/// The offsets whose bits are set in `bits` (bit `i % 8` of byte `i / 8` is offset `i`),
/// ascending, onto `out`: set bits are found a byte at a time, not tested one by one (the
/// TID merge decodes every group of every index of every table).
fn bitmap_offsets(bits: &[u8], out: &mut Vec<u16>) {
    for (i, &byte) in bits.iter().enumerate() {
        let mut rest = byte;
        while rest != 0 {
            out.push((i * 8 + rest.trailing_zeros() as usize) as u16);
            rest &= rest - 1;
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

/// Reads the body of a `Tids` record of chunk `head_chunk` (the record's block field);
/// `None` when it does not decode.
pub fn read<'a>(head_chunk: u32, r: &mut Reader<'a>) -> Option<TidRecord<'a>> {
    match Tag::from_byte(r.u8()?)? {
        Tag::HeapLines => {
            let blkno = r.u32()?;
            let state = PageState::from_byte(r.u8()?)?;
            let nlines = r.u16()?;
            let map = r.bytes()?;
            Some(TidRecord::Heap(HeapLines {
                blkno,
                state,
                nlines,
                map,
            }))
        }
        tag @ (Tag::IndexGroup | Tag::IndexUnsorted) => {
            let index_block = r.u32()?;
            let index_fork = r.u32()?;
            Some(TidRecord::Index(Group {
                index_fork,
                index_block,
                chunk: head_chunk,
                unsorted: tag == Tag::IndexUnsorted,
                entries: r.rest(),
            }))
        }
        Tag::Undecoded => Some(TidRecord::Undecoded(r.u64()?)),
    }
}

/// Chunks an unsorted page's TIDs may fall in and still be written unsorted (one pass over
/// them per chunk); past that they are sorted.
const UNSORTED_MAX_CHUNKS: usize = 8;

/// Writes the TIDs of one index page, `tids` in the page's order, as index group records:
/// sorted and grouped by heap block when they come in order (an index in the table's order),
/// else one unsorted group per chunk (see the module comment). Each record is handed to `push`.
pub fn write_page_tids(
    buf: &mut Vec<u8>,
    place: (u32, u32, u32),
    tids: &mut Vec<(u32, u16)>,
    mut push: impl FnMut(&[u8]),
) {
    let (unit, index_fork, index_block) = place;
    match page_order(tids) {
        PageOrder::Unsorted(chunks) => write_unsorted(buf, place, tids, &chunks, push),
        order => {
            let write = |group: &[(u32, u16)]| {
                write_group(buf, unit, index_fork, index_block, group);
                push(buf);
            };
            if order == PageOrder::Sorted {
                for_each_chunk_of_sorted(tids, write)
            } else {
                for_each_chunk_group(tids, write)
            }
        }
    }
}

/// How an index page's TIDs are written.
#[derive(Debug, PartialEq, Eq)]
enum PageOrder {
    /// Already in table order, without repeats (an index in the table's order).
    Sorted,
    /// Unsorted, in these few chunks (ascending; with the window of a page whose chunks lie
    /// close together, some may name no TID).
    Unsorted(Vec<u32>),
    /// Unsorted over more than [`UNSORTED_MAX_CHUNKS`] chunks: sorted and grouped.
    ToSort,
}

/// The order of a page's TIDs, found in one pass (and a second over the chunks of an
/// unsorted page whose chunks lie far apart).
fn page_order(tids: &[(u32, u16)]) -> PageOrder {
    let packed = |&(block, offset): &(u32, u16)| (u64::from(block) << 16) | u64::from(offset);
    let Some((first, rest)) = tids.split_first() else {
        return PageOrder::Sorted;
    };
    let (mut in_order, mut prev) = (true, packed(first));
    let (mut lowest, mut highest) = (chunk_of(first.0), chunk_of(first.0));
    for t in rest {
        let p = packed(t);
        in_order &= prev < p;
        prev = p;
        let c = chunk_of(t.0);
        lowest = lowest.min(c);
        highest = highest.max(c);
    }
    if in_order {
        return PageOrder::Sorted;
    }
    if ((highest - lowest) as usize) < UNSORTED_MAX_CHUNKS {
        return PageOrder::Unsorted((lowest..=highest).collect());
    }
    let mut chunks = Vec::with_capacity(UNSORTED_MAX_CHUNKS);
    for t in tids {
        let c = chunk_of(t.0);
        if chunks.contains(&c) {
            continue;
        }
        if chunks.len() == UNSORTED_MAX_CHUNKS {
            return PageOrder::ToSort;
        }
        chunks.push(c);
    }
    chunks.sort_unstable();
    PageOrder::Unsorted(chunks)
}

/// Writes an unsorted page's TIDs, each of which lies in one of `chunks` (ascending, at most
/// [`UNSORTED_MAX_CHUNKS`]): one record per chunk that some TID names, its TIDs in the page's
/// order. A counting sort by chunk: the TIDs of each chunk are counted, the records laid out
/// one after another in `buf`, and every TID written straight to its place in one more pass
/// (a pass per chunk, filtering, mispredicted the filter on about every other TID of an index
/// not in the table's order).
fn write_unsorted(
    buf: &mut Vec<u8>,
    (unit, index_fork, index_block): (u32, u32, u32),
    tids: &[(u32, u16)],
    chunks: &[u32],
    mut push: impl FnMut(&[u8]),
) {
    let (Some(&lowest), Some(&highest)) = (chunks.first(), chunks.last()) else {
        return;
    };
    // A window of consecutive chunks finds a TID's by subtraction, else by search.
    let window = (highest - lowest) as usize + 1 == chunks.len();
    let slot_of = |block: u32| {
        let c = chunk_of(block);
        if window {
            (c - lowest) as usize
        } else {
            chunks.partition_point(|&x| x < c)
        }
    };
    let mut counts = [0usize; UNSORTED_MAX_CHUNKS];
    for &(block, _) in tids {
        counts[slot_of(block)] += 1;
    }
    // Per chunk: where its record starts in `buf`, and where its next TID goes.
    let mut places = [(0usize, 0usize); UNSORTED_MAX_CHUNKS];
    buf.clear();
    for (i, &chunk) in chunks.iter().enumerate().filter(|&(i, _)| counts[i] > 0) {
        let start = buf.len();
        Writer::append(buf, unit, Family::Tids, chunk)
            .u8(Tag::IndexUnsorted as u8)
            .u32(index_block)
            .u32(index_fork);
        let body = buf.len();
        buf.resize(body + 4 * counts[i], 0);
        places[i] = (start, body);
    }
    for &(block, offset) in tids {
        let place = &mut places[slot_of(block)];
        let entry = unsorted_entry(block, offset);
        buf[place.1..place.1 + 4].copy_from_slice(&entry);
        place.1 += 4;
    }
    for (i, &(start, end)) in places.iter().enumerate().take(chunks.len()) {
        if counts[i] > 0 {
            push(&buf[start..end]);
        }
    }
}

/// One TID of an unsorted group: its block relative to its chunk and its offset (as
/// [`Writer::u16`] writes them).
fn unsorted_entry(block: u32, offset: u16) -> [u8; 4] {
    let rel = (block % CHUNK_BLOCKS) as u16;
    let [a, b] = rel.to_be_bytes();
    let [c, d] = offset.to_be_bytes();
    [a, b, c, d]
}

/// Calls `emit` with the TIDs of each chunk in turn of `tids`, sorted without repeats.
fn for_each_chunk_of_sorted(tids: &[(u32, u16)], mut emit: impl FnMut(&[(u32, u16)])) {
    let mut rest = tids;
    while let Some(&(block, _)) = rest.first() {
        let chunk = chunk_of(block);
        let n = rest.iter().take_while(|t| chunk_of(t.0) == chunk).count();
        let (these, after) = rest.split_at(n);
        emit(these);
        rest = after;
    }
}

/// Sorts `tids` (heap block, offset), drops repeats and calls `emit` with the TIDs of each
/// chunk in turn.
pub fn for_each_chunk_group(tids: &mut Vec<(u32, u16)>, emit: impl FnMut(&[(u32, u16)])) {
    // Sorted by one packed word: one compare per step instead of two.
    tids.sort_unstable_by_key(|&(block, offset)| (u64::from(block) << 16) | u64::from(offset));
    tids.dedup();
    for_each_chunk_of_sorted(tids, emit);
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
