//! A parallel scanner over fixed-size records (blocks) of many files. It knows nothing about
//! PostgreSQL: it splits files into block ranges (work units), lets worker threads read them with
//! large `pread`s, hands each chunk to a [`Visitor`] owned by the worker, and writes back the
//! byte ranges a visitor marks dirty (write mode only).
//!
//! One slow block never hides the others: a failed chunk read is retried block by block, and
//! every block that still cannot be read is reported to the visitor. Only regular files are
//! opened ([`open::open_regular`]).

mod cache;
pub mod open;

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A file to scan and the number of bytes of it to scan.
#[derive(Debug, Clone)]
pub struct ScanFile {
    pub path: PathBuf,
    /// Bytes to scan, a multiple of the block size.
    pub len: u64,
}

/// The files of a scan, by index: how many bytes of each to scan and where it is. A caller with
/// many files keeps them compactly and builds each path only when a worker opens the file.
pub trait FileList: Sync {
    /// Number of files.
    fn file_count(&self) -> usize;
    /// Bytes of file `file` to scan, a multiple of the block size.
    fn scan_len(&self, file: usize) -> u64;
    /// Writes the path of file `file` into `path` (its buffer is reused from file to file).
    fn path_into(&self, file: usize, path: &mut PathBuf);
    /// The directory file `file` is in, when the list knows it: a worker then keeps that
    /// directory open and opens the file by its name alone ([`FileList::name_into`]), so that
    /// the kernel does not walk the whole path again for every file.
    fn dir_of(&self, _file: usize) -> Option<&Path> {
        None
    }
    /// Writes the name of file `file` inside [`FileList::dir_of`], NUL-terminated, into `name`.
    fn name_into(&self, _file: usize, _name: &mut Vec<u8>) {}
}

impl FileList for [ScanFile] {
    fn file_count(&self) -> usize {
        self.len()
    }
    fn scan_len(&self, file: usize) -> u64 {
        self[file].len
    }
    fn path_into(&self, file: usize, path: &mut PathBuf) {
        path.clone_from(&self[file].path);
    }
}

impl FileList for Vec<ScanFile> {
    fn file_count(&self) -> usize {
        self.len()
    }
    fn scan_len(&self, file: usize) -> u64 {
        self[file].len
    }
    fn path_into(&self, file: usize, path: &mut PathBuf) {
        path.clone_from(&self[file].path);
    }
}

/// A contiguous block range of one file, or a run of whole small files: the unit of parallel
/// work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkUnit {
    /// Index into the file list.
    pub file: usize,
    pub offset: u64,
    pub len: u64,
    /// The unit also covers the whole files `file + 1 ..= last_file` (small files batched into
    /// one unit); `last_file == file` for a block range of one file.
    pub last_file: usize,
}

/// Most files one batched unit covers: enough to make the per-unit cost vanish, few enough to
/// spread many small files over the workers.
pub const MAX_FILES_PER_UNIT: usize = 64;

/// How to scan.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Worker threads.
    pub jobs: usize,
    /// Size of one `pread` (a multiple of `block_size`).
    pub chunk_bytes: usize,
    /// Block (record) size.
    pub block_size: usize,
    /// Open files read-write and write back dirty ranges.
    pub write: bool,
    /// Throttle to this many bytes per second across all workers.
    pub max_bytes_per_sec: Option<u64>,
    /// Leave the OS page cache as found: pages not cached before a read are dropped after it
    /// ([`cache`]; `verify --online`).
    pub keep_cache: bool,
}

/// Byte range inside a chunk that the visitor changed and wants written back.
pub type DirtyRange = std::ops::Range<usize>;

