//! What a DBA does about the findings: one `hint:` line per class of damage (index, table,
//! TOAST, sequence, visibility map, free space map, the rest), naming the relations and the
//! command, and the least repair that covers everything found, as CHECKDB names its minimum
//! repair level.

use std::collections::BTreeMap;

use pgcheckdb_pg::finding::{Finding, FindingKind, Severity};
use pgcheckdb_pg::format::relfile::ForkNumber;

/// The class of damage a finding belongs to; each has one line of advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Damage {
    /// An index page: rebuild the index, no data is lost.
    Index,
    /// The visibility map: truncate it and let VACUUM rebuild it.
    VisibilityMap,
    /// The free space map: VACUUM rebuilds it.
    FreeSpaceMap,
    /// A table's (or materialized view's) pages: rows are lost or wrong.
    Heap,
    /// A TOAST table: out-of-line values of its table are lost.
    Toast,
    /// A sequence page.
    Sequence,
    /// Anything not tied to one relation's pages (catalogs, directories, unnamed files).
    Other,
}

impl Damage {
    /// Whether repairing this class loses data (restore or salvage) rather than rebuilding.
    pub fn loses_data(self) -> bool {
        !matches!(
            self,
            Damage::Index | Damage::VisibilityMap | Damage::FreeSpaceMap
        )
    }
}

/// The class of a finding, `None` for `info` findings (nothing to repair).
pub fn class_of(f: &Finding) -> Option<Damage> {
    if f.severity == Severity::Info {
        return None;
    }
    match f.kind {
        FindingKind::VisibilityMapInvalid => return Some(Damage::VisibilityMap),
        FindingKind::FreeSpaceMapInvalid => return Some(Damage::FreeSpaceMap),
        _ => {}
    }
    match f.fork {
        Some(ForkNumber::Vm) => return Some(Damage::VisibilityMap),
        Some(ForkNumber::Fsm) => return Some(Damage::FreeSpaceMap),
        _ => {}
    }
    match f.kind {
        FindingKind::BtreePageInvalid
        | FindingKind::BtreeItemInvalid
        | FindingKind::IndexPageInvalid => return Some(Damage::Index),
        FindingKind::SequencePageInvalid => return Some(Damage::Sequence),
        _ => {}
    }
    let kind = f.relation.as_ref().and_then(|r| r.kind.as_deref());
    Some(match kind {
        Some("index") | Some("partitioned_index") => Damage::Index,
        Some("toast_table") => Damage::Toast,
        Some("table") | Some("materialized_view") => Damage::Heap,
        Some("sequence") => Damage::Sequence,
        _ => Damage::Other,
    })
}

/// The table that owns an index or TOAST table (`detail.table`, from the catalogs).
pub fn owning_table(f: &Finding) -> Option<&str> {
    f.detail.get("table").and_then(|t| t.as_str())
}

/// `schema.name` quoted for SQL where a part needs it.
pub fn sql_name(name: &str) -> String {
    match name.split_once('.') {
        Some((schema, rel)) => format!("{}.{}", quote_ident(schema), quote_ident(rel)),
        None => quote_ident(name),
    }
}

fn quote_ident(part: &str) -> String {
    let plain = part
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && part
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if plain {
        part.to_string()
    } else {
        format!("\"{}\"", part.replace('"', "\"\""))
    }
}

/// How many relations one hint names before "and N more".
const NAMED_PER_HINT: usize = 8;

/// The relations of one class, by name (or by file when unnamed), with their owning table.
fn relations_of(findings: &[Finding], class: Damage) -> BTreeMap<String, Option<String>> {
    findings
        .iter()
        .filter(|f| class_of(f) == Some(class))
        .map(|f| {
            let name = f
                .relation
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_else(|| format!("file \"{}\"", f.file));
            (name, owning_table(f).map(str::to_string))
        })
        .collect()
}

/// Joins up to `NAMED_PER_HINT` items with `sep`, then "and N more".
fn capped(items: Vec<String>, sep: &str) -> String {
    let n = items.len();
    let mut text = items
        .into_iter()
        .take(NAMED_PER_HINT)
        .collect::<Vec<_>>()
        .join(sep);
    if n > NAMED_PER_HINT {
        text.push_str(&format!(" (and {} more)", n - NAMED_PER_HINT));
    }
    text
}

/// Whether a name is that of a relation (not `file "..."`), so SQL can name it.
fn is_relation(name: &str) -> bool {
    !name.starts_with("file \"")
}

