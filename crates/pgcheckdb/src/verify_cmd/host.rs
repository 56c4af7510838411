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
        let (quiet, verbose) = (self.common.quiet, self.common.verbose);
        match event {
            Event::ControlRead { shown } => self.phases.done(
                "read global/pg_control",
                &format!("data directory \"{}\"", shown.display()),
            ),
            Event::NoServerRunning { datadir } => eprintln_text!(
                "pgcheckdb: no server is running on \"{}\": checking it offline",
                datadir.display()
            ),
            Event::Starting {
                control,
                level,
                jobs,
            } => {
                if self.common.report_format() == Format::Text && !quiet {
                    print::announce(control, level, jobs);
                }
            }
            Event::CatalogsRead { catalog } => self
                .phases
                .done("read the catalogs offline", &verbose::catalog_line(catalog)),
            Event::Listed { plan, catalog } => {
                let what = format!(
                    "{} relation file(s) in {} fork(s)",
                    plan.dir.files.len(),
                    plan.forks.len()
                );
                self.phases.done("listed the data directory", &what);
                for line in verbose::plan_lines(plan, Some(catalog)) {
                    self.phases.say(&line);
                }
            }
            Event::StructurePlanned {
                structure,
                extended,
            } => {
                if !quiet {
                    print::structure_notes(structure, extended, verbose);
                }
            }
            Event::Scanned { report, jobs } => {
                let what = format!(
                    "{} block(s), {}, {} finding(s), {} jobs",
                    report.summary.blocks,
                    human_bytes(report.summary.bytes),
                    report.findings.len(),
                    jobs
                );
                self.phases.done("scanned the blocks", &what);
            }
            Event::Rechecked { online } => self
                .phases
                .done("re-read the pages that failed", &online.text_line()),
            Event::Named => self.phases.done(
                "named the findings",
                "database and relation names from the catalogs",
            ),
            Event::SetAside { findings } => {
                if verbose {
                    print::set_aside(findings);
                }
            }
            Event::BackupChecked { backup } => self
                .phases
                .done("checked the base backup", &backup.text_line()),
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
        signals::cancel_on_signal(&view.progress.cancel, || {
            progress::with_progress(&display, view.progress, scan)
        });
    }

    fn connect(&mut self, conninfo: &str) -> Result<Box<dyn Server>, HostError> {
        Ok(Box::new(Connection::connect(conninfo)?))
    }
}
