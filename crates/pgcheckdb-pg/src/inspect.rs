//! `inspect`: one page decoded for a person — header, checksum, line pointers, heap tuple
//! headers, index tuple sizes and the B-tree special space.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::Serialize;

use crate::checksum::pg_checksum_page;
use crate::control::{ChecksumState, ControlFile};
use crate::layout::btree::{BtMetaPage, BtPageOpaque, BTREE_MAGIC};
use crate::layout::heap::{HeapTupleHeader, ItemPointer};
use crate::layout::itemid::{line_pointers, ItemId};
use crate::layout::le_u16;
use crate::layout::special::{guess_page_kind, PageKind};
use crate::page::{is_all_zero, PageHeader};
use crate::physical::{check_page, PageCheckConfig, PageProblem, PageVerdict};

/// The page's checksum as stored and as calculated for its absolute block number.
#[derive(Debug, Clone, Serialize)]
pub struct ChecksumView {
    pub stored: u16,
    pub calculated: u16,
    /// Whether the cluster verifies checksums at all.
    pub enabled: bool,
}

/// A heap tuple header with its flag names.
#[derive(Debug, Clone, Serialize)]
pub struct HeapTupleView {
    #[serde(flatten)]
    pub header: HeapTupleHeader,
    pub natts: u16,
    pub infomask_flags: Vec<&'static str>,
    pub infomask2_flags: Vec<&'static str>,
}

/// An index tuple's heap pointer and size (`t_tid`, `t_info`).
#[derive(Debug, Clone, Serialize)]
pub struct IndexTupleView {
    pub t_tid: ItemPointer,
    pub size: u16,
    pub has_nulls: bool,
    pub has_varwidth: bool,
}

/// One line pointer and, when it has storage inside the page, what it points at.
#[derive(Debug, Clone, Serialize)]
pub struct ItemView {
    #[serde(flatten)]
    pub item: ItemId,
    /// Why the item's storage is not decoded, if it is not.
    pub problem: Option<String>,
    pub heap_tuple: Option<HeapTupleView>,
    pub index_tuple: Option<IndexTupleView>,
}

/// The whole decoded page.
#[derive(Debug, Clone, Serialize)]
pub struct PageDump {
    pub file: String,
    pub block: u64,
    pub block_in_file: u64,
    pub all_zero: bool,
    pub header: Option<PageHeader>,
    pub page_kind: Option<PageKind>,
    pub checksum: Option<ChecksumView>,
    /// The physical check's verdict, in words.
    pub verdict: String,
    pub items: Vec<ItemView>,
    pub btree: Option<BtPageOpaque>,
    pub btree_flags: Vec<&'static str>,
    pub btree_meta: Option<BtMetaPage>,
}

/// Reads block `block_in_file` of the segment file at `path` and decodes it. `segno` gives the
/// absolute block number used for the checksum.
pub fn inspect_block(
    path: &Path,
    shown: &str,
    segno: u32,
    block_in_file: u64,
    control: &ControlFile,
) -> io::Result<PageDump> {
    let bs = control.block_size();
    let mut page = vec![0u8; bs];
    let file = pgcheckdb_scan::open::open_regular(path, false)?;
    file.read_exact_at(&mut page, block_in_file * bs as u64)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                io::Error::new(
                    e.kind(),
                    format!("block {block_in_file} is beyond the end of \"{shown}\""),
                )
            } else {
                e
            }
        })?;
    let block = segno as u64 * control.relseg_size as u64 + block_in_file;
    Ok(decode_page(&page, shown, block, block_in_file, control))
}

