//! Sorted runs of fact records, bounded in memory. Every record starts with its merge unit (a
//! big-endian `u32`, the relation fork it belongs to), so byte order groups records by unit.
//! A worker appends records to an arena; past its share of the budget it sorts the arena and
//! writes it to a spill file as one sorted run, with an index of where each unit starts.
//! After the scan, [`Runs::for_each_in_unit`] merges one unit's records from every run (in
//! memory and on disk) in sorted order with a k-way merge. The spill directory is private to
//! the run and removed when the [`SpillDir`] is dropped.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::prefetch::prefetch;
use crate::format::bytes::{be_u128_prefix, be_u32, le_u32, le_u32_of, range};

/// How many records ahead a gather over a sorted arena asks for the next ones.
const PREFETCH_AHEAD: usize = 16;

/// The private directory of one run's spill files; removed with everything in it on drop.
#[derive(Debug)]
pub struct SpillDir {
    dir: tempfile::TempDir,
    next: AtomicU64,
}

/// Spill files hold keys of the cluster's rows: nobody else may read them.
const SPILL_DIR_MODE: u32 = 0o700;
const SPILL_FILE_MODE: u32 = 0o600;

impl SpillDir {
    /// Makes a new private directory (mode 0700, `pgcheckdb-spill-` and a random suffix)
    /// under `parent`.
    pub fn create(parent: &Path) -> io::Result<SpillDir> {
        let dir = tempfile::Builder::new()
            .prefix("pgcheckdb-spill-")
            .permissions(fs::Permissions::from_mode(SPILL_DIR_MODE))
            .tempdir_in(parent)?;
        Ok(SpillDir {
            dir,
            next: AtomicU64::new(0),
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn new_file_path(&self) -> PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.path().join(format!("run-{n:06}"))
    }
}

/// The unit a record belongs to: its first four bytes.
pub fn unit_of(record: &[u8]) -> u32 {
    be_u32(record, 0).unwrap_or(u32::MAX)
}

/// Counters of the fact engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpillStats {
    pub records: u64,
    pub spilled_bytes: u64,
    pub spill_files: u64,
}

/// Records in an arena, each stored as a little-endian `u32` length then its bytes.
#[derive(Debug, Default)]
struct Arena {
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

impl Arena {
    fn push(&mut self, record: &[u8]) {
        self.starts.push(self.bytes.len());
        self.bytes
            .extend_from_slice(&(record.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(record);
    }

    /// The record whose length starts at `start`, one of [`Arena::starts`]: [`Arena::push`]
    /// wrote it whole, so it is never cut off (it would read as empty).
    fn record(&self, start: usize) -> &[u8] {
        let len = le_u32(&self.bytes, start).map_or(0, |n| n as usize);
        range(&self.bytes, start + 4, len).unwrap_or_default()
    }

    /// Asks for the record at sorted position `pos` to be brought into the cache.
    fn prefetch_at(&self, pos: usize) {
        if let Some(&s) = self.starts.get(pos) {
            prefetch(&self.bytes, s);
        }
    }

    /// The unit of the record at sorted position `pos`.
    fn unit_at(&self, pos: usize) -> u32 {
        unit_of(self.record(self.starts[pos]))
    }

    /// Bytes held, with the index and the keys [`Arena::sort`] builds (so that sorting stays
    /// within the budget too).
    fn footprint(&self) -> usize {
        let per_record = std::mem::size_of::<usize>() + std::mem::size_of::<(u128, usize)>();
        self.bytes.len() + self.starts.len() * per_record
    }

    /// Sorts the records by their bytes. Each is keyed by its first 16 bytes as a big-endian
    /// number (zero-padded), which orders like the bytes; only equal prefixes compare whole
    /// records. An unstable sort: equal records are interchangeable.
    fn sort(&mut self) {
        let mut keyed: Vec<(u128, usize)> = self
            .starts
            .iter()
            .map(|&s| (prefix_key(self.record(s)), s))
            .collect();
        keyed.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| self.record(a.1).cmp(self.record(b.1)))
        });
        self.starts = keyed.into_iter().map(|(_, s)| s).collect();
    }
}

/// The first 16 bytes of a record as a big-endian number, zero-padded.
#[inline]
fn prefix_key(record: &[u8]) -> u128 {
    be_u128_prefix(record)
}

/// Where one unit's records lie in a run file: `(unit, start, end)` byte offsets.
type UnitRange = (u32, u64, u64);

/// One sorted run on disk: the file and, per unit, the byte range of its records.
#[derive(Debug)]
struct FileRun {
    path: PathBuf,
    units: Vec<UnitRange>,
}

/// One worker's side: collects records and spills sorted runs past its budget.
#[derive(Debug)]
pub struct RunBuilder {
    arena: Arena,
    budget: usize,
    dir: Arc<SpillDir>,
    runs: Runs,
}

impl RunBuilder {
    pub fn new(budget: usize, dir: Arc<SpillDir>) -> RunBuilder {
        RunBuilder {
            arena: Arena::default(),
            budget: budget.max(64 << 10),
            dir,
            runs: Runs::default(),
        }
    }

