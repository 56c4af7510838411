//! `backup_manifest`: the JSON list of files (path, size, checksum) the server wrote at the
//! end of a base backup, closed by a SHA-256 of its own text. Checking the copy against it
//! finds files changed, cut, lost or added after the backup was taken, which no page check
//! can see (a whole file gone, a config file edited, a segment truncated at a block boundary).
//!
//! Every `Checksum-Algorithm` is checked: CRC-32C (the default), SHA-224/256/384/512
//! ([`super::digest`]); `NONE` compares the size only. Like `pg_verifybackup`, `pg_wal/`
//! and the files a restore is expected to add or edit (`postgresql.auto.conf`,
//! `recovery.signal`, `standby.signal`) are not compared.
//!
//! The comparison ([`check_against`]) takes what was seen of the files from a [`Files`]: a
//! plain backup's directory, read once more here ([`DirFiles`]), or the sizes and checksums a
//! tar backup's scan computed in its one read of each member ([`SeenFiles`]).

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io::{self, Read};
use std::path::Path;

use crate::verify::report::ManifestSummary;
use serde_json::{json, Value};

pub use super::digest::Algorithm;
use super::digest::{sha256_hex, FileDigest, UnknownAlgorithm};
use crate::finding::{Finding, FindingKind, Severity};
use crate::format::lsn::Lsn;

/// The file's name in the backup's root.
pub const MANIFEST_FILE: &str = "backup_manifest";

/// Paths (relative to the root) never compared with the manifest.
const IGNORED: &[&str] = &[
    MANIFEST_FILE,
    "pg_wal",
    "postgresql.auto.conf",
    "recovery.signal",
    "standby.signal",
];

/// The largest manifest read (a manifest line is about 150 bytes per file).
const MAX_MANIFEST_BYTES: u64 = 1 << 30;

/// Why `backup_manifest` cannot be read or used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file exists but could not be read.
    #[error("could not read \"{file}\": {0}", file = MANIFEST_FILE)]
    Read(#[source] io::Error),
    #[error("not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("no PostgreSQL-Backup-Manifest-Version")]
    NoVersion,
    #[error("no Files list")]
    NoFiles,
    #[error("no Manifest-Checksum")]
    NoChecksum,
    /// A `Files` entry's `Encoded-Path` is not hexadecimal.
    #[error("bad Encoded-Path \"{0}\"")]
    BadEncodedPath(String),
    #[error("a Files entry has no Path")]
    NoPath,
    #[error("no Size for \"{path}\"")]
    NoSize { path: String },
    #[error("{source} for \"{path}\"")]
    Algorithm {
        path: String,
        #[source]
        source: UnknownAlgorithm,
    },
}

/// One `Files` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    pub path: String,
    pub size: u64,
    pub algorithm: Algorithm,
    /// Hexadecimal, as written.
    pub checksum: Option<String>,
}

/// A parsed manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub version: u64,
    pub files: Vec<ManifestFile>,
    /// The highest `End-LSN` of `WAL-Ranges`: where the backup ends.
    pub wal_end: Option<Lsn>,
    /// `Manifest-Checksum` matches the SHA-256 of the text before its line.
    pub checksum_ok: bool,
}

/// Parses the manifest's bytes.
pub fn parse_manifest(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    let v: Value = serde_json::from_slice(bytes).map_err(ManifestError::Json)?;
    let version = v["PostgreSQL-Backup-Manifest-Version"]
        .as_u64()
        .ok_or(ManifestError::NoVersion)?;
    let files = v["Files"]
        .as_array()
        .ok_or(ManifestError::NoFiles)?
        .iter()
        .map(manifest_file)
        .collect::<Result<Vec<_>, _>>()?;
    let wal_end = v["WAL-Ranges"].as_array().and_then(|ranges| {
        ranges
            .iter()
            .filter_map(|r| r["End-LSN"].as_str().and_then(Lsn::parse))
            .max()
    });
    let expected = v["Manifest-Checksum"]
        .as_str()
        .ok_or(ManifestError::NoChecksum)?;
    Ok(Manifest {
        version,
        files,
        wal_end,
        checksum_ok: self_checksum(bytes).is_some_and(|c| c.eq_ignore_ascii_case(expected)),
    })
}

