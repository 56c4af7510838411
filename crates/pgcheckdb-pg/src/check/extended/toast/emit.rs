//! The scan side of the TOAST check: pointer facts from a table's heap pages, chunk facts from
//! its TOAST relation's pages, and the mark of a TOAST page that could not be used. The record
//! layouts are here too (encode and decode side by side).

use super::ToastPointers;
use crate::catalog::attributes::Attribute;
use crate::catalog::xact::{CommitLog, XidStatus};
use crate::check::extended::facts::{Family, Reader, Writer};
use crate::check::extended::heap::{certainly_live, HeapTuples};
use crate::check::extended::spill::RunBuilder;
use crate::check::standard::attribute_span;
use crate::format::bytes::le_u32;
use crate::format::enums::byte_enum;
use crate::format::heap::{infomask as im, HeapTupleHeader};
use crate::format::itemid::{ItemId, LpFlags};
use crate::format::toast::{chunk_offset, VARATT_4B_COMPRESSED, VARLENA_EXTSIZE_MASK, VARTAG_1B_E};

byte_enum! {
    /// The sub-kind byte that starts a [`Family::ToastValue`] body: a value's pointers sort before
    /// its chunks.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ValueFact {
        Pointer = 0,
        Chunk = 1,
    }
}

byte_enum! {
    /// How sure it is that a chunk tuple is live.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub enum ChunkLife {
        /// Certainly dead (inserter aborted, or deleter committed): only counted.
        Dead = 0,
        /// Neither certainly dead nor certainly live (an in-progress, prepared or unknown
        /// transaction, a multixact deleter): present, but never blamed.
        Possible = 1,
        /// Inserted by a committed transaction, not deleted by one that committed or may commit.
        Certain = 2,
    }
}

byte_enum! {
    /// How a chunk's `chunk_data` is stored.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ChunkForm {
        /// A plain varlena (1-byte or 4-byte header): its data length is the chunk's size.
        Plain = 0,
        /// A compressed inline varlena: never written into a TOAST relation.
        Compressed = 1,
        /// An external varlena: never written into a TOAST relation.
        External = 2,
    }
}

/// A live row's TOAST pointer as a fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerFact {
    pub valueid: u32,
    /// `va_extinfo & 0x3FFFFFFF`: the bytes stored in chunks.
    pub extsize: u32,
    pub rawsize: u32,
    /// Where the pointer is: main fork block, line pointer, attribute number.
    pub block: u32,
    pub offset: u16,
    pub attnum: u16,
}

/// A chunk tuple as a fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkFact {
    pub valueid: u32,
    /// `chunk_seq` (an `int4`; negative values read as large ones, past any last chunk).
    pub seq: u32,
    pub life: ChunkLife,
    pub form: ChunkForm,
    /// Bytes of `chunk_data` after its varlena header.
    pub size: u32,
    /// Where the chunk is in the TOAST relation.
    pub block: u32,
    pub offset: u16,
}

/// One decoded [`Family::ToastValue`] record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRecord {
    Pointer(PointerFact),
    Chunk(ChunkFact),
}

impl PointerFact {
    pub fn write(&self, buf: &mut Vec<u8>, unit: u32) {
        Writer::start(buf, unit, Family::ToastValue, self.valueid)
            .u8(ValueFact::Pointer as u8)
            .u32(self.extsize)
            .u32(self.rawsize)
            .u32(self.block)
            .u16(self.offset)
            .u16(self.attnum);
    }
}

impl ChunkFact {
    pub fn write(&self, buf: &mut Vec<u8>, unit: u32) {
        Writer::start(buf, unit, Family::ToastValue, self.valueid)
            .u8(ValueFact::Chunk as u8)
            .u32(self.seq)
            .u8(self.life as u8)
            .u8(self.form as u8)
            .u32(self.size)
            .u32(self.block)
            .u16(self.offset);
    }
}

