//! The GIN graph at the extended level: the entry tree (from its root, block 1), the posting
//! trees hanging from its leaf tuples, and the pending list (fast update) from the metapage.
//!
//! [`emit`] writes what each sound page says: its own fact (flags, rightlink, and on posting-
//! tree pages the range of heap TIDs it holds or bounds), the metapage's pending-list head and
//! tail, and one record per link it holds (an entry-tree downlink, a posting-tree root named by
//! an entry leaf tuple, a posting-tree downlink with its key). [`check`] keeps one index's
//! pages (about 40 bytes each) and links (24 bytes each) in memory and checks, from how
//! PostgreSQL builds and vacuums the structure (`ginbtree.c`, `gindatapage.c`,
//! `ginentrypage.c`, `ginfast.c`, `ginvacuum.c`):
//! * every link points inside the index at a page of the right kind (entry-tree page, or live
//!   posting-tree page), never at the metapage, a pending-list page, a deleted page or an
//!   all-zero page; no page is the target of two links; the children of one page are all
//!   leaves or all internal pages;
//! * in each tree, every leaf reached by downlinks is at the same depth;
//! * entry-tree rightlinks lead to entry-tree pages of the same level; the rightlinks of
//!   posting-tree pages reached by downlinks lead to posting-tree pages of the same tree and
//!   level (or to a deleted page), and their heap TIDs ascend along the leaf level;
//! * heap TIDs ascend inside a posting-tree leaf, keys inside an internal posting-tree page,
//!   and a posting-tree downlink's key bounds the TIDs below it;
//! * with every block read and sound, every entry-tree page is reached from the root, by a
//!   downlink or by the rightlink of a page whose split was not finished
//!   (`GIN_INCOMPLETE_SPLIT`);
//! * the pending list runs from the metapage's head through rightlinks over live
//!   pending-list pages to its tail, which ends the chain.
//!
//! Not checked: posting-tree pages reached by no link (a crash between creating a posting
//! tree and storing its root in the entry leaf leaves one; so does a page split whose
//! downlink was never inserted when its left page is later deleted), pending-list pages off
//! the list (a crash between writing new list pages and linking them), and the order of entry
//! keys, which needs each operator class's comparison.

mod check;
mod emit;
#[cfg(test)]
mod tests;

pub use check::Check;
pub use emit::emit;

use crate::format::enums::byte_enum;
pub(crate) use crate::format::gin::flags;

/// `GIN_ROOT_BLKNO`: the entry tree's root.
const GIN_ROOT_BLKNO: u32 = 1;

byte_enum! {
    /// The tags of this module's records (after the frame's damaged and new-page marks).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Tag {
        /// The metapage's pending list: `head`, `tail`.
        Meta = super::FIRST_AM_TAG,
        /// A page's own fact ([`PageFact`]).
        Page = super::FIRST_AM_TAG + 1,
        /// A link the page holds ([`LinkKind`], child block, key).
        Link = super::FIRST_AM_TAG + 2,
    }
}

byte_enum! {
    /// What kind of link a page holds.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum LinkKind {
        /// An entry-tree internal tuple's downlink (`GinGetDownlink`).
        EntryDownlink = 0,
        /// An entry leaf tuple's posting-tree root (`GinIsPostingTree`, `GinGetPostingTree`).
        PostingRoot = 1,
        /// A `PostingItem` of an internal posting-tree page.
        DataDownlink = 2,
    }
}

impl LinkKind {
    fn name(self) -> &'static str {
        match self {
            LinkKind::EntryDownlink => "entry-tree downlink",
            LinkKind::PostingRoot => "posting-tree root",
            LinkKind::DataDownlink => "posting-tree downlink",
        }
    }
}

byte_enum! {
    /// Something wrong inside one page, found while writing its fact.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum PageIssue {
        None = 0,
        /// A posting-tree leaf's heap TIDs do not ascend (at the given 0-based TID).
        TidsOutOfOrder = 1,
        /// An internal posting-tree page's keys descend (at the given 1-based item).
        KeysOutOfOrder = 2,
    }
}

/// A heap TID packed so that comparing the numbers compares the TIDs (`ItemPointerCompare`).
fn pack_tid(block: u32, offset: u16) -> u64 {
    ((block as u64) << 16) | offset as u64
}

/// The text form `(block,offset)` of a packed TID.
fn tid_text(t: u64) -> String {
    format!("({},{})", t >> 16, t & 0xFFFF)
}

/// One sound page's fact as written by [`emit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct PageFact {
    flags: u16,
    rightlink: u32,
    issue: u8,
    issue_at: u16,
    /// Whether `lo`/`hi` are known: a posting-tree leaf with decoded TIDs, or an internal
    /// posting-tree page with at least one bounded key.
    has_range: bool,
    /// The lowest heap TID on a posting-tree leaf (packed).
    lo: u64,
    /// The highest heap TID on a posting-tree leaf, or the highest bounded key of an internal
    /// posting-tree page (packed).
    hi: u64,
}

impl PageFact {
    fn is(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    /// A live entry-tree page: none of data, list, metapage, deleted.
    fn is_entry(&self) -> bool {
        use flags::*;
        self.flags & (GIN_DATA | GIN_LIST | GIN_META | GIN_DELETED) == 0
    }

    /// A live posting-tree page.
    fn is_live_data(&self) -> bool {
        use flags::*;
        self.is(GIN_DATA) && self.flags & (GIN_LIST | GIN_META | GIN_DELETED) == 0
    }

    fn is_leaf(&self) -> bool {
        self.is(flags::GIN_LEAF)
    }
}
