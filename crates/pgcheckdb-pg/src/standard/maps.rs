//! Visibility-map (`_vm`) and free-space-map (`_fsm`) pages: an ordinary header with no line
//! pointers and no special space, and (VM) no "all-frozen but not all-visible" bit pair.

use serde_json::json;

use super::{ClusterFacts, StructureProblem};
use crate::finding::{FindingKind as K, Severity};
use crate::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};

/// `VISIBILITYMAP_ALL_VISIBLE` and `VISIBILITYMAP_ALL_FROZEN`.
const ALL_VISIBLE: u8 = 0x1;
const ALL_FROZEN: u8 = 0x2;

/// Header of a page whose contents start right after the page header.
fn plain_contents_header(h: &PageHeader, facts: &ClusterFacts) -> Option<String> {
    (h.pd_special as usize != facts.blcksz).then(|| {
        format!(
            "special space of {} bytes on a map page",
            facts.blcksz - h.pd_special as usize
        )
    })
}

pub fn check_vm_page(
    page: &[u8],
    h: &PageHeader,
    facts: &ClusterFacts,
    out: &mut Vec<StructureProblem>,
) {
    if let Some(m) = plain_contents_header(h, facts) {
        out.push(StructureProblem::error(K::VisibilityMapInvalid, m));
        return;
    }
    let bits = &page[SIZE_OF_PAGE_HEADER_DATA..];
    let bad: Vec<usize> = bits
        .iter()
        .enumerate()
        .flat_map(|(i, &b)| {
            (0..4)
                .filter(move |k| (b >> (2 * k)) & (ALL_VISIBLE | ALL_FROZEN) == ALL_FROZEN)
                .map(move |k| i * 4 + k)
        })
        .take(10)
        .collect();
    if let Some(&first) = bad.first() {
        out.push(
            StructureProblem::error(
                K::VisibilityMapInvalid,
                format!(
                    "heap page slot {first} of this map page is all-frozen but not all-visible"
                ),
            )
            .detail(json!({"slots": bad})),
        );
    }
}

pub fn check_fsm_page(
    _page: &[u8],
    h: &PageHeader,
    facts: &ClusterFacts,
    out: &mut Vec<StructureProblem>,
) {
    if let Some(m) = plain_contents_header(h, facts) {
        out.push(StructureProblem::error(K::FreeSpaceMapInvalid, m).severity(Severity::Warning));
    }
}
