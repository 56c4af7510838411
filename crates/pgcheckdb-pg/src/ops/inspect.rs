//! `inspect`: one page decoded for a person — header, checksum, line pointers, heap tuple
//! headers (FROZEN when `xmin` is frozen), index tuple sizes, the B-tree special space, the bits
//! of a visibility-map page and the tree of a free-space-map page, and a hex dump — with one
//! verdict from the same checks as `verify`'s standard level ([`standard_problems`]).

use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::Serialize;

use crate::check::physical::{check_page, PageCheckConfig, PageProblem, PageVerdict};
use crate::format::btree::{BtMetaPage, BtPageOpaque, BTREE_MAGIC};
use crate::format::bytes::{align_up, le_i32, le_u16};
use crate::format::checksum::pg_checksum_page;
use crate::format::control::{ChecksumState, ControlFile};
use crate::format::heap::{HeapTupleHeader, ItemPointer};
use crate::format::index_tuple::T_INFO_OFFSET;
use crate::format::itemid::{line_pointers, ItemId};
use crate::format::page::{is_all_zero, PageHeader, SIZE_OF_PAGE_HEADER_DATA};
use crate::format::relfile::ForkNumber;
use crate::format::special::{guess_page_kind, PageKind};
use crate::format::vm::{HEAPBLOCKS_PER_BYTE, VM_ALL_FROZEN, VM_ALL_VISIBLE};

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
    /// `xmin` is frozen: `HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID` both set (`HEAP_XMIN_FROZEN`),
    /// or `xmin` is `FrozenTransactionId` (2), as tuples frozen before PostgreSQL 9.4 are.
    pub frozen: bool,
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
    /// The verdict, in words: the physical check's, then (on a physically valid page) that of
    /// the standard level's checks as `verify` runs them ([`apply_standard_level`]).
    pub verdict: String,
    /// Every problem the standard level's checks found on the page (empty when none, or when
    /// the page failed the physical checks, which then give the verdict alone).
    pub problems: Vec<ProblemView>,
    /// Why the standard level's checks did not run on this page, when they did not.
    pub structure_not_checked: Option<String>,
    pub items: Vec<ItemView>,
    pub btree: Option<BtPageOpaque>,
    pub btree_flags: Vec<&'static str>,
    pub btree_meta: Option<BtMetaPage>,
    /// The fork the page belongs to.
    pub fork: ForkNumber,
    /// A visibility-map page's bits.
    pub visibility_map: Option<VisibilityMapView>,
    /// A free-space-map page's tree.
    pub free_space_map: Option<FreeSpaceMapView>,
}

/// One problem of the standard level's checks, as `verify` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct ProblemView {
    /// The finding kind (`line_pointer_invalid`, ...).
    pub kind: &'static str,
    /// `error`, `warning` or `info`.
    pub severity: &'static str,
    /// The 1-based line pointer, where it applies.
    pub offset: Option<u16>,
    /// The 1-based attribute, where it applies.
    pub attnum: Option<u16>,
    pub message: String,
}

impl ProblemView {
    /// `kind at line pointer N, attribute M: message`.
    fn text(&self) -> String {
        let mut place = String::new();
        if let Some(o) = self.offset {
            place += &format!(" at line pointer {o}");
        }
        if let Some(a) = self.attnum {
            place += &format!(", attribute {a}");
        }
        format!("{}{place}: {}", self.kind, self.message)
    }
}

