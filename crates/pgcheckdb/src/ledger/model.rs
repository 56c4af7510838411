//! What a run changes in the ledger, decided without a database: the findings reduced to
//! ledger keys ([`observations`]), and which open entries a run sees again, which it finds for
//! the first time and which it may call repaired ([`diff`]). Both stores apply the result.

use std::collections::BTreeMap;

use pgcheckdb_pg::finding::{Finding, Severity};
use pgcheckdb_pg::format::relfile::parse_relation_file_name;

/// The place and kind of one damage: a relation file (its first segment's path, which names
/// the relation and its fork), the fork, the absolute block (-1 for the file as a whole) and
/// the finding kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub file: String,
    pub fork: String,
    pub block: i64,
    pub kind: String,
}

/// One key as a run found it: findings of one kind at one block collapse into one.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub key: Key,
    pub severity: String,
    pub database: String,
    pub relation: String,
    pub message: String,
    /// Findings of this run under the key.
    pub count: i64,
}

/// An open entry of the ledger, as much as [`diff`] needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Open {
    pub id: i64,
    pub key: Key,
    /// The lowest level of a run that found it.
    pub level: u8,
    /// The scope of the last run that found it ("" for the whole cluster).
    pub scope: String,
}

/// The run being recorded.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub host: String,
    pub system_identifier: String,
    pub pgdata: String,
    pub started_at: String,
    pub finished_at: String,
    /// 1 physical, 2 standard, 3 extended.
    pub level: u8,
    /// The scope flags as one canonical text, "" for the whole cluster.
    pub scope: String,
    /// Whether the run checked everything its scope and level cover: not interrupted, no tool
    /// error, no skipped file or block. Only a complete run repairs.
    pub complete: bool,
}

/// What a run changes.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// Found for the first time (or again after a repair): new entries.
    pub new: Vec<Observed>,
    /// Open entries found again: (entry id, lowest level now, what was found).
    pub seen: Vec<(i64, u8, Observed)>,
    /// Open entries this run checked and no longer found.
    pub repaired: Vec<i64>,
    /// Open entries this run did not check (another scope, a deeper level, incomplete run).
    pub unchecked: usize,
}

/// The level's rank in the ledger.
pub fn level_rank(name: &str) -> u8 {
    match name {
        "physical" => 1,
        "standard" => 2,
        _ => 3,
    }
}

/// The level's name.
pub fn level_name(rank: u8) -> &'static str {
    match rank {
        1 => "physical",
        2 => "standard",
        _ => "extended",
    }
}

/// The relation file of a finding's file: the segment number dropped
/// (`base/5/16384_vm.2` -> `base/5/16384_vm`); a file that is no relation file is kept as is.
pub fn relation_file(file: &str) -> String {
    let (dir, name) = match file.rsplit_once('/') {
        Some((d, n)) => (Some(d), n),
        None => (None, file),
    };
    let Some(mut parsed) = parse_relation_file_name(name) else {
        return file.to_string();
    };
    parsed.segno = 0;
    match dir {
        Some(d) => format!("{d}/{parsed}"),
        None => parsed.to_string(),
    }
}

/// The damage among a run's findings (errors and warnings; info findings are no damage), one
/// [`Observed`] per key, in key order.
pub fn observations(findings: &[Finding]) -> Vec<Observed> {
    let mut by_key: BTreeMap<Key, Observed> = BTreeMap::new();
    for f in findings {
        let severity = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => continue,
        };
        let key = Key {
            file: relation_file(&f.file),
            fork: f.fork.map_or("", |k| k.name()).to_string(),
            block: f.block.map_or(-1, |b| b as i64),
            kind: f.kind.name().to_string(),
        };
        let entry = by_key.entry(key.clone()).or_insert_with(|| Observed {
            key,
            severity: severity.to_string(),
            database: f
                .database
                .as_ref()
                .and_then(|d| d.name.clone())
                .unwrap_or_default(),
            relation: f
                .relation
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default(),
            message: f.message.clone(),
            count: 0,
        });
        if severity == "error" {
            entry.severity = "error".to_string();
        }
        entry.count += 1;
    }
    by_key.into_values().collect()
}

