//! The extended level's plan: which relation forks give facts and what the merge needs to know
//! about each (name, key ordering, uniqueness and the table behind a unique index). Built from
//! the offline catalog before the scan; shared read-only by every worker.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::allindexed::exact::{LiveMap, Sums};
use super::allindexed::{
    estimated_entries, filter_bits, plan_index, AllIndexed, Candidate, Method, Planned, RowStats,
};
use super::catalog::{find_row, is_heap_table, read_index_rows, IndexRow};
use super::graphs::{plan_graphs, GraphInfo, GraphPlan, GraphPlanInputs};
use super::spill::SpillDir;
use super::tids::{plan_tids, IndexAm, TidIndexInfo, TidPlan, TidPlanInputs};
use super::toast::{plan_toast, ToastInfo, ToastPointers};
use super::ExtendedConfig;
use crate::catalog::attributes::Attribute;
use crate::catalog::{tablespace_of_path, Catalog, FileKey, RelKind, RelationInfo};
use crate::check::agreement::{Agreement, ForkAgreement};
use crate::check::order::{ordering_for, IndexOrdering, NotOrderChecked};
use crate::format::control::DbState;
use crate::format::oids::am_oid;
use crate::format::relfile::ForkNumber;
use crate::plan::Plan;

/// What a unique index's duplicates are checked with.
#[derive(Debug, Clone)]
pub struct UniqueSpec {
    /// The table's main fork (index into the plan's forks).
    pub heap_fork: usize,
    pub nkeyatts: usize,
    pub natts: usize,
    pub nulls_not_distinct: bool,
    /// The index's columns (to find where the key columns end before INCLUDE columns).
    pub attributes: Option<Arc<[Attribute]>>,
}

/// One B-tree index.
#[derive(Debug)]
pub struct IndexInfo {
    /// Its main fork (index into the plan's forks): also its merge unit.
    pub fork: usize,
    /// `database: schema.name` (shared catalogs: `database 0: ...`).
    pub name: String,
    pub ordering: Result<Arc<IndexOrdering>, NotOrderChecked>,
    pub unique: Option<UniqueSpec>,
    /// Its heap -> index check, when it has one (set after the indexes are known).
    pub all_indexed: Option<Arc<AllIndexed>>,
}

/// What the heap pages of one table contribute. Each cross-page check that needs a table's
/// heap pages sets its own field here; a table whose heap no check needs has no `HeapInfo`.
#[derive(Debug, Clone, Default)]
pub struct HeapInfo {
    /// The table's main fork (index into the plan's forks): also its merge unit.
    pub fork: usize,
    /// Tuple liveness for the uniqueness check (a valid unique B-tree index on the table).
    pub live_roots: bool,
    /// The table's B-tree indexes checked for heap -> index: each live tuple is looked up.
    pub all_indexed: Vec<Arc<AllIndexed>>,
    /// Line-pointer summaries for the index -> heap TID check ([`super::tids`]).
    pub tids: bool,
    /// The TOAST pointers of live rows, for the TOAST check (a table with a TOAST relation).
    pub toast_pointers: Option<Arc<ToastPointers>>,
    /// This heap is a TOAST relation: its chunks, for the TOAST check.
    pub toast_chunks: bool,
    /// Hint bits against `pg_xact` (every heap table, [`super::vm`]).
    pub hints: bool,
    /// The page's visibility summary, for the table's visibility map ([`super::vm`]).
    pub visibility: bool,
    /// The table's `relfrozenxid`: older xids are not looked up in `pg_xact`.
    pub relfrozenxid: u32,
}

/// What one file of the plan contributes.
#[derive(Debug, Clone)]
pub enum Role {
    Btree(Arc<IndexInfo>),
    /// A segment of a table's main fork.
    Heap(Arc<HeapInfo>),
    /// A hash, GiST, SP-GiST, GIN or BRIN index: its heap TIDs (not BRIN's, which has none)
    /// and its graph, each when planned.
    OtherIndex {
        tids: Option<Arc<TidIndexInfo>>,
        graph: Option<Arc<GraphInfo>>,
    },
    /// A segment of a table's visibility map (`_vm` fork).
    Vm(Arc<super::vm::VmInfo>),
}

