//! Operations built on the floors below: a whole `verify` run ([`verifier`]), the base-backup
//! source ([`backup`]), enabling and disabling checksums ([`enable`]), `corrupt` and its write
//! confinement ([`corrupt`], [`confine`]), `inspect` and the block it and `corrupt` are given
//! ([`target`]), opening a data directory named on the command line ([`open`]), and the state
//! of the cluster and pgcheckdb's own lock ([`cluster`], [`lock`]).

pub mod backup;
pub mod cluster;
pub mod confine;
pub mod corrupt;
pub mod enable;
pub mod inspect;
pub mod lock;
pub mod open;
pub mod target;
pub mod verifier;
