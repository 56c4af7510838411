//! Planning the standard level's key-order check: for each B-tree index of the plan, its
//! [`IndexOrdering`] and whether its metapage says version 4 (heap TIDs are part of the key),
//! or why its keys are not order-checked.
//!
//! The version matters only when two keys of a page are equal in every key column, which a
//! healthy unique index never shows; so it is not read while planning (that was one more
//! open and read per index, serially, before the scan). The scan learns it from block 0 when
//! it checks the metapage, and a page that needs it earlier reads the metapage itself, once
//! per index.

use foldhash::{HashMap, HashMapExt};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, OnceLock};

use pgcheckdb_scan::open::open_regular;

use super::{ordering_for_align, IndexOrdering, NotOrderChecked};
use crate::catalog::{Catalog, RelationInfo};
use crate::datadir::RelationFile;
use crate::format::btree::{BtMetaPage, BTREE_MAGIC, BTREE_VERSION};
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;
use crate::plan::Plan;

/// Bytes of block 0 that [`BtMetaPage::parse`] decodes: the page header and the first six
/// 4-byte fields of `BTMetaPageData` (magic, version, root, level, fast root, fast level).
const METAPAGE_PREFIX: usize = SIZE_OF_PAGE_HEADER_DATA + 6 * 4;

/// What the key-order check of one B-tree index needs.
#[derive(Debug, Clone)]
pub struct BtreeOrderCheck {
    pub ordering: Arc<IndexOrdering>,
    /// Version 4+: equal keys are ordered by heap TID (shared by the index's segment files).
    pub version: Arc<IndexVersion>,
}

/// Whether a B-tree index is version 4 or later ("heapkeyspace"), known once its metapage has
/// been seen. False when the metapage cannot be read or is not a B-tree metapage: then only the
/// keys are compared, never the heap TIDs (no false finding either way).
#[derive(Debug)]
pub struct IndexVersion {
    /// Segment 0 of the index's main fork, which holds the metapage; `None` when not listed.
    metapage_file: Option<RelationFile>,
    heapkeyspace: OnceLock<bool>,
}

impl IndexVersion {
    /// An index whose version is already known (hand-built checks, the fuzzing harness).
    pub fn known(heapkeyspace: bool) -> IndexVersion {
        IndexVersion {
            metapage_file: None,
            heapkeyspace: OnceLock::from(heapkeyspace),
        }
    }

    /// An index whose metapage is read from `metapage_file` when first needed.
    fn unread(metapage_file: Option<RelationFile>) -> IndexVersion {
        IndexVersion {
            metapage_file,
            heapkeyspace: OnceLock::new(),
        }
    }

    /// Whether heap TIDs are part of the key; reads the metapage if the scan has not seen it.
    /// A metapage that cannot be read now is not remembered: the scan may still read block 0
    /// (a tar backup streams the segments in any order).
    pub fn heapkeyspace(&self) -> bool {
        if let Some(&known) = self.heapkeyspace.get() {
            return known;
        }
        match self.read_metapage() {
            Some(m) => *self.heapkeyspace.get_or_init(|| says_heapkeyspace(&m)),
            None => false,
        }
    }

    /// Block 0 failed its checks: only keys are compared from now on (a damaged version field
    /// must not make heap TIDs part of the key of an index whose keys they are not).
    pub fn distrust_metapage(&self) {
        let _ = self.heapkeyspace.set(false);
    }

    /// Records the version from block 0 as the scan read it (`page` is the whole block).
    pub fn learn_from_metapage(&self, page: &[u8]) {
        if self.heapkeyspace.get().is_none() {
            let heapkeyspace = BtMetaPage::parse(page).is_some_and(|m| says_heapkeyspace(&m));
            // Another worker may have set it meanwhile, from the same bytes.
            let _ = self.heapkeyspace.set(heapkeyspace);
        }
    }

    fn read_metapage(&self) -> Option<BtMetaPage> {
        let file = open_regular(&self.metapage_file.as_ref()?.path(), false).ok()?;
        let mut prefix = [0u8; METAPAGE_PREFIX];
        file.read_exact_at(&mut prefix, 0).ok()?;
        BtMetaPage::parse(&prefix)
    }
}

fn says_heapkeyspace(m: &BtMetaPage) -> bool {
    m.btm_magic == BTREE_MAGIC && m.btm_version == BTREE_VERSION
}

