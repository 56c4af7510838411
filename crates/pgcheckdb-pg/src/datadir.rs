//! The data directory's relation files: `global/`, `base/<db>/` and
//! `pg_tblspc/<spc>/PG_<major>_<catver>/<db>/`, with every segment of every fork, and the
//! non-relation files that live beside them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pgcheckdb_scan::open::file_type_name;
use serde_json::json;

use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use crate::format::page::MAX_BLOCK_NUMBER;
use crate::format::relfile::{parse_relation_file_name, ForkNumber, RelFileName};

/// Where a relation directory sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Location {
    /// `global/`: shared catalogs (database oid 0).
    Global,
    /// `base/<db>/`.
    Database { db_oid: u32 },
    /// `pg_tblspc/<spc>/<version dir>/<db>/`.
    Tablespace { spc_oid: u32, db_oid: u32 },
}

impl Location {
    /// Tablespace oid: `pg_global` for `global/`, `pg_default` for `base/`.
    pub fn tablespace_oid(self) -> u32 {
        match self {
            Location::Global => crate::format::oids::GLOBALTABLESPACE,
            Location::Database { .. } => crate::format::oids::DEFAULTTABLESPACE,
            Location::Tablespace { spc_oid, .. } => spc_oid,
        }
    }

    /// Database oid; 0 for shared relations, as PostgreSQL writes it.
    pub fn db_oid(self) -> u32 {
        match self {
            Location::Global => 0,
            Location::Database { db_oid } | Location::Tablespace { db_oid, .. } => db_oid,
        }
    }
}

/// A directory that holds relation files, shared by all of its files: a file keeps only a
/// reference to it and its parsed name, and its paths are built when needed.
#[derive(Debug)]
pub struct RelationDir {
    /// Path to open (tablespace symlinks not resolved).
    pub path: PathBuf,
    /// Path relative to the data directory, `/`-separated.
    pub rel: String,
}

/// One segment file of one fork of one relation: a few dozen bytes, no allocation of its own.
#[derive(Debug, Clone)]
pub struct RelationFile {
    pub dir: Arc<RelationDir>,
    pub location: Location,
    pub name: RelFileName,
    /// File size in bytes when listed.
    pub size: u64,
}

impl RelationFile {
    /// Path to open (tablespace symlinks not resolved).
    pub fn path(&self) -> PathBuf {
        let mut path = PathBuf::new();
        self.path_into(&mut path);
        path
    }

    /// [`Self::path`] written into `path`, reusing its buffer.
    pub fn path_into(&self, path: &mut PathBuf) {
        use std::fmt::Write;
        let mut name = NameBuf::default();
        // Writing into a fixed buffer that fits every relation file name cannot fail.
        let _ = write!(name, "{}", self.name);
        path.clear();
        path.push(&self.dir.path);
        path.push(name.as_str());
    }

    /// Path relative to the data directory, `/`-separated.
    pub fn rel_path(&self) -> String {
        format!("{}/{}", self.dir.rel, self.name)
    }
}

/// A relation file name formatted without allocating: `t<backend>_<relfilenode>_init.<segno>`
/// is at most 1 + 10 + 1 + 10 + 5 + 1 + 10 = 38 bytes.
struct NameBuf {
    bytes: [u8; 40],
    len: usize,
}

impl Default for NameBuf {
    fn default() -> Self {
        NameBuf {
            bytes: [0; 40],
            len: 0,
        }
    }
}

