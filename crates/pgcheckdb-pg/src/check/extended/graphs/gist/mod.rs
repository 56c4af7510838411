//! The GiST graph at the extended level: which pages the downlinks of internal pages name
//! (`t_tid`'s block of every internal tuple), and what must hold across them.
//!
//! The root is block 0 (`GIST_ROOT_BLKNO`). PostgreSQL changes a parent and its child in one
//! WAL record: a split writes the new pages with their downlinks (or leaves `F_FOLLOW_RIGHT`
//! on the left page until the downlinks are inserted, clearing it in the same record), page
//! deletion (`gistdeletepage`) marks an empty leaf `F_DELETED` and removes its downlink at
//! once, and the root split keeps the root at block 0 and every leaf at the same depth. So, on
//! a cluster shut down cleanly:
//! * every downlink names a block inside the index that is neither the root, an all-zero page
//!   nor a deleted page;
//! * no page is named by two downlinks;
//! * walking from the root (downlinks one level down, the rightlink of an `F_FOLLOW_RIGHT`
//!   page on the same level), the children of a page are leaves exactly when they are at the
//!   depth of the index's leaves (the depth most of its reached leaves have);
//! * the root is not deleted.
//!
//! A page that no downlink reaches is not reported: a split that fails with an error after
//! filling its new pages (before its critical section) can leave such a page behind, which a
//! later VACUUM may write out.
//!
//! [`emit`] reads each page alone; [`check::Check`] keeps one index's graph in the merge —
//! 4 bytes per block and 12 per downlink, plus the rightlinks of `F_FOLLOW_RIGHT` pages.

mod check;
mod emit;

pub use check::Check;
pub use emit::emit;

use super::FIRST_AM_TAG;

/// `GIST_ROOT_BLKNO`.
const GIST_ROOT_BLKNO: u32 = 0;

/// Record tags: the page's own facts (`flags`, `rightlink`), and one downlink of an internal
/// page (child block, offset number of the tuple), both keyed by the page's block.
const PAGE_TAG: u8 = FIRST_AM_TAG;
const DOWNLINK_TAG: u8 = FIRST_AM_TAG + 1;