/// The SHA-256 of everything up to and including the next-to-last newline: the manifest's
/// last line carries the checksum of the lines before it.
fn self_checksum(bytes: &[u8]) -> Option<String> {
    if bytes.last() != Some(&b'\n') {
        return None;
    }
    let body = &bytes[..bytes.len() - 1];
    let cut = body.iter().rposition(|&b| b == b'\n')?;
    Some(sha256_hex(&bytes[..=cut]))
}

fn manifest_file(v: &Value) -> Result<ManifestFile, ManifestError> {
    let path = match (v["Path"].as_str(), v["Encoded-Path"].as_str()) {
        (Some(p), _) => p.to_string(),
        (None, Some(hexed)) => decode_hex(hexed)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok_or_else(|| ManifestError::BadEncodedPath(hexed.to_string()))?,
        _ => return Err(ManifestError::NoPath),
    };
    let Some(size) = v["Size"].as_u64() else {
        return Err(ManifestError::NoSize { path });
    };
    let algorithm = match Algorithm::from_manifest(v["Checksum-Algorithm"].as_str()) {
        Ok(a) => a,
        Err(source) => return Err(ManifestError::Algorithm { path, source }),
    };
    Ok(ManifestFile {
        path,
        size,
        algorithm,
        checksum: v["Checksum"].as_str().map(str::to_string),
    })
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads and checks `backup_manifest` against the files under `root`. `Ok(None)` when the
/// backup has no manifest.
pub fn check(root: &Path) -> Result<Option<(ManifestSummary, Vec<Finding>)>, ManifestError> {
    let Some(bytes) = read_manifest(root)? else {
        return Ok(None);
    };
    Ok(Some(check_against(&bytes, &mut DirFiles { root })))
}

/// The bytes of `backup_manifest` in `dir`; `Ok(None)` when there is none.
pub fn read_manifest(dir: &Path) -> Result<Option<Vec<u8>>, ManifestError> {
    let path = dir.join(MANIFEST_FILE);
    match pgcheckdb_scan::open::read_regular(&path, MAX_MANIFEST_BYTES) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ManifestError::Read(e)),
    }
}

/// What a reader saw of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub size: u64,
    /// Its checksum by the manifest entry's algorithm (hexadecimal), `None` for `NONE`.
    pub checksum: Option<String>,
}

/// The backup's files as the comparison sees them.
pub trait Files {
    /// The size and checksum of a listed file; `NotFound` when the backup does not have it.
    fn observe(&mut self, f: &ManifestFile) -> io::Result<Observed>;
    /// Every regular file of the backup (relative, `/`-separated).
    fn paths(&mut self) -> Vec<String>;
}

/// A plain backup's directory: each listed file read once more.
pub struct DirFiles<'a> {
    pub root: &'a Path,
}

impl Files for DirFiles<'_> {
    fn observe(&mut self, f: &ManifestFile) -> io::Result<Observed> {
        let file = pgcheckdb_scan::open::open_regular(&self.root.join(&f.path), false)?;
        size_and_digest(file, f.algorithm)
    }

    fn paths(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        walk(self.root, "", 0, &mut out);
        out
    }
}

/// Files whose sizes and checksums a scan already computed, by path.
#[derive(Debug, Default)]
pub struct SeenFiles {
    pub files: HashMap<String, Observed>,
}