/// Decodes a page image.
pub fn decode_page(
    page: &[u8],
    shown: &str,
    block: u64,
    block_in_file: u64,
    control: &ControlFile,
) -> PageDump {
    let enabled = control.checksum_state() == ChecksumState::On;
    let cfg = PageCheckConfig {
        blcksz: page.len(),
        max_align: control.max_align as usize,
        checksums: enabled,
    };
    let header = PageHeader::parse(page);
    let all_zero = is_all_zero(page);
    let verdict = describe_verdict(&check_page(&cfg, page, block as u32));
    let mut dump = PageDump {
        file: shown.to_string(),
        block,
        block_in_file,
        all_zero,
        header,
        page_kind: None,
        checksum: None,
        verdict,
        items: Vec::new(),
        btree: None,
        btree_flags: Vec::new(),
        btree_meta: None,
    };
    let Some(h) = header.filter(|h| !h.is_new()) else {
        return dump;
    };
    let kind = guess_page_kind(page, &h);
    dump.page_kind = Some(kind);
    dump.checksum = Some(ChecksumView {
        stored: h.pd_checksum,
        calculated: pg_checksum_page(page, block as u32),
        enabled,
    });
    if kind == PageKind::Btree {
        dump.btree = BtPageOpaque::parse(page, h.pd_special as usize);
        dump.btree_flags = dump
            .btree
            .map(|o| crate::layout::btree::flags::names(o.btpo_flags))
            .unwrap_or_default();
        dump.btree_meta =
            BtMetaPage::parse(page).filter(|m| m.btm_magic == BTREE_MAGIC && block == 0);
    }
    let is_meta = dump.btree_meta.is_some();
    if !is_meta {
        dump.items = line_pointers(page, &h)
            .into_iter()
            .map(|item| item_view(page, &h, kind, item))
            .collect();
    }
    dump
}

fn describe_verdict(v: &PageVerdict) -> String {
    match v {
        PageVerdict::Valid => "valid".into(),
        PageVerdict::New => "new (all zero)".into(),
        PageVerdict::Problem(p) => describe_problem(p),
    }
}

fn describe_problem(p: &PageProblem) -> String {
    match p {
        PageProblem::NonzeroNewPage { zero_prefix } => {
            format!("nonzero_new_page: pd_upper is 0 but the page is not all zero (first non-zero byte at {zero_prefix})")
        }
        PageProblem::InvalidHeader { text, .. } => format!("invalid_header: {text}"),
        PageProblem::TornPage { zero_from, .. } => {
            format!("torn_page: zero from byte {zero_from} to the end")
        }
        PageProblem::ChecksumMismatch { checksum } => format!(
            "checksum_mismatch: calculated checksum {} but the page stores {}",
            checksum.calculated, checksum.stored
        ),
        PageProblem::SuspiciousHeader { text, .. } => format!("suspicious_header: {text}"),
    }
}

fn item_view(page: &[u8], h: &PageHeader, kind: PageKind, item: ItemId) -> ItemView {
    let mut view = ItemView {
        item,
        problem: None,
        heap_tuple: None,
        index_tuple: None,
    };
    if !item.has_storage() {
        return view;
    }
    let start = item.lp_off as usize;
    let end = start + item.lp_len as usize;
    if start < h.pd_upper as usize || end > h.pd_special as usize || end > page.len() {
        view.problem = Some(format!(
            "storage {start}..{end} is outside the tuple area {}..{}",
            h.pd_upper, h.pd_special
        ));
        return view;
    }
    let tuple = &page[start..end];
    match kind {
        PageKind::HeapLike | PageKind::Sequence => {
            view.heap_tuple = HeapTupleHeader::parse(tuple).map(|header| HeapTupleView {
                natts: header.natts(),
                infomask_flags: crate::layout::heap::infomask::names(header.t_infomask),
                infomask2_flags: crate::layout::heap::infomask2::names(header.t_infomask2),
                header,
            });
            if view.heap_tuple.is_none() {
                view.problem = Some(format!(
                    "lp_len {} is shorter than a tuple header",
                    item.lp_len
                ));
            }
        }
        PageKind::Btree | PageKind::Hash | PageKind::Gist => view.index_tuple = index_tuple(tuple),
        _ => {}
    }
    view
}

