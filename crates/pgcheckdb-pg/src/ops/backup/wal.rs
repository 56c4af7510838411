//! The WAL a base backup carries in `pg_wal` (the default `pg_basebackup -X stream`), read for
//! one fact: which blocks recovery of the copy will rewrite. Every record from the backup's
//! start LSN to the end of the valid WAL is decoded as far as its block references
//! (`XLogRecordBlockHeader`): a block named there is restored from a full-page image or
//! re-modified by replay before the copy is ever used, so its bytes in the copy may be torn
//! and prove nothing.
//!
//! Records are found and validated (page addresses, `xl_prev` chain, CRC-32C) by the reader
//! the standard level uses ([`crate::check::standard::wal`]); this module decodes the record's
//! headers. The layout is the same in PostgreSQL 14 to 18 except the image header's
//! compression flags (`bimg_info`), which changed in 15.

use std::collections::HashSet;
use std::path::Path;

use crate::check::standard::wal::{
    WalReader, RM_XLOG_ID, SIZE_OF_XLOG_RECORD, XLOG_SWITCH, XLR_RMGR_INFO_MASK, XL_INFO, XL_RMID,
};
use crate::format::bytes::{le_u16, le_u32};
use crate::format::lsn::Lsn;
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;
use crate::format::vm::HEAPBLOCKS_PER_BYTE;

/// Resource managers whose main data this module reads (`RM_*_ID`; `RM_XLOG_ID` is
/// [`crate::check::standard::wal`]'s).
const RM_XACT_ID: u8 = 1;
const RM_SMGR_ID: u8 = 2;
/// Database creation and removal (`xl_dbase_create_file_copy_rec`, `xl_dbase_create_wal_log_rec`,
/// `xl_dbase_drop_rec`; 14's `xl_dbase_create_rec`): each starts with `db_id`.
const RM_DBASE_ID: u8 = 4;
/// A relation map rewritten (`xl_relmap_update`: `dbid` first, 0 for the shared map).
const RM_RELMAP_ID: u8 = 7;
/// `RM_XLOG_ID` records (`XLOG_SWITCH` is [`crate::check::standard::wal`]'s).
const XLOG_BACKUP_END: u8 = 0x50;
/// `RM_SMGR_ID` records: relation files created or truncated without a block reference.
const XLOG_SMGR_CREATE: u8 = 0x10;
const XLOG_SMGR_TRUNCATE: u8 = 0x20;

/// `RM_XACT_ID` records that may drop relation files, and the parts of their main data.
const XLOG_XACT_OPMASK: u8 = 0x70;
const XLOG_XACT_HAS_INFO: u8 = 0x80;
const XLOG_XACT_COMMIT: u8 = 0x00;
const XLOG_XACT_ABORT: u8 = 0x20;
const XLOG_XACT_COMMIT_PREPARED: u8 = 0x30;
const XLOG_XACT_ABORT_PREPARED: u8 = 0x40;
const XACT_XINFO_HAS_DBINFO: u32 = 1 << 0;
const XACT_XINFO_HAS_SUBXACTS: u32 = 1 << 1;
const XACT_XINFO_HAS_RELFILELOCATORS: u32 = 1 << 2;

/// The ids that may open a header fragment of a record.
const XLR_MAX_BLOCK_ID: u8 = 32;
const XLR_BLOCK_ID_DATA_SHORT: u8 = 255;
const XLR_BLOCK_ID_DATA_LONG: u8 = 254;
const XLR_BLOCK_ID_ORIGIN: u8 = 253;
const XLR_BLOCK_ID_TOPLEVEL_XID: u8 = 252;

/// `XLogRecordBlockHeader.fork_flags`.
const BKPBLOCK_FORK_MASK: u8 = 0x0F;
const BKPBLOCK_HAS_IMAGE: u8 = 0x10;
const BKPBLOCK_SAME_REL: u8 = 0x80;
/// Fork numbers (`MAIN_FORKNUM`, `VISIBILITYMAP_FORKNUM`, `INIT_FORKNUM` the highest).
const MAIN_FORKNUM: u8 = 0;
const VISIBILITYMAP_FORKNUM: u8 = 2;
const MAX_FORKNUM: u8 = 3;

