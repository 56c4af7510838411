//! The second pass over a tar-format backup: each data archive read once more, every
//! relation file's whole blocks handed to the page checks in order (the plan's block source),
//! every member's size and manifest checksum computed from the same bytes. What the checks
//! look up after a page has gone by is kept as it passes: the pages newer than the start LSN
//! (for the page-LSN rule) and hash index metapages (for the count of all-zero pages).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use pgcheckdb_scan::{Progress, Visitor};

use super::archive::{Archive, Member, MemberVisitor, StopReading};
use super::{Role, TarBackup};
use crate::ops::backup::digest::{Algorithm, FileDigest};
use crate::ops::backup::manifest::{self, Manifest, Observed, SeenFiles};
use crate::plan::Plan;
use crate::verify::run::BlockSource;

/// The bytes handed to the checks at a time (whole blocks).
const CHUNK_BYTES: usize = 256 << 10;

/// The second pass's block source and what it saw besides the blocks.
pub struct TarSource<'a> {
    pub backup: &'a TarBackup,
    pub plan: &'a Plan,
    /// Each listed file's `Checksum-Algorithm`, from the manifest.
    algorithms: HashMap<String, Algorithm>,
    /// The backup's start LSN: pages whose `pd_lsn` is past it are remembered.
    start_lsn: u64,
    progress: &'a Progress,
    /// Every regular member's size and checksum, for the manifest comparison.
    pub seen: SeenFiles,
    /// `(fork, block)` of every page whose `pd_lsn` is past the start LSN: the page-LSN rule
    /// of [`crate::ops::backup`] asks about them after the stream is gone.
    pub newer_pages: HashSet<(usize, u64)>,
}

impl<'a> TarSource<'a> {
    pub fn new(
        backup: &'a TarBackup,
        plan: &'a Plan,
        manifest: Option<&Manifest>,
        start_lsn: u64,
        progress: &'a Progress,
    ) -> TarSource<'a> {
        let algorithms = manifest
            .map(|m| {
                m.files
                    .iter()
                    .filter(|f| !manifest::ignored(&f.path))
                    .map(|f| (f.path.clone(), f.algorithm))
                    .collect()
            })
            .unwrap_or_default();
        TarSource {
            backup,
            plan,
            algorithms,
            start_lsn,
            progress,
            seen: SeenFiles::default(),
            newer_pages: HashSet::new(),
        }
    }
}

