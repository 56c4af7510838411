//! Which heap tables get visibility-map and hint-bit facts, and which `_vm` fork belongs to
//! each. The visibility map is compared with the heap only where the two agree
//! ([`crate::check::agreement`]): after a clean shutdown, or, on a crashed cluster or a base
//! backup, for the tables WAL replay does not touch. Anywhere else (a standby shut down in
//! recovery) the heap page and its map page may have reached disk at different points of the
//! WAL, and a disagreement proves nothing until recovery has replayed it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::catalog::{Catalog, FileKey, RelKind};
use crate::check::agreement::ForkAgreement;
use crate::datadir::Location;
use crate::format::oids::am_oid;
use crate::format::relfile::ForkNumber;
use crate::plan::Plan;

/// A `_vm` fork: the table whose heap blocks it maps.
#[derive(Debug)]
pub struct VmInfo {
    /// The table's main fork (index into the plan's forks): the merge unit of its facts.
    pub heap_fork: usize,
}

/// The tables whose heap pages give visibility and hint-bit facts.
#[derive(Debug, Default)]
pub struct VmPlan {
    /// Main forks of the heap tables, sorted.
    pub tables: Vec<usize>,
    /// Heap main fork -> its `_vm` fork, for the tables whose map is compared.
    pub maps: HashMap<usize, usize>,
    /// Why no visibility map is compared, when none is.
    pub not_checked: Option<String>,
    /// Tables whose map is not compared because WAL replay rewrites pages of them.
    pub in_flux: u64,
}

/// One heap table: its main fork and `relfrozenxid`.
#[derive(Debug, Clone, Copy)]
pub struct HeapTable {
    pub fork: usize,
    pub relfrozenxid: u32,
}

impl VmPlan {
    /// Plans the heap tables among the main forks of the plan (`fork_of_key`).
    pub fn build(
        plan: &Plan,
        catalog: &Catalog,
        fork_of_key: &HashMap<FileKey, usize>,
        agree: &ForkAgreement,
    ) -> (VmPlan, Vec<HeapTable>) {
        let mut tables: Vec<HeapTable> = fork_of_key
            .iter()
            .filter_map(|(key, &fork)| {
                let rel = catalog.relations.get(key)?;
                let heap_kind = matches!(
                    rel.kind,
                    RelKind::Table | RelKind::Toast | RelKind::MaterializedView
                );
                (heap_kind && rel.relam == am_oid::HEAP).then_some(HeapTable {
                    fork,
                    relfrozenxid: rel.relfrozenxid,
                })
            })
            .collect();
        tables.sort_by_key(|t| t.fork);
        let mut maps = HashMap::new();
        let mut in_flux = 0;
        if agree.unknown.is_none() {
            let vm_of = vm_forks(plan);
            for t in &tables {
                let f = &plan.forks[t.fork];
                let Some(&vm) = vm_of.get(&(f.location, f.relfilenode)) else {
                    continue;
                };
                match agree.check(&[t.fork, vm]) {
                    Ok(()) => _ = maps.insert(t.fork, vm),
                    Err(_) => in_flux += 1,
                }
            }
        }
        let not_checked = agree.unknown.map(|_| {
            "the cluster was not shut down cleanly: a heap page and its visibility-map page may \
             stand at different points of the WAL until recovery replays it"
                .to_string()
        });
        let vm = VmPlan {
            tables: tables.iter().map(|t| t.fork).collect(),
            maps,
            not_checked,
            in_flux,
        };
        (vm, tables)
    }

    /// The `_vm` forks to read, each with the information its pages need.
    pub fn map_roles(&self) -> impl Iterator<Item = (usize, Arc<VmInfo>)> + '_ {
        self.maps
            .iter()
            .map(|(&heap_fork, &vm)| (vm, Arc::new(VmInfo { heap_fork })))
    }
}

/// Every `_vm` fork of the plan by (location, relfilenode).
fn vm_forks(plan: &Plan) -> HashMap<(Location, u32), usize> {
    plan.forks
        .iter()
        .enumerate()
        .filter(|(_, f)| f.fork == ForkNumber::Vm && !f.segments().is_empty())
        .map(|(i, f)| ((f.location, f.relfilenode), i))
        .collect()
}
