//! The graphs of the other index access methods — hash, GiST, SP-GiST, GIN and BRIN — at the
//! extended level: how their pages link to each other, which the standard level, checking each
//! page alone, cannot see (hash bucket and overflow chains, GiST and SP-GiST child pages, GIN
//! entry and posting trees, BRIN's range map against its regular pages).
//!
//! Flow, as for the B-tree (`extended::btree`): [`plan_graphs`] picks the indexes (of a cluster
//! shut down cleanly); during the
//! block scan each sound page of such an index gives its facts through a [`Sink`] (one record
//! per fact, in the index's unit and family [`Family::IndexGraph`]), and a page that failed its
//! physical or standard checks gives a damaged mark instead; the merge streams each index's
//! records in block order into its access method's [`GraphCheck`], which returns the problems
//! found ([`merge`]). Each access method owns one module: what its pages say ([`emit`] there)
//! and what must hold across them ([`GraphCheck`] there).
//!
//! [`Family::IndexGraph`]: super::facts::Family::IndexGraph

pub mod brin;
pub mod gin;
pub mod gist;
pub mod hash;
pub mod merge;
pub mod spgist;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::catalog::find_row;
use super::catalog::IndexRow;
use super::facts::{Family, Writer};
use super::spill::RunBuilder;
use super::tids::TidNotChecked;
use crate::catalog::{Catalog, FileKey, RelKind};
use crate::check::agreement::ForkAgreement;
use crate::format::oids::am_oid;

/// The access methods whose graphs are checked here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphAm {
    Hash,
    Gist,
    SpGist,
    Gin,
    Brin,
}

impl GraphAm {
    fn from_relam(relam: u32) -> Option<GraphAm> {
        Some(match relam {
            am_oid::HASH => GraphAm::Hash,
            am_oid::GIST => GraphAm::Gist,
            am_oid::SPGIST => GraphAm::SpGist,
            am_oid::GIN => GraphAm::Gin,
            am_oid::BRIN => GraphAm::Brin,
            _ => return None,
        })
    }

    /// The name PostgreSQL gives the access method (`pg_am.amname`).
    pub fn name(self) -> &'static str {
        match self {
            GraphAm::Hash => "hash",
            GraphAm::Gist => "gist",
            GraphAm::SpGist => "spgist",
            GraphAm::Gin => "gin",
            GraphAm::Brin => "brin",
        }
    }
}

/// One index whose graph is checked.
#[derive(Debug)]
pub struct GraphInfo {
    /// The index's main fork (index into the plan's forks): the unit of its facts.
    pub fork: usize,
    pub am: GraphAm,
    /// `database: name`.
    pub name: String,
    /// The index's block count (its segment files' sizes).
    pub blocks: u64,
}

/// Which indexes have their graph checked, and which not and why.
#[derive(Debug, Default)]
pub struct GraphPlan {
    /// By index fork.
    pub indexes: HashMap<usize, Arc<GraphInfo>>,
    pub not_checked: Vec<TidNotChecked>,
}

/// What [`plan_graphs`] reads.
pub struct GraphPlanInputs<'a> {
    pub catalog: &'a Catalog,
    /// `pg_index` rows by (database, index oid).
    pub rows: &'a HashMap<(u32, u32), IndexRow>,
    /// The plan's main forks by file key.
    pub fork_of_key: &'a HashMap<FileKey, usize>,
    /// Blocks of each of the plan's forks.
    pub fork_blocks: &'a [u64],
    /// Which forks' pages agree with each other ([`crate::check::agreement`]).
    pub agree: &'a ForkAgreement,
}

/// Plans the graph check of every hash, GiST, SP-GiST, GIN and BRIN index in the plan. An
/// index whose pages are not known to agree is not checked ([`ForkAgreement`]): a change that
/// spans pages is atomic only through the WAL, and replay may not have written all of its
/// pages yet. Nor is an index that is not valid (`indisvalid` false: a build that failed or
/// was interrupted may have left it in part), as for the B-tree checks.
pub fn plan_graphs(inputs: &GraphPlanInputs<'_>) -> GraphPlan {
    let catalog = inputs.catalog;
    let mut out = GraphPlan::default();
    for (key, &fork) in inputs.fork_of_key {
        let Some(rel) = catalog.relations.get(key) else {
            continue;
        };
        if rel.kind != RelKind::Index {
            continue;
        }
        let Some(am) = GraphAm::from_relam(rel.relam) else {
            continue;
        };
        let database = catalog
            .databases
            .get(&key.0)
            .map_or_else(|| format!("database {}", key.0), |d| d.name.clone());
        let name = format!("{database}: {}", rel.name);
        let why_not = if let Err(why) = inputs.agree.check(&[fork]) {
            Some(why)
        } else {
            match find_row(inputs.rows, key.0, rel.oid) {
                None => Some("no pg_index row"),
                Some(row) if !row.indisvalid => {
                    Some("the index is not valid (indisvalid is false)")
                }
                Some(_) => None,
            }
        };
        if let Some(reason) = why_not {
            out.not_checked.push(TidNotChecked {
                index: name,
                reason,
            });
            continue;
        }
        let info = GraphInfo {
            fork,
            am,
            name,
            blocks: inputs.fork_blocks.get(fork).copied().unwrap_or(0),
        };
        out.indexes.insert(fork, Arc::new(info));
    }
    out.not_checked.sort_by(|a, b| a.index.cmp(&b.index));
    out
}