    /// Adds one record (its first four bytes are the unit).
    pub fn push(&mut self, record: &[u8]) {
        self.arena.push(record);
        self.runs.stats.records += 1;
        if self.arena.footprint() > self.budget {
            self.spill();
        }
    }

    /// Sorts the arena and writes it as one run file.
    fn spill(&mut self) {
        let mut arena = std::mem::take(&mut self.arena);
        arena.sort();
        let path = self.dir.new_file_path();
        match write_run(&path, &arena) {
            Ok((units, bytes)) => {
                self.runs.stats.spilled_bytes += bytes;
                self.runs.stats.spill_files += 1;
                self.runs.files.push(FileRun { path, units });
            }
            Err(e) => {
                // The facts stay in memory: the budget is exceeded, nothing is lost.
                self.runs.errors.push(format!(
                    "could not write spill file \"{}\": {e}",
                    path.display()
                ));
                self.runs.mem.push(arena);
            }
        }
    }

    /// Takes over runs another worker finished.
    pub fn adopt(&mut self, runs: Runs) {
        self.runs.absorb(runs);
    }

    /// Sorts the arena's records into an in-memory run; later records start a new arena.
    /// A worker calls it when its scan ends, so that the sort runs in parallel with the other
    /// workers instead of in the thread that collects them.
    pub fn seal(&mut self) {
        let mut arena = std::mem::take(&mut self.arena);
        if !arena.starts.is_empty() {
            arena.sort();
            self.runs.mem.push(arena);
        }
    }

    /// The runs: the arena's rest sorted in memory, and the spilled files.
    pub fn finish(mut self) -> Runs {
        self.seal();
        self.runs
    }
}

fn write_run(path: &Path, arena: &Arena) -> io::Result<(Vec<UnitRange>, u64)> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(SPILL_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let mut out = BufWriter::with_capacity(256 << 10, file);
    let mut units: Vec<UnitRange> = Vec::new();
    let mut at = 0u64;
    for (pos, &s) in arena.starts.iter().enumerate() {
        arena.prefetch_at(pos + PREFETCH_AHEAD);
        let rec = arena.record(s);
        let unit = unit_of(rec);
        match units.last_mut() {
            Some(u) if u.0 == unit => u.2 = at + 4 + rec.len() as u64,
            _ => units.push((unit, at, at + 4 + rec.len() as u64)),
        }
        out.write_all(&(rec.len() as u32).to_le_bytes())?;
        out.write_all(rec)?;
        at += 4 + rec.len() as u64;
    }
    out.flush()?;
    Ok((units, at))
}

/// Bytes of read buffers one unit's merge spreads over its spill files.
const MERGE_READ_BUFFERS: usize = 4 << 20;

/// Every sorted run of the scan.
#[derive(Debug, Default)]
pub struct Runs {
    mem: Vec<Arena>,
    files: Vec<FileRun>,
    pub stats: SpillStats,
    /// Spill files that could not be written (their facts stayed in memory).
    pub errors: Vec<String>,
}

impl Runs {
    pub fn absorb(&mut self, other: Runs) {
        self.mem.extend(other.mem);
        self.files.extend(other.files);
        self.stats.records += other.stats.records;
        self.stats.spilled_bytes += other.stats.spilled_bytes;
        self.stats.spill_files += other.stats.spill_files;
        self.errors.extend(other.errors);
    }