/// The standard level's checks of one physically valid page, exactly as `verify` runs them:
/// the page format the catalog gives its file, the cluster's xid bounds and commit log, the
/// B-tree key order, and (without data checksums) the `t_ctid` placement evidence. `Err` says
/// why they cannot run (the file is not in the catalog, or of an access method pgcheckdb has no
/// page format for).
pub fn standard_problems(
    datadir: &Path,
    control: &ControlFile,
    path: &Path,
    block: u64,
    page: &[u8],
) -> Result<Vec<ProblemView>, String> {
    use crate::catalog::Catalog;
    use crate::check::standard::{check_page_structure, Inputs, Scratch};
    use crate::check::structure::{placement_applies, Structure};
    use crate::format::relfile::parse_relation_file_name;
    use crate::plan::Plan;

    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let wanted = parse_relation_file_name(name)
        .ok_or_else(|| format!("\"{name}\" is not a relation file name"))?;
    let real_dir = |dir: &Path| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let dir = real_dir(path.parent().unwrap_or(Path::new(".")));
    let same_relation = |f: &crate::datadir::RelationFile| {
        f.name.relfilenode == wanted.relfilenode
            && f.name.temp_backend == wanted.temp_backend
            && real_dir(&f.dir.path) == dir
    };
    let plan = Plan::build_scoped(datadir, control.clone(), same_relation);
    let file = plan
        .dir
        .files
        .iter()
        .position(|f| f.name.fork == wanted.fork && f.name.segno == wanted.segno)
        .ok_or_else(|| format!("\"{name}\" is not in the data directory's listing"))?;
    let catalog = Catalog::read(datadir, control);
    let structure = Structure::from_catalog(&plan, &catalog);
    let fs = structure
        .files
        .get(file)
        .and_then(Option::as_ref)
        .ok_or_else(|| match structure.not_structure_checked.first() {
            Some(n) => n.reason.clone(),
            None => "the catalog does not describe this file".to_string(),
        })?;
    let mut problems = Vec::new();
    let fork = plan.fork_of_file[file];
    if control.checksum_state() != ChecksumState::On
        && placement_applies(&plan, Some(&structure), file, fork)
    {
        let max_align = control.max_align as usize;
        let fork_blocks = plan.fork_blocks[fork];
        if let Some(m) =
            crate::check::placement::misplaced_by_ctid(page, block, fork_blocks, max_align, |b| {
                plan.read_fork_block(fork, b)
            })
        {
            problems.push(ProblemView {
                kind: crate::finding::FindingKind::MisplacedPage.name(),
                severity: severity_name(crate::finding::Severity::Error),
                offset: None,
                attnum: None,
                message: m.message,
            });
        }
    }
    let inputs = Inputs {
        file: fs,
        facts: &structure.facts,
        clog: structure.clog,
    };
    let mut found = Vec::new();
    check_page_structure(page, block, &inputs, &mut Scratch::default(), &mut found);
    problems.extend(found.into_iter().map(|p| ProblemView {
        kind: p.kind.name(),
        severity: severity_name(p.severity),
        offset: p.offset,
        attnum: p.attnum,
        message: p.message,
    }));
    Ok(problems)
}

/// Gives a physically valid page the verdict of the standard level's checks: the most severe
/// problem (errors first), or `valid`; `checked` is [`standard_problems`]'s answer.
pub fn apply_standard_level(dump: &mut PageDump, checked: Result<Vec<ProblemView>, String>) {
    if dump.verdict != VALID {
        return;
    }
    match checked {
        Err(why) => {
            dump.verdict = format!("{VALID} (physical checks only: {why})");
            dump.structure_not_checked = Some(why);
        }
        Ok(mut problems) => {
            let rank = |p: &ProblemView| match p.severity {
                "error" => 0,
                "warning" => 1,
                _ => 2,
            };
            problems.sort_by_key(rank);
            if let Some(first) = problems.first() {
                dump.verdict = match problems.len() {
                    1 => first.text(),
                    n => format!("{} (and {} more problem(s), below)", first.text(), n - 1),
                };
            }
            dump.problems = problems;
        }
    }
}

fn severity_name(s: crate::finding::Severity) -> &'static str {
    use crate::finding::Severity;
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

impl PageDump {
    /// Whether the physical checks passed (before [`apply_standard_level`]): only then do the
    /// standard level's checks run, as in `verify`.
    pub fn physically_valid(&self) -> bool {
        self.verdict == VALID
    }
}

