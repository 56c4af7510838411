//! Findings of the extended level: each is reported at one block of one relation fork (the
//! page that holds the wrong fact), in the segment file that holds that block.

use serde_json::Value;

use crate::finding::{DatabaseRef, Finding, FindingKind, RelationRef, Severity};
use crate::plan::Plan;

/// A finding at absolute block `blkno` of fork `fork` of the plan.
pub fn block_finding(
    plan: &Plan,
    fork: usize,
    blkno: u64,
    kind: FindingKind,
    message: String,
    detail: Value,
) -> Finding {
    let f = &plan.forks[fork];
    let (segno, file) = plan.segment_of_block(fork, blkno);
    let file = file.unwrap_or(&plan.dir.files[f.segments().start]);
    let mut finding = Finding::for_file(kind, Severity::Error, &file.rel_path(), message)
        .with_detail(detail)
        .at_segment(segno);
    finding.fork = Some(f.fork);
    finding.block = Some(blkno);
    finding.database = Some(DatabaseRef {
        oid: Some(f.location.db_oid()),
        name: None,
    });
    finding.relation = Some(RelationRef {
        filenode: Some(f.relfilenode),
        ..Default::default()
    });
    finding
}
