//! The stable fuzzing harness: the committed seed corpus (`fuzz/corpus/`, real pages and files
//! from PostgreSQL 14-18 clusters, made by `scripts/fuzz-seeds.sh`) run through a deterministic,
//! structure-aware mutator and fed to every fuzzing entry point of `pgcheckdb_pg::fuzzing`.
//!
//! Invariant: no panic, and no call longer than the timeout (a watchdog aborts the process and
//! names the saved input). A panicking input is saved under `fuzz/artifacts/` and fails the test.
//!
//! Knobs (environment): `FUZZ_SEEDS_MUTATIONS` mutants per target (default 20000),
//! `FUZZ_SEEDS_RNG` the generator's seed (default fixed), `FUZZ_SEEDS_TIMEOUT_MS` the per-call
//! limit (default 1000).

use std::collections::BTreeMap;
use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgcheckdb_pg::check::physical::{check_page, PageCheckConfig, PageVerdict};
use pgcheckdb_pg::check::standard::Scratch;
use pgcheckdb_pg::format::control::ControlFile;
use pgcheckdb_pg::fuzzing::{self, StandardContext, BLCKSZ};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The seeds of one corpus directory, `(file name, bytes)`, sorted; fails loudly when missing.
fn corpus(dir: &str, at_least: usize) -> Vec<(String, Vec<u8>)> {
    let path = repo_root().join("fuzz/corpus").join(dir);
    let entries = fs::read_dir(&path).unwrap_or_else(|e| {
        panic!(
            "seed corpus {} is missing ({e}); run scripts/fuzz-seeds.sh",
            path.display()
        )
    });
    let mut seeds: Vec<(String, Vec<u8>)> = entries
        .map(|e| {
            let e = e.expect("corpus entry");
            let name = e.file_name().to_string_lossy().into_owned();
            (name, fs::read(e.path()).expect("read seed"))
        })
        .collect();
    seeds.sort();
    assert!(
        seeds.len() >= at_least,
        "seed corpus {} has {} files, expected at least {at_least}; run scripts/fuzz-seeds.sh",
        path.display(),
        seeds.len()
    );
    seeds
}

/// SplitMix64: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Values that sit on the edges the checks compare against.
const INTERESTING_U16: [u16; 20] = [
    0, 1, 2, 4, 7, 8, 16, 23, 24, 28, 0x7F, 0x80, 0x1FFF, 0x2004, 0x7FFF, 0x8000, 8176, 8184, 8192,
    0xFFFF,
];
const INTERESTING_U32: [u32; 10] = [
    0,
    1,
    2,
    3,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFE,
    0xFFFF_FFFF,
    100_000,
    100_001,
];

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
}

/// Offsets where a 16-bit field of a page lives: header fields, line pointers, the start and
/// end of the special space, and the header fields of a tuple a line pointer points at.
fn structural_offset(page: &[u8], rng: &mut Rng) -> usize {
    let lower = u16_at(page, 12).unwrap_or(24) as usize;
    let special = u16_at(page, 16).unwrap_or(0) as usize;
    let n_items = lower.saturating_sub(24) / 4;
    match rng.below(6) {
        0 => rng.pick(&[8, 10, 12, 14, 16, 18, 20, 22]),
        1 => 24 + 4 * rng.below(n_items.max(1)) + rng.pick(&[0, 2]),
        2 => special + 2 * rng.below(8),
        3 => page.len().saturating_sub(2 + 2 * rng.below(8)),
        4 => {
            let lp = 24 + 4 * rng.below(n_items.max(1));
            let lp_off = u16_at(page, lp).map_or(0, |w| (w & 0x7FFF) as usize);
            // t_xmin, t_xmax, t_ctid, t_infomask2, t_infomask, t_hoff and the first data bytes.
            lp_off + rng.pick(&[0, 4, 8, 12, 14, 16, 18, 20, 22, 24, 26, 28, 32])
        }
        _ => rng.below(page.len().max(1)),
    }
}

