//! The fact records of one B-tree page, keyed by the block they are about. A page says what it
//! is at its own block (a [`PageRec`], or a damaged mark), and what it claims about other pages
//! at theirs: "I am your left sibling" at `btpo_next` ([`LeftRec`]), "I am your right sibling"
//! at `btpo_prev` ([`RightRec`], with the first key its left sibling must not exceed), "I am
//! your parent" at each downlink's child ([`DownlinkRec`], with the separator and the high key
//! the child must have), "you are my top parent" for a half-dead leaf ([`TopParentRec`]), and
//! for a unique index its first run of equal keys at its own block and its last run at
//! `btpo_next` ([`RunRec`]). After the sort every record about one block arrives together, in
//! the order of [`Rec`], so the merge holds one block's facts at a time.

use crate::check::extended::facts::{Family, Reader, RunPlace, Writer};
use crate::format::btree::{flags as bf, P_NONE};
use crate::format::enums::byte_enum;
use crate::format::index_tuple::T_INFO_OFFSET;
use crate::format::page::INVALID_BLOCK_NUMBER;

/// Bytes of an index tuple before `t_info`: a pivot's downlink or a high key's unused block
/// and its `ip_posid`. Pivot keys are compared from `t_info` on, as for every B-tree version.
pub const PIVOT_KEY_FROM: usize = T_INFO_OFFSET;

byte_enum! {
    /// The kind of a record about one block (the byte right after the block number): the page's
    /// own fact sorts first, so every claim meets it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub enum Rec {
        /// The page failed its physical or standard checks: nothing is concluded from it.
        Damaged = 0,
        Page = 1,
        Left = 2,
        Right = 3,
        Downlink = 4,
        TopParent = 5,
        /// The page's first run of equal keys (unique indexes).
        FirstRun = 6,
        /// The left sibling's last run of equal keys (unique indexes).
        LastRun = 7,
    }
}

/// One downlink of an internal page, borrowed from the page.
#[derive(Debug, Clone, Copy)]
pub struct DownlinkView<'p> {
    pub offnum: u16,
    pub child: u32,
    /// The whole pivot tuple (`IndexTupleData` and key).
    pub item: &'p [u8],
}

/// What the emitter read from one B-tree page (not the metapage), borrowed from it.
#[derive(Debug, Clone, Default)]
pub struct PageView<'p> {
    pub btpo_prev: u32,
    pub btpo_next: u32,
    pub btpo_level: u32,
    pub btpo_flags: u16,
    /// The full transaction id a deleted page stores (PostgreSQL 14+, `BTP_HAS_FULLXID`).
    pub safexid: Option<u64>,
    /// A half-dead leaf's top parent link (the block in its high key's `t_tid`).
    pub top_parent: Option<u32>,
    /// The high key item (empty on the rightmost page of a level).
    pub high_key: &'p [u8],
    /// First and last data items (on an internal page the first is "minus infinity" on the
    /// leftmost page only).
    pub first_item: &'p [u8],
    pub last_item: &'p [u8],
    pub downlinks: Vec<DownlinkView<'p>>,
}

impl PageView<'_> {
    pub fn deleted(&self) -> bool {
        self.btpo_flags & bf::BTP_DELETED != 0
    }

    /// The first key a left sibling's keys must not exceed: a leaf's first item; on an
    /// internal page the second data item (the first is "minus infinity" with its key
    /// columns truncated away).
    fn first_real_key(&self) -> &[u8] {
        match self.downlinks.is_empty() {
            true => self.first_item,
            false => self.downlinks.get(1).map_or(&[][..], |d| d.item),
        }
    }
}

byte_enum! {
    /// Where a downlink's child must end: the high key it must have.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Bound {
        /// The parent's next pivot (its offset is in the record).
        NextPivot = 0,
        /// The parent's high key.
        ParentHighKey = 1,
        /// Nothing: the parent is the rightmost page of its level.
        Nothing = 2,
    }
}

