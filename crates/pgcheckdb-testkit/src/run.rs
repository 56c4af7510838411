//! Runs the `pgcheckdb` binary and parses its JSON Lines output (docs/OUTPUT.md, "JSON Lines"): finding
//! objects, then one summary; and the questions tests ask of a run's findings (by kind, by
//! place).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt;
use std::path::Path;
use std::process::Command;

use pgcheckdb_cluster::RunAs;
use serde_json::Value;

/// One finished run of the binary.
#[derive(Debug, Clone)]
pub struct Run {
    /// Exit status (-1 if killed by a signal).
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    /// `type == "finding"` objects, in output order.
    pub findings: Vec<Value>,
    /// The `type == "summary"` object, if one was printed.
    pub summary: Option<Value>,
}

/// A finding reduced to what tests compare: kind, file, absolute block.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: String,
    pub file: String,
    pub block: Option<u64>,
}

impl Key {
    /// A key for `kind` at `file`, block `block`.
    pub fn new(kind: &str, file: &str, block: Option<u64>) -> Key {
        Key {
            kind: kind.to_string(),
            file: file.to_string(),
            block,
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.block {
            Some(b) => write!(f, "{} {} block {b}", self.kind, self.file),
            None => write!(f, "{} {}", self.kind, self.file),
        }
    }
}

impl Run {
    /// Findings of severity `error` or `warning`.
    pub fn problems(&self) -> Vec<&Value> {
        self.findings
            .iter()
            .filter(|f| matches!(f["severity"].as_str(), Some("error" | "warning")))
            .collect()
    }

    /// Keys of the error and warning findings.
    pub fn problem_keys(&self) -> BTreeSet<Key> {
        self.problems().into_iter().map(key_of).collect()
    }

    /// `(file, block)` of every error finding that names a block.
    pub fn error_blocks(&self) -> BTreeSet<(String, u64)> {
        self.findings
            .iter()
            .filter(|f| f["severity"] == "error")
            .filter_map(|f| Some((f["file"].as_str()?.to_string(), f["block"].as_u64()?)))
            .collect()
    }

    /// The findings as compact JSON lines, for comparing runs.
    pub fn findings_text(&self) -> Vec<String> {
        self.findings.iter().map(|f| f.to_string()).collect()
    }

    /// The summary; panics with the output when there is none.
    pub fn summary(&self) -> &Value {
        self.summary
            .as_ref()
            .unwrap_or_else(|| panic!("no summary line in the output of pgcheckdb\n{self}"))
    }

    /// The first stdout line as JSON (the object of a command that prints one); panics with the
    /// run when there is none or it is not JSON.
    pub fn first_json(&self) -> Value {
        self.json_line(self.stdout.lines().next())
    }

    /// The last stdout line as JSON (a summary); panics as [`Run::first_json`] does.
    pub fn last_json(&self) -> Value {
        self.json_line(self.stdout.lines().last())
    }

    fn json_line(&self, line: Option<&str>) -> Value {
        line.and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no JSON line where one was expected\n{self}"))
    }

    /// Non-empty stderr lines.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect()
    }

    /// The summary's `extended` object (the extended level's counters); panics with the
    /// output when there is no summary.
    pub fn extended(&self) -> &Value {
        &self.summary()["extended"]
    }

    /// The findings of `kind` (any severity), in output order.
    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.findings.iter().filter(|f| f["kind"] == kind).collect()
    }

    /// The first finding of `kind` in `file` (any block).
    pub fn find_in(&self, kind: &str, file: &str) -> Option<&Value> {
        self.findings
            .iter()
            .find(|f| f["kind"] == kind && f["file"] == file)
    }

    /// The first finding of `kind` at block `block` of `file`.
    pub fn find_at(&self, kind: &str, file: &str, block: u64) -> Option<&Value> {
        self.findings
            .iter()
            .find(|f| f["kind"] == kind && f["file"] == file && f["block"] == block)
    }

    /// [`place_of`] every error and warning finding but those of kind `except`.
    pub fn problem_places_except(&self, except: &str) -> BTreeSet<Place> {
        self.problems()
            .into_iter()
            .filter(|f| f["kind"] != except)
            .map(place_of)
            .collect()
    }

    /// [`place_of`] every finding whose kind is one of `kinds`.
    pub fn places_of(&self, kinds: &[&str]) -> BTreeSet<Place> {
        self.findings
            .iter()
            .filter(|f| kinds.iter().any(|k| f["kind"] == *k))
            .map(place_of)
            .collect()
    }
}

