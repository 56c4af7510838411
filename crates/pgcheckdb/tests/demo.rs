//! `pgcheckdb demo` end to end on the PostgreSQL installed here: it must find the damage it
//! injected, name the table, show the page, show the server's own refusal, exit 0 and leave
//! no cluster directory behind.

mod common;

use std::process::Command;

use common::bin;

#[test]
fn demo_runs_and_cleans_up() {
    pgcheckdb_testkit::require_binaries(15);
    let before = demo_dirs();
    let out = Command::new(bin())
        .arg("demo")
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
        demo_dirs(),
        before,
        "demo left its cluster directory behind"
    );
}

/// Work directories the cluster crate makes under the temp dir.
fn demo_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(std::env::temp_dir())
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
