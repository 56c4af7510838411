//! Fuzzing entry points: one function per input that pgcheckdb decodes from disk (a page for the
//! physical check, the standard level's structure checks, `inspect` and `checksums enable`; the
//! control file; the relation map; a catalog file). Each takes arbitrary bytes, shapes them the
//! way the real caller does (pages are cut or zero-padded to the block size, as every reader
//! passes whole blocks), calls the real code, and checks a few cheap invariants. Shared by the
//! `cargo fuzz` targets in `fuzz/` and the stable seed-corpus test; not part of the API.
//!
//! The invariant everywhere: no panic and no endless loop, whatever the bytes.

use std::borrow::Cow;
use std::sync::Arc;

use crate::catalog::attributes::Attribute;
use crate::catalog::relmap::parse_relmap;
use crate::catalog::xact::CommitLog;
use crate::check::physical::{check_page, check_page_with_sum, MisplacedEvidence, PageCheckConfig};
use crate::check::physical::{PageProblem, PageVerdict};
use crate::check::standard::{
    check_page_structure, ClusterFacts, FileStructure, HeapRelation, Inputs, PageFormat, Scratch,
    StructureProblem,
};
use crate::finding::Severity;
use crate::format::bytes::le_u32;
use crate::format::checksum::raw_block_sum;
use crate::format::control::ControlFile;
use crate::ops::enable::{classify_block, stamp_chunk, BlockAction};
use crate::ops::inspect::{decode_page, render_text};

/// `MAXALIGN` of the seed clusters (x86-64).
pub use crate::format::bytes::MAXIMUM_ALIGNOF as MAX_ALIGN;
/// Block size of the seed clusters (PostgreSQL's default).
pub use crate::format::page::DEFAULT_BLCKSZ as BLCKSZ;
/// Blocks the fuzzed fork is said to have (links and `t_ctid` are checked against it).
const FORK_BLOCKS: u64 = 256;
/// Block numbers each page is checked at: 0 (metapages) and a later one.
const BLOCK_NUMBERS: [u32; 2] = [0, 3];

/// The bytes as one block: cut or zero-padded to [`BLCKSZ`].
pub fn as_page(data: &[u8]) -> Cow<'_, [u8]> {
    if data.len() == BLCKSZ {
        return Cow::Borrowed(data);
    }
    let mut page = data[..data.len().min(BLCKSZ)].to_vec();
    page.resize(BLCKSZ, 0);
    Cow::Owned(page)
}

/// The physical check with and without checksums, at two block numbers, and the misplaced-page
/// evidence for a mismatch. The caller-supplied sum must give the same verdict as the inline one.
pub fn physical(data: &[u8]) {
    let page = as_page(data);
    for checksums in [false, true] {
        let cfg = PageCheckConfig {
            blcksz: BLCKSZ,
            max_align: MAX_ALIGN,
            checksums,
        };
        for blkno in BLOCK_NUMBERS {
            let verdict = check_page(&cfg, &page, blkno);
            let with_sum = check_page_with_sum(&cfg, &page, blkno, || raw_block_sum(&page));
            assert_eq!(
                verdict, with_sum,
                "check_page and check_page_with_sum differ"
            );
            if let PageVerdict::Problem(PageProblem::ChecksumMismatch { checksum }) = verdict {
                let ev =
                    MisplacedEvidence::gather(&page, &checksum, blkno, 1000, MAX_ALIGN, |_| {
                        Some(page.to_vec())
                    });
                std::hint::black_box((ev.is_convincing(), ev.detail()));
            }
        }
    }
}

/// A column of the seed table `fuzz_rows` (see `scripts/fuzz-seeds.sh`).
fn column(name: &str, type_name: &str, attlen: i16, align: usize) -> Attribute {
    Attribute {
        name: name.into(),
        type_name: Some(type_name.into()),
        attlen,
        align,
        dropped: false,
    }
}

/// The columns of the seed table `fuzz_rows`, in `attnum` order; keep in step with the
/// `CREATE TABLE` in `scripts/fuzz-seeds.sh`.
pub fn seed_table_columns() -> Vec<Attribute> {
    let mut gone = column("........pg.dropped.6........", "int4", 4, 4);
    gone.dropped = true;
    vec![
        column("id", "int4", 4, 4),
        column("small", "int2", 2, 2),
        column("big", "int8", 8, 8),
        column("flag", "bool", 1, 1),
        column("name", "text", -1, 4),
        gone,
        column("ts", "timestamptz", 8, 8),
        column("amount", "numeric", -1, 4),
        column("payload", "bytea", -1, 4),
        column("code", "bpchar", -1, 4),
        column("u", "uuid", 16, 1),
        column("label", "name", 64, 1),
    ]
}

/// The columns of a TOAST table.
fn toast_columns() -> Vec<Attribute> {
    vec![
        column("chunk_id", "oid", 4, 4),
        column("chunk_seq", "int4", 4, 4),
        column("chunk_data", "bytea", -1, 4),
    ]
}

