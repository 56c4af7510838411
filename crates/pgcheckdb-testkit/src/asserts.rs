//! Assertions on a finished run that show the whole run (or the finding) when they fail: its
//! exit status, its error and warning findings as a set of [`Key`]s, one finding by key, no
//! finding off the damaged blocks, a healthy extended run and its spill to disk, and the
//! one-finding verdict of an injected index graph damage.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::path::Path;

use serde_json::Value;

use crate::run::{key_of, verify_json, Key, Run};

/// A key with a block.
pub fn key(kind: &str, file: &str, block: u64) -> Key {
    Key::new(kind, file, Some(block))
}

/// Asserts the exit status, showing the whole run otherwise.
pub fn assert_status(run: &Run, expected: i32, what: &str) {
    assert_eq!(
        run.status, expected,
        "{what}: expected exit {expected}\n{run}"
    );
}

/// Asserts a clean run: exit 0 and no error or warning finding.
pub fn assert_clean(run: &Run, what: &str) {
    assert_status(run, 0, what);
    assert!(run.problems().is_empty(), "{what}: problems found\n{run}");
}

/// Asserts that the error and warning findings are exactly `expected`.
pub fn assert_problems(run: &Run, expected: &BTreeSet<Key>, what: &str) {
    let got = run.problem_keys();
    let missing: Vec<String> = expected.difference(&got).map(|k| k.to_string()).collect();
    let extra: Vec<String> = got.difference(expected).map(|k| k.to_string()).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: findings differ\n  missing: {missing:#?}\n  unexpected: {extra:#?}\n{run}"
    );
}

/// The finding with this key; panics if absent.
pub fn finding<'a>(run: &'a Run, key: &Key) -> &'a Value {
    run.findings
        .iter()
        .find(|f| key_of(f) == *key)
        .unwrap_or_else(|| panic!("no finding {key}\n{run}"))
}

/// Asserts that finding `f`'s message names `n` (the block or offset number it is about).
pub fn assert_message_names(f: &Value, n: impl Display) {
    let n = n.to_string();
    assert!(
        f["message"].as_str().unwrap_or("").contains(&n),
        "the message does not name {n}: {f}"
    );
}

/// Asserts that the extended level's facts spilled to disk (`spill_files` > 0).
pub fn assert_spilled(run: &Run) {
    let spilled = run.extended();
    assert!(
        spilled["spill_files"].as_u64().unwrap_or(0) > 0,
        "no spill: {spilled}"
    );
}

/// `verify --level extended` of `datadir` with `--memory <memory>` and a fresh `--temp-dir`,
/// asserting that the facts spilled to disk; the run, and the spill directory (to check that
/// nothing was left in it).
pub fn verify_spilled(bin: &Path, datadir: &Path, memory: &str) -> (Run, tempfile::TempDir) {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = datadir.display().to_string();
    let temp_arg = temp.path().display().to_string();
    let extra = ["--memory", memory, "--temp-dir", &temp_arg];
    let run = verify_json(bin, &["-D", &dir], "extended", &extra, None);
    assert_spilled(&run);
    (run, temp)
}

/// The `index_graph_invalid` finding at `block` of relation file `file` whose message says
/// `says`, if the run has one.
pub fn graph_finding<'a>(run: &'a Run, file: &str, block: u64, says: &str) -> Option<&'a Value> {
    run.findings.iter().find(|f| {
        f["kind"] == "index_graph_invalid"
            && f["file"] == file
            && f["block"] == block
            && f["message"].as_str().unwrap_or("").contains(says)
    })
}

/// The damaged run found exactly one problem, `index_graph_invalid` at `block` of `file`, and
/// its text says `says`.
pub fn assert_only_graph_finding(run: &Run, file: &str, block: u64, says: &str, what: &str) {
    assert_eq!(run.status, 2, "{what}\n{run}");
    let expected: BTreeSet<_> = [key("index_graph_invalid", file, block)].into();
    assert_problems(run, &expected, what);
    let text = run.findings_text().join("\n");
    assert!(text.contains(says), "{what}: expected {says:?}\n{text}");
}

/// Asserts that `run` is a clean extended-level run of a healthy PostgreSQL `major` cluster
/// whose summary's `extended` counters reach at least `minimums`; the counters.
pub fn assert_healthy_extended<'a>(
    run: &'a Run,
    major: u32,
    minimums: &[(&str, u64)],
) -> &'a Value {
    assert_clean(run, &format!("PostgreSQL {major}: healthy cluster"));
    let ext = run.extended();
    for (counter, least) in minimums {
        assert!(
            ext[*counter].as_u64().unwrap_or(0) >= *least,
            "PostgreSQL {major}: {counter} below {least}: {ext}"
        );
    }
    ext
}

/// Asserts that every finding `counts` accepts is at one of the `damaged` (file, block)
/// places, naming the first that is not after `what`.
pub fn assert_only_on(
    run: &Run,
    damaged: &BTreeSet<(String, u64)>,
    counts: impl Fn(&Value) -> bool,
    what: &str,
) {
    for f in run.findings.iter().filter(|f| counts(f)) {
        let at = (
            f["file"].as_str().unwrap_or_default().to_string(),
            f["block"].as_u64().unwrap_or(u64::MAX),
        );
        assert!(damaged.contains(&at), "{what}: {f}");
    }
}