/// Everything the workers and the merge share.
#[derive(Debug)]
pub struct ExtendedPlan {
    /// Per file of the plan.
    pub roles: Vec<Option<Role>>,
    pub indexes: HashMap<usize, Arc<IndexInfo>>,
    pub spill: Arc<SpillDir>,
    /// Memory one worker may hold before it spills.
    pub worker_budget: usize,
    pub jobs: usize,
    pub max_align: usize,
    /// `nextXid` as a full transaction id, when the cluster was shut down cleanly (a deleted
    /// page's stored xid must be older).
    pub next_full_xid: Option<u64>,
    pub config: ExtendedConfig,
    /// Indexes checked for heap -> index (see [`ExtendedPlan::first_phase`] for the scan order).
    pub all_indexed: Vec<Arc<AllIndexed>>,
    /// Indexes not checked for it, and why.
    pub all_indexed_skipped: Vec<(String, String)>,
    /// The indexes whose heap TIDs are checked against their tables.
    pub tids: TidPlan,
    /// The hash, GiST, SP-GiST, GIN and BRIN indexes whose graphs are checked.
    pub graphs: GraphPlan,
    /// The TOAST relations checked against their tables, by TOAST fork.
    pub toasts: HashMap<usize, Arc<ToastInfo>>,
    /// The heap tables checked for hint bits and visibility-map bits.
    pub vm: super::vm::VmPlan,
    /// B-tree indexes left out of every cross-page check because WAL replay rewrites pages of
    /// them or of their table.
    pub btree_in_flux: Vec<String>,
    /// Forks of the plan whose pages WAL replay rewrites (a crashed cluster, a base backup):
    /// no cross-page fact about them is judged. `None` when that rule does not apply.
    pub forks_in_flux: Option<u64>,
}

impl ExtendedPlan {
    /// Whether file `file` must be scanned in the first phase: a segment of an index whose
    /// entries heap pages look up in its filter in the second, or of a table whose indexes
    /// are checked by sums against its live tuples in the second (see [`Method`]).
    pub fn first_phase(&self, file: usize) -> bool {
        match self.roles.get(file) {
            Some(Some(Role::Btree(i))) => i
                .all_indexed
                .as_ref()
                .is_some_and(|a| matches!(a.method, Method::Filter(_))),
            Some(Some(Role::Heap(h))) => h
                .all_indexed
                .first()
                .is_some_and(|a| matches!(a.method, Method::Exact { .. })),
            _ => false,
        }
    }

