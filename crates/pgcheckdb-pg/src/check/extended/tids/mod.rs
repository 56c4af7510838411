//! Index -> heap TIDs: every heap TID an index leaf entry holds (B-tree plain and posting
//! tuples, hash bucket and overflow tuples, GiST and SP-GiST leaf tuples, GIN entry posting
//! lists, posting trees and the pending list) must point at a line pointer of the index's
//! table that an index may name: inside the table, at most the page's line pointer count, and
//! `LP_NORMAL` (not a heap-only tuple), `LP_REDIRECT` or `LP_DEAD`. A heap page that is all
//! zero, or beyond the end of the table, while index entries point into it is a lost write.
//!
//! Flow: [`plan_tids`] picks the indexes whose table is in scope; during the scan each heap
//! page gives one line-pointer summary and each index page one record per heap block its
//! entries name, both in the heap's unit and family [`Family::Tids`] so that they meet sorted
//! by heap block, the heap page's summary first ([`record`]; TIDs are read from index pages by
//! [`decode`]); the merge streams each table's records once, in constant memory ([`merge`]).
//!
//! [`Family::Tids`]: super::facts::Family::Tids

pub mod decode;
pub mod merge;
pub mod record;

use std::collections::HashMap;
use std::sync::Arc;

use super::catalog::IndexRow;
use crate::catalog::{Catalog, FileKey, RelKind};
use crate::check::agreement::ForkAgreement;
use crate::format::oids::am_oid;

/// The index access methods whose leaf entries give heap TIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexAm {
    Btree,
    Hash,
    Gist,
    SpGist,
    Gin,
}

impl IndexAm {
    fn from_relam(relam: u32) -> Option<IndexAm> {
        Some(match relam {
            am_oid::BTREE => IndexAm::Btree,
            am_oid::HASH => IndexAm::Hash,
            am_oid::GIST => IndexAm::Gist,
            am_oid::SPGIST => IndexAm::SpGist,
            am_oid::GIN => IndexAm::Gin,
            _ => return None,
        })
    }
}

/// One index whose TIDs are checked against its table.
#[derive(Debug)]
pub struct TidIndexInfo {
    /// The index's main fork (index into the plan's forks).
    pub fork: usize,
    /// The table's main fork: the merge unit of the TID facts.
    pub heap_fork: usize,
    pub am: IndexAm,
    /// `database: name`.
    pub name: String,
    /// The table's name.
    pub table: String,
}

/// An index whose TIDs are not checked, and why.
#[derive(Debug, Clone)]
pub struct TidNotChecked {
    pub index: String,
    pub reason: &'static str,
}

/// Which indexes give TID facts.
#[derive(Debug, Default)]
pub struct TidPlan {
    /// By index fork.
    pub indexes: HashMap<usize, Arc<TidIndexInfo>>,
    pub not_checked: Vec<TidNotChecked>,
}

/// What [`plan_tids`] reads.
pub struct TidPlanInputs<'a> {
    pub catalog: &'a Catalog,
    pub rows: &'a HashMap<(u32, u32), IndexRow>,
    /// The plan's main forks by file key.
    pub fork_of_key: &'a HashMap<FileKey, usize>,
    /// File keys by (database, relation oid).
    pub key_of_oid: &'a HashMap<(u32, u32), FileKey>,
    /// Which forks' pages agree with each other ([`crate::check::agreement`]). After a crash
    /// or on a standby an index page may have reached the disk while the heap page it points
    /// into did not (WAL replay would write it), so nothing is concluded there unless the
    /// WAL says neither is rewritten.
    pub agree: &'a ForkAgreement,
}

/// Plans the TID check of every index (B-tree, hash, GiST, SP-GiST, GIN) in the plan.
pub fn plan_tids(inputs: &TidPlanInputs<'_>) -> TidPlan {
    let mut out = TidPlan::default();
    for (key, &fork) in inputs.fork_of_key {
        let Some(rel) = inputs.catalog.relations.get(key) else {
            continue;
        };
        if rel.kind != RelKind::Index {
            continue;
        }
        let Some(am) = IndexAm::from_relam(rel.relam) else {
            continue;
        };
        let database = inputs
            .catalog
            .databases
            .get(&key.0)
            .map_or_else(|| format!("database {}", key.0), |d| d.name.clone());
        let name = format!("{database}: {}", rel.name);
        match heap_of(inputs, key.0, rel.oid, fork) {
            Ok((table, heap_fork)) => {
                let info = TidIndexInfo {
                    fork,
                    heap_fork,
                    am,
                    name,
                    table: inputs
                        .catalog
                        .relations
                        .get(&table)
                        .map_or_else(String::new, |r| r.name.to_string()),
                };
                out.indexes.insert(fork, Arc::new(info));
            }
            Err(reason) => out.not_checked.push(TidNotChecked {
                index: name,
                reason,
            }),
        }
    }
    out.not_checked.sort_by(|a, b| a.index.cmp(&b.index));
    out
}

/// The main fork of the table of index `oid`, or why its TIDs cannot be checked.
fn heap_of(
    inputs: &TidPlanInputs<'_>,
    db: u32,
    oid: u32,
    index_fork: usize,
) -> Result<(FileKey, usize), &'static str> {
    inputs.agree.check(&[index_fork])?;
    let row = super::catalog::find_row(inputs.rows, db, oid).ok_or("no pg_index row")?;
    if !row.indisvalid {
        return Err("the index is not valid (indisvalid is false)");
    }
    let table = inputs
        .key_of_oid
        .get(&(db, row.indrelid))
        .or_else(|| inputs.key_of_oid.get(&(0, row.indrelid)))
        .ok_or("its table is not in the catalog")?;
    if !super::catalog::is_heap_table(inputs.catalog, table) {
        return Err(super::catalog::OTHER_TABLE_AM);
    }
    let fork = inputs
        .fork_of_key
        .get(table)
        .copied()
        .ok_or("its table is not in the scope of this run")?;
    inputs.agree.check(&[fork])?;
    Ok((*table, fork))
}