/// `XLogRecordBlockImageHeader.bimg_info`.
const BKPIMAGE_HAS_HOLE: u8 = 0x01;
/// PostgreSQL 14: one flag for pglz.
const BKPIMAGE_IS_COMPRESSED_14: u8 = 0x02;
/// PostgreSQL 15 and later: one flag per method (pglz, lz4, zstd).
const BKPIMAGE_COMPRESS_PGLZ: u8 = 0x04;
const BKPIMAGE_COMPRESS_LZ4: u8 = 0x08;
const BKPIMAGE_COMPRESS_ZSTD: u8 = 0x10;
/// `SizeOfXLogRecordBlockImageHeader` and `SizeOfXLogRecordBlockCompressHeader`.
const IMAGE_HEADER: usize = 5;
const COMPRESS_HEADER: usize = 2;
/// `sizeof(RelFileLocator)` (`RelFileNode` before 16): spcOid, dbOid, relNumber.
const REL_FILE_LOCATOR: usize = 12;

/// A relation's storage as WAL names it (`RelFileLocator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelFileLocator {
    pub spc_oid: u32,
    pub db_oid: u32,
    pub rel_number: u32,
}

impl RelFileLocator {
    fn read(b: &[u8], at: usize) -> Option<RelFileLocator> {
        Some(RelFileLocator {
            spc_oid: le_u32(b, at)?,
            db_oid: le_u32(b, at + 4)?,
            rel_number: le_u32(b, at + 8)?,
        })
    }
}

/// One block of one fork of one relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockRef {
    pub rel: RelFileLocator,
    pub fork: u8,
    pub block: u32,
}

/// What a decoded record says about storage.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RecordRefs {
    pub blocks: Vec<BlockRef>,
    /// Relation files created or truncated by the record (`XLOG_SMGR_*`).
    pub relations: Vec<RelFileLocator>,
    /// Databases whose directory (`RM_DBASE_ID`) or relation map (`RM_RELMAP_ID`) replay
    /// rewrites as a whole (0: the shared catalogs' map).
    pub databases: Vec<u32>,
    /// The start LSN of the backup this record ends (`XLOG_BACKUP_END`).
    pub backup_end_of: Option<u64>,
    /// `XLOG_SWITCH`: the rest of the segment is unused.
    pub switch: bool,
}

/// Why a record's headers could not be decoded (the CRC matched: a format this module does
/// not know, or a bug).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("WAL record at {lsn}: {why}")]
pub struct DecodeError {
    pub lsn: Lsn,
    pub why: &'static str,
}

/// Decodes the header fragments of a whole record (`XLogRecord` and what follows it).
pub fn decode_record(record: &[u8], major: u32) -> Result<RecordRefs, &'static str> {
    let len = record.len();
    if len < SIZE_OF_XLOG_RECORD {
        return Err("shorter than its header");
    }
    let mut out = RecordRefs::default();
    let mut pos = SIZE_OF_XLOG_RECORD;
    // The payloads (block data, images, main data) follow all headers; their total length
    // tells where the headers end.
    let mut payload = 0usize;
    let mut main_len = 0usize;
    let mut last_rel: Option<RelFileLocator> = None;
    let short = "a header runs past the record";
    while pos < len && len - pos > payload {
        let Some(&id) = record.get(pos) else {
            break;
        };
        match id {
            XLR_BLOCK_ID_DATA_SHORT => {
                main_len = *record.get(pos + 1).ok_or(short)? as usize;
                pos += 2;
                payload = payload.saturating_add(main_len);
                break; // the main data header is always last
            }
            XLR_BLOCK_ID_DATA_LONG => {
                main_len = le_u32(record, pos + 1).ok_or(short)? as usize;
                pos += 5;
                payload = payload.saturating_add(main_len);
                break;
            }
            XLR_BLOCK_ID_ORIGIN => pos += 3,
            XLR_BLOCK_ID_TOPLEVEL_XID => pos += 5,
            0..=XLR_MAX_BLOCK_ID => {
                let (block, used, data) = block_header(record, pos, major, last_rel)?;
                last_rel = Some(block.rel);
                out.blocks.push(block);
                pos += used;
                payload = payload.saturating_add(data);
            }
            _ => return Err("unknown block id"),
        }
    }
    if pos.checked_add(payload) != Some(len) {
        return Err("header and payload lengths do not add up to xl_tot_len");
    }
    // `main_len` is part of the payload, which ends the record.
    main_data_refs(
        record,
        record.get(len - main_len..).unwrap_or_default(),
        &mut out,
    );
    Ok(out)
}