    /// Plans the facts; fails only when the spill directory cannot be made.
    pub fn build(
        plan: &Plan,
        catalog: &Catalog,
        config: &ExtendedConfig,
        jobs: usize,
        agreement: &Agreement,
    ) -> io::Result<ExtendedPlan> {
        let spill = Arc::new(SpillDir::create(&config.temp_dir)?);
        let control = &plan.control;
        let agree = agreement.resolve(plan);
        let major = control.major.unwrap_or(0);
        let version_dir = control.tablespace_version_directory().unwrap_or_default();
        let rows = read_index_rows(
            &plan.datadir,
            catalog,
            major,
            control.blcksz as usize,
            control.max_align as usize,
            &version_dir,
        );
        let keys = Keys {
            fork_of_key: fork_keys(plan),
            key_of_oid: catalog
                .relations
                .iter()
                .map(|(k, r)| ((k.0, r.oid), *k))
                .collect(),
        };
        let mut roles: Vec<Option<Role>> = vec![None; plan.dir.files.len()];
        let (mut indexes, candidates, in_flux) = btree_indexes(plan, catalog, &rows, &keys, &agree);
        // Heap -> index state lives through the scan and the merge: half the budget, beside
        // the scan's runs (then the merge's buffers), which take the other half.
        let (all_indexed, all_indexed_skipped) =
            plan_all_indexed(&candidates, control.blcksz as u64, config.memory / 2);
        for a in &all_indexed {
            if let Some(info) = indexes.get_mut(&a.index_fork) {
                info.all_indexed = Some(a.clone());
            }
        }
        let indexes: HashMap<usize, Arc<IndexInfo>> =
            indexes.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
        let mut heaps: HashMap<usize, HeapInfo> = HashMap::new();
        for (&fork, info) in &indexes {
            set_role(plan, &mut roles, fork, &Role::Btree(info.clone()));
            if let Some(u) = &info.unique {
                heap_info(&mut heaps, u.heap_fork).live_roots = true;
            }
        }
        for a in &all_indexed {
            heap_info(&mut heaps, a.heap_fork)
                .all_indexed
                .push(a.clone());
        }
        let tids = plan_tids(&TidPlanInputs {
            catalog,
            rows: &rows,
            fork_of_key: &keys.fork_of_key,
            key_of_oid: &keys.key_of_oid,
            agree: &agree,
        });
        for info in tids.indexes.values() {
            heap_info(&mut heaps, info.heap_fork).tids = true;
        }
        let graphs = plan_graphs(&GraphPlanInputs {
            catalog,
            rows: &rows,
            fork_of_key: &keys.fork_of_key,
            fork_blocks: &plan.fork_blocks,
            agree: &agree,
        });
        set_other_index_roles(plan, &tids, &graphs, &mut roles);
        let toasts = plan_toast(plan, catalog, &keys.fork_of_key, &agree);
        for t in toasts.values() {
            heap_info(&mut heaps, t.main_fork).toast_pointers = Some(Arc::clone(&t.pointers));
            heap_info(&mut heaps, t.toast_fork).toast_chunks = true;
        }
        let vm = plan_maps(
            plan,
            catalog,
            &keys.fork_of_key,
            &agree,
            &mut heaps,
            &mut roles,
        );
        for (fork, info) in heaps {
            set_role(plan, &mut roles, fork, &Role::Heap(Arc::new(info)));
        }
        let jobs = jobs.max(1);
        Ok(ExtendedPlan {
            roles,
            indexes,
            spill,
            // Half the budget for the scan's runs, the other half for the merge.
            worker_budget: (config.memory / 2 / jobs as u64) as usize,
            jobs,
            max_align: control.max_align as usize,
            next_full_xid: (control.state == DbState::Shutdowned).then_some(control.next_xid),
            config: config.clone(),
            all_indexed,
            all_indexed_skipped,
            tids,
            graphs,
            toasts,
            vm,
            btree_in_flux: in_flux,
            forks_in_flux: matches!(agreement, Agreement::AllBut(_))
                .then_some(agree.in_flux.len() as u64),
        })
    }

    pub fn spill_path(&self) -> &Path {
        self.spill.path()
    }
}