impl Files for SeenFiles {
    fn observe(&mut self, f: &ManifestFile) -> io::Result<Observed> {
        self.files
            .get(&f.path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn paths(&mut self) -> Vec<String> {
        let mut paths: Vec<String> = self.files.keys().cloned().collect();
        paths.sort();
        paths
    }
}

/// Compares the manifest's text `bytes` with the backup's `files`.
pub fn check_against(bytes: &[u8], files: &mut dyn Files) -> (ManifestSummary, Vec<Finding>) {
    let mut findings = Vec::new();
    let manifest = match parse_manifest(bytes) {
        Ok(m) => m,
        Err(why) => {
            findings.push(invalid_manifest(format!(
                "backup_manifest cannot be used: {why}"
            )));
            return (ManifestSummary::default(), findings);
        }
    };
    let mut summary = ManifestSummary {
        version: manifest.version,
        files: manifest.files.len() as u64,
        manifest_checksum_ok: manifest.checksum_ok,
        ..ManifestSummary::default()
    };
    if !manifest.checksum_ok {
        findings.push(invalid_manifest(
            "backup_manifest's own SHA-256 (Manifest-Checksum) does not match its text: the manifest was changed after the backup".into(),
        ));
    }
    for f in &manifest.files {
        if ignored(&f.path) {
            continue;
        }
        if let Some(finding) = check_file(files, f, &mut summary) {
            findings.push(finding);
        }
    }
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    let present = files.paths();
    for rel in present
        .iter()
        .filter(|p| !ignored(p) && !listed.contains(p.as_str()))
    {
        summary.unexpected += 1;
        findings.push(Finding::for_file(
            FindingKind::BackupFileUnexpected,
            Severity::Error,
            rel,
            "file is in the backup but not in backup_manifest: it was added after the backup"
                .into(),
        ));
    }
    (summary, findings)
}

fn invalid_manifest(message: String) -> Finding {
    Finding::for_file(
        FindingKind::BackupManifestInvalid,
        Severity::Error,
        MANIFEST_FILE,
        message,
    )
}

/// Whether `rel` (relative, `/`-separated) is outside the comparison.
pub fn ignored(rel: &str) -> bool {
    IGNORED
        .iter()
        .any(|i| rel == *i || rel.strip_prefix(i).is_some_and(|r| r.starts_with('/')))
}

/// Compares one listed file with the copy; a finding when it differs or is missing.
fn check_file(
    files: &mut dyn Files,
    f: &ManifestFile,
    summary: &mut ManifestSummary,
) -> Option<Finding> {
    let seen = match files.observe(f) {
        Ok(seen) => seen,
        Err(e) => {
            summary.missing += 1;
            let what = if e.kind() == io::ErrorKind::NotFound {
                "file is listed in backup_manifest but missing from the backup".to_string()
            } else {
                format!("file is listed in backup_manifest but cannot be read: {e}")
            };
            return Some(
                Finding::for_file(
                    FindingKind::BackupFileMissing,
                    Severity::Error,
                    &f.path,
                    what,
                )
                .with_detail(json!({"expected_size": f.size})),
            );
        }
    };
    if seen.size != f.size {
        summary.mismatched += 1;
        return Some(mismatch(
            f,
            format!(
                "size is {} bytes, backup_manifest says {}",
                seen.size, f.size
            ),
            json!({"expected_size": f.size, "size": seen.size}),
        ));
    }
    let Some(actual) = seen.checksum else {
        summary.size_only += 1;
        return None;
    };
    summary.checksums_verified += 1;
    let expected = f.checksum.as_deref().unwrap_or("");
    if actual.eq_ignore_ascii_case(expected) {
        return None;
    }
    summary.mismatched += 1;
    let name = f.algorithm.name();
    Some(mismatch(
        f,
        format!("{name} checksum is {actual}, backup_manifest says {expected}"),
        json!({"algorithm": name, "expected": expected, "calculated": actual}),
    ))
}

fn mismatch(f: &ManifestFile, message: String, detail: Value) -> Finding {
    Finding::for_file(
        FindingKind::BackupManifestMismatch,
        Severity::Error,
        &f.path,
        format!("file differs from backup_manifest: {message}"),
    )
    .with_detail(detail)
}

/// The file's length and checksum by `algorithm`, read once.
fn size_and_digest(mut file: fs::File, algorithm: Algorithm) -> io::Result<Observed> {
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    let mut digest = FileDigest::new(algorithm);
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => {
                return Ok(Observed {
                    size,
                    checksum: digest.finish_hex(),
                })
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        size += n as u64;
        digest.update(&buf[..n]);
    }
}

/// Every regular file under `dir` (relative paths into `out`), tablespace links followed,
/// the ignored paths left out.
fn walk(dir: &Path, rel: &str, depth: usize, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir.join(rel)) else {
        return;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if ignored(&child) {
            continue;
        }
        let Ok(meta) = fs::metadata(dir.join(&child)) else {
            continue;
        };
        if meta.is_dir() && depth < 16 {
            walk(dir, &child, depth + 1, out);
        } else if meta.is_file() {
            out.push(child);
        }
    }
}

/// The manifest's files by path (for tests and callers that look one up).
pub fn by_path(m: &Manifest) -> HashMap<&str, &ManifestFile> {
    m.files.iter().map(|f| (f.path.as_str(), f)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest over `files` as the server writes it, with a right or wrong self-checksum.
    fn manifest_text(files: &[(&str, &[u8])], good: bool) -> String {
        let mut s = String::from("{\"PostgreSQL-Backup-Manifest-Version\": 1,\n\"Files\": [\n");
        let lines: Vec<String> = files
            .iter()
            .map(|(p, data)| {
                let crc = super::super::digest::hex(&crc32c::crc32c(data).to_le_bytes());
                format!("{{ \"Path\": \"{p}\", \"Size\": {}, \"Last-Modified\": \"2026-01-01 00:00:00 GMT\", \"Checksum-Algorithm\": \"CRC32C\", \"Checksum\": \"{crc}\" }}", data.len())
            })
            .collect();
        s += &lines.join(",\n");
        s += "\n],\n\"WAL-Ranges\": [\n{ \"Timeline\": 1, \"Start-LSN\": \"0/2000028\", \"End-LSN\": \"0/2000100\" }\n],\n";
        let sum = if good {
            sha256_hex(s.as_bytes())
        } else {
            "00".repeat(32)
        };
        s + &format!("\"Manifest-Checksum\": \"{sum}\"}}\n")
    }

    fn kinds(findings: &[Finding]) -> Vec<(FindingKind, String)> {
        findings.iter().map(|f| (f.kind, f.file.clone())).collect()
    }

    #[test]
    fn a_matching_backup_is_clean_and_changes_are_findings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        fs::create_dir_all(root.join("base/5")).expect("mkdir");
        fs::create_dir_all(root.join("pg_wal")).expect("mkdir");
        fs::write(root.join("PG_VERSION"), b"16\n").expect("write");
        fs::write(root.join("base/5/16384"), vec![7u8; 8192]).expect("write");
        fs::write(root.join("pg_wal/000000010000000000000002"), b"x").expect("write");
        let files: &[(&str, &[u8])] = &[("PG_VERSION", b"16\n"), ("base/5/16384", &[7u8; 8192])];
        fs::write(root.join(MANIFEST_FILE), manifest_text(files, true)).expect("write");
        let (s, findings) = check(root).expect("check").expect("manifest");
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!((s.files, s.checksums_verified), (2, 2));
        assert!(s.manifest_checksum_ok);
        // One byte changed, a file added, a file removed.
        let mut page = vec![7u8; 8192];
        page[100] = 8;
        fs::write(root.join("base/5/16384"), page).expect("write");
        fs::write(root.join("base/5/99999"), b"").expect("write");
        fs::remove_file(root.join("PG_VERSION")).expect("rm");
        let (s, findings) = check(root).expect("check").expect("manifest");
        assert_eq!(
            kinds(&findings),
            vec![
                (FindingKind::BackupFileMissing, "PG_VERSION".to_string()),
                (
                    FindingKind::BackupManifestMismatch,
                    "base/5/16384".to_string()
                ),
                (
                    FindingKind::BackupFileUnexpected,
                    "base/5/99999".to_string()
                ),
            ]
        );
        assert_eq!((s.missing, s.mismatched, s.unexpected), (1, 1, 1));
        // A size change.
        fs::write(root.join("base/5/16384"), vec![7u8; 4096]).expect("write");
        let (_, findings) = check(root).expect("check").expect("manifest");
        assert!(findings
            .iter()
            .any(|f| f.kind == FindingKind::BackupManifestMismatch && f.detail["size"] == 4096));
    }

    #[test]
    fn the_manifest_checksum_is_checked_and_absence_is_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(check(dir.path()).expect("check").is_none());
        fs::write(dir.path().join(MANIFEST_FILE), manifest_text(&[], false)).expect("write");
        let (s, findings) = check(dir.path()).expect("check").expect("manifest");
        assert!(!s.manifest_checksum_ok);
        assert_eq!(
            kinds(&findings),
            vec![(
                FindingKind::BackupManifestInvalid,
                MANIFEST_FILE.to_string()
            )]
        );
        let m = parse_manifest(manifest_text(&[], true).as_bytes()).expect("parse");
        assert!(m.checksum_ok);
        assert_eq!(m.wal_end, Some(Lsn(0x2000100)));
        fs::write(dir.path().join(MANIFEST_FILE), b"{nope").expect("write");
        let (_, findings) = check(dir.path()).expect("check").expect("manifest");
        assert_eq!(findings[0].kind, FindingKind::BackupManifestInvalid);
    }

