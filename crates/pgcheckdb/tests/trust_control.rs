//! A `pg_control` with a valid CRC but a value no server accepts at start-up is one refusal
//! naming the field (exit 1), never "no corruption" and never a flood of page findings: an
//! impossible `xlog_blcksz`, and a `blcksz` that disagrees with the fields derived from it.
//! The real server of each version refuses the same file, so the refusal is PostgreSQL's own.

mod common;

use pgcheckdb_testkit::asserts::assert_status;
use pgcheckdb_testkit::control::set_control_u32;
use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::{Cluster, ClusterOptions, MAJORS};

use common::bin;

/// Byte offsets of `blcksz` and `xlog_blcksz` in `ControlFileData` of `major`
/// (`src/include/catalog/pg_control.h`): the same in 14-18; 19 added
/// `checkPointCopy.logicalDecodingEnabled`, widened `nextMultiOffset` to 8 bytes and added
/// `slru_pages_per_segment` between `relseg_size` and `xlog_blcksz`.
fn block_size_offsets(major: u32) -> (usize, usize) {
    if major >= 19 {
        (224, 236)
    } else {
        (216, 224)
    }
}

fn verify(cluster: &Cluster, level: &str) -> Run {
    let d = cluster.datadir().to_string_lossy().into_owned();
    run::pgcheckdb(
        &bin(),
        &["verify", "-D", &d, "--level", level, "--format", "json"],
        None,
    )
}

/// Exit 1, one stderr line naming `field`, and a JSON summary carrying the error.
fn assert_refused(run: &Run, field: &str) {
    assert_status(run, 1, field);
    let lines = run.stderr_lines();
    assert_eq!(lines.len(), 1, "one stderr line expected\n{run}");
    assert!(lines[0].contains(field), "the line names {field}\n{run}");
    assert!(run.findings.is_empty(), "no findings expected\n{run}");
    let error = run.summary()["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(field),
        "the summary carries the error\n{run}"
    );
}

/// The server of the cluster's own version refuses to start on the edited `pg_control`.
fn assert_server_refuses(cluster: &mut Cluster) {
    assert!(
        cluster.start().is_err(),
        "PostgreSQL {} started on a pg_control it should refuse",
        cluster.major()
    );
}

#[test]
fn impossible_control_values_are_one_refusal_on_every_version() {
    for major in MAJORS {
        let (blcksz_at, xlog_blcksz_at) = block_size_offsets(major);
        let mut cluster = Cluster::init_temp(&ClusterOptions::new(major, major.is_multiple_of(2)))
            .expect("initdb");
        let clean = verify(&cluster, "standard");
        assert_status(&clean, 0, "fresh cluster");

        set_control_u32(cluster.datadir(), xlog_blcksz_at, 1);
        for level in ["physical", "standard", "extended"] {
            assert_refused(&verify(&cluster, level), "xlog_blcksz");
        }
        assert_server_refuses(&mut cluster);

        set_control_u32(cluster.datadir(), xlog_blcksz_at, 8192);
        assert_status(&verify(&cluster, "standard"), 0, "xlog_blcksz restored");

        set_control_u32(cluster.datadir(), blcksz_at, 4096);
        for level in ["physical", "standard"] {
            assert_refused(&verify(&cluster, level), "blcksz");
        }
        assert_server_refuses(&mut cluster);
    }
}