impl NameBuf {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for NameBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Names in relation directories that are not relation files and are skipped silently, as
/// `pg_checksums` skips them. `true` means the name only has to start with the entry.
const SKIPPED_FILES: [(&str, bool); 6] = [
    ("pg_control", false),
    ("pg_filenode.map", false),
    ("pg_internal.init", true),
    ("PG_VERSION", false),
    ("config_exec_params", true),
    (".DS_Store", false),
];

/// `PG_TEMP_FILE_PREFIX`: temporary files and directories of sorts and hashes.
const PG_TEMP_FILE_PREFIX: &str = "pgsql_tmp";

fn is_skipped_name(name: &str) -> bool {
    name.starts_with(PG_TEMP_FILE_PREFIX)
        || SKIPPED_FILES.iter().any(|(skip, prefix)| {
            if *prefix {
                name.starts_with(skip)
            } else {
                name == *skip
            }
        })
}

/// The result of listing a data directory.
#[derive(Debug, Default)]
pub struct DataDirectory {
    /// Relation files, sorted by location, relfilenode, fork and segment.
    pub files: Vec<RelationFile>,
    /// Temporary relation files, skipped.
    pub skipped_temp_files: usize,
    /// Notes about the layout itself (unexpected files, foreign version directories, unreadable directories).
    pub findings: Vec<Finding>,
    /// Directories that could not be listed: `(relative path, error)`.
    pub errors: Vec<(String, io::Error)>,
}

/// Lists every relation file of a data directory. `version_dir` is the tablespace version
/// directory of this cluster (`PG_15_202209061`); `None` accepts any `PG_*` directory.
///
/// Nothing is skipped silently: a directory that cannot be listed is an entry of `errors`; a
/// missing `base/` or `pg_tblspc/`, a tablespace link that leads nowhere and anything but a
/// regular file where a relation file is named are error findings.
pub fn list_relation_files(datadir: &Path, version_dir: Option<&str>) -> DataDirectory {
    let mut out = DataDirectory::default();
    scan_relation_dir(datadir, "global", Location::Global, &mut out);
    for (db_oid, name) in numbered_subdirs(datadir, "base", &mut out) {
        scan_relation_dir(
            datadir,
            &format!("base/{name}"),
            Location::Database { db_oid },
            &mut out,
        );
    }
    for (spc_oid, spc_name) in tablespace_links(datadir, &mut out) {
        scan_tablespace(datadir, spc_oid, &spc_name, version_dir, &mut out);
    }
    sort_relation_files(&mut out.files);
    out.files.shrink_to_fit();
    out
}

/// Puts relation files in the plan's order: by location, then file number, fork and segment.
/// No two files have the same place in it, so an unstable sort gives the one order.
pub fn sort_relation_files(files: &mut [RelationFile]) {
    files.sort_unstable_by_key(|f| (f.location, f.name.relfilenode, f.name.fork, f.name.segno));
}

impl DataDirectory {
    /// Everything that kept part of the data directory from being listed or that is not a
    /// regular file where a relation file is named, one line each. A command that must see
    /// every page (`checksums enable`) refuses to finish when this is not empty.
    pub fn blocking_problems(&self) -> Vec<String> {
        let listing = self
            .errors
            .iter()
            .map(|(rel, e)| format!("could not read \"{rel}\": {e}"));
        let findings = self
            .findings
            .iter()
            .filter(|f| {
                matches!(
                    f.kind,
                    FindingKind::IrregularFile
                        | FindingKind::TablespaceMissing
                        | FindingKind::MissingDirectory
                )
            })
            .map(|f| f.message.clone());
        listing.chain(findings).collect()
    }
}

fn scan_tablespace(
    datadir: &Path,
    spc_oid: u32,
    spc_name: &str,
    version_dir: Option<&str>,
    out: &mut DataDirectory,
) {
    let spc_rel = format!("pg_tblspc/{spc_name}");
    let Some(entries) = read_dir_sorted(datadir, &spc_rel, out) else {
        return;
    };
    let mut found_ours = false;
    for entry in entries {
        let ours = match version_dir {
            Some(v) => entry == v,
            None => entry.starts_with("PG_"),
        };
        let rel = format!("{spc_rel}/{entry}");
        if !ours {
            if entry.starts_with("PG_") {
                out.findings.push(Finding::for_file(
                    FindingKind::ForeignVersionDirectory,
                    Severity::Info,
                    &rel,
                    format!("tablespace directory \"{rel}\" belongs to another PostgreSQL version; not checked"),
                ));
            } else {
                out.findings.push(unexpected(&rel, "entry"));
            }
            continue;
        }
        found_ours = true;
        for (db_oid, db_name) in numbered_subdirs(datadir, &rel, out) {
            scan_relation_dir(
                datadir,
                &format!("{rel}/{db_name}"),
                Location::Tablespace { spc_oid, db_oid },
                out,
            );
        }
    }
    if !found_ours {
        if let Some(v) = version_dir {
            let target = link_target(datadir, &spc_rel);
            out.findings.push(tablespace_missing(
                &spc_rel,
                format!(
                    "tablespace {spc_oid} (\"{spc_rel}\"{target}) has no \"{v}\" directory (is its disk mounted?): its relations were not checked"
                ),
                json!({"tablespace": spc_oid, "missing": v}),
            ));
        }
    }
}

/// The tablespace links of `pg_tblspc/`: entries named by an oid that lead to a directory. A
/// link that dangles, loops or leads to something else is a [`FindingKind::TablespaceMissing`].
fn tablespace_links(datadir: &Path, out: &mut DataDirectory) -> Vec<(u32, String)> {
    let Some(names) = read_dir_sorted(datadir, "pg_tblspc", out) else {
        return Vec::new();
    };
    let mut links = Vec::new();
    for name in names {
        let Some(oid) = oid_name(&name) else {
            continue;
        };
        let rel = format!("pg_tblspc/{name}");
        let target = link_target(datadir, &rel);
        match fs::metadata(datadir.join(&rel)) {
            Ok(m) if m.is_dir() => links.push((oid, name)),
            Ok(m) => out.findings.push(tablespace_missing(
                &rel,
                format!(
                    "tablespace {oid} (\"{rel}\"{target}) is a {}, not a directory: its relations were not checked",
                    file_type_name(&m.file_type())
                ),
                json!({"tablespace": oid}),
            )),
            Err(e) => out.findings.push(tablespace_missing(
                &rel,
                format!("tablespace {oid} (\"{rel}\"{target}) cannot be reached: {e}; its relations were not checked"),
                json!({"tablespace": oid, "os_error": e.raw_os_error()}),
            )),
        }
    }
    links
}

/// `" -> target"` when `rel` is a symbolic link, else `""`.
fn link_target(datadir: &Path, rel: &str) -> String {
    fs::read_link(datadir.join(rel))
        .map(|t| format!(" -> {}", t.display()))
        .unwrap_or_default()
}

fn tablespace_missing(rel: &str, message: String, detail: serde_json::Value) -> Finding {
    Finding::for_file(
        FindingKind::TablespaceMissing,
        Severity::Error,
        rel,
        message,
    )
    .with_detail(detail)
}

/// The oid a directory entry is named by, if it is one.
fn oid_name(name: &str) -> Option<u32> {
    name.parse()
        .ok()
        .filter(|_| name.bytes().all(|b| b.is_ascii_digit()))
}

/// Database directories of `rel` (relative to `datadir`): entries named by an oid, following
/// symlinks. One that is not a directory is an [`FindingKind::IrregularFile`].
fn numbered_subdirs(datadir: &Path, rel: &str, out: &mut DataDirectory) -> Vec<(u32, String)> {
    let mut dirs = Vec::new();
    for name in read_dir_sorted(datadir, rel, out).unwrap_or_default() {
        let Some(oid) = oid_name(&name) else {
            continue;
        };
        let entry = format!("{rel}/{name}");
        match fs::metadata(datadir.join(&entry)) {
            Ok(m) if m.is_dir() => dirs.push((oid, name)),
            Ok(m) => out.findings.push(irregular(
                &entry,
                file_type_name(&m.file_type()),
                "a database directory",
            )),
            Err(e) => out.errors.push((entry, e)),
        }
    }
    dirs
}

/// Directories every data directory has; their absence is damage, not an empty listing.
const REQUIRED_DIRS: [&str; 3] = ["global", "base", "pg_tblspc"];

/// The sorted entry names of `rel`, or `None` when it cannot be listed (recorded in `out`).
fn read_dir_sorted(datadir: &Path, rel: &str, out: &mut DataDirectory) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for_each_dir_entry(datadir, rel, out, |name, _| names.push(name))?;
    names.sort();
    Some(names)
}

