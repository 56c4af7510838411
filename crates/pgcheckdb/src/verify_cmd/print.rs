//! What `verify` prints: the report on stdout (findings and summary, text or JSON), the
//! per-relation lines of `-v`, and the lines on stderr around the steps (the opening lines,
//! the missing-locale warnings, `-v`'s lists of what a check left out, the findings a base
//! backup sets aside).

use std::io::{self, Write};

use pgcheckdb_pg::check::extended::tids::TidNotChecked;
use pgcheckdb_pg::check::extended::ExtendedPlan;
use pgcheckdb_pg::check::structure::Structure;
use pgcheckdb_pg::finding::{Finding, Severity};
use pgcheckdb_pg::format::control::ControlFile;
use pgcheckdb_pg::verify::options::Level;
use pgcheckdb_pg::verify::relstats::RelationSummary;
use pgcheckdb_pg::verify::report::Summary;
use pgcheckdb_report::{
    not_structure_checked_lines, text_line, write_finding, write_findings_text, write_summary,
    Format, TEXT_FINDINGS_PER_PAGE,
};

/// The findings and the summary on stdout.
pub fn report(
    format: Format,
    quiet: bool,
    findings: &[Finding],
    summary: &Summary,
) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match format {
        Format::Json => {
            for f in findings {
                write_finding(&mut out, format, f)?;
            }
            write_summary(&mut out, format, summary, findings)?;
        }
        Format::Text => report_text(&mut out, quiet, findings, summary)?,
    }
    out.flush()
}

/// The text report; `-q`: findings and errors only (no info findings, no closing sentence).
fn report_text(
    out: &mut impl Write,
    quiet: bool,
    findings: &[Finding],
    summary: &Summary,
) -> io::Result<()> {
    let shown: Vec<Finding> = findings
        .iter()
        .filter(|f| !quiet || f.severity != Severity::Info)
        .cloned()
        .collect();
    write_findings_text(out, &shown, TEXT_FINDINGS_PER_PAGE)?;
    if quiet {
        return Ok(());
    }
    if let Some(b) = &summary.backup {
        text_line(out, &format!("pgcheckdb: {}", b.text_line()))?;
    }
    if let Some(c) = &summary.crash_recovery {
        text_line(out, &format!("pgcheckdb: {}", c.text_line()))?;
    }
    if let Some(o) = &summary.online {
        text_line(out, &format!("pgcheckdb: {}", o.text_line()))?;
    }
    for line in not_structure_checked_lines(summary) {
        text_line(out, &line)?;
    }
    write_summary(out, Format::Text, summary, findings)
}

/// The verbose per-relation lines, as CHECKDB's "There are N rows in M pages for object X":
/// text on stderr with the other `-v` lines (so `2>>verify.log` keeps them off the terminal),
/// JSON `relation` objects on stdout, in the JSON Lines stream before the summary.
pub fn relations(format: Format, relations: &[RelationSummary]) -> io::Result<()> {
    match format {
        Format::Json => {
            let stdout = io::stdout();
            let mut out = io::BufWriter::new(stdout.lock());
            for r in relations {
                let mut v = serde_json::to_value(r).map_err(io::Error::other)?;
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("type".into(), "relation".into());
                }
                serde_json::to_writer(&mut out, &v).map_err(io::Error::other)?;
                writeln!(out)?;
            }
            out.flush()
        }
        Format::Text => {
            let stderr = io::stderr();
            let mut out = io::BufWriter::new(stderr.lock());
            for r in relations {
                text_line(&mut out, &format!("pgcheckdb: {}", relation_text(r)))?;
            }
            out.flush()
        }
    }
}

fn relation_text(r: &RelationSummary) -> String {
    let db = match (&r.database, r.database_oid) {
        (Some(name), _) => name.clone(),
        (None, 0) => "shared catalogs".to_string(),
        (None, oid) => format!("database {oid}"),
    };
    let what = match (&r.relation, &r.kind) {
        (Some(name), Some(kind)) => format!("{name} ({kind})"),
        (Some(name), None) => name.clone(),
        _ => format!("relfilenode {}", r.filenode),
    };
    let rows = match (r.tuples, r.kind.as_deref()) {
        (Some(n), Some("index")) => format!("{n} index entries in "),
        (Some(n), _) => format!("{n} rows in "),
        (None, _) => String::new(),
    };
    format!(
        "{db}: there are {rows}{} pages for {what} ({} pages in all forks)",
        r.pages, r.pages_all_forks
    )
}