impl BlockSource for TarSource<'_> {
    fn feed(&mut self, visitor: &mut dyn Visitor) -> Result<(), String> {
        let files = crate::ops::backup::files_by_path(self.plan);
        for tar in self.backup.archives.iter().filter(|t| t.role != Role::Wal) {
            let mut feeder = Feeder {
                tar,
                plan: self.plan,
                files: &files,
                algorithms: &self.algorithms,
                start_lsn: self.start_lsn,
                progress: self.progress,
                visitor: &mut *visitor,
                seen: &mut self.seen,
                newer: &mut self.newer_pages,
                current: None,
                buf: Vec::with_capacity(CHUNK_BYTES),
            };
            let mut archive =
                Archive::open(&tar.path, tar.compression).map_err(|e| e.to_string())?;
            let read = archive.for_each(&mut feeder);
            if self.progress.cancel.load(Ordering::Relaxed) {
                break;
            }
            read.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// The member being read.
struct Current {
    path: String,
    size: u64,
    digest: FileDigest,
    /// Its index in the plan, when it is a relation file to check.
    file: Option<usize>,
    /// Bytes of it handed to the checks so far.
    fed: u64,
}

struct Feeder<'a, 'v> {
    tar: &'a super::TarFile,
    plan: &'a Plan,
    files: &'a HashMap<String, usize>,
    algorithms: &'a HashMap<String, Algorithm>,
    start_lsn: u64,
    progress: &'a Progress,
    visitor: &'v mut dyn Visitor,
    seen: &'a mut SeenFiles,
    newer: &'a mut HashSet<(usize, u64)>,
    current: Option<Current>,
    buf: Vec<u8>,
}

impl Feeder<'_, '_> {
    /// Hands the whole blocks gathered in `buf` to the checks.
    fn flush(&mut self) {
        let bs = self.plan.control.blcksz as usize;
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let Some(file) = cur.file else {
            self.buf.clear();
            return;
        };
        let whole = self.buf.len() / bs * bs;
        if whole == 0 {
            return;
        }
        let rf = &self.plan.dir.files[file];
        let fork = self.plan.fork_of_file[file];
        let first = self.plan.absolute_block(rf, cur.fed / bs as u64);
        for (i, page) in self.buf[..whole].chunks_exact(bs).enumerate() {
            if page_lsn(page).is_some_and(|l| l > self.start_lsn) {
                self.newer.insert((fork, first + i as u64));
            }
        }
        if cur.fed == 0 && first == 0 {
            stage_hash_metapage(rf, &self.buf[..bs]);
        }
        self.visitor.chunk(file, cur.fed, &mut self.buf[..whole]);
        cur.fed += whole as u64;
        self.progress
            .bytes_done
            .fetch_add(whole as u64, Ordering::Relaxed);
        self.buf.drain(..whole);
    }
}

/// Writes a hash index's metapage (block 0 of its main fork) where the plan reads it from (the
/// staging directory): after the scan, the count of all-zero pages leaves out the bucket pages
/// the metapage says were allocated ahead of use. Any other page, and a file already staged,
/// is left alone; a failed write only loses that refinement.
fn stage_hash_metapage(rf: &crate::datadir::RelationFile, page: &[u8]) {
    if rf.name.fork != crate::format::relfile::ForkNumber::Main
        || crate::format::hash_buckets::unused_bucket_blocks(page).is_none()
    {
        return;
    }
    let path = rf.path();
    if path.exists() {
        return;
    }
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&path, page);
}

/// A page's `pd_lsn` (its first 8 bytes: `xlogid`, `xrecoff`).
fn page_lsn(page: &[u8]) -> Option<u64> {
    let hi = crate::format::bytes::le_u32(page, 0)?;
    let lo = crate::format::bytes::le_u32(page, 4)?;
    Some((u64::from(hi) << 32) | u64::from(lo))
}

impl MemberVisitor for Feeder<'_, '_> {
    fn start(&mut self, member: &Member) -> bool {
        let path = self.tar.data_path(&member.path);
        let algorithm = self
            .algorithms
            .get(&path)
            .copied()
            .unwrap_or(Algorithm::None);
        let file = self.files.get(&path).copied();
        self.current = Some(Current {
            path,
            size: 0,
            digest: FileDigest::new(algorithm),
            file,
            fed: 0,
        });
        self.buf.clear();
        true
    }

    fn data(&mut self, bytes: &[u8]) -> Result<(), StopReading> {
        let Some(cur) = self.current.as_mut() else {
            return Ok(());
        };
        cur.size += bytes.len() as u64;
        cur.digest.update(bytes);
        if self.progress.cancel.load(Ordering::Relaxed) {
            return Err(StopReading::Interrupted);
        }
        if cur.file.is_none() {
            return Ok(());
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let take = (CHUNK_BYTES - self.buf.len()).min(rest.len());
            self.buf.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.buf.len() == CHUNK_BYTES {
                self.flush();
            }
        }
        Ok(())
    }

    fn cancelled(&self) -> bool {
        self.progress.cancel.load(Ordering::Relaxed)
    }

    fn end(&mut self) -> Result<(), StopReading> {
        self.flush();
        self.buf.clear();
        if let Some(cur) = self.current.take() {
            self.seen.files.insert(
                cur.path,
                Observed {
                    size: cur.size,
                    checksum: cur.digest.finish_hex(),
                },
            );
        }
        Ok(())
    }
}