/// The order checks of the plan's B-tree indexes, one per fork.
pub struct BtreeOrders<'a> {
    plan: &'a Plan,
    catalog: &'a Catalog,
    by_fork: HashMap<usize, Option<BtreeOrderCheck>>,
    /// Indexes not order-checked: `(schema.name, database oid, why)`.
    pub skipped: Vec<(String, u32, NotOrderChecked)>,
}

impl<'a> BtreeOrders<'a> {
    pub fn new(plan: &'a Plan, catalog: &'a Catalog) -> BtreeOrders<'a> {
        BtreeOrders {
            plan,
            catalog,
            by_fork: HashMap::new(),
            skipped: Vec::new(),
        }
    }

    /// The order check of the main fork `fork` of B-tree index `rel` in database `db_oid`.
    pub fn of(&mut self, fork: usize, db_oid: u32, rel: &RelationInfo) -> Option<BtreeOrderCheck> {
        if let Some(found) = self.by_fork.get(&fork) {
            return found.clone();
        }
        let max_align = self.plan.control.max_align as usize;
        let check = match ordering_for_align(self.catalog, db_oid, rel, max_align) {
            Ok(ordering) => Some(BtreeOrderCheck {
                ordering,
                version: Arc::new(IndexVersion::unread(self.metapage_file(fork))),
            }),
            Err(why) => {
                self.skipped.push((rel.name.to_string(), db_oid, why));
                None
            }
        };
        self.by_fork.insert(fork, check.clone());
        check
    }

    /// Segment 0 of `fork`, which holds the metapage.
    fn metapage_file(&self, fork: usize) -> Option<RelationFile> {
        self.plan.forks[fork]
            .segments()
            .map(|i| &self.plan.dir.files[i])
            .find(|f| f.name.segno == 0)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Block 0 of a B-tree with `magic` and `version` in `BTMetaPageData`.
    fn metapage(magic: u32, version: u32) -> Vec<u8> {
        let mut page = vec![0u8; 8192];
        page[SIZE_OF_PAGE_HEADER_DATA..][..4].copy_from_slice(&magic.to_le_bytes());
        page[SIZE_OF_PAGE_HEADER_DATA + 4..][..4].copy_from_slice(&version.to_le_bytes());
        page
    }

    #[test]
    fn version_learnt_from_the_scanned_metapage() {
        for (version, heapkeyspace) in [(2, false), (3, false), (4, true)] {
            let v = IndexVersion::unread(None);
            v.learn_from_metapage(&metapage(BTREE_MAGIC, version));
            assert_eq!(v.heapkeyspace(), heapkeyspace, "version {version}");
        }
        let wrong_magic = IndexVersion::unread(None);
        wrong_magic.learn_from_metapage(&metapage(0x1234, 4));
        assert!(!wrong_magic.heapkeyspace());
    }

    /// Segment 0 of relation 16384's main fork in `dir`, holding `page`.
    fn index_file(dir: &std::path::Path, page: &[u8]) -> RelationFile {
        std::fs::write(dir.join("16384"), page).expect("write metapage");
        RelationFile {
            dir: Arc::new(crate::datadir::RelationDir {
                path: dir.to_path_buf(),
                rel: "base/5".into(),
            }),
            location: crate::datadir::Location::Database { db_oid: 5 },
            name: crate::format::relfile::RelFileName {
                relfilenode: 16384,
                fork: crate::format::relfile::ForkNumber::Main,
                segno: 0,
                temp_backend: None,
            },
            size: page.len() as u64,
        }
    }

    #[test]
    fn version_read_from_the_file_when_not_yet_scanned() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (version, heapkeyspace) in [(3, false), (4, true)] {
            let file = index_file(dir.path(), &metapage(BTREE_MAGIC, version));
            let v = IndexVersion::unread(Some(file));
            assert_eq!(v.heapkeyspace(), heapkeyspace, "version {version}");
        }
        let short = index_file(dir.path(), &metapage(BTREE_MAGIC, 4)[..40]);
        assert!(
            !IndexVersion::unread(Some(short)).heapkeyspace(),
            "cut metapage"
        );
    }

    #[test]
    fn unreadable_metapage_compares_keys_only() {
        assert!(!IndexVersion::unread(None).heapkeyspace());
        let known = IndexVersion::known(true);
        known.learn_from_metapage(&metapage(BTREE_MAGIC, 3));
        assert!(known.heapkeyspace(), "a known version is not overwritten");
    }
}
