//! Puts names on a verification report: database, `schema.relation`, relation kind and access
//! method for every finding, plus the catalog's own problems and orphan files.

use std::collections::HashSet;

use crate::catalog::Catalog;
use crate::finding::{Finding, FindingKind, Severity};
use crate::relfile::ForkNumber;
use crate::verify::{Plan, VerifyReport};

/// Annotates every finding and adds catalog findings and orphan files; keeps the order stable.
pub fn name_findings(report: &mut VerifyReport, plan: &Plan, catalog: &Catalog) {
    report.findings.extend(catalog.findings.iter().cloned());
    report.findings.extend(orphan_files(plan, catalog));
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
    let named_dbs: HashSet<u32> = catalog.relations.keys().map(|(db, _, _)| *db).collect();
    let mut out = Vec::new();
    for (fi, fork) in plan.forks.iter().enumerate() {
        if fork.fork != ForkNumber::Main || plan.fork_blocks[fi] == 0 {
            continue;
        }
        let db = fork.location.db_oid();
        let first = &plan.dir.files[fork.segments[0]];
        if !named_dbs.contains(&db)
            || catalog.incomplete_databases.contains(&db)
            || catalog
                .relation_for_file(&first.rel_path, db, fork.relfilenode)
                .is_some()
        {
            continue;
        }
        let mut f = Finding::for_file(
            FindingKind::OrphanFile,
            Severity::Info,
            &first.rel_path,
            format!(
                "no catalog row owns this file ({} blocks); probably left behind by a crash",
                plan.fork_blocks[fi]
            ),
        )
        .with_detail(serde_json::json!({"blocks": plan.fork_blocks[fi]}))
        .at_segment(first.name.segno);
        f.fork = Some(ForkNumber::Main);
        f.database = Some(crate::finding::DatabaseRef {
            oid: Some(db),
            name: None,
        });
        f.relation = Some(crate::finding::RelationRef {
            filenode: Some(fork.relfilenode),
            ..Default::default()
        });
        out.push(f);
    }
    out
}
