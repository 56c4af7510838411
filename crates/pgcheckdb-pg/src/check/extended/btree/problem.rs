//! A problem the B-tree merge found, before it is placed in a file as a finding.

use serde_json::Value;

use crate::finding::FindingKind as K;

/// A finding of the merge, before it is placed in a file: block, kind, message, detail.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub blkno: u32,
    pub kind: K,
    pub message: String,
    pub detail: Value,
}