    #[test]
    fn sha2_checksums_are_verified_from_what_a_scan_saw() {
        let data = b"16\n";
        let sha = super::super::digest::hex(&{
            use sha2::Digest;
            sha2::Sha512::digest(data)
        });
        let mut s = String::from("{\"PostgreSQL-Backup-Manifest-Version\": 1,\n\"Files\": [\n");
        s += &format!("{{ \"Path\": \"PG_VERSION\", \"Size\": 3, \"Checksum-Algorithm\": \"SHA512\", \"Checksum\": \"{sha}\" }}\n],\n");
        let sum = sha256_hex(s.as_bytes());
        s += &format!("\"Manifest-Checksum\": \"{sum}\"}}\n");
        let observed = |bytes: &[u8]| {
            let mut d = FileDigest::new(Algorithm::Sha512);
            d.update(bytes);
            Observed {
                size: bytes.len() as u64,
                checksum: d.finish_hex(),
            }
        };
        let mut seen = SeenFiles::default();
        seen.files.insert("PG_VERSION".into(), observed(data));
        let (summary, findings) = check_against(s.as_bytes(), &mut seen);
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(summary.checksums_verified, 1);
        seen.files.insert("PG_VERSION".into(), observed(b"17\n"));
        seen.files.insert("base/1/1259".into(), observed(b""));
        let (summary, findings) = check_against(s.as_bytes(), &mut seen);
        assert_eq!(
            kinds(&findings),
            vec![
                (
                    FindingKind::BackupManifestMismatch,
                    "PG_VERSION".to_string()
                ),
                (FindingKind::BackupFileUnexpected, "base/1/1259".to_string()),
            ]
        );
        assert_eq!(findings[0].detail["algorithm"], "SHA512");
        assert_eq!((summary.mismatched, summary.unexpected), (1, 1));
    }

