//! TOAST values against their chunks (extended level): every on-disk TOAST pointer
//! (`varatt_external`) of a certainly live row must find chunks `0..n-1` of its value
//! (`va_valueid`) in the table's TOAST relation, each `TOAST_MAX_CHUNK_SIZE` bytes long but the
//! last, which holds the rest of the pointer's external size (`va_extinfo`'s low 30 bits).
//!
//! Flow, in the same single read as every other check:
//!
//! * plan ([`plan_toast`]): a table with a TOAST relation, both in the run, gets
//!   `HeapInfo::toast_pointers` on its main fork (emit pointer facts) and its TOAST relation
//!   `HeapInfo::toast_chunks` (emit chunk facts). Only after a clean shutdown (also a standby's
//!   shutdown in recovery): after a crash, a page holding a pointer may reach the disk before
//!   the page holding its chunks, and WAL replay, not corruption, would fill the gap.
//! * scan ([`emit`]): a sound main page gives one record per external pointer of each certainly
//!   live tuple (`extended::heap::certainly_live`; the column walk is the standard level's
//!   `attribute_span`); a sound TOAST page one record per chunk tuple that is not certainly dead,
//!   with its liveness; an unsound TOAST page a [`Family::ToastDamaged`] mark.
//! * merge ([`merge`]): per TOAST relation, in parallel across relations.
//!
//! Sort order. Records are `unit | family | block | body`, sorted by bytes. Both kinds of
//! record use the TOAST relation's fork as unit, so a relation's facts form one stream. The
//! damaged marks are family 8 (they sort first: before any value is judged, the merge knows
//! whether chunks may be missing from the facts). Pointers and chunks share family 9, with the
//! value id in the block field and a sub-kind byte (pointer 0, chunk 1) first in the body: a
//! value's pointers arrive first, then its chunks in `chunk_seq` order (big-endian), duplicates
//! side by side. Two families for pointers and chunks would have put every pointer before every
//! chunk, and joining them would have needed both streams at once; this way the merge holds one
//! value at a time (its pointers, the last chunk seen, a few counters): constant memory.
//!
//! Liveness. A pointer is checked only when its row is certainly live (inserted by a committed
//! transaction, not deleted or updated by one that committed or may still commit): a value a
//! dead row points at may have lost its chunks to VACUUM. A chunk counts as present unless it
//! is certainly dead (inserter aborted, or deleter committed); duplicates, sizes and chunks past
//! the end are judged only on certainly live chunks. Chunks of values that no certainly live
//! row points at are counted, with one `toast_chunks_unreferenced` info per TOAST relation.

pub mod emit;
pub mod merge;
pub mod value;

use std::collections::HashMap;
use std::sync::Arc;

use crate::catalog::attributes::Attribute;
use crate::catalog::{Catalog, FileKey, RelKind};
use crate::check::agreement::ForkAgreement;
use crate::format::control::DbState;
use crate::format::oids::am_oid;
use crate::plan::Plan;

#[cfg(doc)]
use super::facts::Family;

/// What a table's main fork contributes: the pointer facts of its live rows.
#[derive(Debug)]
pub struct ToastPointers {
    /// The merge unit: the TOAST relation's fork.
    pub unit: u32,
    /// `pg_class.reltoastrelid` of the table: pointers naming another relation are the
    /// standard level's `toast_pointer_invalid` and give no facts.
    pub toastrelid: u32,
    /// The table's columns (`pg_attribute`).
    pub attributes: Arc<[Attribute]>,
}

/// One TOAST relation to check against its table.
#[derive(Debug)]
pub struct ToastInfo {
    /// The TOAST relation's main fork (index into the plan's forks): also the merge unit.
    pub toast_fork: usize,
    /// The table's main fork.
    pub main_fork: usize,
    /// `database: schema.table` of the table.
    pub main_name: String,
    /// `TOAST_MAX_CHUNK_SIZE` of the cluster.
    pub max_chunk: u32,
    /// What the table's main fork contributes (its `HeapInfo::toast_pointers`).
    pub pointers: Arc<ToastPointers>,
}

/// Plans the TOAST check: the TOAST relation of every table whose forks are both in the run,
/// by fork (the plan sets the heap flags of both from it). Nothing when the cluster was not
/// shut down (see the module comment), unless the WAL says which pages agree: then every
/// table but those whose pages (or whose TOAST relation's) replay rewrites.
pub fn plan_toast(
    plan: &Plan,
    catalog: &Catalog,
    fork_of_key: &HashMap<FileKey, usize>,
    agree: &ForkAgreement,
) -> HashMap<usize, Arc<ToastInfo>> {
    let mut out = HashMap::new();
    let stopped = plan.control.state == DbState::ShutdownedInRecovery;
    if agree.unknown.is_some() && !stopped {
        return out;
    }
    let toast_of_oid: HashMap<(u32, u32), FileKey> = catalog
        .relations
        .iter()
        .filter(|(_, r)| r.kind == RelKind::Toast)
        .map(|(k, r)| ((k.0, r.oid), *k))
        .collect();
    // pg_control's own value, checked against the block size when the file was read.
    let max_chunk = plan.control.toast_max_chunk_size;
    for (key, &main_fork) in fork_of_key {
        let Some(rel) = catalog.relations.get(key) else {
            continue;
        };
        let table = matches!(rel.kind, RelKind::Table | RelKind::MaterializedView);
        if !table || rel.relam != am_oid::HEAP || rel.reltoastrelid == 0 {
            continue;
        }
        let Some(attributes) = rel.attributes.clone() else {
            continue;
        };
        let Some(toast_fork) = toast_of_oid
            .get(&(key.0, rel.reltoastrelid))
            .and_then(|k| fork_of_key.get(k))
            .copied()
        else {
            continue; // not in the run (scoped out, or its file is missing: reported elsewhere)
        };
        if agree.not_in_flux(&[main_fork, toast_fork]).is_err() {
            continue;
        }
        let database = catalog
            .databases
            .get(&key.0)
            .map_or_else(|| format!("database {}", key.0), |d| d.name.clone());
        let pointers = Arc::new(ToastPointers {
            unit: toast_fork as u32,
            toastrelid: rel.reltoastrelid,
            attributes,
        });
        out.insert(
            toast_fork,
            Arc::new(ToastInfo {
                toast_fork,
                main_fork,
                main_name: format!("{database}: {}", rel.name),
                max_chunk,
                pointers,
            }),
        );
    }
    out
}