fn put(buf: &mut [u8], off: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(off..off + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// One mutation of `buf`; `other` is another seed of the same corpus, for splices.
fn mutate_once(buf: &mut Vec<u8>, other: &[u8], rng: &mut Rng) {
    if buf.is_empty() {
        buf.extend_from_slice(other);
        return;
    }
    let len = buf.len();
    match rng.below(10) {
        0 => {
            let bit = rng.below(len * 8);
            buf[bit / 8] ^= 1 << (bit % 8);
        }
        1 => {
            let off = rng.below(len);
            let random = rng.next() as u8;
            buf[off] = rng.pick(&[0, 1, 0x7F, 0x80, 0xFF, random]);
        }
        2 | 3 => {
            let off = structural_offset(buf, rng);
            let value = if rng.below(4) == 0 {
                rng.next() as u16
            } else {
                rng.pick(&INTERESTING_U16)
            };
            put(buf, off, &value.to_le_bytes());
        }
        4 => {
            let off = structural_offset(buf, rng) & !3;
            let value = if rng.below(4) == 0 {
                rng.next() as u32
            } else {
                rng.pick(&INTERESTING_U32)
            };
            put(buf, off, &value.to_le_bytes());
        }
        5 => {
            let off = structural_offset(buf, rng);
            let delta = rng.pick(&[1i32, -1, 2, -2, 4, -4, 8, -8, 24, -24]);
            if let Some(v) = u16_at(buf, off) {
                put(buf, off, &(v as i32 + delta).to_le_bytes()[..2]);
            }
        }
        6 => buf.truncate(rng.below(len)),
        7 => {
            // Splice: this seed up to a cut, the other one after it.
            let cut = rng.below(len.min(other.len()).max(1));
            buf.truncate(cut);
            buf.extend_from_slice(other.get(cut..).unwrap_or_default());
        }
        8 => {
            // A range of the other seed copied over the same offsets.
            let start = rng.below(len);
            let n = rng.below(512).min(len - start);
            if let Some(src) = other.get(start..start + n) {
                buf[start..start + n].copy_from_slice(src);
            }
        }
        _ => {
            // A zeroed run: torn writes, lost sectors.
            let start = rng.below(len);
            let n = rng.pick(&[1, 2, 4, 8, 64, 512, len]).min(len - start);
            buf[start..start + n].fill(0);
        }
    }
}

/// Calls the entry point with one input at a time and aborts the process if a call outlives
/// the timeout (a hang cannot be caught otherwise).
struct Watchdog {
    /// Milliseconds since `epoch` at which the running call started, 0 when idle.
    started: Arc<AtomicU64>,
    input: Arc<Mutex<Vec<u8>>>,
    epoch: Instant,
}

impl Watchdog {
    fn new(target: &'static str) -> Watchdog {
        let timeout = env_u64("FUZZ_SEEDS_TIMEOUT_MS", 1000);
        let started = Arc::new(AtomicU64::new(0));
        let input = Arc::new(Mutex::new(Vec::new()));
        let epoch = Instant::now();
        let (s, i) = (started.clone(), input.clone());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(50));
            let begun = s.load(Ordering::Acquire);
            let now = epoch.elapsed().as_millis() as u64;
            if begun != 0 && now.saturating_sub(begun) > timeout {
                let bytes = i.lock().map(|b| b.clone()).unwrap_or_default();
                let saved = save_artifact(target, "timeout", &bytes);
                eprintln!(
                    "fuzz_seeds: {target}: a call ran longer than {timeout} ms; input saved as {}",
                    saved.display()
                );
                std::process::abort();
            }
        });
        Watchdog {
            started,
            input,
            epoch,
        }
    }

    fn call<R>(&self, input: &[u8], f: impl FnOnce() -> R) -> std::thread::Result<R> {
        if let Ok(mut slot) = self.input.lock() {
            slot.clear();
            slot.extend_from_slice(input);
        }
        let now = (self.epoch.elapsed().as_millis() as u64).max(1);
        self.started.store(now, Ordering::Release);
        IN_CALL.with(|c| c.set(true));
        let result = panic::catch_unwind(AssertUnwindSafe(f));
        IN_CALL.with(|c| c.set(false));
        self.started.store(0, Ordering::Release);
        result
    }
}

