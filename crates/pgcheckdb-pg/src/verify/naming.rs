//! Puts names on a verification report: database, `schema.relation`, relation kind and access
//! method for every finding, plus the catalog's own problems, orphan files (with the reason no
//! committed catalog row owns them) and relation files that are missing.

use serde_json::json;

use crate::catalog::{Catalog, PendingRelation};
use crate::finding::{Finding, FindingKind, RelationRef, Severity};
use crate::format::control::DbState;
use crate::format::relfile::ForkNumber;
use crate::plan::Plan;
use crate::verify::report::VerifyReport;

/// Annotates every finding and adds catalog findings, orphan files and missing files; keeps the
/// order stable.
pub fn name_findings(report: &mut VerifyReport, plan: &Plan, catalog: &Catalog) {
    name_findings_with(report, catalog, listing_findings(plan, catalog));
}

/// The findings that come from comparing the catalog with the listing alone (orphan and
/// missing files), and the catalog's own: they need no block, so `verify` finds them on a
/// thread of their own while the scan runs.
pub fn listing_findings(plan: &Plan, catalog: &Catalog) -> Vec<Finding> {
    let mut out = catalog.findings.clone();
    out.extend(orphan_files(plan, catalog));
    out.extend(crate::verify::missing::missing_files(plan, catalog));
    out
}

/// [`name_findings`] with the [`listing_findings`] found beforehand.
pub fn name_findings_with(report: &mut VerifyReport, catalog: &Catalog, listed: Vec<Finding>) {
    report.findings.extend(listed);
    for f in &mut report.findings {
        catalog.annotate(f);
    }
    report
        .findings
        .sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    report.summary.findings = report.findings.len() as u64;
}

/// Non-empty main forks that no `pg_class` row of a readable database owns.
fn orphan_files(plan: &Plan, catalog: &Catalog) -> Vec<Finding> {
    let named_dbs = databases_with_relations(catalog);
    let mut out = Vec::new();
    for (fi, fork) in plan.forks.iter().enumerate() {
        if fork.fork != ForkNumber::Main || plan.fork_blocks[fi] == 0 {
            continue;
        }
        let db = fork.location.db_oid();
        let first = &plan.dir.files[fork.segments().start];
        if named_dbs.binary_search(&db).is_err()
            || catalog.incomplete_databases.contains(&db)
            || catalog.relation_of(first).is_some()
        {
            continue;
        }
        let blocks = plan.fork_blocks[fi];
        let pending = catalog.pending_of(first);
        let (why, mut detail) = orphan_reason(pending, plan, catalog);
        detail["blocks"] = json!(blocks);
        let mut f = Finding::for_file(
            FindingKind::OrphanFile,
            Severity::Info,
            &first.rel_path(),
            format!("no committed catalog row owns this file ({blocks} blocks): {why}"),
        )
        .with_detail(detail)
        .at_segment(first.name.segno);
        f.fork = Some(ForkNumber::Main);
        f.database = Some(crate::finding::DatabaseRef {
            oid: Some(db),
            name: None,
        });
        f.relation = Some(RelationRef {
            filenode: Some(fork.relfilenode),
            oid: pending.map(|p| p.oid),
            name: pending.map(|p| p.name.clone()),
            kind: pending.map(|p| p.kind.name()),
        });
        out.push(f);
    }
    out
}

/// The databases the catalog names relations of, sorted. Relations come database by database,
/// so only a change of database is looked up.
fn databases_with_relations(catalog: &Catalog) -> Vec<u32> {
    let mut dbs: Vec<u32> = Vec::new();
    let mut last = None;
    for &(db, _, _) in catalog.relations.keys() {
        if last != Some(db) && !dbs.contains(&db) {
            dbs.push(db);
        }
        last = Some(db);
    }
    dbs.sort_unstable();
    dbs
}

/// Why no committed row owns a file, and the facts behind it as `detail`.
fn orphan_reason(
    pending: Option<&PendingRelation>,
    plan: &Plan,
    catalog: &Catalog,
) -> (String, serde_json::Value) {
    let standby = plan.control.state == DbState::ShutdownedInRecovery;
    let Some(p) = pending else {
        return if standby {
            (
                "catalog rows for this file may not be flushed yet (standby shut down in recovery)"
                    .into(),
                json!({"reason": "standby_not_flushed"}),
            )
        } else {
            (
                "probably left behind by a crash".into(),
                json!({"reason": "no_catalog_row"}),
            )
        };
    };
    let what = format!("{} {}", p.kind.name().replace('_', " "), p.name);
    if let Some(x) = catalog.prepared_xact(p.xmin) {
        let gid = x
            .gid
            .as_deref()
            .map(|g| format!(" '{g}'"))
            .unwrap_or_default();
        return (
            format!(
                "created as {what} by prepared transaction {}{gid}, which has not committed yet",
                x.xid
            ),
            json!({"reason": "prepared_transaction", "xid": x.xid, "gid": x.gid}),
        );
    }
    if standby {
        return (
            format!("created as {what} by transaction {}, not committed as far as this standby's files show (standby shut down in recovery: it may still run on the primary, or its commit may not be flushed yet)", p.xmin),
            json!({"reason": "standby_not_flushed", "xid": p.xmin}),
        );
    }
    (
        format!(
            "created as {what} by transaction {}, which never committed; left behind by a crash",
            p.xmin
        ),
        json!({"reason": "uncommitted_transaction", "xid": p.xmin}),
    )
}