/// One `XLogRecordBlockHeader` at `pos` with its image header, locator and block number:
/// the block, the header bytes used and the payload bytes it announces.
fn block_header(
    record: &[u8],
    pos: usize,
    major: u32,
    last_rel: Option<RelFileLocator>,
) -> Result<(BlockRef, usize, usize), &'static str> {
    let short = "a block header runs past the record";
    let fork_flags = *record.get(pos + 1).ok_or(short)?;
    let data_length = le_u16(record, pos + 2).ok_or(short)? as usize;
    let mut at = pos + 4;
    let mut payload = data_length;
    if fork_flags & BKPBLOCK_HAS_IMAGE != 0 {
        let bimg_len = le_u16(record, at).ok_or(short)? as usize;
        let bimg_info = *record.get(at + 4).ok_or(short)?;
        at += IMAGE_HEADER;
        if bimg_info & BKPIMAGE_HAS_HOLE != 0 && image_compressed(bimg_info, major) {
            at += COMPRESS_HEADER;
        }
        payload += bimg_len;
    }
    let rel = if fork_flags & BKPBLOCK_SAME_REL != 0 {
        last_rel.ok_or("BKPBLOCK_SAME_REL on the first block reference")?
    } else {
        let rel = RelFileLocator::read(record, at).ok_or(short)?;
        at += REL_FILE_LOCATOR;
        rel
    };
    let block = le_u32(record, at).ok_or(short)?;
    at += 4;
    let fork = fork_flags & BKPBLOCK_FORK_MASK;
    if fork > MAX_FORKNUM {
        return Err("fork number out of range");
    }
    Ok((BlockRef { rel, fork, block }, at - pos, payload))
}

/// Whether a full-page image is compressed: one flag in 14, one per method from 15 on.
fn image_compressed(bimg_info: u8, major: u32) -> bool {
    if major <= 14 {
        bimg_info & BKPIMAGE_IS_COMPRESSED_14 != 0
    } else {
        bimg_info & (BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD) != 0
    }
}

/// The facts in a record's main data: relation files created or truncated, the end of a
/// backup, a segment switch.
fn main_data_refs(record: &[u8], main: &[u8], out: &mut RecordRefs) {
    // The caller checked that the record holds its `XLogRecord` header.
    let (Some(&xl_info), Some(&rmid)) = (record.get(XL_INFO), record.get(XL_RMID)) else {
        return;
    };
    let info = xl_info & XLR_RMGR_INFO_MASK;
    match rmid {
        RM_XLOG_ID if info == XLOG_SWITCH => out.switch = true,
        RM_XLOG_ID if info == XLOG_BACKUP_END => {
            out.backup_end_of = le_u32(main, 0)
                .zip(le_u32(main, 4))
                .map(|(lo, hi)| u64::from(lo) | (u64::from(hi) << 32));
        }
        RM_XACT_ID => out.relations.extend(dropped_relations(xl_info, main)),
        RM_SMGR_ID if info == XLOG_SMGR_CREATE => {
            out.relations.extend(RelFileLocator::read(main, 0))
        }
        RM_SMGR_ID if info == XLOG_SMGR_TRUNCATE => {
            out.relations.extend(RelFileLocator::read(main, 4))
        }
        RM_DBASE_ID | RM_RELMAP_ID => out.databases.extend(le_u32(main, 0)),
        _ => {}
    }
}

/// The relation files a commit or abort record drops (`xl_xact_relfilelocators`): after
/// `xact_time`, the optional `xinfo`, database info and subtransactions come first.
fn dropped_relations(xl_info: u8, main: &[u8]) -> Vec<RelFileLocator> {
    let op = xl_info & XLOG_XACT_OPMASK;
    let ends = [
        XLOG_XACT_COMMIT,
        XLOG_XACT_ABORT,
        XLOG_XACT_COMMIT_PREPARED,
        XLOG_XACT_ABORT_PREPARED,
    ];
    if !ends.contains(&op) || xl_info & XLOG_XACT_HAS_INFO == 0 {
        return Vec::new();
    }
    let Some(xinfo) = le_u32(main, 8) else {
        return Vec::new();
    };
    let mut at = 12usize;
    if xinfo & XACT_XINFO_HAS_DBINFO != 0 {
        at += 8;
    }
    if xinfo & XACT_XINFO_HAS_SUBXACTS != 0 {
        let n = le_u32(main, at).unwrap_or(0) as usize;
        at = at.saturating_add(4).saturating_add(n.saturating_mul(4));
    }
    if xinfo & XACT_XINFO_HAS_RELFILELOCATORS == 0 {
        return Vec::new();
    }
    let n = le_u32(main, at).unwrap_or(0) as usize;
    (0..n)
        .map_while(|i| RelFileLocator::read(main, at + 4 + i * REL_FILE_LOCATOR))
        .collect()
}

