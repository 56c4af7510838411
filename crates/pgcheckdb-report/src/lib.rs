//! Renders findings and summaries: PostgreSQL-style text for people, JSON Lines for scripts
//! (the contract of docs/OUTPUT.md: one `finding` object per line, then one `summary`).

use std::collections::BTreeSet;
use std::io::{self, Write};

use pgcheckdb_pg::finding::{Finding, Severity};
use pgcheckdb_pg::verify::report::Summary;
use serde::Serialize;

pub mod advice;
pub mod escape;
pub mod prometheus;

use escape::escape_control;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

/// Writes one finding.
pub fn write_finding(out: &mut dyn Write, format: Format, f: &Finding) -> io::Result<()> {
    match format {
        Format::Json => json_line(out, "finding", f),
        Format::Text => text_line(out, &finding_text(f)),
    }
}

/// Writes the summary (last line of the JSON stream).
pub fn write_summary(
    out: &mut dyn Write,
    format: Format,
    s: &Summary,
    findings: &[Finding],
) -> io::Result<()> {
    match format {
        Format::Json => json_line(out, "summary", s),
        Format::Text => text_line(out, &summary_text(s, findings)),
    }
}

/// Writes one line of text, its control characters escaped ([`escape::escape_control`]).
pub fn text_line(out: &mut dyn Write, line: &str) -> io::Result<()> {
    writeln!(out, "{}", escape_control(line))
}

fn json_line<T: Serialize>(out: &mut dyn Write, kind: &'static str, body: &T) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &Tagged { kind, body }).map_err(io::Error::other)?;
    out.write_all(b"\n")
}

fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// Names the relation a finding is about, as precisely as known.
fn relation_text(f: &Finding) -> String {
    let mut parts = Vec::new();
    if let Some(db) = &f.database {
        match (&db.name, db.oid) {
            (Some(name), _) => parts.push(format!("database \"{name}\"")),
            (None, Some(0)) => parts.push("shared catalogs".to_string()),
            (None, Some(oid)) => parts.push(format!("database {oid}")),
            (None, None) => {}
        }
    }
    if let Some(rel) = &f.relation {
        match (&rel.name, rel.filenode) {
            (Some(name), _) => parts.push(named_relation(f, name)),
            (None, Some(node)) => parts.push(format!("relfilenode {node}")),
            (None, None) => {}
        }
    }
    if let Some(fork) = f.fork {
        parts.push(format!("fork {}", fork.name()));
    }
    parts.join(", ")
}

/// `relation "public.orders_pkey" (index of table "public.orders")`: an index or TOAST
/// relation also names the table a DBA acts on.
fn named_relation(f: &Finding, name: &str) -> String {
    let kind = f.relation.as_ref().and_then(|r| r.kind.as_deref());
    match (kind, advice::owning_table(f)) {
        (Some("index") | Some("partitioned_index"), Some(t)) => {
            format!("relation \"{name}\", index of table \"{t}\"")
        }
        (Some("toast_table"), Some(t)) => {
            format!("relation \"{name}\", TOAST table of \"{t}\"")
        }
        _ => format!("relation \"{name}\""),
    }
}

/// At most this many findings of one page are listed in text; JSON lists all of them.
pub const TEXT_FINDINGS_PER_PAGE: usize = 10;

/// Writes findings as text: one line each, but several on one page are grouped under a line
/// naming the page, at most `per_page` of them listed; then the advice (`hint:` lines).
pub fn write_findings_text(
    out: &mut dyn Write,
    findings: &[Finding],
    per_page: usize,
) -> io::Result<()> {
    let mut rest = findings;
    while let Some(first) = rest.first() {
        let same_page = rest
            .iter()
            .take_while(|f| first.block.is_some() && f.file == first.file && f.block == first.block)
            .count()
            .max(1);
        let (page, tail) = rest.split_at(same_page);
        if page.len() == 1 {
            text_line(out, &finding_text(first))?;
        } else {
            write_page_group(out, page, per_page)?;
        }
        rest = tail;
    }
    for line in advice::hints(findings) {
        text_line(out, &line)?;
    }
    Ok(())
}

