//! The attribute walk of one heap tuple whose inserter committed, against `pg_attribute`: fixed
//! lengths and alignment, 1-byte/4-byte/external varlena headers, cstrings, every attribute
//! ending inside the tuple and the last one exactly at its end, and on-disk TOAST pointers.

use serde_json::json;

use super::heap::TupleCheck;
use super::{align_up, StructureProblem};
use crate::catalog::attributes::Attribute;
use crate::finding::FindingKind as K;
use crate::layout::heap::{infomask as im, HeapTupleHeader};
use crate::layout::le_u32;

/// `VARTAG_ONDISK`: the only external varlena tag allowed on disk.
const VARTAG_ONDISK: u8 = 18;
/// Size of `varatt_external`, the payload of an on-disk TOAST pointer.
const VARATT_EXTERNAL_SIZE: usize = 16;
/// Largest raw size of a varlena (`MaxAllocSize`-ish bound used by amcheck).
const VARLENA_MAX_RAW: u32 = 0x3FFF_FFFF;

impl TupleCheck<'_> {
    /// Walks attributes `1..=natts` the way the server deforms a tuple, checking every length
    /// and varlena header against the tuple's end.
    pub(super) fn walk_attributes(&mut self, h: &HeapTupleHeader, attrs: &[Attribute]) {
        let data = &self.tuple[h.t_hoff as usize..];
        let mut off = 0usize;
        for (i, a) in attrs.iter().enumerate() {
            let attnum = i + 1;
            if h.att_is_null(self.tuple, attnum) {
                continue;
            }
            match self.attribute_end(h, data, off, a, attnum) {
                Ok(end) => off = end,
                Err(problem) => {
                    self.out.push(problem.at(self.offnum).attr(attnum));
                    return;
                }
            }
        }
        if attrs.len() == h.natts() as usize && off != data.len() {
            self.out.push(
                StructureProblem::error(
                    K::AttributeInvalid,
                    format!(
                        "attributes end at byte {off} of the data but the tuple has {} data bytes",
                        data.len()
                    ),
                )
                .at(self.offnum),
            );
        }
    }

    /// Offset just past attribute `a`, which starts at or after `off`.
    fn attribute_end(
        &mut self,
        h: &HeapTupleHeader,
        data: &[u8],
        off: usize,
        a: &Attribute,
        attnum: usize,
    ) -> Result<usize, StructureProblem> {
        let past = |start: usize, len: usize| {
            StructureProblem::error(
                K::AttributeInvalid,
                format!("attribute {attnum} ({}) of length {len} at offset {start} ends beyond the tuple's {} data bytes", a.label(), data.len()),
            )
        };
        match a.attlen {
            len if len > 0 => {
                let start = align_up(off, a.align);
                let end = start + len as usize;
                if end > data.len() {
                    return Err(past(start, len as usize));
                }
                Ok(end)
            }
            -1 => self.varlena_end(h, data, off, a, attnum),
            -2 => {
                let rest = data.get(off..).unwrap_or_default();
                let nul = rest
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or_else(|| past(off, rest.len() + 1))?;
                Ok(off + nul + 1)
            }
            other => Err(StructureProblem::error(
                K::AttributeInvalid,
                format!("pg_attribute gives attribute {attnum} the impossible length {other}"),
            )),
        }
    }

    fn varlena_end(
        &mut self,
        h: &HeapTupleHeader,
        data: &[u8],
        off: usize,
        a: &Attribute,
        attnum: usize,
    ) -> Result<usize, StructureProblem> {
        let bad = |msg: String| {
            StructureProblem::error(
                K::AttributeInvalid,
                format!("attribute {attnum} ({}): {msg}", a.label()),
            )
        };
        let mut start = off;
        if data.get(start) == Some(&0) {
            start = align_up(start, a.align);
        }
        let b0 = *data.get(start).ok_or_else(|| {
            bad(format!(
                "starts at offset {start}, beyond the tuple's {} data bytes",
                data.len()
            ))
        })?;
        let size = if b0 == 0x01 {
            self.toast_pointer(h, data, start, attnum)?;
            2 + VARATT_EXTERNAL_SIZE
        } else if b0 & 0x01 == 0x01 {
            (b0 >> 1) as usize
        } else {
            let word = le_u32(data, start)
                .ok_or_else(|| bad(format!("4-byte varlena header at {start} is cut off")))?;
            let size = ((word >> 2) & 0x3FFF_FFFF) as usize;
            if size < 4 {
                return Err(bad(format!(
                    "4-byte varlena header at {start} gives length {size}"
                )));
            }
            size
        };
        if start + size > data.len() {
            return Err(bad(format!(
                "varlena of length {size} at offset {start} ends beyond the tuple's {} data bytes",
                data.len()
            )));
        }
        Ok(start + size)
    }

    /// Checks an on-disk TOAST pointer (`varatt_external`) at `start`.
    fn toast_pointer(
        &mut self,
        h: &HeapTupleHeader,
        data: &[u8],
        start: usize,
        attnum: usize,
    ) -> Result<(), StructureProblem> {
        let toast = |msg: String| StructureProblem::error(K::ToastPointerInvalid, msg);
        let tag = *data
            .get(start + 1)
            .ok_or_else(|| toast("TOAST pointer is cut off".into()))?;
        if tag != VARTAG_ONDISK {
            return Err(toast(format!("external varlena has tag {tag}, only {VARTAG_ONDISK} (on-disk TOAST pointer) is legal on disk")));
        }
        let p = start + 2;
        let fields = (
            le_u32(data, p),
            le_u32(data, p + 4),
            le_u32(data, p + 8),
            le_u32(data, p + 12),
        );
        let (Some(rawsize), Some(extinfo), Some(valueid), Some(toastrelid)) = fields else {
            return Err(toast("TOAST pointer is cut off".into()));
        };
        let extsize = extinfo & 0x3FFF_FFFF;
        let method = extinfo >> 30;
        let mut problems = Vec::new();
        if rawsize > VARLENA_MAX_RAW {
            problems.push(format!("raw size {rawsize} is too large"));
        }
        if extsize < rawsize.saturating_sub(4) && method > 1 {
            problems.push(format!(
                "compression method {method} is not pglz (0) or lz4 (1)"
            ));
        }
        if h.t_infomask & im::HEAP_HASEXTERNAL == 0 {
            problems.push("the tuple is not marked HEAP_HASEXTERNAL".into());
        }
        if self.rel.reltoastrelid == 0 {
            problems.push("the relation has no TOAST table".into());
        } else if toastrelid != self.rel.reltoastrelid {
            problems.push(format!(
                "it points at relation {toastrelid}, not this table's TOAST table {}",
                self.rel.reltoastrelid
            ));
        }
        for p in problems {
            self.out.push(
                toast(format!("TOAST pointer of attribute {attnum} (value {valueid}): {p}"))
                    .at(self.offnum)
                    .attr(attnum)
                    .detail(json!({"va_valueid": valueid, "va_toastrelid": toastrelid, "va_rawsize": rawsize, "va_extsize": extsize})),
            );
        }
        Ok(())
    }
}
