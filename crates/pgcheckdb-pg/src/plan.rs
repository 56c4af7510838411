//! The scan plan: the relation files of the data directory, grouped into forks, with the
//! findings the listing and the file sizes give before any block is read.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::json;

use pgcheckdb_scan::open::open_regular;
use pgcheckdb_scan::{FileList, ScanFile};

use crate::datadir::{
    check_segments, group_forks, list_relation_files, DataDirectory, ForkFiles, RelationFile,
};
use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use crate::format::control::ControlFile;

/// The scan plan: which files, how they group into forks, what was found before reading.
pub struct Plan {
    pub datadir: PathBuf,
    pub control: ControlFile,
    pub dir: DataDirectory,
    pub forks: Vec<ForkFiles>,
    /// For each file, the index of its fork in `forks`.
    pub fork_of_file: Vec<usize>,
    /// For each fork, its total number of whole blocks.
    pub fork_blocks: Vec<u64>,
    pub findings: Vec<Finding>,
}

impl Plan {
    /// The segment number that holds block `blkno` of fork `fork`, and that segment's file
    /// when the plan has it.
    pub fn segment_of_block(&self, fork: usize, blkno: u64) -> (u32, Option<&RelationFile>) {
        let relseg = u64::from(self.control.relseg_size.max(1));
        let segno = (blkno / relseg) as u32;
        let file = self.forks[fork]
            .segments()
            .map(|i| &self.dir.files[i])
            .find(|f| f.name.segno == segno);
        (segno, file)
    }

    /// Lists the data directory and checks file sizes and the segment structure.
    pub fn build(datadir: &Path, control: ControlFile) -> Plan {
        Plan::build_scoped(datadir, control, |_| true)
    }

    /// The same for only the relation files `keep` accepts (a scoped run, [`crate::scope`]).
    pub fn build_scoped(
        datadir: &Path,
        control: ControlFile,
        keep: impl Fn(&RelationFile) -> bool,
    ) -> Plan {
        let listing = Plan::list(datadir, &control);
        Plan::from_listing(datadir, control, listing, keep)
    }

    /// Lists the relation files of the data directory: the first step of a plan, which can
    /// run while the catalogs are read.
    pub fn list(datadir: &Path, control: &ControlFile) -> DataDirectory {
        let version_dir = control.tablespace_version_directory();
        list_relation_files(datadir, version_dir.as_deref())
    }

    /// The plan of a listing ([`Plan::list`]) for the relation files `keep` accepts.
    pub fn from_listing(
        datadir: &Path,
        control: ControlFile,
        mut dir: DataDirectory,
        keep: impl Fn(&RelationFile) -> bool,
    ) -> Plan {
        dir.remove_impossible_segments(control.relseg_size as u64);
        dir.files.retain(|f| keep(f));
        let forks = group_forks(&dir.files);
        let bs = control.blcksz as u64;
        let mut fork_of_file = vec![0; dir.files.len()];
        let mut fork_blocks = vec![0u64; forks.len()];
        let mut findings = dir.findings.clone();
        for (fi, fork) in forks.iter().enumerate() {
            for i in fork.segments() {
                fork_of_file[i] = fi;
                fork_blocks[fi] += dir.files[i].size / bs;
            }
            for mut f in check_segments(fork, &dir.files, bs, control.relseg_size as u64) {
                attach_names(&mut f, fork.location.db_oid(), fork.relfilenode);
                findings.push(f);
            }
        }
        for file in &dir.files {
            if file.size % bs != 0 {
                findings.push(partial_block_finding(datadir, file, &control));
            }
        }
        Plan {
            datadir: datadir.to_path_buf(),
            control,
            dir,
            forks,
            fork_of_file,
            fork_blocks,
            findings,
        }
    }

    /// The same plan with every file's size as it is now (`verify --online`: a relation may
    /// grow or shrink while it is scanned, and a page written meanwhile may name a block the
    /// first listing did not have). Files and forks stay the ones listed.
    pub fn with_current_sizes(&self) -> Plan {
        let bs = self.control.blcksz as u64;
        let mut files = self.dir.files.clone();
        for f in &mut files {
            if let Ok(m) = std::fs::metadata(f.path()) {
                f.size = m.len();
            }
        }
        let mut fork_blocks = vec![0u64; self.forks.len()];
        for (fi, fork) in self.forks.iter().enumerate() {
            fork_blocks[fi] = fork.segments().map(|i| files[i].size / bs).sum();
        }
        Plan {
            datadir: self.datadir.clone(),
            control: self.control.clone(),
            dir: DataDirectory {
                files,
                skipped_temp_files: self.dir.skipped_temp_files,
                findings: self.dir.findings.clone(),
                errors: Vec::new(),
            },
            forks: self.forks.clone(),
            fork_of_file: self.fork_of_file.clone(),
            fork_blocks,
            findings: self.findings.clone(),
        }
    }

