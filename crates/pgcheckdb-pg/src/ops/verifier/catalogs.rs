//! The second step of a run ([`read_and_plan`]): the catalogs read while the data directory is
//! listed on a second thread, the commit statuses a running server knows better, the scope
//! chosen by name and the plan of what to read.

use super::error::VerifyError;
use super::host::{Event, Host};
use super::online::Online;
use super::prepare::Prepared;
use super::request::VerifyRequest;
use crate::catalog::Catalog;
use crate::datadir::DataDirectory;
use crate::format::control::ControlFile;
use crate::plan::Plan;
use crate::scope::{Scope, ScopeOptions};
use crate::verify::options::Level;

/// The catalogs, the scope chosen in them and the plan.
pub struct Planned {
    pub catalog: Catalog,
    pub plan: Plan,
    pub scope: Scope,
}

/// Reads the catalogs and makes the plan, which takes `control`.
pub fn read_and_plan(
    request: &VerifyRequest,
    host: &mut dyn Host,
    prepared: &mut Prepared,
    control: ControlFile,
) -> Result<Planned, VerifyError> {
    let level = request.level;
    if level == Level::Physical {
        lean_malloc();
    }
    // Only the structure checks (and the estimate of their time) need every relation's
    // columns.
    let columns = level != Level::Physical || request.estimate;
    let (mut catalog, listing) = read_in_parallel(prepared, &control, columns);
    check_interrupt(host, "while reading the catalogs")?;
    if let (Some(online), true) = (prepared.online.as_mut(), level != Level::Physical) {
        online.fill_commit_log(&mut catalog.clog)?;
    }
    host.event(Event::CatalogsRead { catalog: &catalog });
    let scope = Scope::select(&request.scope, &catalog)?;
    let datadir = &prepared.source.datadir;
    let plan = Plan::from_listing(datadir, control, listing, |f| scope.keeps_file(f));
    check_interrupt(host, "while listing the data directory")?;
    check_filenodes(&request.scope, &plan)?;
    host.event(Event::Listed {
        plan: &plan,
        catalog: &catalog,
    });
    Ok(Planned {
        catalog,
        plan,
        scope,
    })
}

/// The catalog first: the scope is chosen by name before the plan picks what to read. The
/// data directory is listed meanwhile on a second thread.
fn read_in_parallel(
    prepared: &Prepared,
    control: &ControlFile,
    columns: bool,
) -> (Catalog, DataDirectory) {
    let (source, datadir) = (&prepared.source, prepared.source.datadir.as_path());
    std::thread::scope(|s| {
        let listing = s.spawn(|| source.listing(control));
        let catalog = match prepared.online {
            Some(_) => Online::read_catalog(datadir, control, columns),
            None => Catalog::read_with(datadir, control, columns),
        };
        let listing = listing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (catalog, listing)
    })
}

/// Stops with the interruption error when a signal was caught; `state` says where.
fn check_interrupt(host: &dyn Host, state: &str) -> Result<(), VerifyError> {
    match host.interrupted() {
        Some(sig) => Err(VerifyError::Refused(format!(
            "interrupted by {} {state}; nothing was checked",
            sig.name
        ))),
        None => Ok(()),
    }
}

/// Each `-f` file number must name a file of the plan (unless `--no-strict-names`).
fn check_filenodes(opts: &ScopeOptions, plan: &Plan) -> Result<(), VerifyError> {
    if !opts.strict_names {
        return Ok(());
    }
    for node in &opts.filenodes {
        if !plan.dir.files.iter().any(|f| f.name.relfilenode == *node) {
            return Err(VerifyError::Refused(format!(
                "no relation files to check with file number {node}"
            )));
        }
    }
    Ok(())
}

/// Has every thread allocate from one malloc arena, and large blocks mapped on their own. The
/// physical level's threads allocate almost nothing once the catalogs are read and the plan is
/// made, but each thread that does gets an arena of its own, whose freed memory stays
/// resident: on a cluster of 80,000 small relations that was a sixth of the peak resident
/// memory. The levels above allocate per
/// page in every worker, and keep the default. Blocks of 128 kB and more (the listing's and
/// the catalog's tables, which grow and are freed while the other is built) are mapped and
/// unmapped on their own instead of leaving holes in the heap: half a megabyte less at the
/// peak on 80,000 relations, and the same from run to run.
fn lean_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes tuning parameters of the C allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
    }
}