/// Whether `run` checked what `entry` is about: a complete run, at the entry's level or
/// deeper, over the whole cluster or over the same scope as the run that last found it.
pub fn checks(run: &RunInfo, entry: &Open) -> bool {
    run.complete && run.level >= entry.level && (run.scope.is_empty() || run.scope == entry.scope)
}

/// What `run`, which found `found`, changes in a ledger whose open entries for its host and
/// cluster are `open`.
pub fn diff(open: &[Open], found: Vec<Observed>, run: &RunInfo) -> Changes {
    let mut by_key: BTreeMap<&Key, &Open> = open.iter().map(|o| (&o.key, o)).collect();
    let mut changes = Changes::default();
    for o in found {
        match by_key.remove(&o.key) {
            Some(entry) => changes.seen.push((entry.id, entry.level.min(run.level), o)),
            None => changes.new.push(o),
        }
    }
    for entry in by_key.into_values() {
        if checks(run, entry) {
            changes.repaired.push(entry.id);
        } else {
            changes.unchecked += 1;
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(file: &str, block: i64) -> Key {
        Key {
            file: file.into(),
            fork: "main".into(),
            block,
            kind: "checksum_mismatch".into(),
        }
    }

    fn seen(file: &str, block: i64) -> Observed {
        Observed {
            key: key(file, block),
            severity: "error".into(),
            database: "postgres".into(),
            relation: "public.t".into(),
            message: "m".into(),
            count: 1,
        }
    }

    fn open(id: i64, file: &str, block: i64, level: u8, scope: &str) -> Open {
        Open {
            id,
            key: key(file, block),
            level,
            scope: scope.into(),
        }
    }

    fn run(level: u8, scope: &str, complete: bool) -> RunInfo {
        RunInfo {
            host: "h".into(),
            system_identifier: "1".into(),
            pgdata: "/d".into(),
            started_at: String::new(),
            finished_at: String::new(),
            level,
            scope: scope.into(),
            complete,
        }
    }

    #[test]
    fn relation_files_drop_the_segment_only() {
        assert_eq!(relation_file("base/5/16384.2"), "base/5/16384");
        assert_eq!(relation_file("base/5/16384_vm.1"), "base/5/16384_vm");
        assert_eq!(relation_file("global/1262"), "global/1262");
        assert_eq!(relation_file("global/pg_control"), "global/pg_control");
        assert_eq!(
            relation_file("pg_tblspc/16390/PG_16_1/5/t3_16391.1"),
            "pg_tblspc/16390/PG_16_1/5/t3_16391"
        );
    }

    #[test]
    fn a_whole_run_sees_new_and_repairs_the_rest() {
        let open = [open(1, "base/5/1", 3, 1, ""), open(2, "base/5/1", 4, 1, "")];
        let c = diff(
            &open,
            vec![seen("base/5/1", 3), seen("base/5/2", 0)],
            &run(2, "", true),
        );
        assert_eq!(c.new, vec![seen("base/5/2", 0)]);
        assert_eq!(c.seen.len(), 1);
        assert_eq!((c.seen[0].0, c.seen[0].1), (1, 1));
        assert_eq!(c.repaired, vec![2]);
        assert_eq!(c.unchecked, 0);
    }

    #[test]
    fn narrower_lower_or_incomplete_runs_repair_nothing() {
        let entries = [
            open(1, "base/5/1", 3, 2, ""),
            open(2, "base/5/1", 4, 2, "-t a"),
        ];
        // A lower level checks neither.
        let c = diff(&entries, Vec::new(), &run(1, "", true));
        assert!(c.repaired.is_empty());
        assert_eq!(c.unchecked, 2);
        // Another scope repairs only what that scope last found.
        let c = diff(&entries, Vec::new(), &run(2, "-t a", true));
        assert_eq!(c.repaired, vec![2]);
        // An incomplete run repairs nothing, even over the whole cluster.
        let c = diff(&entries, Vec::new(), &run(3, "", false));
        assert!(c.repaired.is_empty());
        // A deeper run over the whole cluster repairs both.
        let c = diff(&entries, Vec::new(), &run(3, "", true));
        assert_eq!(c.repaired, vec![1, 2]);
    }
}