/// Hands each entry name of `rel` to `visit` in directory order (with `out`, which it may add
/// to), holding no list of them. `None` when the directory cannot be listed or an entry cannot
/// be read (recorded in `out`); what `visit` did before that stays done.
fn for_each_dir_entry(
    datadir: &Path,
    rel: &str,
    out: &mut DataDirectory,
    mut visit: impl FnMut(String, &mut DataDirectory),
) -> Option<()> {
    let dir = datadir.join(rel);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound && REQUIRED_DIRS.contains(&rel) => {
            out.findings.push(Finding::for_file(
                FindingKind::MissingDirectory,
                Severity::Error,
                rel,
                format!("directory \"{rel}\" is missing from the data directory: the relations it should hold were not checked"),
            ));
            return None;
        }
        Err(e) => {
            out.errors.push((rel.to_string(), e));
            return None;
        }
    };
    for entry in entries {
        match entry {
            Ok(e) => match e.file_name().into_string() {
                Ok(name) => visit(name, out),
                Err(raw) => out.findings.push(unexpected(
                    &format!("{rel}/{}", raw.to_string_lossy()),
                    "file",
                )),
            },
            Err(e) => {
                out.errors.push((rel.to_string(), e));
                return None;
            }
        }
    }
    Some(())
}

/// Lists one directory of relation files. Entries are parsed as they are met (a database
/// directory may hold hundreds of thousands: no list of their names is built), then the
/// relation files are looked at with one `fstatat` each, by several threads in a large
/// directory (that system call was a sixth of a physical run on 80,000 small files, and the
/// listing runs before the scan can start). The other entries are looked at in name order, so
/// that findings come out the same on every run. If the directory cannot be listed whole, none
/// of it is kept.
fn scan_relation_dir(datadir: &Path, rel: &str, location: Location, out: &mut DataDirectory) {
    let dir = Arc::new(RelationDir {
        path: datadir.join(rel),
        rel: rel.to_string(),
    });
    let mut parsed: Vec<RelFileName> = Vec::new();
    let mut others: Vec<(String, Option<RelFileName>)> = Vec::new();
    let listed = for_each_dir_entry(datadir, rel, out, |name, _| {
        if is_skipped_name(&name) {
            return;
        }
        match parse_relation_file_name(&name) {
            Some(p) => parsed.push(p),
            None => others.push((name, None)),
        }
    });
    if listed.is_none() {
        return;
    }
    let handle = fs::File::open(&dir.path).ok();
    let sizes = regular_file_sizes(handle.as_ref(), &parsed);
    out.files.reserve(parsed.len());
    for (p, size) in parsed.into_iter().zip(sizes) {
        match (size, p.temp_backend) {
            // The name formats back exactly: see `RelFileName`'s `Display`.
            (NOT_REGULAR, _) => others.push((p.to_string(), Some(p))),
            (_, Some(_)) => out.skipped_temp_files += 1,
            (size, None) => out.files.push(RelationFile {
                dir: Arc::clone(&dir),
                location,
                name: p,
                size,
            }),
        }
    }
    others.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, parsed) in others {
        classify_entry(&dir, &name, parsed, location, out);
    }
}

