//! The SP-GiST graph at the extended level: the downlinks of inner tuples' nodes and the
//! chains of leaf tuples they lead to.
//!
//! Block 0 is the metapage, block 1 the root of the tree of non-null keys and block 2 the root
//! of the tree of nulls (`SPGIST_ROOT_BLKNO`, `SPGIST_NULL_BLKNO`); every other page of one
//! tree carries its `SPGIST_NULLS` flag or not. A node's downlink (`t_tid`, valid when its
//! offset is not 0) names one tuple: on an inner page a live inner tuple, on a leaf page the
//! head of a chain of leaf tuples linked by `nextOffset` on that page (or a `DEAD` tuple that
//! is all that is left of the chain). `REDIRECT` tuples are left behind for scans already in
//! flight when a tuple moves, and PostgreSQL updates the parent's downlink in the same WAL
//! record, so a downlink never names one at rest (insertion errors out on a redirect or
//! placeholder leaf head and reads the named inner tuple as live). What is checked, on a
//! cluster shut down cleanly:
//! * every valid downlink names a block inside the index other than blocks 0-2, an all-zero,
//!   metapage or deleted page, of the same tree as its parent (`SPGIST_NULLS` agrees), at an
//!   offset that holds a live inner tuple (inner page) or a chain head or `DEAD` tuple (leaf
//!   page);
//! * no tuple is named by two downlinks;
//! * on a leaf page other than a root, each live tuple's `nextOffset` is 0 or names a live leaf
//!   tuple of the page, no two tuples link to the same one, and no chain loops (VACUUM errors
//!   out on anything else: `vacuumLeafPage`);
//! * every live leaf tuple of such a page is on a chain whose head a downlink names (only when
//!   every page of the index was read and sound);
//! * a root that is a leaf holds only live, unchained tuples (`vacuumLeafRoot` and scans error
//!   out on others);
//! * an inner tuple's nodes fit in it.
//!
//! Redirect targets are not checked: after a later move or VACUUM they may be stale.
//!
//! [`emit`] reads each page alone (its tuples' kinds, its chains, its downlinks keyed by the
//! block they name); [`check::Check`] streams the records in block order and keeps only the
//! current block's tuples and the pages with unreached chains in memory.

mod check;
mod emit;

pub use check::Check;
pub use emit::emit;

use super::FIRST_AM_TAG;

use crate::format::enums::byte_enum;
use crate::format::spgist::{SPGIST_NULL_BLKNO, SPGIST_ROOT_BLKNO};

/// `SpGistBlockIsRoot`.
fn is_root(blkno: u32) -> bool {
    blkno == SPGIST_ROOT_BLKNO || blkno == SPGIST_NULL_BLKNO
}

/// Record tags, all keyed by a block of the index: a page's flags and the kind of each of its
/// tuples (its own block); one valid downlink (the block it names); a problem seen on one page
/// alone (its own block). Within a block the page record sorts first.
const PAGE_TAG: u8 = FIRST_AM_TAG;
const LINK_TAG: u8 = FIRST_AM_TAG + 1;
const PROBLEM_TAG: u8 = FIRST_AM_TAG + 2;

byte_enum! {
    /// What a line pointer of a page holds, as far as the graph is concerned.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        /// No storage, or too short to read.
        Nothing = 0,
        /// A live inner tuple.
        Inner = 1,
        /// A live leaf tuple no other tuple of the page links to: a chain's head.
        ChainHead = 2,
        /// A live leaf tuple another one links to.
        ChainMember = 3,
        /// `SPGIST_DEAD`.
        Dead = 4,
        /// `SPGIST_REDIRECT`.
        Redirect = 5,
        /// `SPGIST_PLACEHOLDER`.
        Placeholder = 6,
        /// A live leaf tuple of a root that is a leaf (not chained).
        RootLeaf = 7,
    }
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Nothing => "no tuple",
            Kind::Inner => "a live inner tuple",
            Kind::ChainHead => "the head of a leaf chain",
            Kind::ChainMember => "a leaf tuple inside a chain (not its head)",
            Kind::Dead => "a DEAD tuple",
            Kind::Redirect => "a REDIRECT tuple",
            Kind::Placeholder => "a PLACEHOLDER tuple",
            Kind::RootLeaf => "a leaf tuple of the root",
        }
    }
}

byte_enum! {
    /// Problems one page shows alone, written by [`emit`] with up to three offset numbers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum PageProblem {
        /// (tuple, its nextOffset): the link names no live leaf tuple of the page.
        BadLink = 1,
        /// (tuple, its nextOffset, the other tuple linking there).
        SharedLink = 2,
        /// (a tuple on the loop).
        Cycle = 3,
        /// (tuple, its tupstate): a root leaf tuple that is not live.
        RootNotLive = 4,
        /// (tuple, its nextOffset): a root leaf tuple that is chained.
        RootChained = 5,
        /// (tuple): an inner tuple whose nodes run past its end.
        NodesOverrun = 6,
    }
}