/// Writes every record of page `blkno` to `push`, reusing `buf`. Without `keys` (the index
/// has no comparator) the keys only the order checks compare are left out.
pub fn page_records(
    unit: u32,
    blkno: u32,
    p: &PageView<'_>,
    keys: bool,
    buf: &mut Vec<u8>,
    mut push: impl FnMut(&[u8]),
) {
    let deleted = p.deleted();
    let single_child = match p.downlinks.as_slice() {
        [only] => only.child,
        _ => P_NONE,
    };
    let leafish = p.downlinks.is_empty();
    let mut w = start(buf, unit, blkno, Rec::Page);
    w.u32(p.btpo_prev)
        .u32(p.btpo_next)
        .u32(p.btpo_level)
        .u16(p.btpo_flags)
        .u8(p.safexid.is_some() as u8 | (p.top_parent.is_some() as u8) << 1)
        .u16(p.downlinks.len().min(u16::MAX as usize) as u16)
        .u32(single_child)
        .bytes(p.high_key)
        .bytes(if leafish && keys { p.first_item } else { &[] })
        .bytes(if leafish && keys { p.last_item } else { &[] });
    if let Some(x) = p.safexid {
        w.u64(x);
    }
    if let Some(t) = p.top_parent {
        w.u32(t);
    }
    push(buf);
    if deleted {
        return;
    }
    if p.btpo_next != P_NONE {
        start(buf, unit, p.btpo_next, Rec::Left)
            .u32(blkno)
            .u32(p.btpo_level)
            .u16(p.btpo_flags);
        push(buf);
    }
    if p.btpo_prev != P_NONE {
        start(buf, unit, p.btpo_prev, Rec::Right)
            .u32(blkno)
            .u32(p.btpo_level)
            .bytes(if keys { p.first_real_key() } else { &[] });
        push(buf);
    }
    if let (true, Some(top)) = (p.btpo_flags & bf::BTP_HALF_DEAD != 0, p.top_parent) {
        if top != INVALID_BLOCK_NUMBER {
            start(buf, unit, top, Rec::TopParent).u32(blkno);
            push(buf);
        }
    }
    let n = p.downlinks.len();
    for (i, d) in p.downlinks.iter().enumerate() {
        let (bound, bound_off, expected) = match p.downlinks.get(i + 1) {
            Some(next) => (Bound::NextPivot, next.offnum, Some(next.item)),
            None if p.btpo_next != P_NONE => (Bound::ParentHighKey, 0, Some(p.high_key)),
            None => (Bound::Nothing, 0, None),
        };
        let expected = expected.and_then(|t| t.get(PIVOT_KEY_FROM..));
        let mut w = start(buf, unit, d.child, Rec::Downlink);
        w.u32(blkno)
            .u16(d.offnum)
            .u32(p.btpo_level)
            .u16(i as u16)
            .u16(n.min(u16::MAX as usize) as u16)
            .u8(bound as u8)
            .u16(bound_off)
            .u8(expected.is_some() as u8)
            .bytes(expected.unwrap_or_default())
            .bytes(if i == 0 || !keys { &[] } else { d.item });
        push(buf);
    }
}

/// Writes the damaged mark of block `blkno`.
pub fn damaged_record(unit: u32, blkno: u32, buf: &mut Vec<u8>) {
    start(buf, unit, blkno, Rec::Damaged);
}

/// Writes a unique index's run of equal keys: a page's first run (or its only one) at its own
/// block, its last run (and a only run again, to meet the right sibling) at `next` (its own
/// block on the rightmost page).
pub fn run_record(unit: u32, at: u32, kind: Rec, run: &RunRec<'_>, buf: &mut Vec<u8>) {
    run_body(&mut start(buf, unit, at, kind), run);
}

fn run_body(w: &mut Writer<'_>, run: &RunRec<'_>) {
    w.u32(run.blkno)
        .u32(run.level)
        .u8(run.place as u8)
        .u16(run.offnum)
        .bytes(run.key)
        .u16(run.tids.len() as u16);
    for &(b, o, at) in &run.tids {
        w.u32(b).u16(o).u16(at);
    }
}

fn start(buf: &mut Vec<u8>, unit: u32, blkno: u32, rec: Rec) -> Writer<'_> {
    let mut w = Writer::start(buf, unit, Family::BtreePage, blkno);
    w.u8(rec as u8);
    w
}

/// A page's own fact, read back.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageRec<'a> {
    pub btpo_prev: u32,
    pub btpo_next: u32,
    pub btpo_level: u32,
    pub btpo_flags: u16,
    pub safexid: Option<u64>,
    pub top_parent: Option<u32>,
    pub ndownlinks: u16,
    /// The only child, when the page has exactly one downlink.
    pub single_child: Option<u32>,
    pub high_key: &'a [u8],
    /// A leaf's first and last keys (empty on an internal page).
    pub first: &'a [u8],
    pub last: &'a [u8],
}

impl PageRec<'_> {
    pub fn deleted(&self) -> bool {
        self.btpo_flags & bf::BTP_DELETED != 0
    }

    pub fn flagged(&self, flag: u16) -> bool {
        self.btpo_flags & flag != 0
    }
}

/// "I am your left sibling": from a live page whose `btpo_next` is this block.
#[derive(Debug, Clone, Copy)]
pub struct LeftRec {
    pub from: u32,
    pub level: u32,
    pub flags: u16,
}

/// "I am your right sibling": from a live page whose `btpo_prev` is this block.
#[derive(Debug, Clone, Copy)]
pub struct RightRec<'a> {
    pub from: u32,
    pub level: u32,
    pub first_key: &'a [u8],
}