/// The size [`regular_file_sizes`] gives a name that is not a regular file (or could not be
/// looked at): no file has it (`st_size` is signed).
const NOT_REGULAR: u64 = u64::MAX;

/// Entries of a directory below which its files are looked at by one thread.
const PARALLEL_STAT_MIN: usize = 8192;

/// [`regular_file_size`] of every name in `dir`, in order, [`NOT_REGULAR`] for `None`;
/// several threads share a long list.
fn regular_file_sizes(dir: Option<&fs::File>, names: &[RelFileName]) -> Vec<u64> {
    let Some(dir) = dir else {
        return vec![NOT_REGULAR; names.len()];
    };
    let sizes_of = |names: &[RelFileName]| -> Vec<u64> {
        names
            .iter()
            .map(|n| regular_file_size(dir, n).unwrap_or(NOT_REGULAR))
            .collect()
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
        .min(names.len() / PARALLEL_STAT_MIN + 1);
    if threads <= 1 {
        return sizes_of(names);
    }
    let per_thread = names.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = names
            .chunks(per_thread)
            .map(|part| s.spawn(move || sizes_of(part)))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// The size of the file `name` in the directory `dir` if it is a regular file (symbolic links
/// followed), from one `fstatat`; `None` for anything else or any error (the caller looks
/// again).
fn regular_file_size(dir: &fs::File, name: &RelFileName) -> Option<u64> {
    use std::fmt::Write;
    use std::os::unix::io::AsRawFd;
    let mut buf = NameBuf::default();
    write!(buf, "{name}\0").ok()?;
    let c_name = std::ffi::CStr::from_bytes_with_nul(&buf.bytes[..buf.len]).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid directory descriptor, a NUL-terminated name and a buffer of the right
    // type; `st` is read only after the call succeeded.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), c_name.as_ptr(), st.as_mut_ptr(), 0) };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstatat returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(st.st_size as u64)
}

/// Everything that is not a plainly listed relation or temporary file: errors, dangling links,
/// irregular files and names that are not relation files.
fn classify_entry(
    dir: &Arc<RelationDir>,
    name: &str,
    parsed: Option<RelFileName>,
    location: Location,
    out: &mut DataDirectory,
) {
    let path = dir.path.join(name);
    let rel_path = format!("{}/{name}", dir.rel);
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) => {
            match fs::symlink_metadata(&path) {
                Ok(_) if parsed.is_some_and(|p| p.temp_backend.is_none()) => {
                    let f = irregular(&rel_path, "dangling symbolic link", "a relation file");
                    out.findings.push(match &parsed {
                        Some(p) => f.of_relation_file(location, p),
                        None => f,
                    });
                }
                _ => out.errors.push((rel_path, e)),
            }
            return;
        }
    };
    if !meta.is_file() {
        let what = file_type_name(&meta.file_type());
        match parsed {
            Some(p) if p.temp_backend.is_none() => out
                .findings
                .push(irregular(&rel_path, what, "a relation file").of_relation_file(location, &p)),
            _ => out.findings.push(unexpected(&rel_path, what)),
        }
        return;
    }
    match parsed {
        Some(p) if p.temp_backend.is_some() => out.skipped_temp_files += 1,
        // A regular file after all (it became one between the two looks): list it.
        Some(p) => out.files.push(RelationFile {
            dir: Arc::clone(dir),
            location,
            name: p,
            size: meta.len(),
        }),
        None => out.findings.push(unexpected(&rel_path, "file")),
    }
}