/// Decodes the body of a [`Family::ToastValue`] record about value `valueid`.
pub fn read_value(valueid: u32, r: &mut Reader<'_>) -> Option<ValueRecord> {
    Some(match ValueFact::from_byte(r.u8()?)? {
        ValueFact::Pointer => ValueRecord::Pointer(PointerFact {
            valueid,
            extsize: r.u32()?,
            rawsize: r.u32()?,
            block: r.u32()?,
            offset: r.u16()?,
            attnum: r.u16()?,
        }),
        ValueFact::Chunk => ValueRecord::Chunk(ChunkFact {
            valueid,
            seq: r.u32()?,
            life: ChunkLife::from_byte(r.u8()?)?,
            form: ChunkForm::from_byte(r.u8()?)?,
            size: r.u32()?,
            block: r.u32()?,
            offset: r.u16()?,
        }),
    })
}

/// The tuple of line pointer `it` and its header, if it is a normal item with storage.
fn tuple_at<'p>(page: &'p [u8], it: &ItemId) -> Option<(&'p [u8], HeapTupleHeader)> {
    if it.lp_flags != LpFlags::Normal {
        return None;
    }
    let t = page.get(it.lp_off as usize..it.lp_off as usize + it.lp_len as usize)?;
    Some((t, HeapTupleHeader::parse(t)?))
}

/// One record per external TOAST pointer of each certainly live tuple of a sound heap page.
pub fn pointer_facts(
    target: &ToastPointers,
    tuples: &HeapTuples<'_>,
    clog: &CommitLog,
    buf: &mut Vec<u8>,
    runs: &mut RunBuilder,
) {
    let blkno = tuples.blkno;
    for it in tuples.items {
        let Some((t, h)) = tuples.tuple(it.offnum) else {
            continue;
        };
        if h.t_infomask & im::HEAP_HASEXTERNAL == 0 || !certainly_live(&h, clog) {
            continue;
        }
        external_pointers(t, &h, &target.attributes, |attnum, p| {
            if p.toastrelid != target.toastrelid {
                return; // the standard level's toast_pointer_invalid
            }
            let fact = PointerFact {
                valueid: p.valueid,
                extsize: p.extinfo & VARLENA_EXTSIZE_MASK,
                rawsize: p.rawsize,
                block: blkno,
                offset: it.offnum,
                attnum,
            };
            fact.write(buf, target.unit);
            runs.push(buf);
        });
    }
}

/// `varatt_external`, the payload of an on-disk TOAST pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarattExternal {
    pub rawsize: u32,
    pub extinfo: u32,
    pub valueid: u32,
    pub toastrelid: u32,
}

/// Calls `f(attnum, pointer)` for every external TOAST pointer of a tuple, walking its columns
/// with the standard level's [`attribute_span`]. Dropped columns are skipped (the server never
/// reads them), and so is a tuple whose columns cannot be walked (reported by the standard
/// level) or that has more columns than its table.
pub fn external_pointers(
    tuple: &[u8],
    h: &HeapTupleHeader,
    attrs: &[Attribute],
    mut f: impl FnMut(u16, VarattExternal),
) {
    let natts = h.natts() as usize;
    if natts > attrs.len() {
        return;
    }
    let Some(data) = tuple.get(h.t_hoff as usize..) else {
        return;
    };
    let mut off = 0;
    for (i, a) in attrs[..natts].iter().enumerate() {
        let attnum = i + 1;
        if h.att_is_null(tuple, attnum) {
            continue;
        }
        let Ok(span) = attribute_span(data, off, a) else {
            return;
        };
        off = span.end;
        if !span.external || a.dropped {
            continue;
        }
        let p = span.start + 2;
        let fields = (
            le_u32(data, p),
            le_u32(data, p + 4),
            le_u32(data, p + 8),
            le_u32(data, p + 12),
        );
        if let (Some(rawsize), Some(extinfo), Some(valueid), Some(toastrelid)) = fields {
            let pointer = VarattExternal {
                rawsize,
                extinfo,
                valueid,
                toastrelid,
            };
            f(attnum as u16, pointer);
        }
    }
}