/// `error: 57 findings on block 3 of "base/5/16384" (...):`, then the findings indented.
fn write_page_group(out: &mut dyn Write, page: &[Finding], per_page: usize) -> io::Result<()> {
    let first = &page[0];
    let worst = page
        .iter()
        .map(|f| f.severity)
        .min()
        .unwrap_or(first.severity);
    let rel = relation_text(first);
    let rel = if rel.is_empty() {
        String::new()
    } else {
        format!(" ({rel})")
    };
    let head = format!(
        "{}: {} findings on block {} of \"{}\"{rel}:",
        severity_word(worst),
        page.len(),
        first.block.unwrap_or(0),
        first.file
    );
    text_line(out, &head)?;
    for f in page.iter().take(per_page) {
        text_line(out, &format!("  {}", item_text(f)))?;
    }
    if page.len() > per_page {
        let more = page.len() - per_page;
        text_line(
            out,
            &format!("  ... and {more} more on this page (--format json lists every one)"),
        )?;
    }
    Ok(())
}

/// A finding inside its page's group: `offset 12: error: line_pointer_invalid: ...`.
fn item_text(f: &Finding) -> String {
    let mut at = Vec::new();
    if let Some(o) = f.offset {
        at.push(format!("offset {o}"));
    }
    if let Some(a) = f.attnum {
        at.push(format!("attribute {a}"));
    }
    let at = if at.is_empty() {
        String::new()
    } else {
        format!("{}: ", at.join(" "))
    };
    format!(
        "{at}{}: {}: {}",
        severity_word(f.severity),
        f.kind.name(),
        f.message
    )
}

/// One line: `error: checksum_mismatch in "base/5/16384.1" (database 5, relfilenode 16384, fork main) block 131075: ...`.
pub fn finding_text(f: &Finding) -> String {
    let mut line = format!(
        "{}: {} in \"{}\"",
        severity_word(f.severity),
        f.kind.name(),
        f.file
    );
    let rel = relation_text(f);
    if !rel.is_empty() {
        line.push_str(&format!(" ({rel})"));
    }
    if let Some(b) = f.block {
        line.push_str(&format!(" block {b}"));
    }
    if let Some(o) = f.offset {
        line.push_str(&format!(" offset {o}"));
    }
    if let Some(a) = f.attnum {
        line.push_str(&format!(" attribute {a}"));
    }
    line.push_str(": ");
    line.push_str(&f.message);
    line
}

/// Human size with one decimal: `2.3 GB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit < UNITS.len() - 1 {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// At most this many relations checked at the physical level only are listed in text; JSON
/// lists all of them.
pub const TEXT_NOT_STRUCTURE_CHECKED: usize = 20;

/// The lines before the closing sentence naming the relations that only the physical checks
/// covered, and why: `pgcheckdb: checked at the physical level only: database "postgres",
/// index "public.b_bloom": index access method "bloom" unknown to pgcheckdb`.
pub fn not_structure_checked_lines(s: &Summary) -> Vec<String> {
    let Some(list) = &s.not_structure_checked else {
        return Vec::new();
    };
    let mut lines: Vec<String> = list
        .iter()
        .take(TEXT_NOT_STRUCTURE_CHECKED)
        .map(|r| {
            format!(
                "pgcheckdb: checked at the physical level only: database \"{}\", {} \"{}\": {}",
                printable(&r.database),
                r.kind,
                printable(&r.relation),
                printable(&r.reason)
            )
        })
        .collect();
    if list.len() > TEXT_NOT_STRUCTURE_CHECKED {
        lines.push(format!(
            "pgcheckdb: ... and {} more relation(s) checked at the physical level only (--format json lists every one)",
            list.len() - TEXT_NOT_STRUCTURE_CHECKED
        ));
    }
    lines
}

