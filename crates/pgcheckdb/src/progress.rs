//! Progress on stderr while a scan runs, fed from the scanner's shared counters: a bar on a
//! terminal, or a plain line every few seconds when stderr is a file or pipe and `--progress`
//! was given (as `pg_checksums -P` in a log). Both show the percent done, bytes and blocks done
//! of the total, the rate, the time left and the database and relation being read.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::plan::Plan;
use pgcheckdb_report::human_bytes;
use pgcheckdb_scan::Progress;

use crate::cli::Common;
use crate::signals;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// A redrawn bar (stderr is a terminal).
    Bar,
    /// A plain line every [`LINE_INTERVAL`] (stderr is not a terminal, `--progress` given).
    Lines,
}

/// Time between two plain progress lines.
pub const LINE_INTERVAL: Duration = Duration::from_secs(5);

/// The mode for the flags and stderr: `--no-progress`/`-q` turn it off; a terminal gets a bar
/// unless turned off; anything else gets plain lines only with `--progress`.
pub fn mode(common: &Common) -> Mode {
    if common.no_progress || common.quiet {
        return Mode::Off;
    }
    match (std::io::stderr().is_terminal(), common.progress) {
        (true, _) => Mode::Bar,
        (false, true) => Mode::Lines,
        (false, false) => Mode::Off,
    }
}

/// What to show.
pub struct Display<'a> {
    pub mode: Mode,
    /// Bytes to scan.
    pub total: u64,
    pub block_size: u64,
    /// Names the file with the given plan index (`database/schema.relation`).
    pub label: &'a (dyn Fn(usize) -> String + Sync),
}

/// `database/schema.relation` (or the file's path when the catalog does not name it).
pub fn file_label(plan: &Plan, catalog: &Catalog, file: usize) -> String {
    let Some(f) = plan.dir.files.get(file) else {
        return String::new();
    };
    let db_oid = f.location.db_oid();
    let db = match catalog.databases.get(&db_oid) {
        Some(d) => d.name.clone(),
        None if db_oid == 0 => "shared".to_string(),
        None => db_oid.to_string(),
    };
    match catalog.relation_of(f) {
        Some(rel) => format!("{db}/{}", rel.name),
        None => f.rel_path(),
    }
}

/// One snapshot of the counters, rendered.
struct Snapshot {
    done: u64,
    percent: f64,
    rate: f64,
    eta: Option<Duration>,
    at: String,
}

impl Snapshot {
    fn take(d: &Display, progress: &Progress, started: Instant) -> Snapshot {
        let done = progress.bytes_done.load(Ordering::Relaxed).min(d.total);
        let secs = started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        let eta = (rate > 0.0).then(|| Duration::from_secs_f64((d.total - done) as f64 / rate));
        let at = if done > 0 {
            let label = (d.label)(progress.current_file.load(Ordering::Relaxed));
            pgcheckdb_report::escape::escape_control(&label).into_owned()
        } else {
            String::new()
        };
        Snapshot {
            done,
            percent: if d.total == 0 {
                100.0
            } else {
                100.0 * done as f64 / d.total as f64
            },
            rate,
            eta,
            at,
        }
    }

    /// `12 of 40 blocks, in postgres/public.accounts`.
    fn blocks_and_place(&self, d: &Display) -> String {
        let mut parts = Vec::new();
        if d.block_size > 0 {
            let bs = d.block_size;
            parts.push(format!("{} of {} blocks", self.done / bs, d.total / bs));
        }
        if !self.at.is_empty() {
            parts.push(format!("in {}", self.at));
        }
        parts.join(", ")
    }

    /// The plain line for logs.
    fn line(&self, d: &Display) -> String {
        let more = self.blocks_and_place(d);
        format!(
            "pgcheckdb: progress: {:.1}% ({} of {}{}{more}), {}/s, ETA {}",
            self.percent,
            human_bytes(self.done),
            human_bytes(d.total),
            if more.is_empty() { "" } else { ", " },
            human_bytes(self.rate as u64),
            self.eta.map_or("unknown".to_string(), format_duration),
        )
    }
}

/// `1h02m03s`, `4m05s` or `6s`.
fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, sec) => format!("{h}h{m:02}m{sec:02}s"),
    }
}