/// The columns of a sequence's single row.
fn sequence_columns() -> Vec<Attribute> {
    vec![
        column("last_value", "int8", 8, 8),
        column("log_cnt", "int8", 8, 8),
        column("is_called", "bool", 1, 1),
    ]
}

/// `pg_class.reltoastrelid` of the seed table in the PostgreSQL 18 seed cluster.
pub const SEED_TOAST_RELID: u32 = 16388;

fn heap_relation(columns: Option<Vec<Attribute>>, relnatts: i16, toast: u32) -> HeapRelation {
    HeapRelation {
        relnatts,
        attributes: columns.map(Arc::from),
        reltoastrelid: toast,
        relfrozenxid: 3,
        relminmxid: 1,
    }
}

/// Every page format the standard level checks, each with a name; heap three times (the seed
/// table's columns, a TOAST table's, and no `pg_attribute` knowledge); `toast` is the seed
/// table's `reltoastrelid`.
pub fn page_formats(toast: u32) -> Vec<(&'static str, PageFormat)> {
    let table = seed_table_columns();
    let natts = table.len() as i16;
    let seq = sequence_columns();
    vec![
        (
            "heap",
            PageFormat::Heap(heap_relation(Some(table), natts, toast)),
        ),
        (
            "toast",
            PageFormat::Heap(heap_relation(Some(toast_columns()), 3, 0)),
        ),
        (
            "heap_no_attributes",
            PageFormat::Heap(heap_relation(None, 3, 0)),
        ),
        (
            "sequence",
            PageFormat::Sequence(heap_relation(Some(seq), 3, 0)),
        ),
        ("btree", PageFormat::Btree),
        ("hash", PageFormat::Hash),
        ("gist", PageFormat::Gist),
        ("gin", PageFormat::Gin),
        ("spgist", PageFormat::SpGist),
        ("brin", PageFormat::Brin),
        ("vm", PageFormat::VisibilityMap),
        ("fsm", PageFormat::FreeSpaceMap),
    ]
}

/// What the structure checks compare against, fixed for fuzzing.
pub struct StandardContext {
    pub formats: Vec<(&'static str, FileStructure)>,
    pub facts: ClusterFacts,
    pub clog: CommitLog,
}

impl StandardContext {
    /// Every format, a cluster whose `nextXid` is far ahead of the seeds' xids, and a commit
    /// log that says every xid of its first segment committed.
    pub fn new() -> StandardContext {
        Self::with_toast_relid(SEED_TOAST_RELID)
    }

    /// [`StandardContext::new`] for a seed table whose TOAST table has OID `toast`.
    pub fn with_toast_relid(toast: u32) -> StandardContext {
        let formats = page_formats(toast)
            .into_iter()
            .map(|(name, format)| {
                // B-tree pages also go through the key-order check, as an (int4, text) index.
                let btree_order = matches!(format, PageFormat::Btree).then(|| {
                    crate::check::order::plan::BtreeOrderCheck {
                        ordering: std::sync::Arc::new(
                            crate::check::order::IndexOrdering::for_fuzzing(),
                        ),
                        version: std::sync::Arc::new(
                            crate::check::order::plan::IndexVersion::known(true),
                        ),
                    }
                });
                let file = FileStructure {
                    format,
                    fork_blocks: FORK_BLOCKS,
                    btree_order,
                };
                (name, file)
            })
            .collect();
        StandardContext {
            formats,
            facts: ClusterFacts {
                blcksz: BLCKSZ,
                max_align: MAX_ALIGN,
                next_xid: 100_000,
                next_multi: 1,
                oldest_xid: 3,
                oldest_multi: 1,
                clog_exact: true,
                xid_severity: Severity::Error,
            },
            clog: committed_clog(),
        }
    }