/// Per-worker consumer of scanned data.
pub trait Visitor: Send {
    /// A chunk of `data.len()` bytes read from `file` at `offset` (a multiple of the block
    /// size). In write mode, returns the ranges of `data` to write back.
    fn chunk(&mut self, file: usize, offset: u64, data: &mut [u8]) -> Vec<DirtyRange>;
    /// A block that could not be read.
    fn read_failed(&mut self, file: usize, offset: u64, err: &io::Error);
    /// A file that could not be opened; none of its units were scanned.
    fn open_failed(&mut self, file: usize, err: &io::Error);
    /// The file ended before the planned length (it shrank during the scan).
    fn short_file(&mut self, file: usize, offset: u64);
    /// A write-back failed.
    fn write_failed(&mut self, file: usize, offset: u64, err: &io::Error);
    /// A dirty range of `len` bytes at `offset` was written to `handle` (write mode only), e.g.
    /// to start its writeback early. The default does nothing.
    fn written(&mut self, _file: usize, _handle: &File, _offset: u64, _len: u64) {}
    /// This worker has no units left: work the visitor would otherwise leave to the thread
    /// that collects the visitors (sorting what it gathered) runs here, while the other
    /// workers still scan. The default does nothing.
    fn done(&mut self) {}
}

/// Splits files into units of at most `unit_bytes` (rounded to blocks). Consecutive files
/// smaller than a unit are batched, whole, into one unit of at most `unit_bytes` and at most
/// [`MAX_FILES_PER_UNIT`] files; a larger file is split into block ranges.
pub fn plan_units<L: FileList + ?Sized>(
    files: &L,
    unit_bytes: u64,
    block_size: u64,
) -> Vec<WorkUnit> {
    let unit = (unit_bytes / block_size).max(1) * block_size;
    let mut units: Vec<WorkUnit> = Vec::new();
    // The open batch of small files: its index in `units`.
    let mut batch: Option<usize> = None;
    for file in 0..files.file_count() {
        let len = files.scan_len(file);
        if len == 0 {
            continue;
        }
        if len < unit {
            let joins = batch.map(|b| &mut units[b]).filter(|u| {
                u.last_file + 1 == file
                    && u.len + len <= unit
                    && u.last_file - u.file + 1 < MAX_FILES_PER_UNIT
            });
            match joins {
                Some(u) => {
                    u.last_file = file;
                    u.len += len;
                }
                None => {
                    batch = Some(units.len());
                    units.push(WorkUnit {
                        file,
                        offset: 0,
                        len,
                        last_file: file,
                    });
                }
            }
            continue;
        }
        batch = None;
        let mut offset = 0;
        while offset < len {
            let part = unit.min(len - offset);
            units.push(WorkUnit {
                file,
                offset,
                len: part,
                last_file: file,
            });
            offset += part;
        }
    }
    units
}

/// Shared counters a progress display can read while the scan runs.
#[derive(Debug, Default)]
pub struct Progress {
    pub bytes_done: AtomicU64,
    pub cancel: AtomicBool,
    /// The file of the work unit most recently started (one relaxed store per unit, none per
    /// block), for a display of where the scan is.
    pub current_file: AtomicUsize,
}

/// Runs the scan; returns the visitors, one per worker, for merging.
pub fn run<L, V, F>(
    files: &L,
    units: &[WorkUnit],
    opts: &ScanOptions,
    make_visitor: F,
    progress: &Progress,
) -> Vec<V>
where
    L: FileList + ?Sized,
    V: Visitor,
    F: Fn() -> V + Sync,
{
    let next = AtomicUsize::new(0);
    let throttle = opts.max_bytes_per_sec.map(|rate| Throttle {
        rate,
        start: Instant::now(),
    });
    let jobs = opts.jobs.max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                let mut worker = Worker {
                    files,
                    opts,
                    progress,
                    throttle: throttle.as_ref(),
                    buffer: vec![0u8; opts.chunk_bytes],
                    path: PathBuf::new(),
                    dir: None,
                    name: Vec::new(),
                    open: None,
                };
                let next = &next;
                let make_visitor = &make_visitor;
                scope.spawn(move || {
                    let mut visitor = make_visitor();
                    while let Some(unit) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
                        if progress.cancel.load(Ordering::Relaxed) {
                            break;
                        }
                        worker.scan_unit(*unit, &mut visitor);
                    }
                    visitor.done();
                    visitor
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("scan worker panicked"))
            .collect()
    })
}