impl Finding {
    /// Attaches the database, file number, fork and segment of a relation file's name.
    fn of_relation_file(mut self, location: Location, name: &RelFileName) -> Finding {
        self.database = Some(DatabaseRef {
            oid: Some(location.db_oid()),
            name: None,
        });
        self.relation = Some(RelationRef {
            filenode: Some(name.relfilenode),
            ..Default::default()
        });
        self.fork = Some(name.fork);
        self.at_segment(name.segno)
    }
}

/// Something other than a regular file (or directory) where `expected` is named.
fn irregular(rel_path: &str, what: &str, expected: &str) -> Finding {
    Finding::for_file(
        FindingKind::IrregularFile,
        Severity::Error,
        rel_path,
        format!("\"{rel_path}\" is a {what} where {expected} is named; it was not read"),
    )
    .with_detail(json!({"file_type": what}))
}

fn unexpected(rel_path: &str, what: &str) -> Finding {
    Finding::for_file(
        FindingKind::UnexpectedFile,
        Severity::Info,
        rel_path,
        format!("{what} \"{rel_path}\" is not a relation file; not checked"),
    )
}

/// All segments of one fork of one relation, in segment order.
#[derive(Debug, Clone)]
pub struct ForkFiles {
    pub location: Location,
    pub relfilenode: u32,
    pub fork: ForkNumber,
    /// `first..end` indexes into `DataDirectory::files`: [`ForkFiles::segments`]. Four bytes
    /// each: a plan of a million forks holds them all.
    first: u32,
    end: u32,
}