/// One record per chunk tuple of a sound TOAST page.
pub fn chunk_facts(
    unit: u32,
    blkno: u32,
    page: &[u8],
    items: &[ItemId],
    clog: &CommitLog,
    buf: &mut Vec<u8>,
    runs: &mut RunBuilder,
) {
    for it in items {
        let Some((t, h)) = tuple_at(page, it) else {
            continue;
        };
        let life = chunk_life(&h, clog);
        let Some(mut fact) = decode_chunk(t, &h) else {
            continue;
        };
        fact.life = life;
        fact.block = blkno;
        fact.offset = it.offnum;
        fact.write(buf, unit);
        runs.push(buf);
    }
}

/// The mark of a TOAST page the scan could not use.
pub fn damaged_fact(unit: u32, blkno: u32, buf: &mut Vec<u8>, runs: &mut RunBuilder) {
    Writer::start(buf, unit, Family::ToastDamaged, blkno);
    runs.push(buf);
}

/// Decodes a chunk tuple's columns; `None` when it does not have the three non-null columns of
/// a TOAST relation or its data runs past the tuple.
pub fn decode_chunk(t: &[u8], h: &HeapTupleHeader) -> Option<ChunkFact> {
    if h.natts() != 3 || h.has_nulls() {
        return None;
    }
    let data = t.get(h.t_hoff as usize..)?;
    let valueid = le_u32(data, chunk_offset::CHUNK_ID)?;
    let seq = le_u32(data, chunk_offset::CHUNK_SEQ)?;
    let at = chunk_offset::CHUNK_DATA;
    let b0 = *data.get(at)?;
    let (form, size) = if b0 == VARTAG_1B_E {
        (ChunkForm::External, 0)
    } else if b0 & 0x01 == 0x01 {
        (ChunkForm::Plain, ((b0 >> 1) as u32).checked_sub(1)?)
    } else {
        // A 4-byte header: bit 1 of the first byte set means compressed (VARATT_IS_4B_C).
        let word = le_u32(data, at)?;
        let total = (word >> 2) & VARLENA_EXTSIZE_MASK;
        let form = if u32::from(b0 & 0x03) == VARATT_4B_COMPRESSED {
            ChunkForm::Compressed
        } else {
            ChunkForm::Plain
        };
        (form, total.checked_sub(4)?)
    };
    Some(ChunkFact {
        valueid,
        seq,
        life: ChunkLife::Possible,
        form,
        size,
        block: 0,
        offset: 0,
    })
}