struct Throttle {
    rate: u64,
    start: Instant,
}

impl Throttle {
    /// Sleeps until `bytes_done` is within the allowed rate.
    fn wait(&self, bytes_done: u64) {
        let due = Duration::from_secs_f64(bytes_done as f64 / self.rate as f64);
        let elapsed = self.start.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }
}

struct Worker<'a, L: ?Sized> {
    files: &'a L,
    opts: &'a ScanOptions,
    progress: &'a Progress,
    throttle: Option<&'a Throttle>,
    buffer: Vec<u8>,
    /// The path of the file being opened, reused from file to file.
    path: PathBuf,
    /// The directory of the last file opened by name, and a descriptor of it.
    dir: Option<(PathBuf, File)>,
    /// The name of the file being opened in `dir`, NUL-terminated, reused from file to file.
    name: Vec<u8>,
    /// The file this worker has open, kept across consecutive units of the same file.
    open: Option<(usize, File)>,
}

impl<L: FileList + ?Sized> Worker<'_, L> {
    fn open_file(&mut self, index: usize) -> io::Result<&File> {
        if self.open.as_ref().map(|(i, _)| *i) != Some(index) {
            // Close the previous file first: one descriptor per worker.
            self.open = None;
            let file = match self.open_by_name(index) {
                Some(opened) => opened?,
                None => {
                    self.files.path_into(index, &mut self.path);
                    open::open_listed_regular(&self.path, self.opts.write)?
                }
            };
            if self.opts.keep_cache {
                cache::advise_no_readahead(&file);
            } else if self.files.scan_len(index) > self.opts.chunk_bytes as u64 {
                // Read-ahead advice only pays for a file longer than one read.
                advise_sequential(&file);
            }
            self.open = Some((index, file));
        }
        Ok(&self.open.as_ref().expect("just opened").1)
    }

    /// Opens file `index` by its name in its directory ([`FileList::dir_of`]), opening that
    /// directory when the file is in another one than the last. `None` when the list gives no
    /// directory or the directory cannot be opened: the caller opens the whole path, and an
    /// error then names the file.
    fn open_by_name(&mut self, index: usize) -> Option<io::Result<File>> {
        let dir = self.files.dir_of(index)?;
        if self.dir.as_ref().map(|(p, _)| p.as_os_str()) != Some(dir.as_os_str()) {
            self.dir = None;
            let handle = open::open_directory(dir).ok()?;
            self.dir = Some((dir.to_path_buf(), handle));
        }
        self.name.clear();
        self.files.name_into(index, &mut self.name);
        let name = CStr::from_bytes_with_nul(&self.name).ok()?;
        let (_, handle) = self.dir.as_ref()?;
        Some(open::open_listed_regular_at(handle, name, self.opts.write))
    }

    fn scan_unit<V: Visitor>(&mut self, unit: WorkUnit, visitor: &mut V) {
        let first_len = if unit.last_file == unit.file {
            unit.len
        } else {
            self.files.scan_len(unit.file)
        };
        self.scan_range(unit.file, unit.offset, first_len, visitor);
        for file in unit.file + 1..=unit.last_file {
            if self.progress.cancel.load(Ordering::Relaxed) {
                return;
            }
            self.scan_range(file, 0, self.files.scan_len(file), visitor);
        }
    }

    /// Scans `len` bytes of file `index` from `offset`.
    fn scan_range<V: Visitor>(&mut self, index: usize, offset: u64, len: u64, visitor: &mut V) {
        self.progress.current_file.store(index, Ordering::Relaxed);
        if let Err(e) = self.open_file(index) {
            // Report an unopenable file once, from its first unit.
            if offset == 0 {
                visitor.open_failed(index, &e);
            }
            return;
        }
        let (_, file) = self.open.take().expect("file open");
        let end = offset + len;
        let mut offset = offset;
        while offset < end {
            let want = (self.opts.chunk_bytes as u64).min(end - offset) as usize;
            let before = self
                .opts
                .keep_cache
                .then(|| cache::residency(&file, offset, want))
                .flatten();
            let read = read_full(&file, &mut self.buffer[..want], offset);
            if let Some(r) = &before {
                r.drop_uncached(&file);
            }
            match read {
                Ok(got) => {
                    let whole = got - got % self.opts.block_size;
                    self.visit(&file, index, offset, whole, visitor);
                    if got < want {
                        visitor.short_file(index, offset + whole as u64);
                        break;
                    }
                }
                Err(_) => self.scan_blockwise(&file, index, offset, want, visitor),
            }
            self.progress
                .bytes_done
                .fetch_add(want as u64, Ordering::Relaxed);
            if let Some(t) = self.throttle {
                t.wait(self.progress.bytes_done.load(Ordering::Relaxed));
            }
            offset += want as u64;
        }
        self.open = Some((index, file));
    }

    /// After a failed chunk read: read block by block so that only bad blocks are lost.
    fn scan_blockwise<V: Visitor>(
        &mut self,
        file: &File,
        index: usize,
        offset: u64,
        len: usize,
        visitor: &mut V,
    ) {
        let bs = self.opts.block_size;
        for start in (0..len).step_by(bs) {
            let at = offset + start as u64;
            match read_full(file, &mut self.buffer[start..start + bs], at) {
                Ok(got) if got == bs => self.visit(file, index, at, bs, visitor),
                Ok(_) => {
                    visitor.short_file(index, at);
                    return;
                }
                Err(e) => visitor.read_failed(index, at, &e),
            }
        }
    }

    fn visit<V: Visitor>(
        &mut self,
        file: &File,
        index: usize,
        offset: u64,
        len: usize,
        visitor: &mut V,
    ) {
        if len == 0 {
            return;
        }
        let data = &mut self.buffer[..len];
        let dirty = visitor.chunk(index, offset, data);
        if !self.opts.write {
            debug_assert!(dirty.is_empty(), "read-only scan produced writes");
            return;
        }
        for range in dirty {
            let at = offset + range.start as u64;
            match file.write_all_at(&data[range.clone()], at) {
                Ok(()) => visitor.written(index, file, at, range.len() as u64),
                Err(e) => visitor.write_failed(index, at, &e),
            }
        }
    }
}