/// The verdict of a page no check faults.
const VALID: &str = "valid";

/// What a visibility-map page says about the heap blocks it covers.
#[derive(Debug, Clone, Serialize)]
pub struct VisibilityMapView {
    /// The first heap block this page covers.
    pub first_heap_block: u64,
    /// How many heap blocks it covers (`HEAPBLOCKS_PER_PAGE`).
    pub heap_blocks: u64,
    pub all_visible: u64,
    pub all_frozen: u64,
    /// Heap blocks with the all-frozen bit but not the all-visible bit (never valid).
    pub frozen_not_visible: Vec<u64>,
    /// Runs `[first, last]` of heap blocks with the all-visible bit set (at most 32).
    pub all_visible_runs: Vec<(u64, u64)>,
}

/// What a free-space-map page holds (`FSMPageData`: `fp_next_slot`, then a binary tree of
/// one-byte free-space categories whose leaves are the last `LeafNodesPerPage` nodes).
#[derive(Debug, Clone, Serialize)]
pub struct FreeSpaceMapView {
    pub fp_next_slot: i32,
    /// The root node: the largest category on this page (free bytes = category × BLCKSZ / 256).
    pub root_category: u8,
    pub leaves: usize,
    /// Leaves with a non-zero category (blocks or subtrees with free space recorded).
    pub nonzero_leaves: usize,
    /// The first leaves with a non-zero category: `(leaf index, category)` (at most 16).
    pub first_nonzero_leaves: Vec<(usize, u8)>,
}

/// Reads block `block_in_file` of the segment file at `path` and decodes it. `segno` gives the
/// absolute block number used for the checksum.
pub fn inspect_block(
    path: &Path,
    shown: &str,
    segno: u32,
    block_in_file: u64,
    fork: ForkNumber,
    control: &ControlFile,
) -> io::Result<(PageDump, Vec<u8>)> {
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
    let mut dump = decode_page(&page, shown, block, block_in_file, control);
    decode_map_page(&mut dump, &page, fork, control);
    Ok((dump, page))
}

/// Decodes the contents of a visibility-map or free-space-map page (known from its fork).
pub fn decode_map_page(dump: &mut PageDump, page: &[u8], fork: ForkNumber, control: &ControlFile) {
    dump.fork = fork;
    if dump.all_zero || dump.header.is_none_or(|h| h.is_new()) {
        return;
    }
    let contents = align_up(SIZE_OF_PAGE_HEADER_DATA, control.max_align as usize);
    let Some(body) = page.get(contents..) else {
        return;
    };
    match fork {
        ForkNumber::Vm => dump.visibility_map = Some(visibility_map(body, dump.block)),
        ForkNumber::Fsm => dump.free_space_map = free_space_map(body, page.len()),
        ForkNumber::Main | ForkNumber::Init => {}
    }
}

fn visibility_map(bits: &[u8], vm_block: u64) -> VisibilityMapView {
    let heap_blocks = bits.len() as u64 * HEAPBLOCKS_PER_BYTE as u64;
    let first = vm_block * heap_blocks;
    let mut view = VisibilityMapView {
        first_heap_block: first,
        heap_blocks,
        all_visible: 0,
        all_frozen: 0,
        frozen_not_visible: Vec::new(),
        all_visible_runs: Vec::new(),
    };
    for (i, &byte) in bits.iter().enumerate() {
        for k in 0..HEAPBLOCKS_PER_BYTE as u64 {
            let pair = (byte >> (2 * k)) & (VM_ALL_VISIBLE | VM_ALL_FROZEN);
            let heap_block = first + i as u64 * HEAPBLOCKS_PER_BYTE as u64 + k;
            if pair & VM_ALL_FROZEN != 0 {
                view.all_frozen += 1;
                if pair & VM_ALL_VISIBLE == 0 && view.frozen_not_visible.len() < 32 {
                    view.frozen_not_visible.push(heap_block);
                }
            }
            if pair & VM_ALL_VISIBLE != 0 {
                view.all_visible += 1;
                let runs = &mut view.all_visible_runs;
                let extends = runs.last().is_some_and(|run| run.1 + 1 == heap_block);
                if extends {
                    if let Some(run) = runs.last_mut() {
                        run.1 = heap_block;
                    }
                } else if runs.len() < 32 {
                    runs.push((heap_block, heap_block));
                }
            }
        }
    }
    view
}

