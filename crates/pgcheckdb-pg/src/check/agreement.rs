//! Which pages of a data directory agree with each other: the precondition of every check
//! that compares two pages (the extended level's cross-page facts).
//!
//! A cluster shut down cleanly agrees everywhere: its shutdown checkpoint wrote every changed
//! page. A crashed cluster or a base backup agrees everywhere *after* WAL replay, and replay
//! rewrites only the blocks its records name (a block reference, or a relation file created,
//! truncated or dropped, or a database directory or relation map replaced). A page no record
//! from the redo point (a backup's start LSN) on names is, on disk, what it will be after
//! replay; so two such pages agree as the recovered cluster's pages will. The pages of a
//! relation the WAL names are set aside, and with them every cross-page fact about that
//! relation (docs/CHECKS.md, "The consistency rule", has the whole argument).

use std::collections::HashSet;

use crate::datadir::Location;
use crate::format::control::DbState;
use crate::format::relfile::ForkNumber;
use crate::plan::Plan;

/// Why a relation's cross-page facts are not judged: WAL replay rewrites pages of it.
pub const IN_FLUX: &str = "WAL replay rewrites pages of it or of its table";
/// Why nothing is judged across pages when no rule says which pages agree.
pub const NOT_CLEAN: &str = "the cluster was not shut down cleanly";

/// What is known about the agreement of a data directory's pages.
#[derive(Debug, Clone)]
pub enum Agreement {
    /// Every page (a cluster shut down cleanly).
    All,
    /// Every page but those of the relations and databases named (what WAL replay rewrites).
    AllBut(InFlux),
    /// No rule applies (a standby shut down in recovery, a backup whose WAL is not complete):
    /// the reason.
    Unknown(&'static str),
}

/// The relations and databases WAL replay rewrites.
#[derive(Debug, Clone, Default)]
pub struct InFlux {
    /// `(tablespace oid, database oid, relfilenode)` of each relation.
    pub relations: HashSet<(u32, u32, u32)>,
    /// Databases replay creates, drops or gives a new relation map (0: the shared catalogs).
    pub databases: HashSet<u32>,
}

impl Agreement {
    /// What the shutdown state alone says.
    pub fn of_state(state: DbState) -> Agreement {
        match state {
            DbState::Shutdowned => Agreement::All,
            _ => Agreement::Unknown(NOT_CLEAN),
        }
    }

    /// The agreement of each of the plan's forks.
    pub fn resolve(&self, plan: &Plan) -> ForkAgreement {
        match self {
            Agreement::All => ForkAgreement::default(),
            Agreement::Unknown(why) => ForkAgreement {
                unknown: Some(why),
                ..ForkAgreement::default()
            },
            Agreement::AllBut(flux) => ForkAgreement {
                unknown: None,
                in_flux: in_flux_forks(plan, flux),
            },
        }
    }
}

/// The plan's forks (indexes into `Plan::forks`) of the relations in flux, and of every
/// unlogged relation (one with an `_init` fork): recovery resets those to their init fork, so
/// nothing on disk says what they will hold.
fn in_flux_forks(plan: &Plan, flux: &InFlux) -> HashSet<usize> {
    let unlogged = unlogged_relations(plan);
    plan.forks
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            let db = f.location.db_oid();
            let key = (f.location.tablespace_oid(), db, f.relfilenode);
            flux.databases.contains(&db)
                || flux.relations.contains(&key)
                || unlogged.contains(&(f.location, f.relfilenode))
        })
        .map(|(i, _)| i)
        .collect()
}

/// `(location, relfilenode)` of every relation of the plan that has an `_init` fork.
pub fn unlogged_relations(plan: &Plan) -> HashSet<(Location, u32)> {
    plan.forks
        .iter()
        .filter(|f| f.fork == ForkNumber::Init)
        .map(|f| (f.location, f.relfilenode))
        .collect()
}

/// [`Agreement`] resolved against a plan's forks.
#[derive(Debug, Clone, Default)]
pub struct ForkAgreement {
    /// No page is known to agree, for this reason.
    pub unknown: Option<&'static str>,
    /// The forks whose pages replay rewrites.
    pub in_flux: HashSet<usize>,
}

impl ForkAgreement {
    /// Whether the pages of every fork in `forks` agree with the rest of the cluster's.
    pub fn check(&self, forks: &[usize]) -> Result<(), &'static str> {
        if let Some(why) = self.unknown {
            return Err(why);
        }
        self.not_in_flux(forks)
    }

    /// Like [`ForkAgreement::check`], but only a fork in flux counts against it: where no
    /// rule applies, the caller keeps what it did before the rule existed.
    pub fn not_in_flux(&self, forks: &[usize]) -> Result<(), &'static str> {
        match forks.iter().any(|f| self.in_flux.contains(f)) {
            true => Err(IN_FLUX),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_in_flux_is_out_and_unknown_is_out_everywhere() {
        let a = ForkAgreement {
            unknown: None,
            in_flux: [3].into_iter().collect(),
        };
        assert_eq!(a.check(&[1, 2]), Ok(()));
        assert_eq!(a.check(&[1, 3]), Err(IN_FLUX));
        let u = ForkAgreement {
            unknown: Some(NOT_CLEAN),
            in_flux: HashSet::new(),
        };
        assert_eq!(u.check(&[1]), Err(NOT_CLEAN));
        assert_eq!(u.not_in_flux(&[1]), Ok(()));
        assert!(matches!(
            Agreement::of_state(DbState::Shutdowned),
            Agreement::All
        ));
        for state in [
            DbState::ShutdownedInRecovery,
            DbState::InProduction,
            DbState::InArchiveRecovery,
            DbState::InCrashRecovery,
            DbState::Shutdowning,
            DbState::Startup,
        ] {
            let agreement = Agreement::of_state(state);
            assert!(matches!(agreement, Agreement::Unknown(_)), "{state:?}");
        }
    }
}