/// Reads until `buf` is full or EOF; returns the bytes read.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn advise_sequential(file: &File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: posix_fadvise only takes a valid descriptor and plain integers; it is a hint.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[derive(Default)]
    struct Sum {
        blocks: Vec<(usize, u64, u8)>,
        zeroed: bool,
    }

    impl Visitor for Sum {
        fn chunk(&mut self, file: usize, offset: u64, data: &mut [u8]) -> Vec<DirtyRange> {
            for (i, b) in data.chunks(4).enumerate() {
                self.blocks.push((file, offset + 4 * i as u64, b[0]));
            }
            if self.zeroed {
                data.fill(0);
                #[allow(clippy::single_range_in_vec_init)] // one dirty range: the whole chunk
                return vec![0..data.len()];
            }
            Vec::new()
        }
        fn read_failed(&mut self, _: usize, _: u64, _: &io::Error) {}
        fn open_failed(&mut self, _: usize, _: &io::Error) {}
        fn short_file(&mut self, _: usize, _: u64) {}
        fn write_failed(&mut self, _: usize, _: u64, _: &io::Error) {}
    }

    fn files(dir: &std::path::Path) -> Vec<ScanFile> {
        (0..3u8)
            .map(|n| {
                let path = dir.join(format!("f{n}"));
                let mut f = File::create(&path).expect("create");
                let data: Vec<u8> = (0..(40 * (n as usize + 1)))
                    .map(|i| (i / 4) as u8)
                    .collect();
                f.write_all(&data).expect("write");
                ScanFile {
                    path,
                    len: data.len() as u64,
                }
            })
            .collect()
    }

    #[test]
    fn every_block_is_visited_once_whatever_the_thread_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = files(dir.path());
        let units = plan_units(&files, 12, 4);
        let mut seen_by_jobs = Vec::new();
        for jobs in [1, 3] {
            let opts = ScanOptions {
                jobs,
                chunk_bytes: 8,
                block_size: 4,
                write: false,
                max_bytes_per_sec: None,
                keep_cache: false,
            };
            let progress = Progress::default();
            let visitors = run(&files, &units, &opts, Sum::default, &progress);
            let mut all: Vec<_> = visitors.into_iter().flat_map(|v| v.blocks).collect();
            all.sort();
            assert_eq!(all.len(), 10 + 20 + 30);
            assert_eq!(progress.bytes_done.load(Ordering::Relaxed), 240);
            seen_by_jobs.push(all);
        }
        assert_eq!(seen_by_jobs[0], seen_by_jobs[1]);
    }

    #[test]
    fn write_mode_writes_dirty_ranges() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = files(dir.path());
        let units = plan_units(&files, 16, 4);
        let opts = ScanOptions {
            jobs: 2,
            chunk_bytes: 8,
            block_size: 4,
            write: true,
            max_bytes_per_sec: None,
            keep_cache: false,
        };
        run(
            &files,
            &units,
            &opts,
            || Sum {
                zeroed: true,
                ..Default::default()
            },
            &Progress::default(),
        );
        for f in &files {
            assert!(std::fs::read(&f.path)
                .expect("read")
                .iter()
                .all(|&b| b == 0));
        }
    }

    #[test]
    fn units_cover_files_exactly() {
        let files = vec![
            ScanFile {
                path: "a".into(),
                len: 100,
            },
            ScanFile {
                path: "b".into(),
                len: 0,
            },
        ];
        let units = plan_units(&files, 30, 10);
        assert_eq!(units.iter().map(|u| u.len).sum::<u64>(), 100);
        assert_eq!(units.len(), 4);
        assert_eq!(
            units[3],
            WorkUnit {
                file: 0,
                offset: 90,
                len: 10,
                last_file: 0,
            }
        );
    }

    fn sized(lens: &[u64]) -> Vec<ScanFile> {
        lens.iter()
            .enumerate()
            .map(|(i, &len)| ScanFile {
                path: format!("f{i}").into(),
                len,
            })
            .collect()
    }

    #[test]
    fn small_files_are_batched_into_whole_file_units() {
        // Files of 1-2 blocks (10 bytes each) with units of 3 blocks: batches of whole files up
        // to the unit size; the empty file is skipped; the big file is split on its own.
        let files = sized(&[10, 20, 0, 10, 10, 70, 10]);
        let units = plan_units(&files, 30, 10);
        let shape: Vec<(usize, u64, u64, usize)> = units
            .iter()
            .map(|u| (u.file, u.offset, u.len, u.last_file))
            .collect();
        assert_eq!(
            shape,
            vec![
                (0, 0, 30, 1),
                (3, 0, 20, 4),
                (5, 0, 30, 5),
                (5, 30, 30, 5),
                (5, 60, 10, 5),
                (6, 0, 10, 6),
            ]
        );
        // No unit holds more than MAX_FILES_PER_UNIT files.
        let many = sized(&vec![10; 3 * MAX_FILES_PER_UNIT + 1]);
        let units = plan_units(&many, 1 << 20, 10);
        assert_eq!(units.len(), 4);
        assert!(units
            .iter()
            .all(|u| u.last_file - u.file < MAX_FILES_PER_UNIT));
        assert_eq!(
            units.iter().map(|u| u.len).sum::<u64>(),
            10 * many.len() as u64
        );
    }
}
