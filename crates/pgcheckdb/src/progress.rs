//! The progress bar on stderr: bytes done, throughput and ETA, fed from the scanner's counters.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use pgcheckdb_scan::Progress;

use crate::cli::Common;

/// Whether to draw a bar: `--progress`, or a terminal on stderr without `--no-progress`/`-q`.
pub fn wanted(common: &Common) -> bool {
    if common.no_progress || common.quiet {
        return false;
    }
    common.progress || std::io::stderr().is_terminal()
}

/// Runs `work` while a bar follows `progress.bytes_done` up to `total` bytes.
pub fn with_bar<T>(show: bool, total: u64, progress: &Progress, work: impl FnOnce() -> T) -> T {
    if !show {
        return work();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let done = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                bar.set_position(progress.bytes_done.load(Ordering::Relaxed));
                thread::sleep(Duration::from_millis(100));
            }
        });
        let result = work();
        done.store(true, Ordering::Relaxed);
        bar.finish_and_clear();
        result
    })
}