    /// Every unit that has records.
    pub fn units(&self) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        for a in &self.mem {
            // Sorted: jump from one unit's first record to the next one's.
            let mut pos = 0;
            while pos < a.starts.len() {
                let unit = a.unit_at(pos);
                out.insert(unit);
                pos += a.starts[pos..].partition_point(|&s| unit_of(a.record(s)) <= unit);
            }
        }
        for f in &self.files {
            out.extend(f.units.iter().map(|u| u.0));
        }
        out
    }

    /// Calls `f` with every record of `unit`, in byte order, merged from all runs.
    pub fn for_each_in_unit(&self, unit: u32, f: impl FnMut(&[u8])) -> io::Result<()> {
        self.for_each_between(unit, &unit.to_be_bytes(), None, f)
    }

    /// Calls `f` with the records of `unit` from `from` on (inclusive; `from` starts with the
    /// unit's four bytes) up to `to` (exclusive; `None`: the unit's end), in byte order,
    /// merged from all runs: one part of a unit's merge, the parts of which run in parallel.
    pub fn for_each_between(
        &self,
        unit: u32,
        from: &[u8],
        to: Option<&[u8]>,
        mut f: impl FnMut(&[u8]),
    ) -> io::Result<()> {
        let below_end = |r: &[u8]| match to {
            Some(to) => r < to,
            None => unit_of(r) <= unit,
        };
        let mut cursors: Vec<Cursor<'_>> = Vec::new();
        for a in &self.mem {
            let lo = a.starts.partition_point(|&s| a.record(s) < from);
            let hi = a.starts.partition_point(|&s| below_end(a.record(s)));
            if lo < hi {
                cursors.push(Cursor::new(Source::Mem {
                    arena: a,
                    pos: lo,
                    end: hi,
                }));
            }
        }
        let spans: Vec<(&FileRun, u64, u64)> = self
            .files
            .iter()
            .filter_map(|run| {
                let &(_, start, end) = run.units.iter().find(|u| u.0 == unit)?;
                Some((run, start, end))
            })
            .collect();
        // The read buffers of one unit's merge share MERGE_READ_BUFFERS, each between 4 and
        // 64 KiB: many spill files (a small --memory on a large cluster) get small buffers.
        let capacity = (MERGE_READ_BUFFERS / spans.len().max(1)).clamp(4 << 10, 64 << 10);
        for (run, start, end) in spans {
            let mut file = File::open(&run.path)?;
            file.seek(SeekFrom::Start(start))?;
            cursors.push(Cursor::new(Source::File {
                reader: BufReader::with_capacity(capacity, file),
                left: end - start,
                from,
                to,
            }));
        }
        merge_cursors(&mut cursors, &mut f)
    }
}

/// Calls `f` with the records of all cursors in byte order: a binary heap of cursor numbers
/// ordered by each cursor's current record (its 16-byte prefix key first, the whole record on
/// equal keys). Records are read into each cursor's reused buffer: no allocation per record.
fn merge_cursors(cursors: &mut [Cursor<'_>], f: &mut impl FnMut(&[u8])) -> io::Result<()> {
    let mut heap: Vec<usize> = Vec::with_capacity(cursors.len());
    for (i, c) in cursors.iter_mut().enumerate() {
        if c.advance()? {
            heap.push(i);
        }
    }
    let less = |cursors: &[Cursor<'_>], a: usize, b: usize| {
        let (ca, cb) = (&cursors[a], &cursors[b]);
        (ca.key, ca.record()) < (cb.key, cb.record())
    };
    for i in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, i, cursors, &less);
    }
    while let Some(&top) = heap.first() {
        f(cursors[top].record());
        if !cursors[top].advance()? {
            let last = heap.len() - 1;
            heap.swap(0, last);
            heap.pop();
        }
        sift_down(&mut heap, 0, cursors, &less);
    }
    Ok(())
}