    /// The files and lengths (whole blocks only) to scan, each with its path. The scan of
    /// `verify` takes the plan itself ([`FileList`]) and builds no such list.
    pub fn scan_files(&self) -> Vec<ScanFile> {
        (0..self.dir.files.len())
            .map(|i| ScanFile {
                path: self.dir.files[i].path(),
                len: self.scan_len(i),
            })
            .collect()
    }

    /// Bytes the scan reads: the whole blocks of every file.
    pub fn scan_bytes(&self) -> u64 {
        (0..self.dir.files.len()).map(|i| self.scan_len(i)).sum()
    }

    /// Absolute block number of block `index` of `file`.
    pub fn absolute_block(&self, file: &RelationFile, index: u64) -> u64 {
        file.name.segno as u64 * self.control.relseg_size as u64 + index
    }

    /// Reads one absolute block of a fork, if it exists.
    pub(crate) fn read_fork_block(&self, fork: usize, blkno: u64) -> Option<Vec<u8>> {
        let relseg = self.control.relseg_size as u64;
        let bs = self.control.blcksz as u64;
        let segno = u32::try_from(blkno / relseg).ok()?;
        let i = self.forks[fork]
            .segments()
            .find(|&i| self.dir.files[i].name.segno == segno)?;
        let mut buf = vec![0u8; bs as usize];
        let file = open_regular(&self.dir.files[i].path(), false).ok()?;
        file.read_exact_at(&mut buf, (blkno % relseg) * bs).ok()?;
        Some(buf)
    }
}

impl FileList for Plan {
    fn file_count(&self) -> usize {
        self.dir.files.len()
    }

    /// The whole blocks of the file.
    fn scan_len(&self, file: usize) -> u64 {
        let bs = self.control.blcksz as u64;
        self.dir.files[file].size / bs * bs
    }

    fn path_into(&self, file: usize, path: &mut PathBuf) {
        self.dir.files[file].path_into(path);
    }

    fn dir_of(&self, file: usize) -> Option<&Path> {
        Some(&self.dir.files[file].dir.path)
    }

    fn name_into(&self, file: usize, name: &mut Vec<u8>) {
        use std::io::Write;
        // Writing into a vector cannot fail.
        let _ = write!(name, "{}\0", self.dir.files[file].name);
    }
}

pub(super) fn attach_names(f: &mut Finding, db_oid: u32, relfilenode: u32) {
    f.database = Some(DatabaseRef {
        oid: Some(db_oid),
        name: None,
    });
    f.relation = Some(RelationRef {
        filenode: Some(relfilenode),
        ..Default::default()
    });
}

pub(super) fn partial_block_finding(
    datadir: &Path,
    file: &RelationFile,
    control: &ControlFile,
) -> Finding {
    let bs = control.blcksz as u64;
    let whole = file.size / bs;
    let remainder = file.size % bs;
    let tail_looks_like_header = read_tail_header(datadir, file, whole * bs, remainder);
    let block = file.name.segno as u64 * control.relseg_size as u64 + whole;
    let mut f = Finding::for_file(
        FindingKind::PartialBlock,
        Severity::Error,
        &file.rel_path(),
        format!(
            "file size {} is not a multiple of the block size {bs}: {remainder} trailing bytes after block {block} are ignored by the server",
            file.size
        ),
    )
    .with_detail(json!({"size": file.size, "remainder": remainder, "tail_looks_like_page_header": tail_looks_like_header}))
    .at_segment(file.name.segno);
    f.fork = Some(file.name.fork);
    f.block = Some(block);
    attach_names(&mut f, file.location.db_oid(), file.name.relfilenode);
    f
}

/// Whether the trailing fragment starts with something shaped like a page header.
pub(super) fn read_tail_header(
    _datadir: &Path,
    file: &RelationFile,
    offset: u64,
    len: u64,
) -> bool {
    if len < crate::format::page::SIZE_OF_PAGE_HEADER_DATA as u64 {
        return false;
    }
    let mut buf = [0u8; crate::format::page::SIZE_OF_PAGE_HEADER_DATA];
    let Ok(f) = open_regular(&file.path(), false) else {
        return false;
    };
    if f.read_exact_at(&mut buf, offset).is_err() {
        return false;
    }
    crate::format::page::PageHeader::parse(&buf)
        .is_some_and(|h| !h.is_new() && h.pd_lower <= h.pd_upper && h.pd_upper <= h.pd_special)
}
