//! Fact records: what one page contributes to the cross-page checks, as compact bytes. Each
//! record is `unit (u32 BE) | family (u8) | block (u32 BE) | body`, so that sorting records by
//! bytes groups them by relation fork, then family, then block. Bodies carry the index tuple
//! items the checks need (high key, first and last data items, pivot tuples), never the page.
//! The B-tree records of one block (its own fact and what other pages claim about it) are
//! described in `extended::btree::records`.

use crate::format::bytes::{be_u16, be_u32, be_u64, range};
use crate::format::enums::byte_enum;

byte_enum! {
    /// The family of a fact (its second field).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Family {
        /// The B-tree metapage (`BTMetaPageData`).
        BtreeMeta = 0,
        /// Everything about one B-tree block: the page's own fact (or its damaged mark) and what
        /// its siblings, parents and half-dead children claim about it
        /// (`btree::records::Rec`).
        BtreePage = 1,
        /// A page that failed the physical or standard checks: nothing is concluded from it.
        /// (B-tree pages carry their damaged mark in [`Family::BtreePage`], to meet the claims.)
        Damaged = 2,
        /// A run of equal keys inside a unique index's leaf page with two or more heap TIDs.
        UniqueRun = 3,
        /// The heap line pointers whose HOT chain holds a live tuple.
        HeapLive = 4,
        /// Index -> heap TIDs, in the heap's unit: each heap page's line-pointer summary and the
        /// index groups naming it, in one family so that they sort together by heap block
        /// (`tids::record`). Number 11 is kept for this check too.
        Tids = 10,
        /// A TOAST page that failed the physical or standard checks: chunks may be missing from
        /// the facts, so no chunk of that TOAST relation is called missing (see `toast`).
        ToastDamaged = 8,
        /// A live row's TOAST pointer or a TOAST chunk; its block field is the value id, so that a
        /// value's pointers and chunks meet (see `toast`).
        ToastValue = 9,
        /// A heap page's visibility summary or a visibility-map run of set bits, both at heap
        /// block numbers so that they meet in one sorted stream (see `extended::vm`).
        Visibility = 5,
        /// A tuple whose commit hint bit contradicts `pg_xact`.
        HintBit = 6,
        /// What a page of a hash, GiST, SP-GiST, GIN or BRIN index says about the index's graph,
        /// or its damaged mark (see `extended::graphs`).
        IndexGraph = 12,
    }
}

/// Builds one record in a reused buffer.
pub struct Writer<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// Starts a record of `family` about block `blkno` of unit `unit`.
    pub fn start(buf: &'a mut Vec<u8>, unit: u32, family: Family, blkno: u32) -> Writer<'a> {
        buf.clear();
        Writer::append(buf, unit, family, blkno)
    }

    /// Starts a record after those already in `buf` (records laid out one after another, each
    /// handed on as its own slice).
    pub fn append(buf: &'a mut Vec<u8>, unit: u32, family: Family, blkno: u32) -> Writer<'a> {
        buf.extend_from_slice(&unit.to_be_bytes());
        buf.push(family as u8);
        buf.extend_from_slice(&blkno.to_be_bytes());
        Writer { buf }
    }

    /// Makes room for `n` more bytes (before a loop of small writes).
    pub fn reserve(&mut self, n: usize) -> &mut Self {
        self.buf.reserve(n);
        self
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A byte string of at most 65535 bytes, with its length (longer ones are cut; items of a
    /// page are always shorter).
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        let v = &v[..v.len().min(u16::MAX as usize)];
        self.u16(v.len() as u16);
        self.buf.extend_from_slice(v);
        self
    }
}

/// Reads a record written by [`Writer`]; every getter returns `None` past the end.
pub struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

/// The fixed head of every record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub unit: u32,
    pub family: Family,
    pub blkno: u32,
}

impl<'a> Reader<'a> {
    /// The head of `record` and a reader positioned at its body.
    pub fn open(record: &'a [u8]) -> Option<(Head, Reader<'a>)> {
        let mut r = Reader { b: record, pos: 0 };
        let unit = r.u32()?;
        let family = Family::from_byte(r.u8()?)?;
        let blkno = r.u32()?;
        Some((
            Head {
                unit,
                family,
                blkno,
            },
            r,
        ))
    }

    /// A reader of bytes that are a record's body alone (no head).
    pub fn body(bytes: &'a [u8]) -> Reader<'a> {
        Reader { b: bytes, pos: 0 }
    }

    /// The bytes not read yet, all taken.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = self.b.get(self.pos..).unwrap_or_default();
        self.pos = self.b.len();
        s
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = range(self.b, self.pos, n)?;
        self.pos += n;
        Some(s)
    }

    /// The value `read` finds at the position, which then moves `n` bytes on.
    #[inline]
    fn next<T>(&mut self, n: usize, read: impl Fn(&'a [u8], usize) -> Option<T>) -> Option<T> {
        let v = read(self.b, self.pos)?;
        self.pos += n;
        Some(v)
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.next(1, |b, at| b.get(at).copied())
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.next(2, be_u16)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.next(4, be_u32)
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.next(8, be_u64)
    }

    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }

    /// Whether the whole record has been read.
    pub fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }
}

/// `BTMetaPageData` as a fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaFact {
    pub root: u32,
    pub level: u32,
    pub fastroot: u32,
    pub fastlevel: u32,
    pub version: u32,
}

impl MetaFact {
    pub fn write(&self, w: &mut Writer<'_>) {
        w.u32(self.root)
            .u32(self.level)
            .u32(self.fastroot)
            .u32(self.fastlevel)
            .u32(self.version);
    }

    pub fn read(r: &mut Reader<'_>) -> Option<MetaFact> {
        Some(MetaFact {
            root: r.u32()?,
            level: r.u32()?,
            fastroot: r.u32()?,
            fastlevel: r.u32()?,
            version: r.u32()?,
        })
    }
}

byte_enum! {
    /// Where a run of equal keys sits on its leaf page.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RunPlace {
        /// Neither first nor last: only kept when it holds two or more heap TIDs.
        Inner = 0,
        /// The page's first key.
        First = 1,
        /// The page's last key.
        Last = 2,
        /// The page's only key (both first and last).
        Whole = 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_facts_round_trip_and_sort_by_unit_then_block() {
        let m = MetaFact {
            root: 3,
            level: 1,
            fastroot: 3,
            fastlevel: 1,
            version: 4,
        };
        let mut buf = Vec::new();
        m.write(&mut Writer::start(&mut buf, 5, Family::BtreeMeta, 0));
        let (head, mut r) = Reader::open(&buf).unwrap();
        assert_eq!(
            (head.unit, head.family, head.blkno),
            (5, Family::BtreeMeta, 0)
        );
        assert_eq!(MetaFact::read(&mut r), Some(m));
        let mut page = Vec::new();
        Writer::start(&mut page, 5, Family::BtreePage, 7);
        let mut other = Vec::new();
        Writer::start(&mut other, 5, Family::BtreePage, 300);
        assert!(
            buf < page && page < other,
            "meta, then block 7, then block 300"
        );
        // A truncated record reads as nothing, never a panic.
        let (_, mut r) = Reader::open(&buf[..12]).unwrap();
        assert_eq!(MetaFact::read(&mut r), None);
    }
}