/// The first body byte of a graph record that marks a damaged page.
pub const DAMAGED_TAG: u8 = 0;
/// The first body byte of a graph record that marks an all-zero (new) page. Access methods
/// tag their own records with values from [`FIRST_AM_TAG`] on. A block with no record at all
/// was not read (its segment file is missing or could not be opened: a finding of its own).
pub const NEW_TAG: u8 = 1;
/// The lowest tag an access method's own records may use.
pub const FIRST_AM_TAG: u8 = 2;

/// Where an access method's `emit` writes the facts of one index page: each record is keyed
/// by a block of the same index (the page's own, or the block it says something about) and
/// sorts after the records of lower blocks, then by its body's bytes.
pub struct Sink<'a> {
    unit: u32,
    buf: &'a mut Vec<u8>,
    runs: &'a mut RunBuilder,
}

impl<'a> Sink<'a> {
    pub fn new(unit: u32, buf: &'a mut Vec<u8>, runs: &'a mut RunBuilder) -> Sink<'a> {
        Sink { unit, buf, runs }
    }

    /// Writes one record about block `blkno`; `body` writes its body, which should start with
    /// the access method's tag byte (at least [`FIRST_AM_TAG`]).
    pub fn push(&mut self, blkno: u32, body: impl FnOnce(&mut Writer<'_>)) {
        let mut w = Writer::start(self.buf, self.unit, Family::IndexGraph, blkno);
        body(&mut w);
        self.runs.push(self.buf);
    }

    /// The mark of a page that failed its physical or standard checks.
    pub fn damaged(&mut self, blkno: u32) {
        self.push(blkno, |w| {
            w.u8(DAMAGED_TAG);
        });
    }

    /// The mark of an all-zero page.
    pub fn new_page(&mut self, blkno: u32) {
        self.push(blkno, |w| {
            w.u8(NEW_TAG);
        });
    }
}

/// Writes the graph facts of one sound page of `info`'s index.
pub fn emit(info: &GraphInfo, blkno: u32, page: &[u8], sink: &mut Sink<'_>) {
    match info.am {
        GraphAm::Hash => hash::emit(page, blkno, sink),
        GraphAm::Gist => gist::emit(page, blkno, sink),
        GraphAm::SpGist => spgist::emit(page, blkno, sink),
        GraphAm::Gin => gin::emit(page, blkno, sink),
        GraphAm::Brin => brin::emit(page, blkno, sink),
    }
}

/// Something wrong across the pages of one index, found at block `blkno` (the page that holds
/// the wrong fact; the other page goes in `detail`).
#[derive(Debug, Clone, PartialEq)]
pub struct GraphProblem {
    pub blkno: u64,
    pub message: String,
    /// The facts behind it (a JSON object; the merge adds the index and access method).
    pub detail: Value,
}

impl GraphProblem {
    pub fn new(blkno: impl Into<u64>, message: String, detail: Value) -> GraphProblem {
        GraphProblem {
            blkno: blkno.into(),
            message,
            detail,
        }
    }
}

/// The cross-page check of one access method. The merge feeds it the index's records in
/// block order (within a block, in the order of their bodies' bytes), then asks for the
/// problems found. Every block read gives either the access method's records (a sound page;
/// possibly none), a damaged mark or a new-page mark; a block that gives nothing was not read,
/// and nothing may be concluded from its absence either.
pub trait GraphCheck {
    /// A record the access method's `emit` wrote about block `blkno` (`body` starts with its
    /// tag byte).
    fn record(&mut self, blkno: u32, body: &[u8]);
    /// Block `blkno` failed its physical or standard checks: nothing is known of it, so
    /// nothing may be concluded from what it lacks.
    fn damaged(&mut self, blkno: u32);
    /// Block `blkno` is all zeros (a page extended but never written, or not yet reused).
    fn new_page(&mut self, blkno: u32);
    /// The problems found, once every record was given.
    fn finish(self: Box<Self>) -> Vec<GraphProblem>;
}

/// A fresh check for `info`'s index.
pub fn checker(info: &GraphInfo) -> Box<dyn GraphCheck> {
    match info.am {
        GraphAm::Hash => Box::new(hash::Check::new(info)),
        GraphAm::Gist => Box::new(gist::Check::new(info)),
        GraphAm::SpGist => Box::new(spgist::Check::new(info)),
        GraphAm::Gin => Box::new(gin::Check::new(info)),
        GraphAm::Brin => Box::new(brin::Check::new(info)),
    }
}

/// Helpers of the access methods' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::{GraphAm, GraphInfo};
    use crate::check::extended::facts::{Family, Writer};

    /// One record body, as an access method's `emit` writes it (the record without its head).
    pub fn body(write: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = Writer::start(&mut buf, 0, Family::IndexGraph, 0);
        write(&mut w);
        buf.split_off(9)
    }

    /// A made-up index of `blocks` blocks.
    pub fn info(am: GraphAm, blocks: u64) -> GraphInfo {
        GraphInfo {
            fork: 0,
            am,
            name: "db: i".into(),
            blocks,
        }
    }
}
