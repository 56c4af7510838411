//! `bench checkpoint`: what a `CHECKPOINT` every K rows costs against automatic checkpoints.
//! One cluster (data checksums on, PostgreSQL's default settings). Rows of `char(8000)`, one to
//! a page, committed every K rows; one variant issues `CHECKPOINT` after every commit, the other
//! leaves checkpoints to `checkpoint_timeout` / `max_wal_size`. Both end with one `CHECKPOINT`,
//! inside the timed script, so both finish with everything on disk. Counters per trial: WAL
//! bytes, checkpoints completed and buffers they wrote (`pg_stat_bgwriter` up to 16,
//! `pg_stat_checkpointer` from 17), and the checkpointer's writes in `pg_stat_io` (16+).

use anyhow::Result;
use pgcheckdb_cluster::ClusterOptions;
use serde_json::json;

use super::{bars, compare, finish, groups, mean_of, progress_printer, CommonOpts, Outcome};
use crate::guard::Guarded;
use crate::output::{fmt_bytes, fmt_times};
use crate::pg::{self, timed_psql};
use crate::report::{Chart, Machine, Report};
use crate::schedule::{self, Executor, Measurement, Trial};
use crate::workloads as w;

/// PostgreSQL's block size.
const BLOCK: f64 = 8192.0;

/// Parameters of the experiment.
#[derive(Debug, Clone)]
pub struct Params {
    /// Rows inserted per trial.
    pub rows: u64,
    /// Rows per commit (and per CHECKPOINT in the first variant): K.
    pub every: u64,
}

impl Params {
    /// Defaults, or the `--quick` sizes.
    pub fn defaults(quick: bool) -> Params {
        Params {
            rows: if quick { 480 } else { 16_000 },
            every: 16,
        }
    }
}

struct Exec {
    cluster: Guarded,
    params: Params,
}

impl Executor for Exec {
    fn run(&mut self, trial: &Trial) -> Result<Measurement> {
        let each = trial.variant == 0;
        let c = &mut self.cluster;
        c.start()?;
        c.psql("postgres", &w::ckpt_create())?;
        c.psql("postgres", &w::checkpoint())?;
        let before = pg::snapshot(c)?;
        let secs = timed_psql(c, &w::ckpt_load(self.params.rows, self.params.every, each))?;
        let d = pg::settled_snapshot(c)?.since(&before);
        c.psql("postgres", &w::drop_table(w::TABLE_CKPT))?;
        c.stop()?;
        let per = |x: f64| {
            if d.checkpoints > 0.0 {
                x / d.checkpoints
            } else {
                f64::NAN
            }
        };
        let m = Measurement::seconds(secs)
            .with("checkpoints", d.checkpoints)
            .with("wal_bytes", d.wal_bytes)
            .with("checkpoint_buffers", d.checkpoint_buffers)
            .with("wal_per_checkpoint", per(d.wal_bytes))
            .with("written_per_checkpoint", per(d.checkpoint_buffers * BLOCK));
        Ok(match d.io_checkpointer_writes {
            Some(io) => m.with("io_checkpointer_writes", io),
            None => m,
        })
    }
}

/// Runs the experiment.
pub fn run(opts: &CommonOpts, params: &Params) -> Result<Outcome> {
    let machine = Machine::start();
    let cluster = Guarded::init(&ClusterOptions::new(opts.major, true))?;
    let names = vec![
        format!("CHECKPOINT every {} rows", params.every),
        "automatic checkpoints".to_string(),
    ];
    let plan = schedule::interleaved(2, opts.runs);
    let mut exec = Exec {
        cluster,
        params: params.clone(),
    };
    let mut progress = progress_printer(plan.len(), opts.progress);
    let results = schedule::execute(&plan, &names, &mut exec, &mut progress)?;
    drop(exec);
    let time = compare(&results, &names, "time", 0, 1, None);
    let wal = compare(&results, &names, "WAL bytes", 0, 1, Some("wal_bytes"));
    let conclusions = vec![
        format!(
            "a CHECKPOINT every {} rows makes loading {} rows of char(8000) take {} as long as automatic checkpoints ({:.2} s vs {:.2} s mean)",
            params.every,
            params.rows,
            fmt_times(&time.ratio),
            mean_of(&results, 0, "seconds"),
            mean_of(&results, 1, "seconds"),
        ),
        format!(
            "checkpoints per run {:.0} vs {:.0}; written per checkpoint {} vs {}; WAL per checkpoint {} vs {}; WAL in total {} vs {} ({:.2}×)",
            mean_of(&results, 0, "checkpoints"),
            mean_of(&results, 1, "checkpoints"),
            fmt_bytes(mean_of(&results, 0, "written_per_checkpoint")),
            fmt_bytes(mean_of(&results, 1, "written_per_checkpoint")),
            fmt_bytes(mean_of(&results, 0, "wal_per_checkpoint")),
            fmt_bytes(mean_of(&results, 1, "wal_per_checkpoint")),
            fmt_bytes(mean_of(&results, 0, "wal_bytes")),
            fmt_bytes(mean_of(&results, 1, "wal_bytes")),
            wal.ratio.ratio,
        ),
    ];
    let report = Report {
        experiment: "checkpoint".into(),
        title: format!(
            "CHECKPOINT every {} rows vs automatic, PostgreSQL {}",
            params.every, opts.major
        ),
        settings: json!({
            "postgres_major": opts.major,
            "runs": opts.runs,
            "quick": opts.quick,
            "rows": params.rows,
            "rows_per_commit": params.every,
            "row": "id int, big_col char(8000) STORAGE PLAIN: one row per 8 kB page",
            "timing": "wall clock around one psql script (BEGIN; INSERT K rows; COMMIT; [CHECKPOINT;] ... CHECKPOINT;)",
            "server_settings": "PostgreSQL defaults (fsync on, checkpoint_timeout 5min, max_wal_size 1GB, full_page_writes on), data checksums on",
            "counters": if opts.major >= 17 { "pg_stat_checkpointer, pg_stat_io" } else if opts.major == 16 { "pg_stat_bgwriter, pg_stat_io" } else { "pg_stat_bgwriter" },
            "ci": "ratio of means with Fieller's 95% interval, Welch-Satterthwaite degrees of freedom",
        }),
        machine,
        groups: groups(&results, &names),
        chart: Chart::Bars {
            y_label: "seconds per run".into(),
            bars: bars(&results, &names, None),
        },
        trials: results,
        comparisons: vec![time, wal],
        conclusions,
    };
    finish(report, opts)
}
