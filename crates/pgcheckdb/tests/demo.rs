//! `pgcheckdb demo` end to end on the PostgreSQL installed here: it must find the damage it
//! injected, name the table, show the page, show the server's own refusal, exit 0 and leave
//! no cluster directory behind.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::bin;

#[test]
fn demo_runs_and_cleans_up() {
    pgcheckdb_testkit::require_binaries(15);
    demo_with(&[]);
}

/// The demo on the newest supported PostgreSQL, 19, chosen with `--pg-bin` (the machine's own
/// PostgreSQL, Debian's 15 here, comes first without it).
#[test]
fn demo_runs_on_19() {
    let bin19 = pgcheckdb_testkit::require_binaries(19);
    let dir = bin19.bindir.to_string_lossy().into_owned();
    let stdout = demo_with(&["--pg-bin", &dir]);
    assert!(stdout.contains("PostgreSQL) 19"), "{stdout}");
}

/// Runs `pgcheckdb demo <args>` and checks what it shows; returns its stdout.
fn demo_with(args: &[&str]) -> String {
    // A temp dir of its own, so that other tests' clusters coming and going cannot be taken
    // for the demo's; the server (another user when we are root) must be able to enter it.
    let tmp = tempfile::Builder::new()
        .prefix("demo-test-")
        .tempdir()
        .expect("temp dir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod temp dir");
    let out = Command::new(bin())
        .arg("demo")
        .args(args)
        .env("PGCHECKDB_TMPDIR", tmp.path())
        .output()
        .expect("run pgcheckdb demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed\n{stdout}\n{stderr}");
    assert!(stdout.contains("pgcheckdb found no corruption"), "{stdout}");
    assert!(
        stdout.contains("relation \"public.demo_orders\""),
        "verify must name the table\n{stdout}"
    );
    assert!(stdout.contains("checksum_mismatch"), "{stdout}");
    // Offsets as a person writes them, not a Rust array ("[5000, 5001, 6100]").
    assert!(stdout.contains("at offsets 5000, 5001, 6100"), "{stdout}");
    assert!(!stdout.contains("[5000"), "{stdout}");
    // Flipped bytes are damage, never a page "written at the wrong place": the table has
    // 2,858 blocks, where a chance checksum match is no evidence (docs/CHECKS.md).
    assert!(!stdout.contains("misplaced_page"), "{stdout}");
    assert!(stdout.contains("(exit status 2)"), "{stdout}");
    assert!(
        stdout.contains("checksum: stored"),
        "inspect output missing\n{stdout}"
    );
    assert!(
        stdout.contains("invalid page in block 7"),
        "the server's refusal missing\n{stdout}"
    );
    assert_eq!(
        demo_dirs(tmp.path()),
        Vec::<String>::new(),
        "demo left its cluster directory behind"
    );
    stdout.into_owned()
}

/// Work directories the cluster crate made under the demo's temp dir.
fn demo_dirs(tmp: &std::path::Path) -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(tmp)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("pgcheckdb-"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}