/// The line printed once a signal was caught, before the scan has wound down.
fn interrupted_line(signal: i32) -> String {
    format!(
        "pgcheckdb: interrupted by {}: stopping after the blocks being read",
        signals::name(signal)
    )
}

/// Whether progress is wanted at all (a bar on a terminal, plain lines elsewhere).
pub fn wanted(common: &Common) -> bool {
    !(common.no_progress || common.quiet) && (common.progress || std::io::stderr().is_terminal())
}

/// Runs `work` with progress in bytes only, when `show`: a bar on a terminal, plain lines
/// elsewhere.
pub fn with_bar<T>(show: bool, total: u64, progress: &Progress, work: impl FnOnce() -> T) -> T {
    let mode = match (show, std::io::stderr().is_terminal()) {
        (false, _) => Mode::Off,
        (true, true) => Mode::Bar,
        (true, false) => Mode::Lines,
    };
    let nowhere = |_: usize| String::new();
    let d = Display {
        mode,
        total,
        block_size: 0,
        label: &nowhere,
    };
    with_progress(&d, progress, work)
}

/// Runs `work` while progress is shown as `d.mode` says.
pub fn with_progress<T>(d: &Display, progress: &Progress, work: impl FnOnce() -> T) -> T {
    if d.mode == Mode::Off {
        return work();
    }
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let drawer = s.spawn(|| match d.mode {
            Mode::Bar => draw_bar(d, progress, &done),
            _ => print_lines(d, progress, &done),
        });
        let result = work();
        done.store(true, Ordering::Relaxed);
        // Woken now rather than at its next redraw, which the scope would wait for.
        drawer.thread().unpark();
        result
    })
}

fn draw_bar(d: &Display, progress: &Progress, done: &AtomicBool) {
    let started = Instant::now();
    let bar = ProgressBar::new(d.total);
    bar.set_style(
        ProgressStyle::with_template(
            "{percent:>3}% {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {wide_msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    while !done.load(Ordering::Relaxed) && signals::caught().is_none() {
        let snap = Snapshot::take(d, progress, started);
        bar.set_position(snap.done);
        bar.set_message(snap.blocks_and_place(d));
        thread::park_timeout(Duration::from_millis(100));
    }
    // The bar goes before anything else is said, so it never draws over the lines after it.
    bar.finish_and_clear();
    if let Some(sig) = signals::caught() {
        eprintln_text!("{}", interrupted_line(sig));
    }
}

fn print_lines(d: &Display, progress: &Progress, done: &AtomicBool) {
    let started = Instant::now();
    let mut next = started + LINE_INTERVAL;
    let mut told = false;
    while !done.load(Ordering::Relaxed) {
        if let (Some(sig), false) = (signals::caught(), told) {
            eprintln_text!("{}", interrupted_line(sig));
            told = true;
        }
        if Instant::now() >= next {
            eprintln_text!("{}", Snapshot::take(d, progress, started).line(d));
            next += LINE_INTERVAL;
        }
        thread::park_timeout(Duration::from_millis(50));
    }
    if let (Some(sig), false) = (signals::caught(), told) {
        eprintln_text!("{}", interrupted_line(sig));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_clock() {
        assert_eq!(format_duration(Duration::from_secs(6)), "6s");
        assert_eq!(format_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(format_duration(Duration::from_secs(3723)), "1h02m03s");
    }

    #[test]
    fn plain_line_has_percent_units_and_place() {
        let label = |i: usize| format!("postgres/public.t{i}");
        let d = Display {
            mode: Mode::Lines,
            total: 8192 * 100,
            block_size: 8192,
            label: &label,
        };
        let p = Progress::default();
        p.bytes_done.store(8192 * 25, Ordering::Relaxed);
        p.current_file.store(3, Ordering::Relaxed);
        let line = Snapshot::take(&d, &p, Instant::now() - Duration::from_secs(1)).line(&d);
        assert!(line.starts_with("pgcheckdb: progress: 25.0% (204.8 kB of 819.2 kB, 25 of 100 blocks, in postgres/public.t3)"), "{line}");
        assert!(line.contains("/s, ETA "), "{line}");
    }
}