thread_local! {
    /// True while this thread runs an entry point: its panics are collected, not printed.
    static IN_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs, once, a panic hook that stays silent inside entry-point calls and prints as usual
/// everywhere else (the tests' own assertions).
fn quiet_panics_in_calls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !IN_CALL.with(|c| c.get()) {
                default(info);
            }
        }));
    });
}

fn save_artifact(target: &str, what: &str, bytes: &[u8]) -> PathBuf {
    let dir = repo_root().join("fuzz/artifacts").join(target);
    let _ = fs::create_dir_all(&dir);
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("{what}-{hash:016x}"));
    let _ = fs::write(&path, bytes);
    path
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// Runs `entry` on every seed and on the configured number of mutants; returns the sum of what
/// `entry` returned (how deep the inputs got). Fails listing every distinct panic.
fn fuzz(
    target: &'static str,
    seeds: &[(String, Vec<u8>)],
    mut entry: impl FnMut(&[u8]) -> usize,
) -> (usize, usize) {
    let mutations = env_u64("FUZZ_SEEDS_MUTATIONS", 20_000) as usize;
    let mut rng = Rng(env_u64("FUZZ_SEEDS_RNG", 0x5EED_F022) ^ target.len() as u64);
    let dog = Watchdog::new(target);
    let mut panics: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut depth = 0;
    let mut run = |input: &[u8], depth: &mut usize| match dog.call(input, || entry(input)) {
        Ok(d) => *depth += d,
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            panics
                .entry(msg)
                .or_insert_with(|| save_artifact(target, "panic", input));
        }
    };
    quiet_panics_in_calls();
    for (_, seed) in seeds {
        run(seed, &mut depth);
    }
    let mut buf = Vec::new();
    for _ in 0..mutations {
        let (_, seed) = &seeds[rng.below(seeds.len())];
        let (_, other) = &seeds[rng.below(seeds.len())];
        buf.clear();
        buf.extend_from_slice(seed);
        for _ in 0..1 + rng.below(4) {
            mutate_once(&mut buf, other, &mut rng);
        }
        run(&buf, &mut depth);
    }
    assert!(
        panics.is_empty(),
        "{target}: {} distinct panics:\n{}",
        panics.len(),
        panics
            .iter()
            .map(|(m, p)| format!("  {m}  (input {})", p.display()))
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "fuzz_seeds: {target}: {} seeds, {mutations} mutants, depth {depth}",
        seeds.len()
    );
    (mutations, depth)
}

fn pages() -> Vec<(String, Vec<u8>)> {
    corpus("pages", 40)
}

fn seed_control(major: u32) -> ControlFile {
    let raw = fs::read(repo_root().join(format!("fuzz/corpus/control_file/pg{major}_pg_control")))
        .expect("control file seed (run scripts/fuzz-seeds.sh)");
    ControlFile::parse(raw, "seed").expect("seed control file parses")
}

#[test]
fn physical_page_check() {
    fuzz("physical", &pages(), |p| {
        fuzzing::physical(p);
        0
    });
}

#[test]
fn standard_structure_checks() {
    let ctx = StandardContext::new();
    let mut scratch = Scratch::default();
    let (mutants, reached) = fuzz("standard", &pages(), |p| {
        fuzzing::standard(p, &ctx, &mut scratch)
    });
    // Mutants must get past the physical gate often enough for the structure checks to be
    // fuzzed at all (each page counts up to twice).
    assert!(
        reached * 10 >= mutants,
        "only {reached} of {mutants} mutants reached the structure checks"
    );
}