    /// The structure checks of `format` on one page at `blkno`, as the verify scan calls them.
    pub fn check(
        &self,
        file: &FileStructure,
        page: &[u8],
        blkno: u64,
        scratch: &mut Scratch,
    ) -> Vec<StructureProblem> {
        let inputs = Inputs {
            file,
            facts: &self.facts,
            clog: &self.clog,
        };
        let mut out = Vec::new();
        check_page_structure(page, blkno, &inputs, scratch, &mut out);
        out
    }
}

impl Default for StandardContext {
    fn default() -> Self {
        Self::new()
    }
}

/// A commit log with one segment in which every transaction committed.
pub fn committed_clog() -> CommitLog {
    const SEGMENT_PAGES: usize = 32;
    let segment = vec![0x55u8; SEGMENT_PAGES * BLCKSZ];
    CommitLog::from_segments(BLCKSZ as u32, [(0, segment)])
}

/// The standard level's structure checks for every page format, on the pages the verify scan
/// gives them: those the physical check (checksums off) calls valid. Returns how many pages
/// reached them (0, 1 or 2), so a harness can tell how deep its mutants get.
pub fn standard(data: &[u8], ctx: &StandardContext, scratch: &mut Scratch) -> usize {
    let page = as_page(data);
    let cfg = PageCheckConfig {
        blcksz: BLCKSZ,
        max_align: MAX_ALIGN,
        checksums: false,
    };
    let mut reached = 0;
    for blkno in BLOCK_NUMBERS {
        if check_page(&cfg, &page, blkno) != PageVerdict::Valid {
            return reached;
        }
        reached += 1;
        for (_, file) in &ctx.formats {
            std::hint::black_box(ctx.check(file, &page, blkno as u64, scratch));
        }
    }
    reached
}

/// `inspect`'s page decoder and both of its renderings.
pub fn inspect(data: &[u8], control: &ControlFile) {
    let page = as_page(data);
    for blkno in BLOCK_NUMBERS {
        let dump = decode_page(&page, "fuzz", blkno as u64, blkno as u64, control);
        std::hint::black_box(render_text(&dump));
        std::hint::black_box(serde_json::to_string(&dump).map(|s| s.len()).unwrap_or(0));
    }
}

/// `checksums enable`'s decision per block and its stamping of a two-block chunk; a stamped
/// page must afterwards be `AlreadyValid`.
pub fn enable(data: &[u8]) {
    let page = as_page(data);
    for blkno in BLOCK_NUMBERS {
        std::hint::black_box(classify_block(&page, blkno, BLCKSZ, MAX_ALIGN));
    }
    let mut chunk = page.to_vec();
    chunk.extend_from_slice(&page);
    let mut stamped = Vec::new();
    let dirty = stamp_chunk(&mut chunk, 7, BLCKSZ, MAX_ALIGN, |blkno, _, action| {
        if matches!(action, BlockAction::Stamp { .. }) {
            stamped.push(blkno);
        }
    });
    let dirty_bytes: usize = dirty.iter().map(|r| r.end - r.start).sum();
    assert_eq!(
        dirty_bytes,
        stamped.len() * BLCKSZ,
        "dirty ranges miss a stamped block"
    );
    for blkno in stamped {
        let i = (blkno - 7) as usize * BLCKSZ;
        let after = classify_block(&chunk[i..i + BLCKSZ], blkno as u32, BLCKSZ, MAX_ALIGN);
        assert!(
            matches!(after, BlockAction::AlreadyValid { .. }),
            "block {blkno} stamped but then classified {after:?}"
        );
    }
}

/// Offset of the control file's CRC for the version in `raw` (bytes 8..12), as the reader
/// expects it (288 for a version it does not know).
fn control_crc_offset(raw: &[u8]) -> usize {
    le_u32(raw, 8)
        .and_then(crate::format::control::crc_offset_for)
        .unwrap_or(288)
}

/// `bytes` with the CRC-32C at `crc_offset` recomputed, so mutations reach past the CRC check.
fn with_crc(bytes: &[u8], crc_offset: usize) -> Option<Vec<u8>> {
    let mut fixed = bytes.to_vec();
    let crc = crc32c::crc32c(fixed.get(..crc_offset)?);
    fixed
        .get_mut(crc_offset..crc_offset + 4)?
        .copy_from_slice(&crc.to_le_bytes());
    Some(fixed)
}

/// The control-file parser, on the bytes as they are and with their CRC made right; a parsed
/// file rewritten with another checksum version must parse again. Returns how many parsed.
pub fn control_file(data: &[u8]) -> usize {
    let fixed = with_crc(data, control_crc_offset(data));
    let mut parsed = 0;
    for raw in std::iter::once(data.to_vec()).chain(fixed) {
        let Ok(control) = ControlFile::parse(raw, "fuzz/pg_control") else {
            continue;
        };
        parsed += 1;
        std::hint::black_box((control.block_size(), control.tablespace_version_directory()));
        std::hint::black_box(control.checksum_state().name());
        let rewritten = control.with_checksum_version(1, 0);
        let again = ControlFile::parse(rewritten, "fuzz/pg_control")
            .expect("a rewritten control file parses");
        assert_eq!(again.data_checksum_version, 1);
    }
    parsed
}

/// The relation-map parser, on the bytes as they are and with their CRC made right for either
/// file size. Returns how many parsed.
pub fn relmap(data: &[u8]) -> usize {
    let crc_offset = if data.len() == 524 { 520 } else { 504 };
    let fixed = with_crc(data, crc_offset);
    std::iter::once(data.to_vec())
        .chain(fixed)
        .filter(|raw| std::hint::black_box(parse_relmap(raw)).is_ok())
        .count()
}

/// The catalog reader's row scan and row decoders on the bytes as a catalog file (zero-padded
/// to whole blocks), with a commit log that knows nothing and one that says "committed".
/// Returns the visible rows found with the second.
pub fn catalog(data: &[u8], committed: &CommitLog) -> usize {
    let mut file = data.to_vec();
    file.resize(data.len().div_ceil(BLCKSZ).max(1) * BLCKSZ, 0);
    let unknown = CommitLog::default();
    std::hint::black_box(crate::catalog::fuzzing::decode_catalog_file(
        &file, BLCKSZ, MAX_ALIGN, &unknown,
    ));
    crate::catalog::fuzzing::decode_catalog_file(&file, BLCKSZ, MAX_ALIGN, committed)
}
