//! Visibility-map (`_vm`) and free-space-map (`_fsm`) pages: an ordinary header with no line
//! pointers and no special space, and (VM) no "all-frozen but not all-visible" bit pair.

use serde_json::json;

use super::{ClusterFacts, StructureProblem};
use crate::finding::{FindingKind as K, Severity};
use crate::format::bytes::le_u64_words;
use crate::format::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};
use crate::format::vm::{VM_ALL_FROZEN, VM_ALL_VISIBLE};

// The word-at-a-time test below relies on these being each pair's low and high bit.
const _: () = assert!(VM_ALL_VISIBLE == 0b01 && VM_ALL_FROZEN == 0b10);

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
    let bits = page.get(SIZE_OF_PAGE_HEADER_DATA..).unwrap_or_default();
    if !any_frozen_not_visible(bits) {
        return;
    }
    let bad: Vec<usize> = bits
        .iter()
        .enumerate()
        .flat_map(|(i, &b)| {
            (0..4)
                .filter(move |k| (b >> (2 * k)) & (VM_ALL_VISIBLE | VM_ALL_FROZEN) == VM_ALL_FROZEN)
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

/// Whether any bit pair of `bits` is all-frozen without all-visible, a word at a time: a map
/// page covers 32,672 heap pages, and nearly every page checked has none.
fn any_frozen_not_visible(bits: &[u8]) -> bool {
    /// The low bit of every pair in a word: each pair's all-visible bit.
    const PAIR_LOW_BITS: u64 = 0x5555_5555_5555_5555;
    let frozen_not_visible = |w: u64| (w >> 1) & !w & PAIR_LOW_BITS != 0;
    let (mut words, rest) = le_u64_words(bits);
    words.any(frozen_not_visible) || rest.iter().any(|&b| frozen_not_visible(u64::from(b)))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The word test agrees with a pair-by-pair reading for every position of a bad pair, and
    /// for pairs that are fine (visible only, visible and frozen, neither).
    #[test]
    fn frozen_not_visible_found_at_every_position() {
        let slow = |bits: &[u8]| {
            bits.iter().any(|&b| {
                (0..4).any(|k| (b >> (2 * k)) & (VM_ALL_VISIBLE | VM_ALL_FROZEN) == VM_ALL_FROZEN)
            })
        };
        for len in [0usize, 1, 7, 8, 9, 8168] {
            for fine in [0u8, 0x55, 0xff, 0x11] {
                let mut bits = vec![fine; len];
                assert_eq!(any_frozen_not_visible(&bits), slow(&bits));
                assert!(!any_frozen_not_visible(&bits));
                for at in (0..len.min(40)).chain(len.saturating_sub(10)..len) {
                    for k in 0..4 {
                        bits.fill(fine);
                        bits[at] = (bits[at] & !(0b11 << (2 * k))) | (VM_ALL_FROZEN << (2 * k));
                        assert!(
                            any_frozen_not_visible(&bits),
                            "len {len} byte {at} pair {k}"
                        );
                        assert_eq!(any_frozen_not_visible(&bits), slow(&bits));
                    }
                }
            }
        }
    }
}