/// `text` with control characters escaped (`\n`, `\u{1b}`), for a line of text output.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// The closing sentence, in the spirit of CHECKDB.
pub fn summary_text(s: &Summary, findings: &[Finding]) -> String {
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    let relations: BTreeSet<(Option<u32>, Option<u32>)> = errors
        .iter()
        .map(|f| {
            (
                f.database.as_ref().and_then(|d| d.oid),
                f.relation.as_ref().and_then(|r| r.filenode),
            )
        })
        .collect();
    let databases: BTreeSet<String> = errors
        .iter()
        .filter_map(|f| f.database.as_ref())
        .map(|d| match (&d.name, d.oid) {
            (Some(n), _) => format!("\"{n}\""),
            (None, Some(0)) => "(shared)".into(),
            (None, Some(o)) => o.to_string(),
            (None, None) => "?".into(),
        })
        .collect();
    let mut scanned = format!(
        "{} blocks, {} checked in {:.2} s, level {}, checksums {}",
        s.blocks,
        human_bytes(s.bytes),
        s.seconds,
        s.level,
        s.checksums
    );
    if let Some(x) = &s.extended {
        scanned += &format!(
            "; {} B-tree indexes checked across pages ({} not order-checked), {} TOAST values checked against their chunks, {} facts, {} spilled",
            x.indexes_checked,
            x.keys_not_order_checked,
            x.toast_values_checked,
            x.facts,
            human_bytes(x.spilled_bytes)
        );
    }
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let mut warn = if warnings > 0 {
        format!("; {warnings} warning(s)")
    } else {
        String::new()
    };
    if let Some(weak) = s
        .extended
        .as_ref()
        .and_then(|x| x.all_indexed_weak.as_ref())
        .filter(|w| !w.is_empty())
    {
        let worst = weak.iter().map(|w| w.miss_chance).fold(0.0, f64::max);
        let useless = weak
            .iter()
            .filter(|w| w.miss_chance >= pgcheckdb_pg::check::extended::USELESS_MISS_CHANCE)
            .count();
        let uncounted = match useless {
            0 => String::new(),
            n => format!(", {n} of them too weak to count as checked"),
        };
        warn.push_str(&format!(
            "; heap -> index of {} index(es) ran weakened by --memory (a lacking entry missed with chance up to {worst:.2}{uncounted}; raise --memory)",
            weak.len()
        ));
    }
    if let Some(n) = s.keys_not_order_checked.filter(|&n| n > 0) {
        warn.push_str(&format!(
            "; keys of {n} B-tree index(es) not order-checked (--verbose lists them)"
        ));
    }
    if let Some(n) = s.relations_not_structure_checked.filter(|&n| n > 0) {
        warn.push_str(&format!(
            "; {n} relation(s) of access methods pgcheckdb does not know checked at the physical level only"
        ));
    }
    if let Some(error) = &s.error {
        if errors.is_empty() {
            return format!(
                "pgcheckdb did not check everything ({error}): no corruption found in the part it checked ({scanned}){warn}"
            );
        }
    } else if errors.is_empty() {
        return format!("pgcheckdb found no corruption ({scanned}){warn}");
    }
    let other = errors.len() as u64 - s.corrupt_blocks.min(errors.len() as u64);
    let other_text = if other > 0 {
        format!(" and {other} other problem(s)")
    } else {
        String::new()
    };
    let db_word = if databases.len() == 1 {
        "database"
    } else {
        "databases"
    };
    if databases.is_empty() {
        return format!(
            "pgcheckdb found {} corrupt page(s){other_text} ({scanned}){warn}",
            s.corrupt_blocks
        );
    }
    format!(
        "pgcheckdb found {} corrupt page(s){other_text} in {} relation(s) of {db_word} {} ({scanned}){warn}",
        s.corrupt_blocks,
        relations.len(),
        databases.into_iter().collect::<Vec<_>>().join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgcheckdb_pg::finding::{DatabaseRef, FindingKind, RelationRef};
    use pgcheckdb_pg::format::relfile::ForkNumber;

    fn finding() -> Finding {
        let mut f = Finding::for_file(
            FindingKind::ChecksumMismatch,
            Severity::Error,
            "base/5/16384.1",
            "page verification failed".into(),
        )
        .with_detail(serde_json::json!({"expected": 18766, "calculated": 6527}))
        .at_segment(1);
        f.fork = Some(ForkNumber::Main);
        f.block = Some(131075);
        f.database = Some(DatabaseRef {
            oid: Some(5),
            name: None,
        });
        f.relation = Some(RelationRef {
            filenode: Some(16384),
            ..Default::default()
        });
        f
    }

    #[test]
    fn json_has_contract_fields() {
        let mut out = Vec::new();
        write_finding(&mut out, Format::Json, &finding()).expect("write");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["type"], "finding");
        assert_eq!(v["kind"], "checksum_mismatch");
        assert_eq!(v["severity"], "error");
        assert_eq!(v["fork"], "main");
        assert_eq!(v["segment"], 1);
        assert_eq!(v["block"], 131075);
        assert_eq!(v["database"]["oid"], 5);
        assert!(v["database"]["name"].is_null());
        assert_eq!(v["relation"]["filenode"], 16384);
        assert_eq!(v["detail"]["expected"], 18766);
    }

    #[test]
    fn text_names_file_block_and_relation() {
        let t = finding_text(&finding());
        assert_eq!(
            t,
            "error: checksum_mismatch in \"base/5/16384.1\" (database 5, relfilenode 16384, fork main) block 131075: page verification failed"
        );
    }

    #[test]
    fn summary_sentence() {
        let s = Summary {
            blocks: 10,
            bytes: 81920,
            corrupt_blocks: 1,
            level: "physical".into(),
            checksums: "on".into(),
            ..Default::default()
        };
        let text = summary_text(&s, &[finding()]);
        assert!(
            text.starts_with("pgcheckdb found 1 corrupt page(s) in 1 relation(s) of database 5"),
            "{text}"
        );
        assert!(summary_text(&s, &[]).starts_with("pgcheckdb found no corruption"));
        let incomplete = Summary {
            error: Some("could not read \"base/5\": Permission denied".into()),
            ..s
        };
        let text = summary_text(&incomplete, &[]);
        assert!(
            text.starts_with("pgcheckdb did not check everything")
                && !text.contains("found no corruption"),
            "{text}"
        );
    }

    #[test]
    fn relations_checked_at_the_physical_level_only() {
        use pgcheckdb_pg::check::structure::NotStructureChecked;
        let one = |i: usize| NotStructureChecked {
            database: "postgres".into(),
            relation: format!("public.i\n{i}"),
            kind: "index".into(),
            access_method: Some("bloom".into()),
            reason: "index access method \"bloom\" unknown to pgcheckdb".into(),
        };
        let mut s = Summary::default();
        assert!(not_structure_checked_lines(&s).is_empty());
        s.relations_not_structure_checked = Some(1);
        s.not_structure_checked = Some(vec![one(0)]);
        assert_eq!(
            not_structure_checked_lines(&s),
            ["pgcheckdb: checked at the physical level only: database \"postgres\", index \"public.i\\n0\": index access method \"bloom\" unknown to pgcheckdb"]
        );
        assert!(summary_text(&s, &[]).ends_with(
            "; 1 relation(s) of access methods pgcheckdb does not know checked at the physical level only"
        ));
        let n = TEXT_NOT_STRUCTURE_CHECKED + 3;
        s.not_structure_checked = Some((0..n).map(one).collect());
        let lines = not_structure_checked_lines(&s);
        assert_eq!(lines.len(), TEXT_NOT_STRUCTURE_CHECKED + 1);
        assert_eq!(
            lines.last().map(String::as_str),
            Some("pgcheckdb: ... and 3 more relation(s) checked at the physical level only (--format json lists every one)")
        );
    }
}