/// Where a finding is and what it is: (file, block, kind).
pub type Place = (String, u64, String);

/// The [`Place`] of one finding object: `?` for a missing file or kind, `u64::MAX` for a
/// finding without a block.
pub fn place_of(f: &Value) -> Place {
    (
        f["file"].as_str().unwrap_or("?").to_string(),
        f["block"].as_u64().unwrap_or(u64::MAX),
        f["kind"].as_str().unwrap_or("?").to_string(),
    )
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// The comparison key of one finding object.
pub fn key_of(f: &Value) -> Key {
    Key {
        kind: f["kind"].as_str().unwrap_or("?").to_string(),
        file: f["file"].as_str().unwrap_or("?").to_string(),
        block: f["block"].as_u64(),
    }
}

/// Runs `bin` with `args` (as `user` when given) with `PGDATA` unset, and parses stdout as
/// JSON Lines when every line is JSON. Panics only if the program cannot be started.
pub fn pgcheckdb<S: AsRef<OsStr>>(bin: &Path, args: &[S], user: Option<&RunAs>) -> Run {
    let mut cmd = Command::new(bin);
    cmd.args(args).env_remove("PGDATA").env("NO_COLOR", "1");
    if let Some(user) = user {
        user.apply(&mut cmd);
        cmd.current_dir("/");
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {}: {e}", bin.display()));
    parse(out)
}

/// A finished run's output: its status, and stdout parsed as JSON Lines when every line is
/// JSON.
pub fn parse(out: std::process::Output) -> Run {
    let mut run = unparsed(out);
    let parsed: Option<Vec<Value>> = run
        .stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).ok())
        .collect();
    run.keep(parsed.unwrap_or_default());
    run
}

/// A finished run's output with every stdout line that is JSON parsed, the others (text,
/// a line cut short by a kill) passed over.
pub fn parse_lenient(out: std::process::Output) -> Run {
    let mut run = unparsed(out);
    let parsed: Vec<Value> = run
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    run.keep(parsed);
    run
}

/// Status and output of a finished run, nothing parsed yet.
fn unparsed(out: std::process::Output) -> Run {
    Run {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        findings: Vec::new(),
        summary: None,
    }
}

impl Run {
    /// Keeps the `finding` and `summary` objects of `values`, in order.
    fn keep(&mut self, values: Vec<Value>) {
        for value in values {
            match value["type"].as_str() {
                Some("finding") => self.findings.push(value),
                Some("summary") => self.summary = Some(value),
                _ => {}
            }
        }
    }
}

/// `pgcheckdb verify -D <datadir> --format json --level physical --no-progress -j <jobs>`.
pub fn verify(bin: &Path, datadir: &Path, jobs: u32, user: Option<&RunAs>) -> Run {
    let jobs = jobs.to_string();
    let args: Vec<&OsStr> = vec![
        "verify".as_ref(),
        "-D".as_ref(),
        datadir.as_os_str(),
        "--level".as_ref(),
        "physical".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--no-progress".as_ref(),
        "-j".as_ref(),
        jobs.as_ref(),
    ];
    pgcheckdb(bin, &args, user)
}

/// `verify <target...> --level <level> --format json --no-progress -j 2 <extra...>`, run as
/// `user`: `target` says what is verified (`["-D", dir]`, `["--backup", dir]`, ...).
pub fn verify_json(
    bin: &Path,
    target: &[&str],
    level: &str,
    extra: &[&str],
    user: Option<&RunAs>,
) -> Run {
    let mut args = vec!["verify"];
    args.extend_from_slice(target);
    args.extend_from_slice(&[
        "--level",
        level,
        "--format",
        "json",
        "--no-progress",
        "-j",
        "2",
    ]);
    args.extend_from_slice(extra);
    pgcheckdb(bin, &args, user)
}