/// The heap -> index checks of the candidate indexes, and the indexes left out with the
/// reason. Tables whose live map and sums fit in `budget` bytes (the smallest first) are
/// checked by sums; the others share what is left of the budget in filters.
fn plan_all_indexed(
    candidates: &[Candidate<'_>],
    blcksz: u64,
    budget: u64,
) -> (Vec<Arc<AllIndexed>>, Vec<(String, String)>) {
    let mut skipped = Vec::new();
    let mut by_table: BTreeMap<usize, Vec<&Candidate<'_>>> = BTreeMap::new();
    for c in candidates {
        match (plan_index(c, Planned::Filter(0)), c.heap_fork) {
            (Ok(_), Some(heap)) => by_table.entry(heap).or_default().push(c),
            (Err(why), _) => skipped.push((c.name.clone(), why.to_string())),
            (Ok(_), None) => skipped.push((c.name.clone(), "its table is not in scope".into())),
        }
    }
    let need = |cs: &[&Candidate<'_>]| {
        let blocks = cs.first().map_or(0, |c| c.heap_blocks);
        LiveMap::bytes(blocks, blcksz) + cs.len() as u64 * Sums::bytes(blocks)
    };
    let mut tables: Vec<&Vec<&Candidate<'_>>> = by_table.values().collect();
    tables.sort_by_key(|cs| need(cs));
    let mut left = budget;
    let mut planned = Vec::new();
    let mut filtered = Vec::new();
    for cs in tables {
        let bytes = need(cs);
        if bytes > left {
            filtered.extend(cs.iter().copied());
            continue;
        }
        left -= bytes;
        let live = Arc::new(LiveMap::new(cs[0].heap_blocks, blcksz));
        planned.extend(
            cs.iter()
                .filter_map(|c| plan_index(c, Planned::Exact(live.clone())).ok()),
        );
    }
    let estimates: Vec<u64> = filtered
        .iter()
        .map(|c| estimated_entries(c.index_blocks, blcksz, &c.rows))
        .collect();
    let bits = filter_bits(&estimates, left);
    planned.extend(
        filtered
            .iter()
            .zip(bits)
            .filter_map(|(c, bits)| plan_index(c, Planned::Filter(bits)).ok()),
    );
    (planned.into_iter().map(Arc::new).collect(), skipped)
}

/// The heap facts planned for the table whose main fork is `fork` (made on first use).
pub(super) fn heap_info(heaps: &mut HashMap<usize, HeapInfo>, fork: usize) -> &mut HeapInfo {
    heaps.entry(fork).or_insert_with(|| HeapInfo {
        fork,
        ..HeapInfo::default()
    })
}

/// The catalog's relations by file and by OID, as the planners look them up.
struct Keys {
    /// The main fork of each relation in the plan.
    fork_of_key: HashMap<FileKey, usize>,
    /// The file key of each relation, by `(database, oid)`.
    key_of_oid: HashMap<(u32, u32), FileKey>,
}

impl Keys {
    /// The table of index `row` (a shared catalog's table: in database 0).
    fn table_of(&self, db: u32, row: &IndexRow) -> Option<&FileKey> {
        self.key_of_oid
            .get(&(db, row.indrelid))
            .or_else(|| self.key_of_oid.get(&(0, row.indrelid)))
    }
}

/// Every valid B-tree index in the plan, by fork, and the candidates for heap -> index.
fn btree_indexes<'c>(
    plan: &Plan,
    catalog: &'c Catalog,
    rows: &HashMap<(u32, u32), IndexRow>,
    keys: &Keys,
    agree: &ForkAgreement,
) -> (HashMap<usize, IndexInfo>, Vec<Candidate<'c>>, Vec<String>) {
    let mut indexes = HashMap::new();
    let mut candidates = Vec::new();
    let mut in_flux = Vec::new();
    for (key, &fork) in &keys.fork_of_key {
        let Some(rel) = catalog.relations.get(key) else {
            continue;
        };
        if rel.kind != RelKind::Index || rel.relam != am_oid::BTREE {
            continue;
        }
        let row = find_row(rows, key.0, rel.oid);
        if row.is_some_and(|r| !r.indisvalid) {
            continue; // an invalid index may be incomplete: the server never reads it
        }
        let unique = row
            .filter(|r| r.indisunique)
            .and_then(|r| unique_spec(catalog, keys, key.0, &r, rel));
        let database = catalog
            .databases
            .get(&key.0)
            .map_or_else(|| format!("database {}", key.0), |d| d.name.clone());
        let name = format!("{database}: {}", rel.name);
        let table = row.and_then(|r| keys.table_of(key.0, &r));
        let table_fork = table.and_then(|t| keys.fork_of_key.get(t).copied());
        if agree
            .not_in_flux(
                &[Some(fork), table_fork]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>(),
            )
            .is_err()
        {
            in_flux.push(name);
            continue;
        }
        candidates.push(candidate(
            plan,
            catalog,
            keys,
            name.clone(),
            fork,
            key.0,
            rel,
            table,
        ));
        let info = IndexInfo {
            fork,
            name,
            ordering: ordering_for(catalog, key.0, rel),
            unique,
            all_indexed: None,
        };
        indexes.insert(fork, info);
    }
    in_flux.sort();
    (indexes, candidates, in_flux)
}

/// How a unique index's duplicates are checked: `None` when its table is not a heap table
/// in the plan.
fn unique_spec(
    catalog: &Catalog,
    keys: &Keys,
    db: u32,
    row: &IndexRow,
    rel: &RelationInfo,
) -> Option<UniqueSpec> {
    let table = keys
        .table_of(db, row)
        .filter(|t| is_heap_table(catalog, t))?;
    Some(UniqueSpec {
        heap_fork: *keys.fork_of_key.get(table)?,
        nkeyatts: row.indnkeyatts as usize,
        natts: row.indnatts as usize,
        nulls_not_distinct: row.indnullsnotdistinct,
        attributes: rel.attributes.clone(),
    })
}

