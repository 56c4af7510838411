//! The attribute walk of one heap tuple whose inserter committed, against `pg_attribute`: fixed
//! lengths and alignment, 1-byte/4-byte/external varlena headers, cstrings, every attribute
//! ending inside the tuple and the last one exactly at its end, and on-disk TOAST pointers.

use serde_json::json;

use super::heap::TupleCheck;
use super::StructureProblem;
use crate::catalog::attributes::Attribute;
use crate::finding::FindingKind as K;
use crate::format::bytes::align_up;
use crate::format::bytes::le_u32;
use crate::format::heap::{infomask as im, HeapTupleHeader};
use crate::format::toast::{
    VARATT_EXTERNAL_SIZE, VARLENA_EXTSIZE_MASK, VARTAG_1B_E, VARTAG_ONDISK,
};

/// Largest raw size of a varlena (`MaxAllocSize`-ish bound used by amcheck).
const VARLENA_MAX_RAW: u32 = 0x3FFF_FFFF;

impl TupleCheck<'_> {
    /// Walks attributes `1..=natts` the way the server deforms a tuple, checking every length
    /// and varlena header against the tuple's end.
    pub(super) fn walk_attributes(&mut self, h: &HeapTupleHeader, attrs: &[Attribute]) {
        // `header_ok` has checked `t_hoff` against the tuple's length.
        let Some(data) = self.tuple.get(h.t_hoff as usize..) else {
            return;
        };
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
        match attribute_span(data, off, a) {
            Ok(span) => {
                if span.external {
                    self.toast_pointer(h, data, span.start, attnum)?;
                }
                Ok(span.end)
            }
            Err(e) => Err(span_problem(e, data, a, attnum)),
        }
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
        let extsize = extinfo & VARLENA_EXTSIZE_MASK;
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

/// Where one attribute's bytes lie in a tuple's data (after `t_hoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttrSpan {
    pub start: usize,
    pub end: usize,
    /// An on-disk TOAST pointer (`VARTAG_ONDISK`): `start + 2..end` is its `varatt_external`.
    pub external: bool,
}

/// Why an attribute cannot be walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanError {
    /// A fixed-length value or cstring of `len` bytes at `start` ends past the data.
    Past { start: usize, len: usize },
    /// `pg_attribute` gives an impossible `attlen`.
    ImpossibleLength(i16),
    /// A varlena starts past the data.
    StartsBeyond(usize),
    /// An external varlena's tag or `varatt_external` is cut off.
    ExternalCut,
    /// An external varlena with a tag other than `VARTAG_ONDISK`.
    ExternalTag(u8),
    /// A 4-byte varlena header at `start` is cut off.
    HeaderCut(usize),
    /// A 4-byte varlena header gives a length below 4.
    ShortHeader { start: usize, size: usize },
    /// A varlena of `size` bytes at `start` ends past the data.
    VarlenaPast { start: usize, size: usize },
}

/// The bytes of attribute `a`, which starts at or after `off` in `data`, the way the server
/// deforms a tuple: fixed lengths aligned, varlenas with a 1-byte, 4-byte (aligned) or external
/// header, cstrings up to their NUL. The one attribute walker of the heap checks and of the
/// extended level's TOAST pointers.
pub(crate) fn attribute_span(
    data: &[u8],
    off: usize,
    a: &Attribute,
) -> Result<AttrSpan, SpanError> {
    let plain = |start: usize, end: usize| AttrSpan {
        start,
        end,
        external: false,
    };
    match a.attlen {
        len if len > 0 => {
            let start = align_up(off, a.align);
            let end = start + len as usize;
            if end > data.len() {
                return Err(SpanError::Past {
                    start,
                    len: len as usize,
                });
            }
            Ok(plain(start, end))
        }
        -1 => varlena_span(data, off, a),
        -2 => {
            let rest = data.get(off..).unwrap_or_default();
            let nul = rest.iter().position(|&b| b == 0).ok_or(SpanError::Past {
                start: off,
                len: rest.len() + 1,
            })?;
            Ok(plain(off, off + nul + 1))
        }
        other => Err(SpanError::ImpossibleLength(other)),
    }
}

fn varlena_span(data: &[u8], off: usize, a: &Attribute) -> Result<AttrSpan, SpanError> {
    let mut start = off;
    if data.get(start) == Some(&0) {
        start = align_up(start, a.align);
    }
    let b0 = *data.get(start).ok_or(SpanError::StartsBeyond(start))?;
    let (size, external) = if b0 == VARTAG_1B_E {
        let tag = *data.get(start + 1).ok_or(SpanError::ExternalCut)?;
        if tag != VARTAG_ONDISK {
            return Err(SpanError::ExternalTag(tag));
        }
        if start + 2 + VARATT_EXTERNAL_SIZE > data.len() {
            return Err(SpanError::ExternalCut);
        }
        (2 + VARATT_EXTERNAL_SIZE, true)
    } else if b0 & 0x01 == 0x01 {
        ((b0 >> 1) as usize, false)
    } else {
        let word = le_u32(data, start).ok_or(SpanError::HeaderCut(start))?;
        let size = ((word >> 2) & 0x3FFF_FFFF) as usize;
        if size < 4 {
            return Err(SpanError::ShortHeader { start, size });
        }
        (size, false)
    };
    if start + size > data.len() {
        return Err(SpanError::VarlenaPast { start, size });
    }
    Ok(AttrSpan {
        start,
        end: start + size,
        external,
    })
}

/// The finding of an attribute that cannot be walked (messages as before the walk was shared).
fn span_problem(e: SpanError, data: &[u8], a: &Attribute, attnum: usize) -> StructureProblem {
    let n = data.len();
    let attr = |msg: String| {
        StructureProblem::error(
            K::AttributeInvalid,
            format!("attribute {attnum} ({}): {msg}", a.label()),
        )
    };
    let toast = |msg: String| StructureProblem::error(K::ToastPointerInvalid, msg);
    match e {
        SpanError::Past { start, len } => StructureProblem::error(
            K::AttributeInvalid,
            format!("attribute {attnum} ({}) of length {len} at offset {start} ends beyond the tuple's {n} data bytes", a.label()),
        ),
        SpanError::ImpossibleLength(other) => StructureProblem::error(
            K::AttributeInvalid,
            format!("pg_attribute gives attribute {attnum} the impossible length {other}"),
        ),
        SpanError::StartsBeyond(start) => attr(format!(
            "starts at offset {start}, beyond the tuple's {n} data bytes"
        )),
        SpanError::ExternalCut => toast("TOAST pointer is cut off".into()),
        SpanError::ExternalTag(tag) => toast(format!("external varlena has tag {tag}, only {VARTAG_ONDISK} (on-disk TOAST pointer) is legal on disk")),
        SpanError::HeaderCut(start) => attr(format!("4-byte varlena header at {start} is cut off")),
        SpanError::ShortHeader { start, size } => attr(format!(
            "4-byte varlena header at {start} gives length {size}"
        )),
        SpanError::VarlenaPast { start, size } => attr(format!(
            "varlena of length {size} at offset {start} ends beyond the tuple's {n} data bytes"
        )),
    }
}