#[test]
fn inspect_page_decoder() {
    let controls = [seed_control(18), seed_control(14)];
    let mut n = 0;
    fuzz("inspect", &pages(), |p| {
        n += 1;
        fuzzing::inspect(p, &controls[n % 2]);
        0
    });
}

#[test]
fn enable_classify_and_stamp() {
    fuzz("enable", &pages(), |p| {
        fuzzing::enable(p);
        0
    });
}

#[test]
fn control_file_parser() {
    let (mutants, parsed) = fuzz(
        "control_file",
        &corpus("control_file", 6),
        fuzzing::control_file,
    );
    assert!(
        parsed * 10 >= mutants,
        "only {parsed} of {mutants} mutants parsed"
    );
}

#[test]
fn relmap_parser() {
    let (mutants, parsed) = fuzz("relmap", &corpus("relmap", 10), fuzzing::relmap);
    assert!(
        parsed * 10 >= mutants,
        "only {parsed} of {mutants} mutants parsed"
    );
}

#[test]
fn catalog_row_reader() {
    let committed = fuzzing::committed_clog();
    let (mutants, rows) = fuzz("catalog", &corpus("catalog", 20), |d| {
        fuzzing::catalog(d, &committed)
    });
    assert!(
        rows >= mutants,
        "only {rows} visible rows in {mutants} mutants"
    );
}

/// The unmutated seeds are real, healthy pages: the physical check must call each valid and the
/// structure checks of its own format (the second word of its name) must find nothing.
/// `pg<major> -> reltoastrelid` of the seed table, from `fuzz/corpus/seeds.tsv`.
fn seed_toast_relids() -> BTreeMap<String, u32> {
    let path = repo_root().join("fuzz/corpus/seeds.tsv");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} is missing ({e}); run scripts/fuzz-seeds.sh",
            path.display()
        )
    });
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.len() == 3 && f[1] == "reltoastrelid").then(|| (f[0].to_string(), f[2].parse().ok()))
        })
        .map(|(k, v)| (k, v.expect("numeric reltoastrelid in seeds.tsv")))
        .collect()
}

#[test]
fn seeds_are_clean_for_their_format() {
    let contexts: BTreeMap<String, StandardContext> = seed_toast_relids()
        .into_iter()
        .map(|(major, toast)| (major, StandardContext::with_toast_relid(toast)))
        .collect();
    assert!(
        contexts.len() >= 2,
        "seeds.tsv names fewer than two clusters"
    );
    let mut scratch = Scratch::default();
    let mut checked = 0;
    let mut complaints = Vec::new();
    for (name, page) in pages() {
        assert_eq!(page.len(), BLCKSZ, "{name} is not one block");
        let mut words = name.splitn(2, '_');
        let major = words.next().unwrap_or_default();
        let rest = words.next().unwrap_or_default();
        let ctx = contexts
            .get(major)
            .unwrap_or_else(|| panic!("seed {name}: {major} is not in seeds.tsv"));
        let (format, file) = ctx
            .formats
            .iter()
            .filter(|(f, _)| rest.starts_with(&format!("{f}_")))
            .max_by_key(|(f, _)| f.len())
            .unwrap_or_else(|| panic!("seed {name} names no page format"));
        let blkno: u64 = name
            .rsplit("_b")
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("seed {name} names no block"));
        let cfg = PageCheckConfig {
            blcksz: BLCKSZ,
            max_align: fuzzing::MAX_ALIGN,
            checksums: major == "pg18",
        };
        let verdict = check_page(&cfg, &page, blkno as u32);
        if verdict == PageVerdict::New {
            continue;
        }
        assert_eq!(verdict, PageVerdict::Valid, "{name}");
        let problems = ctx.check(file, &page, blkno, &mut scratch);
        if !problems.is_empty() {
            complaints.push(format!("{name} as {format}: {problems:?}"));
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} seeds checked");
    assert!(complaints.is_empty(), "{}", complaints.join("\n"));
}