impl ForkFiles {
    /// Indexes into `DataDirectory::files` (sorted by location, file number, fork and segment,
    /// so a fork's files are contiguous), in segment order.
    pub fn segments(&self) -> std::ops::Range<usize> {
        self.first as usize..self.end as usize
    }
}

/// Groups relation files, sorted as [`list_relation_files`] sorts them, into forks.
pub fn group_forks(files: &[RelationFile]) -> Vec<ForkFiles> {
    let key = |f: &RelationFile| (f.location, f.name.relfilenode, f.name.fork);
    debug_assert!(files
        .windows(2)
        .all(|w| (key(&w[0]), w[0].name.segno) < (key(&w[1]), w[1].name.segno)));
    let count = 1 + files
        .windows(2)
        .filter(|w| key(&w[0]) != key(&w[1]))
        .count();
    let mut forks = Vec::with_capacity(if files.is_empty() { 0 } else { count });
    let mut start = 0;
    while start < files.len() {
        let k = key(&files[start]);
        let end = files[start..]
            .iter()
            .position(|f| key(f) != k)
            .map_or(files.len(), |n| start + n);
        forks.push(ForkFiles {
            location: k.0,
            relfilenode: k.1,
            fork: k.2,
            first: u32::try_from(start).expect("fewer than 2^32 relation files"),
            end: u32::try_from(end).expect("fewer than 2^32 relation files"),
        });
        start = end;
    }
    forks
}

/// Whether a fork can have segment `segno`: its first block must be a valid block number.
pub fn segment_possible(segno: u32, relseg_size: u64) -> bool {
    segno as u64 * relseg_size <= MAX_BLOCK_NUMBER
}

impl DataDirectory {
    /// Takes the files whose segment number no fork can have out of `files` (they are never
    /// scanned and plan no segment gaps) and reports each once as an
    /// [`FindingKind::ImpossibleSegment`].
    pub fn remove_impossible_segments(&mut self, relseg_size: u64) {
        let impossible: Vec<RelationFile> = self
            .files
            .iter()
            .filter(|f| !segment_possible(f.name.segno, relseg_size))
            .cloned()
            .collect();
        self.files
            .retain(|f| segment_possible(f.name.segno, relseg_size));
        for f in impossible {
            let rel_path = f.rel_path();
            let first_block = f.name.segno as u64 * relseg_size;
            self.findings.push(
                Finding::for_file(
                    FindingKind::ImpossibleSegment,
                    Severity::Warning,
                    &rel_path,
                    format!(
                        "\"{}\" is named as segment {} ({} bytes), whose first block {first_block} lies past the largest block number {MAX_BLOCK_NUMBER}: no relation can have it and the server never reads it; not checked",
                        rel_path, f.name.segno, f.size
                    ),
                )
                .with_detail(json!({"size": f.size, "first_block": first_block, "max_block_number": MAX_BLOCK_NUMBER}))
                .of_relation_file(f.location, &f.name),
            );
        }
    }
}

