//! B-tree pages as the tests that damage them see them, decoded with `pgcheckdb-pg`'s layout
//! types: every page of an index with its special space, its items by offset number, and a
//! level's pages from left to right.

use std::path::Path;

use pgcheckdb_pg::format::btree::{flags as bf, BtMetaPage, BtPageOpaque, P_NONE};
use pgcheckdb_pg::format::itemid::line_pointers;
use pgcheckdb_pg::format::page::PageHeader;
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::bytes::block_id_at;
use pgcheckdb_testkit::BLCKSZ;

/// One B-tree page as the test sees it.
#[derive(Debug, Clone)]
pub struct Page {
    pub blkno: u64,
    pub opaque: BtPageOpaque,
    pub bytes: Vec<u8>,
}

impl Page {
    /// `(lp_off, lp_len)` of each line pointer, by offset number - 1.
    pub fn items(&self) -> Vec<(usize, usize)> {
        let h = PageHeader::parse(&self.bytes).expect("header");
        line_pointers(&self.bytes, &h)
            .iter()
            .map(|lp| (lp.lp_off as usize, lp.lp_len as usize))
            .collect()
    }

    /// The first data item's offset number: 1 on the rightmost page, else 2 (after the high key).
    pub fn first_data(&self) -> usize {
        if self.opaque.btpo_next == P_NONE {
            1
        } else {
            2
        }
    }

    /// The item at offset number `offnum`.
    pub fn item(&self, offnum: usize) -> &[u8] {
        let (off, len) = self.items()[offnum - 1];
        &self.bytes[off..off + len]
    }

    /// Child block of the pivot at `offnum` (1-based) of an internal page.
    pub fn downlink(&self, offnum: usize) -> u32 {
        block_id_at(self.item(offnum), 0)
    }

    /// Neither deleted nor half-dead.
    pub fn live(&self) -> bool {
        self.opaque.btpo_flags & (bf::BTP_DELETED | bf::BTP_HALF_DEAD) == 0
    }
}

/// Every initialized page of the index file at `path` but the metapage.
pub fn pages(path: &Path) -> Vec<Page> {
    let len = std::fs::metadata(path).expect("index file").len();
    (1..len / BLCKSZ as u64)
        .filter_map(|b| {
            let bytes = corrupt::read_block(path, b, BLCKSZ).ok()?;
            let h = PageHeader::parse(&bytes)?;
            if h.is_new() {
                return None;
            }
            let opaque = BtPageOpaque::parse(&bytes, h.pd_special as usize)?;
            Some(Page {
                blkno: b,
                opaque,
                bytes,
            })
        })
        .collect()
}

/// The live pages of level `level`, left to right.
pub fn level_chain(ps: &[Page], level: u32) -> Vec<Page> {
    let by = |b: u32| ps.iter().find(|p| p.blkno == b as u64);
    let mut page = ps
        .iter()
        .find(|p| p.live() && p.opaque.btpo_level == level && p.opaque.btpo_prev == P_NONE)
        .expect("leftmost page of the level");
    let mut chain = vec![page.clone()];
    while page.opaque.btpo_next != P_NONE {
        page = by(page.opaque.btpo_next).expect("right sibling");
        chain.push(page.clone());
    }
    chain
}

/// The metapage of the index file at `path`.
pub fn meta(path: &Path) -> BtMetaPage {
    let bytes = corrupt::read_block(path, 0, BLCKSZ).expect("metapage");
    BtMetaPage::parse(&bytes).expect("metapage")
}