/// One line of advice for one class.
fn hint(class: Damage, rels: &BTreeMap<String, Option<String>>) -> String {
    let names = || capped(rels.keys().cloned().collect(), ", ");
    match class {
        Damage::Index => {
            let commands: Vec<String> = rels
                .keys()
                .map(|name| {
                    if !is_relation(name) {
                        format!("(unnamed {name}: find its index with the server running)")
                    } else if name.starts_with("pg_catalog.") {
                        // System catalog indexes cannot be rebuilt concurrently.
                        format!("REINDEX INDEX {};", sql_name(name))
                    } else {
                        format!("REINDEX INDEX CONCURRENTLY {};", sql_name(name))
                    }
                })
                .collect();
            format!(
                "hint: index damage (no data lost, the table is intact): with the server running, rebuild: {}",
                capped(commands, " ")
            )
        }
        Damage::VisibilityMap => {
            let commands: Vec<String> = rels
                .keys()
                .map(|name| {
                    if is_relation(name) {
                        let table = sql_name(name);
                        format!(
                            "SELECT pg_truncate_visibility_map('{}'); VACUUM {table};",
                            table.replace('\'', "''")
                        )
                    } else {
                        format!("(unnamed {name}: find its table with the server running)")
                    }
                })
                .collect();
            format!(
                "hint: visibility map damage ({}): with the server running, CREATE EXTENSION pg_visibility; then rebuild each map: {}",
                names(),
                capped(commands, " ")
            )
        }
        Damage::FreeSpaceMap => format!(
            "hint: free space map damage ({}): VACUUM the table rebuilds its free space map; the server tolerates a wrong one meanwhile",
            names()
        ),
        Damage::Heap => format!(
            "hint: table damage ({}): rows on the damaged pages are lost or wrong; restore the table from a backup (or point-in-time recovery), or salvage the readable rows on a copy of the cluster (zero_damaged_pages, pg_surgery's heap_force_kill for single tuples) and then rebuild its indexes",
            names()
        ),
        Damage::Toast => {
            let owners: Vec<String> = rels
                .iter()
                .map(|(toast, owner)| match owner {
                    Some(t) => format!("{toast} of table {t}"),
                    None => toast.clone(),
                })
                .collect();
            format!(
                "hint: TOAST damage ({}): long values of the table are lost; restore the table from a backup, or on a copy of the cluster find the rows whose values cannot be read and delete or update them",
                capped(owners, ", ")
            )
        }
        Damage::Sequence => format!(
            "hint: sequence damage ({}): recreate the sequence and setval() it past the highest value in use",
            names()
        ),
        Damage::Other => format!(
            "hint: damage outside a single relation's pages ({}): copy the data directory before anything else, then restore the damaged files or the cluster from a backup",
            names()
        ),
    }
}

/// The advice for a set of findings: one hint per class found, then the minimum repair.
pub fn hints(findings: &[Finding]) -> Vec<String> {
    let classes: std::collections::BTreeSet<Damage> =
        findings.iter().filter_map(class_of).collect();
    if classes.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<String> = classes
        .iter()
        .map(|&c| hint(c, &relations_of(findings, c)))
        .collect();
    let minimum = if classes.iter().any(|c| c.loses_data()) {
        "restore from a backup or salvage (data on the damaged pages is lost)"
    } else {
        "rebuild (REINDEX / VACUUM: no data is lost)"
    };
    lines.push(format!(
        "hint: minimum repair for everything found: {minimum}"
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgcheckdb_pg::finding::RelationRef;
    use serde_json::json;

    fn on(kind: FindingKind, relkind: &str, name: &str, table: Option<&str>) -> Finding {
        let mut f = Finding::for_file(kind, Severity::Error, "base/5/1", "x".into());
        f.fork = Some(ForkNumber::Main);
        f.relation = Some(RelationRef {
            name: Some(name.into()),
            kind: Some(relkind.into()),
            ..Default::default()
        });
        if let Some(t) = table {
            f.detail = json!({ "table": t });
        }
        f
    }

    #[test]
    fn index_damage_names_reindex_and_no_data_loss() {
        let f = on(
            FindingKind::BtreePageInvalid,
            "index",
            "public.Orders_pkey",
            Some("public.Orders"),
        );
        let lines = hints(&[f]);
        assert!(
            lines[0].contains("REINDEX INDEX CONCURRENTLY public.\"Orders_pkey\";"),
            "{lines:?}"
        );
        assert!(lines[1].contains("no data is lost"), "{lines:?}");
    }

    #[test]
    fn heap_and_catalog_index_damage() {
        let lines = hints(&[
            on(FindingKind::LinePointerInvalid, "table", "public.t", None),
            on(
                FindingKind::BtreeItemInvalid,
                "index",
                "pg_catalog.pg_class_oid_index",
                None,
            ),
        ]);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("REINDEX INDEX pg_catalog.pg_class_oid_index;")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("table damage (public.t)")),
            "{lines:?}"
        );
        assert!(
            lines
                .last()
                .is_some_and(|l| l.contains("restore from a backup")),
            "{lines:?}"
        );
    }

    #[test]
    fn visibility_map_hint_names_the_table_in_its_sql() {
        let lines = hints(&[on(
            FindingKind::VisibilityMapInvalid,
            "table",
            "public.O'rders",
            None,
        )]);
        let vm = lines
            .iter()
            .find(|l| l.contains("visibility map damage"))
            .expect("a visibility map hint");
        assert!(
            vm.contains(
                "SELECT pg_truncate_visibility_map('public.\"O''rders\"'); VACUUM public.\"O'rders\";"
            ),
            "{lines:?}"
        );
        assert!(!vm.contains("<table>"), "{lines:?}");
    }

    #[test]
    fn info_findings_get_no_advice() {
        let mut f = on(FindingKind::OrphanFile, "table", "public.t", None);
        f.severity = Severity::Info;
        assert!(hints(&[f]).is_empty());
    }
}