/// Checks the segment structure of a fork the way `md.c` relies on it: full segments, then one
/// partial one, then only empty ones. Returns the findings: one per run of missing segments
/// (never one per absent segment number), one per short or oversized segment.
pub fn check_segments(
    fork: &ForkFiles,
    files: &[RelationFile],
    blcksz: u64,
    relseg_size: u64,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let last_nonempty = fork
        .segments()
        .rev()
        .find(|&i| files[i].size > 0)
        .map(|i| files[i].name.segno);
    let Some(last_nonempty) = last_nonempty else {
        return findings;
    };
    let mut expected_segno = 0u32;
    for i in fork.segments() {
        let f = &files[i];
        let segno = f.name.segno;
        if segno > expected_segno && segno <= last_nonempty {
            findings.push(missing_segments(f, expected_segno, segno - 1, relseg_size));
        }
        expected_segno = segno.saturating_add(1);
        let blocks = f.size / blcksz;
        if blocks > relseg_size {
            let rel_path = f.rel_path();
            findings.push(
                Finding::for_file(
                    FindingKind::SegmentTooBig,
                    Severity::Error,
                    &rel_path,
                    format!("segment \"{rel_path}\" has {blocks} blocks, more than the {relseg_size} of a segment"),
                )
                .with_detail(serde_json::json!({"blocks": blocks, "relseg_size": relseg_size}))
                .at_segment(segno),
            );
        } else if segno < last_nonempty && blocks < relseg_size {
            let rel_path = f.rel_path();
            findings.push(
                Finding::for_file(
                    FindingKind::SegmentGap,
                    Severity::Error,
                    &rel_path,
                    format!(
                        "segment \"{rel_path}\" is only {blocks} of {relseg_size} blocks but segment {last_nonempty} follows; the server cannot see the later data"
                    ),
                )
                .with_detail(serde_json::json!({"blocks": blocks, "relseg_size": relseg_size, "last_segment": last_nonempty}))
                .at_segment(segno),
            );
        }
    }
    findings.iter_mut().for_each(|x| {
        x.fork = Some(fork.fork);
    });
    findings
}

/// The path of segment `segno` of the fork `next` belongs to, relative to the data directory.
fn segment_name(next: &RelationFile, segno: u32) -> String {
    let name = RelFileName { segno, ..next.name };
    format!("{}/{name}", next.dir.rel)
}

/// One finding for the run of missing segments `first..=last` before `next`.
fn missing_segments(next: &RelationFile, first: u32, last: u32, relseg_size: u64) -> Finding {
    let file = segment_name(next, first);
    let count = last - first + 1;
    let what = if count == 1 {
        format!("segment \"{file}\" is missing")
    } else {
        format!(
            "segments \"{file}\" to \"{}\" ({count} files) are missing",
            segment_name(next, last)
        )
    };
    let stray = if first == 0 {
        " (the fork has no first segment: the server never reads it)"
    } else {
        ""
    };
    Finding::for_file(
        FindingKind::SegmentGap,
        Severity::Error,
        &file,
        format!(
            "{what} but \"{}\" exists{stray}; the server cannot see the later data",
            next.rel_path()
        ),
    )
    .with_detail(serde_json::json!({"missing_segment": first, "last_missing_segment": last, "missing_segments": count, "relseg_size": relseg_size}))
    .at_segment(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory long enough to be looked at by several threads: every regular file gets its
    /// own size, in listing order, and a directory, a FIFO and a missing name get none.
    #[test]
    fn sizes_of_a_large_directory_in_order() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let count = PARALLEL_STAT_MIN * 2 + 17;
        let mut names = Vec::new();
        for i in 0..count {
            let node = 16384 + i as u32;
            let name = format!("{node}");
            match i {
                100 => fs::create_dir(tmp.path().join(&name)).expect("dir"),
                // SAFETY: a NUL-terminated path; mkfifo only creates the node.
                9000 => unsafe {
                    let path = std::ffi::CString::new(tmp.path().join(&name).to_str().unwrap())
                        .expect("path");
                    assert_eq!(libc::mkfifo(path.as_ptr(), 0o600), 0);
                },
                12345 => {} // listed, then gone
                _ => fs::write(tmp.path().join(&name), vec![0u8; i % 7]).expect("file"),
            }
            names.push(parse_relation_file_name(&name).expect("a relation file name"));
        }
        let dir = fs::File::open(tmp.path()).expect("open dir");
        let sizes = regular_file_sizes(Some(&dir), &names);
        assert_eq!(sizes.len(), count);
        for (i, size) in sizes.iter().enumerate() {
            let expected = match i {
                100 | 9000 | 12345 => NOT_REGULAR,
                _ => (i % 7) as u64,
            };
            assert_eq!(*size, expected, "entry {i}");
        }
    }
}