fn free_space_map(body: &[u8], blcksz: usize) -> Option<FreeSpaceMapView> {
    let fp_next_slot = le_i32(body, 0)?;
    let nodes = body.get(4..)?;
    // NonLeafNodesPerPage = BLCKSZ / 2 - 1; the rest of the nodes are leaves.
    let non_leaf = (blcksz / 2).saturating_sub(1).min(nodes.len());
    let leaves = nodes.get(non_leaf..).unwrap_or_default();
    let nonzero: Vec<(usize, u8)> = leaves
        .iter()
        .enumerate()
        .filter(|(_, &c)| c != 0)
        .map(|(i, &c)| (i, c))
        .collect();
    Some(FreeSpaceMapView {
        fp_next_slot,
        root_category: nodes.first().copied().unwrap_or(0),
        leaves: leaves.len(),
        nonzero_leaves: nonzero.len(),
        first_nonzero_leaves: nonzero.into_iter().take(16).collect(),
    })
}

/// A hex dump of a page, 16 bytes a line with the offset; runs of identical lines after the
/// first are shown as one `*` line (as `hexdump` does).
pub fn hex_dump(page: &[u8]) -> String {
    let mut out = String::new();
    let mut previous: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in page.chunks(16).enumerate() {
        if previous == Some(line) {
            if !starred {
                out += "*\n";
                starred = true;
            }
            continue;
        }
        starred = false;
        previous = Some(line);
        out += &format!("{:04x} ", i * 16);
        for (j, b) in line.iter().enumerate() {
            out += if j == 8 { "  " } else { " " };
            out += &format!("{b:02x}");
        }
        out += "  |";
        out.extend(line.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        out += "|\n";
    }
    out += &format!("{:04x}\n", page.len());
    out
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
        problems: Vec::new(),
        structure_not_checked: None,
        items: Vec::new(),
        btree: None,
        btree_flags: Vec::new(),
        btree_meta: None,
        fork: ForkNumber::Main,
        visibility_map: None,
        free_space_map: None,
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
            .map(|o| crate::format::btree::flags::names(o.btpo_flags))
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
        PageVerdict::Valid => VALID.into(),
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
    let tuple = match item.storage(page) {
        Some(tuple) if start >= h.pd_upper as usize && end <= h.pd_special as usize => tuple,
        _ => {
            view.problem = Some(format!(
                "storage {start}..{end} is outside the tuple area {}..{}",
                h.pd_upper, h.pd_special
            ));
            return view;
        }
    };
    match kind {
        PageKind::HeapLike | PageKind::Sequence => {
            view.heap_tuple = HeapTupleHeader::parse(tuple).map(|header| HeapTupleView {
                natts: header.natts(),
                frozen: is_frozen(&header),
                infomask_flags: crate::format::heap::infomask::names(header.t_infomask),
                infomask2_flags: crate::format::heap::infomask2::names(header.t_infomask2),
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

/// `HEAP_XMIN_FROZEN` (both xmin hint bits), or `xmin` = `FrozenTransactionId`.
fn is_frozen(h: &HeapTupleHeader) -> bool {
    use crate::catalog::xact::FROZEN_TRANSACTION_ID;
    use crate::format::heap::infomask::{HEAP_XMIN_COMMITTED, HEAP_XMIN_INVALID};
    let both = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID;
    h.t_infomask & both == both || h.t_xmin == FROZEN_TRANSACTION_ID
}

/// `IndexTupleData`: `t_tid` and `t_info` (size in the low 13 bits, 0x4000 varwidth, 0x8000 nulls).
fn index_tuple(tuple: &[u8]) -> Option<IndexTupleView> {
    let t_info = le_u16(tuple, T_INFO_OFFSET)?;
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
        "file \"{}\", {} fork, block {} (block {} of this segment file)\n",
        d.file,
        d.fork.name(),
        d.block,
        d.block_in_file
    );
    out += &format!("verdict: {}\n", d.verdict);
    if d.problems.len() > 1 {
        for p in &d.problems {
            out += &format!("  {} {}\n", p.severity, p.text());
        }
    }
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
    if let Some(v) = &d.visibility_map {
        out += &visibility_map_text(v);
    } else if let Some(f) = &d.free_space_map {
        out += &free_space_map_text(f);
    } else if let Some(k) = d.page_kind {
        out += &format!("page kind (from special space): {}\n", page_kind_name(k));
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

/// The page kind as a person reads it (not the Rust name).
fn page_kind_name(k: PageKind) -> &'static str {
    match k {
        PageKind::HeapLike => "heap, visibility map or free space map (no special space)",
        PageKind::Btree => "B-tree",
        PageKind::Hash => "hash",
        PageKind::Gist => "GiST",
        PageKind::SpGist => "SP-GiST",
        PageKind::Brin => "BRIN",
        PageKind::Gin => "GIN",
        PageKind::Sequence => "sequence",
        PageKind::Unknown => "unknown",
    }
}

/// PostgreSQL's name of a line pointer's state.
fn lp_flags_name(f: crate::format::itemid::LpFlags) -> &'static str {
    use crate::format::itemid::LpFlags;
    match f {
        LpFlags::Unused => "LP_UNUSED",
        LpFlags::Normal => "LP_NORMAL",
        LpFlags::Redirect => "LP_REDIRECT",
        LpFlags::Dead => "LP_DEAD",
    }
}

fn visibility_map_text(v: &VisibilityMapView) -> String {
    let last = v.first_heap_block + v.heap_blocks - 1;
    let mut out = format!(
        "visibility map page: heap blocks {}..{last}: {} all-visible, {} all-frozen\n",
        v.first_heap_block, v.all_visible, v.all_frozen
    );
    if !v.all_visible_runs.is_empty() {
        let runs: Vec<String> = v
            .all_visible_runs
            .iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        out += &format!("  all-visible heap blocks: {}\n", runs.join(", "));
    }
    if !v.frozen_not_visible.is_empty() {
        out += &format!(
            "  !! all-frozen but not all-visible (invalid): heap blocks {}\n",
            v.frozen_not_visible
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}

fn free_space_map_text(f: &FreeSpaceMapView) -> String {
    let mut out = format!(
        "free space map page: fp_next_slot {}, root category {} (largest free space on this page), {} of {} leaves non-zero\n",
        f.fp_next_slot, f.root_category, f.nonzero_leaves, f.leaves
    );
    if !f.first_nonzero_leaves.is_empty() {
        let leaves: Vec<String> = f
            .first_nonzero_leaves
            .iter()
            .map(|(i, c)| format!("{i}:{c}"))
            .collect();
        out += &format!("  leaf:category {}\n", leaves.join(" "));
    }
    out
}

fn item_line(it: &ItemView) -> String {
    let i = &it.item;
    let mut line = format!(
        "  lp {:>3}: {} off {} len {}",
        i.offnum,
        lp_flags_name(i.lp_flags),
        i.lp_off,
        i.lp_len
    );
    if let Some(t) = &it.heap_tuple {
        line += &format!(
            "  xmin {}{} xmax {} ctid ({},{}) natts {} t_hoff {} infomask [{}]",
            t.header.t_xmin,
            if t.frozen { " FROZEN" } else { "" },
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