/// A B-tree index as a candidate for heap -> index, with its table's sizes and statistics.
#[allow(clippy::too_many_arguments)]
fn candidate<'c>(
    plan: &Plan,
    catalog: &'c Catalog,
    keys: &Keys,
    name: String,
    fork: usize,
    db: u32,
    rel: &'c RelationInfo,
    table: Option<&FileKey>,
) -> Candidate<'c> {
    let table_fork = |t: &FileKey| keys.fork_of_key.get(t).copied();
    Candidate {
        name,
        index_fork: fork,
        other_table_am: table.is_some_and(|t| !is_heap_table(catalog, t)),
        heap_fork: table.and_then(table_fork),
        meta: catalog.order.index(db, rel.oid).map(|(_, m)| m),
        index_attrs: rel.attributes.as_ref(),
        heap_attrs: table
            .and_then(|t| catalog.relations.get(t))
            .and_then(|t| t.attributes.as_ref()),
        index_blocks: plan.fork_blocks[fork],
        heap_blocks: table
            .and_then(table_fork)
            .map_or(0, |f| plan.fork_blocks[f]),
        rows: table
            .and_then(|t| Some((catalog.relations.get(t)?, table_fork(t)?)))
            .map_or_else(RowStats::default, |(t, f)| RowStats {
                relpages: t.relpages,
                reltuples: t.reltuples,
                heap_blocks: plan.fork_blocks[f],
            }),
    }
}

/// Gives every segment file of `fork` the role `role`.
fn set_role(plan: &Plan, roles: &mut [Option<Role>], fork: usize, role: &Role) {
    for i in plan.forks[fork].segments() {
        roles[i] = Some(role.clone());
    }
}

/// The roles of the indexes of the other access methods: the TID check, the graph check, or
/// both.
fn set_other_index_roles(
    plan: &Plan,
    tids: &TidPlan,
    graphs: &GraphPlan,
    roles: &mut [Option<Role>],
) {
    let mut others: Vec<usize> = tids
        .indexes
        .iter()
        .filter(|(_, info)| info.am != IndexAm::Btree)
        .map(|(&fork, _)| fork)
        .chain(graphs.indexes.keys().copied())
        .collect();
    others.sort_unstable();
    others.dedup();
    for fork in others {
        let role = Role::OtherIndex {
            tids: tids.indexes.get(&fork).cloned(),
            graph: graphs.indexes.get(&fork).cloned(),
        };
        set_role(plan, roles, fork, &role);
    }
}

/// Plans the visibility maps and hint bits: the heap flags of every table, the role of each
/// `_vm` fork read.
fn plan_maps(
    plan: &Plan,
    catalog: &Catalog,
    fork_of_key: &HashMap<FileKey, usize>,
    agree: &ForkAgreement,
    heaps: &mut HashMap<usize, HeapInfo>,
    roles: &mut [Option<Role>],
) -> super::vm::VmPlan {
    let (vm, tables) = super::vm::VmPlan::build(plan, catalog, fork_of_key, agree);
    for t in tables {
        let info = heap_info(heaps, t.fork);
        info.hints = true;
        info.visibility = vm.maps.contains_key(&t.fork);
        info.relfrozenxid = t.relfrozenxid;
    }
    for (vm_fork, info) in vm.map_roles() {
        set_role(plan, roles, vm_fork, &Role::Vm(info.clone()));
    }
    vm
}

/// The file key of every main fork in the plan.
fn fork_keys(plan: &Plan) -> HashMap<FileKey, usize> {
    plan.forks
        .iter()
        .enumerate()
        .filter(|(_, f)| f.fork == ForkNumber::Main && !f.segments().is_empty())
        .map(|(i, f)| {
            let first = &plan.dir.files[f.segments().start];
            let key = (
                f.location.db_oid(),
                tablespace_of_path(&first.rel_path()),
                f.relfilenode,
            );
            (key, i)
        })
        .collect()
}