/// The blocks and relation files replay of a backup rewrites.
#[derive(Debug, Default)]
pub struct ReplaySet {
    pub blocks: HashSet<BlockRef>,
    /// Relations with any block reference or file creation/truncation in the WAL read.
    pub relations: HashSet<RelFileLocator>,
    /// Databases created, dropped or given a new relation map in the WAL read (0: the shared
    /// catalogs' map).
    pub databases: HashSet<u32>,
    /// Records decoded.
    pub records: u64,
    /// The end of the last valid record: the end of the WAL present.
    pub end_lsn: Lsn,
    /// Where that last record starts, and where the next one would (past a segment switch):
    /// to tell later whether the WAL grew.
    pub last_record: Option<(u64, u64)>,
    /// The WAL holds the `XLOG_BACKUP_END` record of this backup: every change made while the
    /// files were copied is in the set.
    pub reaches_backup_end: bool,
    /// A record whose CRC matched but whose headers could not be decoded ended the walk.
    pub decode_error: Option<DecodeError>,
}

/// The visibility-map block that holds the bits of heap block `block`
/// (`HEAPBLK_TO_MAPBLOCK`).
fn vm_block_of(block: u32, blcksz: u32) -> u32 {
    // `SizeOfPageHeaderData` is already a multiple of `MAXALIGN`.
    let map_bytes = blcksz.saturating_sub(SIZE_OF_PAGE_HEADER_DATA as u32);
    block / (map_bytes * HEAPBLOCKS_PER_BYTE as u32).max(1)
}

/// The blocks a reference rewrites: the block itself and, for a main-fork block, the
/// visibility-map page that covers it. The server clears visibility-map bits when it changes
/// a heap page without logging the map page (replay clears them again from the heap record),
/// so that map page can be torn in the copy with no reference of its own.
fn rewritten(b: BlockRef, blcksz: u32) -> [BlockRef; 2] {
    let vm = if b.fork == MAIN_FORKNUM {
        BlockRef {
            fork: VISIBILITYMAP_FORKNUM,
            block: vm_block_of(b.block, blcksz),
            ..b
        }
    } else {
        b
    };
    [b, vm]
}

/// The source of WAL and the cluster's formats `collect` needs.
#[derive(Debug, Clone, Copy)]
pub struct WalFormat {
    pub seg_size: u64,
    pub blcksz: u32,
    pub major: u32,
}

/// Reads the WAL in `pg_wal` from `start` to its end. `None` when the record at `start`
/// is not there (no WAL in the backup, or not from its start).
pub fn collect(datadir: &Path, format: WalFormat, start: Lsn) -> Option<ReplaySet> {
    let WalFormat {
        seg_size,
        blcksz,
        major,
    } = format;
    let mut reader = WalReader::open(datadir.join("pg_wal"), seg_size)?;
    let mut set = ReplaySet::default();
    let mut lsn = start.0;
    let mut prev = None;
    let mut record = Vec::new();
    while let Some((at, next)) = reader.record(lsn, prev, &mut record) {
        let refs = match decode_record(&record, major) {
            Ok(refs) => refs,
            Err(why) => {
                set.decode_error = Some(DecodeError { lsn: Lsn(at), why });
                break;
            }
        };
        set.records += 1;
        set.end_lsn = Lsn(next);
        for b in refs.blocks {
            set.relations.insert(b.rel);
            set.blocks.extend(rewritten(b, blcksz));
        }
        set.relations.extend(refs.relations);
        set.databases.extend(refs.databases);
        if refs.backup_end_of == Some(start.0) {
            set.reaches_backup_end = true;
        }
        prev = Some(at);
        lsn = if refs.switch {
            next.next_multiple_of(reader.seg_size)
        } else {
            next.next_multiple_of(8)
        };
        set.last_record = Some((at, lsn));
    }
    (set.records > 0).then_some(set)
}

