//! A fingerprint of every file under a directory (size, modification time and CRC-32C of the
//! content), following the `pg_tblspc` symlinks, to prove that a command changed nothing.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What is recorded per file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePrint {
    pub size: u64,
    pub modified: Option<SystemTime>,
    pub crc: u32,
    pub mode: u32,
}

/// Files by path relative to the snapshot root.
pub type Snapshot = BTreeMap<PathBuf, FilePrint>;

/// Fingerprints every regular file under `root`, following symlinks to directories.
pub fn snapshot(root: &Path) -> io::Result<Snapshot> {
    let mut out = Snapshot::new();
    walk(root, Path::new(""), &mut out)?;
    Ok(out)
}

fn walk(root: &Path, rel: &Path, out: &mut Snapshot) -> io::Result<()> {
    for entry in fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let rel_child = rel.join(entry.file_name());
        let meta = fs::metadata(root.join(&rel_child))?;
        if meta.is_dir() {
            walk(root, &rel_child, out)?;
        } else if meta.is_file() {
            out.insert(rel_child.clone(), print(&root.join(&rel_child), &meta)?);
        }
    }
    Ok(())
}

fn print(path: &Path, meta: &fs::Metadata) -> io::Result<FilePrint> {
    use std::os::unix::fs::PermissionsExt;
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
    Ok(FilePrint {
        size: meta.len(),
        modified: meta.modified().ok(),
        crc,
        mode: meta.permissions().mode(),
    })
}

/// Human-readable differences between two snapshots (empty when equal).
pub fn differences(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut diffs = Vec::new();
    for (path, a) in before {
        match after.get(path) {
            None => diffs.push(format!("removed: {}", path.display())),
            Some(b) if a != b => {
                diffs.push(format!("changed: {} ({a:?} -> {b:?})", path.display()))
            }
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        diffs.push(format!("added: {}", path.display()));
    }
    diffs
}