    #[test]
    fn encoded_paths_and_other_algorithms() {
        let v: Value = serde_json::from_str(
            r#"{"Encoded-Path": "626173652f31", "Size": 3, "Checksum-Algorithm": "SHA256", "Checksum": "ab"}"#,
        )
        .expect("json");
        let f = manifest_file(&v).expect("entry");
        assert_eq!(f.path, "base/1");
        assert_eq!(f.algorithm, Algorithm::Sha256);
        assert!(ignored("pg_wal/000000010000000000000001"));
        assert!(!ignored("pg_wal2"));
    }

    #[test]
    fn messages_are_the_old_texts() {
        let json = serde_json::from_slice::<Value>(b"{nope").unwrap_err();
        let json_text = format!("not valid JSON: {json}");
        let cases = [
            (
                ManifestError::Read(io::Error::other("boom")).to_string(),
                "could not read \"backup_manifest\": boom".to_string(),
            ),
            (ManifestError::Json(json).to_string(), json_text),
            (
                ManifestError::NoVersion.to_string(),
                "no PostgreSQL-Backup-Manifest-Version".into(),
            ),
            (ManifestError::NoFiles.to_string(), "no Files list".into()),
            (
                ManifestError::NoChecksum.to_string(),
                "no Manifest-Checksum".into(),
            ),
            (
                ManifestError::BadEncodedPath("zz".into()).to_string(),
                "bad Encoded-Path \"zz\"".into(),
            ),
            (
                ManifestError::NoPath.to_string(),
                "a Files entry has no Path".into(),
            ),
            (
                ManifestError::NoSize {
                    path: "base/1".into(),
                }
                .to_string(),
                "no Size for \"base/1\"".into(),
            ),
            (
                ManifestError::Algorithm {
                    path: "base/1".into(),
                    source: UnknownAlgorithm("MD5".into()),
                }
                .to_string(),
                "unknown Checksum-Algorithm \"MD5\" for \"base/1\"".into(),
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
