//! The merge side of the index graphs: one index's graph records, streamed in block order
//! from the sorted runs, go through its access method's [`GraphCheck`]; the problems become
//! `index_graph_invalid` findings at the page that holds the wrong fact.

use serde_json::{json, Value};

use super::{checker, GraphInfo, GraphProblem, DAMAGED_TAG, NEW_TAG};
use crate::check::extended::facts::{Family, Reader};
use crate::check::extended::report::block_finding;
use crate::check::extended::spill::Runs;
use crate::finding::{Finding, FindingKind};
use crate::plan::Plan;

/// Checks the graph of one planned index: its findings, or why its facts could not be read.
pub fn check_index(plan: &Plan, runs: &Runs, info: &GraphInfo) -> Result<Vec<Finding>, String> {
    let mut check = checker(info);
    let read = runs.for_each_in_unit(info.fork as u32, |record| {
        let Some((head, mut body)) = Reader::open(record) else {
            return;
        };
        if head.family != Family::IndexGraph {
            return;
        }
        let rest = body.rest();
        match rest.first() {
            Some(&DAMAGED_TAG) => check.damaged(head.blkno),
            Some(&NEW_TAG) => check.new_page(head.blkno),
            Some(_) => check.record(head.blkno, rest),
            None => {}
        }
    });
    if let Err(e) = read {
        return Err(format!(
            "could not read the graph facts of index {}: {e}",
            info.name
        ));
    }
    let problems = check.finish();
    Ok(problems
        .into_iter()
        .map(|p| finding(plan, info, p))
        .collect())
}

/// The finding of one problem, with the index and its access method in `detail`.
fn finding(plan: &Plan, info: &GraphInfo, p: GraphProblem) -> Finding {
    let mut detail = match p.detail {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => {
            let mut m = serde_json::Map::new();
            m.insert("facts".into(), other);
            m
        }
    };
    detail.insert("index".into(), json!(info.name));
    detail.insert("am".into(), json!(info.am.name()));
    block_finding(
        plan,
        info.fork,
        p.blkno,
        FindingKind::IndexGraphInvalid,
        format!("{} index {}: {}", info.am.name(), info.name, p.message),
        Value::Object(detail),
    )
}
