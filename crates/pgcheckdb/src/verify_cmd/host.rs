//! This program as the host of a `verify` run ([`Terminal`]): each step's lines on stderr as
//! the flags ask (`-v`'s phases, `-q`), the progress display of the scan, the signal caught
//! and the connection to a running server.

use pgcheckdb_pg::ops::verifier::{Event, Host, HostError, ScanView, Server, Signal};
use pgcheckdb_report::{human_bytes, Format};

use super::print;
use super::server::Connection;
use crate::cli::Common;
use crate::verbose::{self, Phases};
use crate::{progress, signals};

/// The terminal (or log) a run reports to.
pub struct Terminal<'a> {
    common: &'a Common,
    phases: Phases,
}

impl<'a> Terminal<'a> {
    /// Starts timing the phases now.
    pub fn new(common: &'a Common) -> Terminal<'a> {
        Terminal {
            common,
            phases: Phases::new(common.verbose),
        }
    }
}

impl Host for Terminal<'_> {
    fn event(&mut self, event: Event<'_>) {
        if let Some((phase, what)) = phase_line(&event) {
            self.phases.done(phase, &what);
        }
        let (quiet, verbose) = (self.common.quiet, self.common.verbose);
        let text = self.common.report_format() == Format::Text;
        match event {
            Event::NoServerRunning { datadir } => eprintln_text!(
                "pgcheckdb: no server is running on \"{}\": checking it offline",
                datadir.display()
            ),
            Event::Starting {
                control,
                level,
                jobs,
            } if text && !quiet => print::announce(control, level, jobs),
            Event::Listed { plan, catalog } => {
                for line in verbose::plan_lines(plan, Some(catalog)) {
                    self.phases.say(&line);
                }
            }
            Event::StructurePlanned {
                structure,
                extended,
            } if !quiet => print::structure_notes(structure, extended, verbose),
            Event::SetAside { findings } if verbose => print::set_aside(findings),
            _ => {}
        }
    }

    fn interrupted(&self) -> Option<Signal> {
        signals::caught().map(|number| Signal {
            number,
            name: signals::name(number),
        })
    }

    fn watch_scan(&mut self, view: &ScanView<'_>, scan: &mut dyn FnMut()) {
        let where_is = |file: usize| progress::file_label(view.plan, view.catalog, file);
        let display = progress::Display {
            mode: progress::mode(self.common),
            total: view.total,
            block_size: view.plan.control.blcksz as u64,
            label: &where_is,
        };
        let stopped = || {
            signals::caught().is_some()
                || view
                    .stop
                    .is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
        };
        signals::watching(
            stopped,
            || {
                view.progress
                    .cancel
                    .store(true, std::sync::atomic::Ordering::SeqCst)
            },
            || progress::with_progress(&display, view.progress, scan),
        );
    }

    fn connect(&mut self, conninfo: &str) -> Result<Box<dyn Server + Send>, HostError> {
        Ok(Box::new(Connection::connect(conninfo)?))
    }
}

/// The `-v` line of a step that ends a phase: the phase and what it found.
fn phase_line(event: &Event<'_>) -> Option<(&'static str, String)> {
    Some(match event {
        Event::ControlRead { shown } => (
            "read global/pg_control",
            format!("data directory \"{}\"", shown.display()),
        ),
        Event::CatalogsRead { catalog } => {
            ("read the catalogs offline", verbose::catalog_line(catalog))
        }
        Event::Listed { plan, .. } => (
            "listed the data directory",
            format!(
                "{} relation file(s) in {} fork(s)",
                plan.dir.files.len(),
                plan.forks.len()
            ),
        ),
        Event::Scanned { report, jobs } => (
            "scanned the blocks",
            format!(
                "{} block(s), {}, {} finding(s), {} jobs",
                report.summary.blocks,
                human_bytes(report.summary.bytes),
                report.findings.len(),
                jobs
            ),
        ),
        Event::Rechecked { online } => ("re-read the pages that failed", online.text_line()),
        Event::Named => (
            "named the findings",
            "database and relation names from the catalogs".to_string(),
        ),
        Event::BackupChecked { backup } => ("checked the base backup", backup.text_line()),
        Event::CrashChecked { crash } => ("applied the crash-recovery rule", crash.text_line()),
        _ => return None,
    })
}