/// The opening lines of the text format.
pub fn announce(control: &ControlFile, level: Level, jobs: usize) {
    eprintln_text!(
        "pgcheckdb: PostgreSQL {}, block size {}, segment size {} blocks, data checksums {}, {} jobs",
        control.major.map_or("?".to_string(), |m| m.to_string()),
        control.blcksz,
        control.relseg_size,
        control.checksum_state(),
        jobs
    );
    if control.data_checksum_version == 0 {
        let what = match level {
            Level::Physical => "page headers only",
            _ => "page headers and the structure inside pages",
        };
        eprintln_text!("pgcheckdb: data checksums are off in this cluster: checking {what}");
    }
}

/// The warnings about the structure checks, and with `verbose` what each check left out.
pub fn structure_notes(structure: &Structure<'_>, extended: Option<&ExtendedPlan>, verbose: bool) {
    warn_missing_locales(structure);
    if !verbose {
        return;
    }
    list_not_order_checked(structure);
    if let Some(ext) = extended {
        let (tids, graphs) = (&ext.tids, &ext.graphs);
        let (n, skipped) = (tids.indexes.len(), &tids.not_checked);
        list_not_checked("index -> heap TIDs", "TIDs not checked", n, skipped);
        let (n, skipped) = (graphs.indexes.len(), &graphs.not_checked);
        let what = "index graphs (hash, GiST, SP-GiST, GIN, BRIN)";
        list_not_checked(what, "graph not checked", n, skipped);
    }
}

/// One warning per libc locale that B-tree indexes use and this machine lacks: their keys are
/// not order-checked (counted in the summary's `keys_not_order_checked`).
fn warn_missing_locales(structure: &Structure<'_>) {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, _, why) in &structure.not_order_checked {
        if let Some(locale) = why.missing_locale() {
            *counts.entry(locale).or_default() += 1;
        }
    }
    for (locale, n) in counts {
        eprintln_text!(
            "pgcheckdb: warning: locale \"{locale}\" is not installed on this machine: the keys of {n} B-tree index(es) using it are not order-checked"
        );
    }
}

/// `--verbose`: how many indexes a check of the extended level covered, and each one it left
/// out, with the reason (`check` names the check, `each` starts the line of one left out).
fn list_not_checked(check: &str, each: &str, checked: usize, not_checked: &[TidNotChecked]) {
    eprintln_text!(
        "pgcheckdb: {check}: {checked} index(es) checked, {} not checked",
        not_checked.len()
    );
    for n in not_checked {
        eprintln_text!("pgcheckdb: {each}: index {}: {}", n.index, n.reason);
    }
}

/// `--verbose`: each B-tree index whose keys are not order-checked, with the reason.
fn list_not_order_checked(structure: &Structure<'_>) {
    let checked = structure
        .files
        .iter()
        .flatten()
        .filter(|f| f.btree_order.is_some())
        .count();
    eprintln_text!(
        "pgcheckdb: B-tree key order: {checked} index file(s) checked, {} index(es) not order-checked",
        structure.not_order_checked.len()
    );
    for (index, db_oid, why) in &structure.not_order_checked {
        eprintln_text!(
            "pgcheckdb: keys not order-checked: index {index} (database {db_oid}): {why}"
        );
    }
}

/// `--verbose`: each finding a base backup set aside.
pub fn set_aside(findings: &[Finding]) {
    for f in findings {
        eprintln_text!(
            "pgcheckdb: set aside (replay rewrites it): {} {} block {}: {}",
            f.kind.name(),
            f.file,
            f.block.map_or("-".to_string(), |b| b.to_string()),
            f.message
        );
    }
}