/// Restores the heap order below position `i`.
fn sift_down(
    heap: &mut [usize],
    mut i: usize,
    cursors: &[Cursor<'_>],
    less: &impl Fn(&[Cursor<'_>], usize, usize) -> bool,
) {
    loop {
        let (l, r) = (2 * i + 1, 2 * i + 2);
        let mut smallest = i;
        if l < heap.len() && less(cursors, heap[l], heap[smallest]) {
            smallest = l;
        }
        if r < heap.len() && less(cursors, heap[r], heap[smallest]) {
            smallest = r;
        }
        if smallest == i {
            return;
        }
        heap.swap(i, smallest);
        i = smallest;
    }
}

/// Where one run's records of a unit come from.
enum Source<'a> {
    Mem {
        arena: &'a Arena,
        pos: usize,
        end: usize,
    },
    /// A unit's span of a run file; its records before `from`, and from `to` on, are
    /// skipped.
    File {
        reader: BufReader<File>,
        left: u64,
        from: &'a [u8],
        to: Option<&'a [u8]>,
    },
}

/// A position in one run, limited to one unit, with its current record.
struct Cursor<'a> {
    source: Source<'a>,
    buf: Vec<u8>,
    key: u128,
}

impl<'a> Cursor<'a> {
    fn new(source: Source<'a>) -> Cursor<'a> {
        Cursor {
            source,
            buf: Vec::new(),
            key: 0,
        }
    }

    fn record(&self) -> &[u8] {
        match &self.source {
            // The record in place in the arena (`pos` is already past it).
            Source::Mem { arena, pos, .. } => arena.record(arena.starts[*pos - 1]),
            Source::File { .. } => &self.buf,
        }
    }

    /// Loads the next record; `false` at the end of the unit.
    fn advance(&mut self) -> io::Result<bool> {
        match &mut self.source {
            Source::Mem { arena, pos, end } => {
                if *pos >= *end {
                    return Ok(false);
                }
                arena.prefetch_at(*pos + PREFETCH_AHEAD);
                *pos += 1;
            }
            Source::File {
                reader,
                left,
                from,
                to,
            } => loop {
                if *left == 0 {
                    return Ok(false);
                }
                let mut len = [0u8; 4];
                reader.read_exact(&mut len)?;
                let len = le_u32_of(&len) as usize;
                self.buf.resize(len, 0);
                reader.read_exact(&mut self.buf)?;
                *left = left.saturating_sub(4 + len as u64);
                if to.is_some_and(|to| self.buf.as_slice() >= to) {
                    *left = 0;
                    return Ok(false);
                }
                if self.buf.as_slice() >= *from {
                    break;
                }
            },
        }
        self.key = prefix_key(self.record());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(unit: u32, body: &[u8]) -> Vec<u8> {
        let mut r = unit.to_be_bytes().to_vec();
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn arena_sorts_like_the_bytes_beyond_the_prefix_key() {
        let records: Vec<Vec<u8>> = vec![
            vec![1, 2, 0],
            vec![1, 2],
            [vec![1u8; 16], vec![9]].concat(),
            [vec![1u8; 16], vec![3, 4]].concat(),
            vec![1u8; 16],
            [vec![1, 2], vec![0; 18], vec![5]].concat(),
            vec![0xFF],
            vec![],
        ];
        let mut arena = Arena::default();
        for r in &records {
            arena.push(r);
        }
        arena.sort();
        let got: Vec<Vec<u8>> = arena
            .starts
            .iter()
            .map(|&s| arena.record(s).to_vec())
            .collect();
        let mut expected = records.clone();
        expected.sort();
        assert_eq!(got, expected);
    }

    #[test]
    fn records_equal_in_their_first_16_bytes_merge_in_byte_order() {
        let parent = tempfile::tempdir().unwrap();
        let dir = Arc::new(SpillDir::create(parent.path()).unwrap());
        let mut all = Runs::default();
        let mut expected = Vec::new();
        for w in 0..4u8 {
            let mut b = RunBuilder::new(0, dir.clone());
            for i in 0..3000u32 {
                // One unit, a shared 16-byte prefix, the order decided after it.
                let mut r = rec(9, &[7u8; 12]);
                r.extend_from_slice(&(i % 50).to_be_bytes());
                r.push(w);
                expected.push(r.clone());
                b.push(&r);
            }
            all.absorb(b.finish());
        }
        let mut got = Vec::new();
        all.for_each_in_unit(9, |r| got.push(r.to_vec())).unwrap();
        expected.sort();
        assert_eq!(got, expected);
    }

    #[test]
    fn spilled_and_memory_runs_merge_in_order_and_files_are_removed() {
        let parent = tempfile::tempdir().unwrap();
        let dir = Arc::new(SpillDir::create(parent.path()).unwrap());
        let spill_path = dir.path().to_path_buf();
        let mut all = Runs::default();
        let mut expected: Vec<Vec<u8>> = Vec::new();
        for w in 0..3u32 {
            // A tiny budget: every worker spills many runs.
            let mut b = RunBuilder::new(0, dir.clone());
            for i in 0..20000u32 {
                let r = rec(i % 7, &(i * 31 + w).to_be_bytes());
                if i % 7 == 3 {
                    expected.push(r.clone());
                }
                b.push(&r);
            }
            all.absorb(b.finish());
        }
        assert!(all.stats.spill_files >= 6, "{:?}", all.stats);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&spill_path), 0o700);
        let first = spill_path.join("run-000000");
        assert_eq!(mode(&first), 0o600);
        assert!(spill_path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pgcheckdb-spill-")));
        assert_eq!(all.units(), (0..7).collect());
        let mut got = Vec::new();
        all.for_each_in_unit(3, |r| got.push(r.to_vec())).unwrap();
        expected.sort();
        assert_eq!(got, expected);
        drop(all);
        drop(dir);
        assert!(!spill_path.exists());
    }

    #[test]
    fn a_range_of_a_unit_merges_only_its_records_from_memory_and_files() {
        let parent = tempfile::tempdir().unwrap();
        let dir = Arc::new(SpillDir::create(parent.path()).unwrap());
        let mut all = Runs::default();
        let mut records: Vec<Vec<u8>> = Vec::new();
        for w in 0..2u32 {
            // The first worker spills, the second keeps its records in memory.
            let mut b = RunBuilder::new(if w == 0 { 0 } else { 1 << 30 }, dir.clone());
            for i in 0..5000u32 {
                let r = rec(i % 3, &(i * 7 + w).to_be_bytes());
                records.push(r.clone());
                b.push(&r);
            }
            all.absorb(b.finish());
        }
        assert!(all.stats.spill_files > 0 && !all.mem.is_empty());
        let (from, upper) = (
            rec(1, &9000u32.to_be_bytes()),
            rec(1, &20000u32.to_be_bytes()),
        );
        for (to, unit_end) in [(Some(&upper[..]), false), (None, true)] {
            let mut got = Vec::new();
            all.for_each_between(1, &from, to, |r| got.push(r.to_vec()))
                .unwrap();
            let mut expected: Vec<Vec<u8>> = records
                .iter()
                .filter(|r| unit_of(r) == 1 && r[..] >= from[..] && (unit_end || r[..] < upper[..]))
                .cloned()
                .collect();
            expected.sort();
            assert!(!expected.is_empty());
            assert_eq!(got, expected);
        }
    }
}