/// A chunk tuple's liveness: the rules of [`certainly_live`], with "not sure" kept apart from
/// certainly dead (its inserter aborted, or its deleter committed).
pub fn chunk_life(h: &HeapTupleHeader, clog: &CommitLog) -> ChunkLife {
    if certainly_live(h, clog) {
        return ChunkLife::Certain;
    }
    let mask = h.t_infomask;
    let xmin_frozen = mask & (im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID)
        == (im::HEAP_XMIN_COMMITTED | im::HEAP_XMIN_INVALID);
    let inserter_aborted = !xmin_frozen
        && mask & im::HEAP_XMIN_COMMITTED == 0
        && (mask & im::HEAP_XMIN_INVALID != 0 || clog.status(h.t_xmin) == XidStatus::Aborted);
    if inserter_aborted {
        return ChunkLife::Dead;
    }
    let locked_only = crate::check::extended::heap::xmax_locked_only(mask);
    let plain_xmax = mask & (im::HEAP_XMAX_INVALID | im::HEAP_XMAX_IS_MULTI) == 0
        && h.t_xmax != 0
        && !locked_only;
    let deleter_committed = plain_xmax
        && (mask & im::HEAP_XMAX_COMMITTED != 0 || clog.status(h.t_xmax) == XidStatus::Committed);
    if deleter_committed {
        return ChunkLife::Dead;
    }
    ChunkLife::Possible
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header that counts three attributes.
    fn header(xmin: u32, xmax: u32, mask: u16) -> HeapTupleHeader {
        HeapTupleHeader {
            t_infomask2: 3,
            ..HeapTupleHeader::for_tests(xmin, xmax, mask)
        }
    }

    /// A chunk tuple: header, chunk_id, chunk_seq, chunk_data with a 4-byte header.
    fn chunk_tuple(valueid: u32, seq: u32, data_len: usize) -> Vec<u8> {
        let mut t = vec![0u8; 24];
        t[22] = 24;
        t.extend_from_slice(&valueid.to_le_bytes());
        t.extend_from_slice(&seq.to_le_bytes());
        t.extend_from_slice(&(((data_len as u32) + 4) << 2).to_le_bytes());
        t.resize(t.len() + data_len, 0xAB);
        t
    }

    #[test]
    fn chunks_decode_with_either_header() {
        let h = header(100, 0, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID);
        let c = decode_chunk(&chunk_tuple(16400, 3, 1996), &h).unwrap();
        assert_eq!(
            (c.valueid, c.seq, c.size, c.form),
            (16400, 3, 1996, ChunkForm::Plain)
        );
        // A 1-byte header: (len + 1) << 1 | 1.
        let mut t = chunk_tuple(16400, 4, 0);
        t.truncate(32);
        t.push(((10 + 1) << 1) | 1);
        t.extend_from_slice(&[7; 10]);
        let c = decode_chunk(&t, &h).unwrap();
        assert_eq!((c.seq, c.size, c.form), (4, 10, ChunkForm::Plain));
        // Compressed and external headers are told apart.
        let mut t = chunk_tuple(16400, 5, 8);
        t[32] |= 0x02;
        assert_eq!(decode_chunk(&t, &h).unwrap().form, ChunkForm::Compressed);
        t[32] = 0x01;
        assert_eq!(decode_chunk(&t, &h).unwrap().form, ChunkForm::External);
        // Cut off: nothing.
        assert_eq!(decode_chunk(&t[..30], &h), None);
    }

    #[test]
    fn chunk_liveness_keeps_the_uncertain_apart() {
        let clog = CommitLog::default(); // knows no xid
        let live = header(100, 0, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_INVALID);
        assert_eq!(chunk_life(&live, &clog), ChunkLife::Certain);
        assert_eq!(chunk_life(&header(100, 0, 0), &clog), ChunkLife::Possible);
        let aborted = header(100, 0, im::HEAP_XMIN_INVALID);
        assert_eq!(chunk_life(&aborted, &clog), ChunkLife::Dead);
        let deleted = header(100, 200, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_COMMITTED);
        assert_eq!(chunk_life(&deleted, &clog), ChunkLife::Dead);
        let multi = header(100, 200, im::HEAP_XMIN_COMMITTED | im::HEAP_XMAX_IS_MULTI);
        assert_eq!(chunk_life(&multi, &clog), ChunkLife::Possible);
    }

    #[test]
    fn records_round_trip_and_a_values_pointer_sorts_before_its_chunks() {
        let p = PointerFact {
            valueid: 16400,
            extsize: 5000,
            rawsize: 5004,
            block: 9,
            offset: 3,
            attnum: 2,
        };
        let c = ChunkFact {
            valueid: 16400,
            seq: 0,
            life: ChunkLife::Certain,
            form: ChunkForm::Plain,
            size: 1996,
            block: 0,
            offset: 1,
        };
        let (mut a, mut b, mut other) = (Vec::new(), Vec::new(), Vec::new());
        p.write(&mut a, 7);
        c.write(&mut b, 7);
        ChunkFact { seq: 1, ..c }.write(&mut other, 7);
        assert!(a < b && b < other);
        let (head, mut r) = Reader::open(&b).unwrap();
        assert_eq!(read_value(head.blkno, &mut r), Some(ValueRecord::Chunk(c)));
        let (head, mut r) = Reader::open(&a).unwrap();
        assert_eq!(
            read_value(head.blkno, &mut r),
            Some(ValueRecord::Pointer(p))
        );
        let mut next_value = Vec::new();
        PointerFact {
            valueid: 16401,
            ..p
        }
        .write(&mut next_value, 7);
        assert!(other < next_value);
    }
}
