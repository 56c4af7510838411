//! `pgcheckdb ledger`: the damage ledger read back (docs/LEDGER.md, docs/OUTPUT.md): per host
//! and cluster its last run, then each entry still open (`new` when that last run found it
//! first, else `open`) and each entry that last run repaired (`--all`: every repair).

use std::collections::BTreeMap;

use serde_json::json;

use crate::cli::{Common, LedgerCmd, OutputFormat};
use crate::exit::EXIT_OK;
use crate::ledger::model::level_name;
use crate::ledger::{self, LastRun, Location, Row};

/// What `ledger` says of one entry.
fn status(row: &Row, last: Option<&LastRun>) -> Option<&'static str> {
    let last_id = last.map(|l| l.id);
    match row.repaired_run {
        None if Some(row.first_run) == last_id => Some("new"),
        None => Some("open"),
        Some(r) if Some(r) == last_id => Some("repaired"),
        Some(_) => None,
    }
}

pub fn run(common: &Common, args: &LedgerCmd) -> anyhow::Result<u8> {
    let location = Location::parse(args.ledger.as_deref().unwrap_or(""))?;
    let (runs, rows) = ledger::read(&location)?;
    let last: BTreeMap<(&str, &str), &LastRun> = runs
        .iter()
        .map(|r| ((r.host.as_str(), r.system_identifier.as_str()), r))
        .collect();
    let mut by_cluster: BTreeMap<(&str, &str), Vec<(&'static str, &Row)>> = BTreeMap::new();
    for row in &rows {
        let key = (row.host.as_str(), row.system_identifier.as_str());
        let shown = match status(row, last.get(&key).copied()) {
            Some(s) => Some(s),
            None if args.all => Some("repaired"),
            None => None,
        };
        if let Some(s) = shown {
            by_cluster.entry(key).or_default().push((s, row));
        }
    }
    let json = common.format == OutputFormat::Json;
    for run in &runs {
        let key = (run.host.as_str(), run.system_identifier.as_str());
        let entries = by_cluster.remove(&key).unwrap_or_default();
        let count = |s: &str| entries.iter().filter(|(st, _)| *st == s).count();
        let (new, open, repaired) = (count("new"), count("open"), count("repaired"));
        let scope = if run.scope.is_empty() {
            "whole cluster"
        } else {
            run.scope.as_str()
        };
        if json {
            println!(
                "{}",
                json!({"type": "ledger_cluster", "host": run.host,
                       "system_identifier": run.system_identifier, "pgdata": run.pgdata,
                       "last_run": run.finished_at, "level": level_name(run.level),
                       "scope": run.scope, "complete": run.complete,
                       "new": new, "open": new + open, "repaired": repaired})
            );
        } else {
            println_text!(
                "host \"{}\", cluster {} ({}): last run {} (level {}, {}{}): {} open ({} new), {} repaired",
                run.host,
                run.system_identifier,
                run.pgdata,
                run.finished_at,
                level_name(run.level),
                scope,
                if run.complete { "" } else { ", incomplete" },
                new + open,
                new,
                repaired
            );
        }
        for (st, row) in entries {
            let block = (row.block >= 0).then_some(row.block);
            if json {
                println!(
                    "{}",
                    json!({"type": "ledger_entry", "status": st, "host": row.host,
                           "system_identifier": row.system_identifier, "file": row.file,
                           "fork": (!row.fork.is_empty()).then_some(&row.fork),
                           "block": block, "kind": row.kind, "severity": row.severity,
                           "level": level_name(row.level),
                           "database": (!row.database.is_empty()).then_some(&row.database),
                           "relation": (!row.relation.is_empty()).then_some(&row.relation),
                           "count": row.count, "message": row.message,
                           "first_seen": row.first_seen, "last_seen": row.last_seen,
                           "repaired_at": row.repaired_at})
                );
            } else {
                let place = match block {
                    Some(b) => format!("{} {} block {b}", row.file, fork_or_main(&row.fork)),
                    None => row.file.clone(),
                };
                let named = match (row.database.is_empty(), row.relation.is_empty()) {
                    (false, false) => {
                        format!(
                            " database \"{}\" relation \"{}\"",
                            row.database, row.relation
                        )
                    }
                    (false, true) => format!(" database \"{}\"", row.database),
                    _ => String::new(),
                };
                let repaired = match &row.repaired_at {
                    Some(at) => format!(", repaired {at}"),
                    None => String::new(),
                };
                println_text!(
                    "  {st:<8} {} {}: {}{named}: first seen {}, last seen {}{repaired}",
                    row.severity,
                    row.kind,
                    place,
                    row.first_seen,
                    row.last_seen
                );
            }
        }
    }
    if runs.is_empty() && !json {
        println_text!("{} holds no run yet", location.describe());
    }
    Ok(EXIT_OK)
}

fn fork_or_main(fork: &str) -> &str {
    if fork.is_empty() {
        "main"
    } else {
        fork
    }
}