/// `IndexTupleData`: `t_tid` and `t_info` (size in the low 13 bits, 0x4000 varwidth, 0x8000 nulls).
fn index_tuple(tuple: &[u8]) -> Option<IndexTupleView> {
    let t_info = le_u16(tuple, 6)?;
    Some(IndexTupleView {
        t_tid: ItemPointer::parse(tuple, 0)?,
        size: t_info & 0x1FFF,
        has_nulls: t_info & 0x8000 != 0,
        has_varwidth: t_info & 0x4000 != 0,
    })
}

/// Multi-line text rendering of a dump.
pub fn render_text(d: &PageDump) -> String {
    let mut out = format!(
        "file \"{}\", block {} (block {} of this segment file)\n",
        d.file, d.block, d.block_in_file
    );
    out += &format!("verdict: {}\n", d.verdict);
    let Some(h) = d.header.filter(|_| !d.all_zero) else {
        out += "page is all zero (new, never initialised)\n";
        return out;
    };
    out += &format!(
        "header: pd_lsn {:X}/{:08X} pd_checksum {} pd_flags {:#06x} pd_lower {} pd_upper {} pd_special {} pd_pagesize_version {:#06x} pd_prune_xid {}\n",
        h.pd_lsn >> 32,
        h.pd_lsn & 0xFFFF_FFFF,
        h.pd_checksum,
        h.pd_flags,
        h.pd_lower,
        h.pd_upper,
        h.pd_special,
        h.pd_pagesize_version,
        h.pd_prune_xid
    );
    if let Some(c) = &d.checksum {
        let state = if !c.enabled {
            " (checksums off in this cluster)"
        } else if c.stored == c.calculated {
            " (ok)"
        } else {
            " (MISMATCH)"
        };
        out += &format!(
            "checksum: stored {} calculated {}{state}\n",
            c.stored, c.calculated
        );
    }
    if let Some(k) = d.page_kind {
        out += &format!("page kind (from special space): {k:?}\n");
    }
    if let Some(o) = &d.btree {
        out += &format!(
            "btree special: btpo_prev {} btpo_next {} btpo_level {} btpo_flags {:#06x} [{}] btpo_cycleid {}\n",
            o.btpo_prev,
            o.btpo_next,
            o.btpo_level,
            o.btpo_flags,
            d.btree_flags.join("|"),
            o.btpo_cycleid
        );
    }
    if let Some(m) = &d.btree_meta {
        out += &format!(
            "btree metapage: btm_magic {:#x} btm_version {} btm_root {} btm_level {} btm_fastroot {} btm_fastlevel {}\n",
            m.btm_magic, m.btm_version, m.btm_root, m.btm_level, m.btm_fastroot, m.btm_fastlevel
        );
    }
    if !d.items.is_empty() {
        out += &format!("{} line pointers:\n", d.items.len());
    }
    for it in &d.items {
        out += &item_line(it);
    }
    out
}

fn item_line(it: &ItemView) -> String {
    let i = &it.item;
    let mut line = format!(
        "  lp {:>3}: {:?} off {} len {}",
        i.offnum, i.lp_flags, i.lp_off, i.lp_len
    );
    if let Some(t) = &it.heap_tuple {
        line += &format!(
            "  xmin {} xmax {} ctid ({},{}) natts {} t_hoff {} infomask [{}]",
            t.header.t_xmin,
            t.header.t_xmax,
            t.header.t_ctid.block,
            t.header.t_ctid.offset,
            t.natts,
            t.header.t_hoff,
            t.infomask_flags
                .iter()
                .chain(&t.infomask2_flags)
                .copied()
                .collect::<Vec<_>>()
                .join("|")
        );
    }
    if let Some(t) = &it.index_tuple {
        line += &format!(
            "  tid ({},{}) size {}",
            t.t_tid.block, t.t_tid.offset, t.size
        );
    }
    if let Some(p) = &it.problem {
        line += &format!("  !! {p}");
    }
    line + "\n"
}