/// "I am your parent": one downlink to this block.
#[derive(Debug, Clone, Copy)]
pub struct DownlinkRec<'a> {
    pub parent: u32,
    pub offnum: u16,
    pub parent_level: u32,
    /// Its position among the parent's downlinks, and how many the parent has.
    pub index: u16,
    pub siblings: u16,
    pub bound: Bound,
    pub bound_offnum: u16,
    /// The high key the child must have, from `t_info` on (`None`: nothing to compare).
    pub expected_high: Option<&'a [u8]>,
    /// The pivot tuple (empty for the parent's first, "minus infinity", downlink).
    pub separator: &'a [u8],
}

/// "You are my top parent": from a live half-dead leaf.
#[derive(Debug, Clone, Copy)]
pub struct TopParentRec {
    pub leaf: u32,
}

/// A run of entries with byte-equal keys on a unique index's leaf page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRec<'a> {
    /// The leaf page holding it, and its level.
    pub blkno: u32,
    pub level: u32,
    pub place: RunPlace,
    /// Offset number of the run's first entry.
    pub offnum: u16,
    pub key: &'a [u8],
    /// Heap TIDs (block, offset), with the offset number of the entry holding each.
    pub tids: Vec<(u32, u16, u16)>,
}

/// One record about a block, read back.
#[derive(Debug, Clone)]
pub enum Record<'a> {
    Damaged,
    Page(PageRec<'a>),
    Left(LeftRec),
    Right(RightRec<'a>),
    Downlink(DownlinkRec<'a>),
    TopParent(TopParentRec),
    FirstRun(RunRec<'a>),
    LastRun(RunRec<'a>),
}

/// Reads the body of a [`Family::BtreePage`] record; `None` when it is cut or unknown.
pub fn read<'a>(r: &mut Reader<'a>) -> Option<Record<'a>> {
    Some(match Rec::from_byte(r.u8()?)? {
        Rec::Damaged => Record::Damaged,
        Rec::Page => {
            let (btpo_prev, btpo_next, btpo_level, btpo_flags) =
                (r.u32()?, r.u32()?, r.u32()?, r.u16()?);
            let has = r.u8()?;
            let ndownlinks = r.u16()?;
            let single = r.u32()?;
            let (high_key, first, last) = (r.bytes()?, r.bytes()?, r.bytes()?);
            let safexid = if has & 1 != 0 { Some(r.u64()?) } else { None };
            let top_parent = if has & 2 != 0 { Some(r.u32()?) } else { None };
            Record::Page(PageRec {
                btpo_prev,
                btpo_next,
                btpo_level,
                btpo_flags,
                safexid,
                top_parent,
                ndownlinks,
                single_child: (ndownlinks == 1).then_some(single),
                high_key,
                first,
                last,
            })
        }
        Rec::Left => Record::Left(LeftRec {
            from: r.u32()?,
            level: r.u32()?,
            flags: r.u16()?,
        }),
        Rec::Right => Record::Right(RightRec {
            from: r.u32()?,
            level: r.u32()?,
            first_key: r.bytes()?,
        }),
        Rec::Downlink => {
            let (parent, offnum, parent_level, index, siblings) =
                (r.u32()?, r.u16()?, r.u32()?, r.u16()?, r.u16()?);
            let bound = Bound::from_byte(r.u8()?)?;
            let bound_offnum = r.u16()?;
            let has = r.u8()? == 1;
            let expected = r.bytes()?;
            Record::Downlink(DownlinkRec {
                parent,
                offnum,
                parent_level,
                index,
                siblings,
                bound,
                bound_offnum,
                expected_high: has.then_some(expected),
                separator: r.bytes()?,
            })
        }
        Rec::TopParent => Record::TopParent(TopParentRec { leaf: r.u32()? }),
        kind @ (Rec::FirstRun | Rec::LastRun) => {
            let run = read_run(r)?;
            match kind {
                Rec::FirstRun => Record::FirstRun(run),
                _ => Record::LastRun(run),
            }
        }
    })
}

fn read_run<'a>(r: &mut Reader<'a>) -> Option<RunRec<'a>> {
    let blkno = r.u32()?;
    let level = r.u32()?;
    let place = RunPlace::from_byte(r.u8()?)?;
    let offnum = r.u16()?;
    let key = r.bytes()?;
    let n = r.u16()?;
    let mut tids = Vec::with_capacity(n as usize);
    for _ in 0..n {
        tids.push((r.u32()?, r.u16()?, r.u16()?));
    }
    Some(RunRec {
        blkno,
        level,
        place,
        offnum,
        key,
        tids,
    })
}

/// Reads an inner run of a [`Family::UniqueRun`] record (written with [`run_record`] under
/// that family).
pub fn read_inner_run<'a>(r: &mut Reader<'a>) -> Option<RunRec<'a>> {
    read_run(r)
}

/// Writes an inner run (two or more heap TIDs, not at a page's edge) as a
/// [`Family::UniqueRun`] record: it needs no join, only the heap's liveness.
pub fn inner_run_record(unit: u32, run: &RunRec<'_>, buf: &mut Vec<u8>) {
    run_body(
        &mut Writer::start(buf, unit, Family::UniqueRun, run.blkno),
        run,
    );
}