/// Whether a valid record now follows the last one `set` read: the WAL grew since.
pub fn grew(datadir: &Path, format: WalFormat, set: &ReplaySet) -> bool {
    let Some((last, next)) = set.last_record else {
        return false;
    };
    let Some(mut reader) = WalReader::open(datadir.join("pg_wal"), format.seg_size) else {
        return false;
    };
    reader.record(next, Some(last), &mut Vec::new()).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `rmid`/`info` with the given header fragments and payload bytes.
    fn record(rmid: u8, info: u8, headers: &[u8], payload: &[u8]) -> Vec<u8> {
        let tot = SIZE_OF_XLOG_RECORD + headers.len() + payload.len();
        let mut r = vec![0u8; SIZE_OF_XLOG_RECORD];
        r[..4].copy_from_slice(&(tot as u32).to_le_bytes());
        r[XL_INFO] = info;
        r[XL_RMID] = rmid;
        r.extend_from_slice(headers);
        r.extend_from_slice(payload);
        r
    }

    fn locator(spc: u32, db: u32, rel: u32) -> Vec<u8> {
        [spc, db, rel]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    #[test]
    fn block_references_with_same_rel_images_and_main_data() {
        let mut h = Vec::new();
        // Block 0: fork main, has data (3 bytes), a full-page image with a hole, compressed
        // with lz4 (15+): image header + compress header.
        h.extend_from_slice(&[0, 0x10 | 0x20, 3, 0]);
        h.extend_from_slice(&[10, 0, 0x40, 0, BKPIMAGE_HAS_HOLE | BKPIMAGE_COMPRESS_LZ4]);
        h.extend_from_slice(&[0x20, 0x1F]); // hole_length
        h.extend_from_slice(&locator(1663, 5, 16384));
        h.extend_from_slice(&7u32.to_le_bytes());
        // Block 1: same relation, fork vm, no data.
        h.extend_from_slice(&[1, 0x80 | 2, 0, 0]);
        h.extend_from_slice(&9u32.to_le_bytes());
        // Top-level xid, then 4 bytes of main data.
        h.extend_from_slice(&[XLR_BLOCK_ID_TOPLEVEL_XID, 1, 0, 0, 0]);
        h.extend_from_slice(&[XLR_BLOCK_ID_DATA_SHORT, 4]);
        let r = record(10, 0, &h, &[0u8; 3 + 10 + 4]);
        let refs = decode_record(&r, 16).expect("decode");
        let rel = RelFileLocator {
            spc_oid: 1663,
            db_oid: 5,
            rel_number: 16384,
        };
        assert_eq!(
            refs.blocks,
            vec![
                BlockRef {
                    rel,
                    fork: 0,
                    block: 7
                },
                BlockRef {
                    rel,
                    fork: 2,
                    block: 9
                }
            ]
        );
        // PostgreSQL 14 knows no lz4 flag: no compress header, so the same bytes decode to
        // something else (or nothing).
        assert_ne!(decode_record(&r, 14).ok(), Some(refs));
    }

    #[test]
    fn a_commit_that_drops_relations() {
        let mut main = vec![0u8; 8]; // xact_time
        let xinfo =
            XACT_XINFO_HAS_DBINFO | XACT_XINFO_HAS_SUBXACTS | XACT_XINFO_HAS_RELFILELOCATORS;
        main.extend_from_slice(&xinfo.to_le_bytes());
        main.extend_from_slice(&[5, 0, 0, 0, 0x7F, 6, 0, 0]); // dbId, tsId
        main.extend_from_slice(&1u32.to_le_bytes()); // one subxact
        main.extend_from_slice(&901u32.to_le_bytes());
        main.extend_from_slice(&2u32.to_le_bytes()); // two relations
        main.extend_from_slice(&locator(1663, 5, 16500));
        main.extend_from_slice(&locator(1663, 5, 16501));
        let header = [XLR_BLOCK_ID_DATA_SHORT, main.len() as u8];
        let r = record(
            RM_XACT_ID,
            XLOG_XACT_COMMIT | XLOG_XACT_HAS_INFO,
            &header,
            &main,
        );
        let refs = decode_record(&r, 17).expect("decode");
        let nodes: Vec<u32> = refs.relations.iter().map(|r| r.rel_number).collect();
        assert_eq!(nodes, vec![16500, 16501]);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for n in 0..20_000usize {
            let len = SIZE_OF_XLOG_RECORD + n % 97;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Favour the ids and flags that open header fragments.
                    [0, 1, 0x80, 0x10, 252, 253, 254, 255, x as u8][(x >> 40) as usize % 9]
                })
                .collect();
            let _ = decode_record(&bytes, 14 + (n % 5) as u32);
        }
    }

    #[test]
    fn a_heap_block_also_rewrites_its_visibility_map_page() {
        let rel = RelFileLocator {
            spc_oid: 1663,
            db_oid: 5,
            rel_number: 1,
        };
        let heap = BlockRef {
            rel,
            fork: MAIN_FORKNUM,
            block: 32672 * 2 + 5,
        };
        assert_eq!(
            rewritten(heap, 8192)[1],
            BlockRef {
                rel,
                fork: VISIBILITYMAP_FORKNUM,
                block: 2
            }
        );
        let fsm = BlockRef {
            rel,
            fork: 1,
            block: 3,
        };
        assert_eq!(rewritten(fsm, 8192), [fsm, fsm]);
    }

    #[test]
    fn pg14_compressed_image_has_a_compress_header() {
        let mut h = vec![0, 0x10, 0, 0];
        h.extend_from_slice(&[8, 0, 0, 0, BKPIMAGE_HAS_HOLE | BKPIMAGE_IS_COMPRESSED_14]);
        h.extend_from_slice(&[0, 1]);
        h.extend_from_slice(&locator(1663, 1, 1259));
        h.extend_from_slice(&0u32.to_le_bytes());
        let r = record(10, 0, &h, &[0u8; 8]);
        let refs = decode_record(&r, 14).expect("decode");
        assert_eq!(refs.blocks.len(), 1);
        assert_eq!(refs.blocks[0].rel.rel_number, 1259);
    }

    #[test]
    fn database_and_relation_map_records_name_their_database() {
        // XLOG_DBASE_DROP (0x20 from 15 on): db_id, ntablespaces, tablespace ids.
        let mut main = 16385u32.to_le_bytes().to_vec();
        main.extend_from_slice(&1u32.to_le_bytes());
        main.extend_from_slice(&1663u32.to_le_bytes());
        let r = record(RM_DBASE_ID, 0x20, &[XLR_BLOCK_ID_DATA_SHORT, 12], &main);
        assert_eq!(
            decode_record(&r, 17).expect("decode").databases,
            vec![16385]
        );
        // XLOG_RELMAP_UPDATE of the shared map: dbid 0, tsid, nbytes, the map.
        let mut main = vec![0u8; 4];
        main.extend_from_slice(&1664u32.to_le_bytes());
        main.extend_from_slice(&4u32.to_le_bytes());
        main.extend_from_slice(&[0u8; 4]);
        let r = record(RM_RELMAP_ID, 0x00, &[XLR_BLOCK_ID_DATA_SHORT, 16], &main);
        assert_eq!(decode_record(&r, 14).expect("decode").databases, vec![0]);
    }

    #[test]
    fn smgr_truncate_backup_end_and_bad_records() {
        let mut main = 3u32.to_le_bytes().to_vec();
        main.extend_from_slice(&locator(1663, 5, 16400));
        main.extend_from_slice(&7u32.to_le_bytes());
        let r = record(
            RM_SMGR_ID,
            XLOG_SMGR_TRUNCATE,
            &[XLR_BLOCK_ID_DATA_SHORT, 20],
            &main,
        );
        let refs = decode_record(&r, 18).expect("decode");
        assert_eq!(refs.relations[0].rel_number, 16400);
        let start = 0x1_0000_0028u64.to_le_bytes();
        let r = record(
            RM_XLOG_ID,
            XLOG_BACKUP_END,
            &[XLR_BLOCK_ID_DATA_SHORT, 8],
            &start,
        );
        assert_eq!(
            decode_record(&r, 18).expect("decode").backup_end_of,
            Some(0x1_0000_0028)
        );
        // SAME_REL on the first block, an unknown id, a header cut short.
        let r = record(10, 0, &[0, 0x80, 0, 0, 1, 0, 0, 0], &[]);
        assert!(decode_record(&r, 16).is_err());
        assert!(decode_record(&record(10, 0, &[100, 0], &[]), 16).is_err());
        assert!(decode_record(&record(10, 0, &[0, 0, 0], &[]), 16).is_err());
        // A record with no headers at all (e.g. an XLOG_NOOP without data) decodes empty.
        assert_eq!(
            decode_record(&record(0, 0x20, &[], &[]), 16),
            Ok(RecordRefs::default())
        );
    }
}
