//! A parallel scanner over fixed-size records (blocks) of many files. It knows nothing about
//! PostgreSQL: it splits files into block ranges (work units), lets worker threads read them with
//! large `pread`s, hands each chunk to a [`Visitor`] owned by the worker, and writes back the
//! byte ranges a visitor marks dirty (write mode only).
//!
//! One slow block never hides the others: a failed chunk read is retried block by block, and
//! every block that still cannot be read is reported to the visitor. Only regular files are
//! opened ([`open::open_regular`]).

pub mod open;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A file to scan and the number of bytes of it to scan.
#[derive(Debug, Clone)]
pub struct ScanFile {
    pub path: PathBuf,
    /// Bytes to scan, a multiple of the block size.
    pub len: u64,
}

/// A contiguous block range of one file: the unit of parallel work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkUnit {
    /// Index into the file list.
    pub file: usize,
    pub offset: u64,
    pub len: u64,
}

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
}

/// Splits files into units of at most `unit_bytes` (rounded to blocks).
pub fn plan_units(files: &[ScanFile], unit_bytes: u64, block_size: u64) -> Vec<WorkUnit> {
    let unit = (unit_bytes / block_size).max(1) * block_size;
    let mut units = Vec::new();
    for (file, f) in files.iter().enumerate() {
        let mut offset = 0;
        while offset < f.len {
            let len = unit.min(f.len - offset);
            units.push(WorkUnit { file, offset, len });
            offset += len;
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
pub fn run<V, F>(
    files: &[ScanFile],
    units: &[WorkUnit],
    opts: &ScanOptions,
    make_visitor: F,
    progress: &Progress,
) -> Vec<V>
where
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

struct Worker<'a> {
    files: &'a [ScanFile],
    opts: &'a ScanOptions,
    progress: &'a Progress,
    throttle: Option<&'a Throttle>,
    buffer: Vec<u8>,
    /// The file this worker has open, kept across consecutive units of the same file.
    open: Option<(usize, File)>,
}

impl Worker<'_> {
    fn open_file(&mut self, index: usize) -> io::Result<&File> {
        if self.open.as_ref().map(|(i, _)| *i) != Some(index) {
            let file = open::open_regular(&self.files[index].path, self.opts.write)?;
            advise_sequential(&file);
            self.open = Some((index, file));
        }
        Ok(&self.open.as_ref().expect("just opened").1)
    }

    fn scan_unit<V: Visitor>(&mut self, unit: WorkUnit, visitor: &mut V) {
        self.progress
            .current_file
            .store(unit.file, Ordering::Relaxed);
        if let Err(e) = self.open_file(unit.file) {
            // Report an unopenable file once, from its first unit.
            if unit.offset == 0 {
                visitor.open_failed(unit.file, &e);
            }
            return;
        }
        let (_, file) = self.open.take().expect("file open");
        let end = unit.offset + unit.len;
        let mut offset = unit.offset;
        while offset < end {
            let want = (self.opts.chunk_bytes as u64).min(end - offset) as usize;
            match read_full(&file, &mut self.buffer[..want], offset) {
                Ok(got) => {
                    let whole = got - got % self.opts.block_size;
                    self.visit(&file, unit.file, offset, whole, visitor);
                    if got < want {
                        visitor.short_file(unit.file, offset + whole as u64);
                        break;
                    }
                }
                Err(_) => self.scan_blockwise(&file, unit.file, offset, want, visitor),
            }
            self.progress
                .bytes_done
                .fetch_add(want as u64, Ordering::Relaxed);
            if let Some(t) = self.throttle {
                t.wait(self.progress.bytes_done.load(Ordering::Relaxed));
            }
            offset += want as u64;
        }
        self.open = Some((unit.file, file));
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
                len: 10
            }
        );
    }
}
