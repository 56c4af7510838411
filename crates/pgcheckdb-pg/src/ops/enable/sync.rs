//! The durability step of `checksums enable`: every relation file and the directories holding
//! them are fsynced before `pg_control` may change, plus the writeback hints used during the scan.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use pgcheckdb_scan::open::open_regular;
use pgcheckdb_scan::ScanFile;

/// Opens a directory (for fsync); anything else fails at once, never blocks.
pub(crate) fn open_directory(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)
}

/// Fsyncs every file (in parallel, after a pass that starts writeback of all of them) and then
/// every directory that holds one. Returns one message per failure.
pub fn sync_files_and_dirs(files: &[ScanFile], jobs: usize) -> Vec<String> {
    let errors = Mutex::new(Vec::new());
    let paths: Vec<&Path> = files.iter().map(|f| f.path.as_path()).collect();
    // Writeback can run for many files at once while a thread waits on one fsync.
    let threads = jobs.max(4);
    for_each_parallel(&paths, threads, |path| start_writeback(path));
    for_each_parallel(&paths, threads, |path| {
        if let Err(e) = open_regular(path, false).and_then(|f| f.sync_all()) {
            errors
                .lock()
                .expect("errors lock")
                .push(format!("could not fsync \"{}\": {e}", path.display()));
        }
    });
    let dirs: BTreeSet<PathBuf> = files
        .iter()
        .filter_map(|f| f.path.parent().map(Path::to_path_buf))
        .collect();
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    for_each_parallel(&dirs, threads, |dir| {
        if let Err(e) = open_directory(dir).and_then(|f| f.sync_all()) {
            errors.lock().expect("errors lock").push(format!(
                "could not fsync directory \"{}\": {e}",
                dir.display()
            ));
        }
    });
    errors.into_inner().expect("errors lock")
}

fn for_each_parallel<T: Sync>(items: &[T], threads: usize, f: impl Fn(&T) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.min(items.len()) {
            s.spawn(|| {
                while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                    f(item);
                }
            });
        }
    });
}

/// Asks the kernel to start writing a byte range of an open file (a hint; errors are ignored).
pub(super) fn start_range_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: a valid descriptor and plain integers; SYNC_FILE_RANGE_WRITE only starts I/O.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as i64,
                len as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Asks the kernel to start writing a file's dirty pages without waiting (a hint; errors are
/// ignored, the fsync that follows reports them).
fn start_writeback(path: &Path) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        if let Ok(f) = open_regular(path, false) {
            // SAFETY: a valid descriptor and plain integers; SYNC_FILE_RANGE_WRITE only starts I/O.
            unsafe {
                libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}
