//! `verify -v`: what is read, counts per database and the time of each phase, as
//! `pgcheckdb: ...` lines on stderr (stdout stays the report).

use std::collections::BTreeMap;
use std::time::Instant;

use pgcheckdb_pg::catalog::Catalog;
use pgcheckdb_pg::plan::Plan;
use pgcheckdb_report::human_bytes;

/// Times the phases of one run; prints nothing unless verbose.
pub struct Phases {
    on: bool,
    since: Instant,
}

impl Phases {
    pub fn new(on: bool) -> Phases {
        Phases {
            on,
            since: Instant::now(),
        }
    }

    /// Says that `phase` is done, with its time since the previous phase, and `what` it found.
    pub fn done(&mut self, phase: &str, what: &str) {
        if self.on {
            eprintln_text!(
                "pgcheckdb: {phase}: {what} ({:.3} s)",
                self.since.elapsed().as_secs_f64()
            );
        }
        self.since = Instant::now();
    }

    /// Prints a line when verbose.
    pub fn say(&self, text: &str) {
        if self.on {
            eprintln_text!("pgcheckdb: {text}");
        }
    }
}

/// Files, blocks and bytes of one database (or of the shared catalogs).
#[derive(Default)]
struct Counts {
    files: u64,
    bytes: u64,
}

/// "listed N relation files" plus one line per database.
pub fn plan_lines(plan: &Plan, catalog: Option<&Catalog>) -> Vec<String> {
    let bs = u64::from(plan.control.blcksz).max(1);
    let mut per_db: BTreeMap<u32, Counts> = BTreeMap::new();
    for f in &plan.dir.files {
        let c = per_db.entry(f.location.db_oid()).or_default();
        c.files += 1;
        c.bytes += f.size / bs * bs;
    }
    per_db
        .iter()
        .map(|(oid, c)| {
            let name = match (oid, catalog.and_then(|cat| cat.databases.get(oid))) {
                (0, _) => "shared catalogs (global/)".to_string(),
                (_, Some(db)) => format!("database \"{}\" (oid {oid})", db.name),
                (_, None) => format!("database oid {oid}"),
            };
            format!(
                "  {name}: {} file(s), {} block(s), {}",
                c.files,
                c.bytes / bs,
                human_bytes(c.bytes)
            )
        })
        .collect()
}

/// "N databases, M relations" from the catalogs read offline.
pub fn catalog_line(catalog: &Catalog) -> String {
    format!(
        "{} database(s), {} relation file(s) named, {} tablespace(s)",
        catalog.databases.len(),
        catalog.relations.len(),
        catalog.tablespaces.len()
    )
}
