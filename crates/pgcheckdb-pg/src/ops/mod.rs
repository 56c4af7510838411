//! Operations built on the floors below: the base-backup source ([`backup`]), enabling and
//! disabling checksums ([`enable`]), `corrupt` and its write confinement ([`corrupt`],
//! [`confine`]), `inspect`, and the state of the cluster and pgcheckdb's own lock
//! ([`cluster`], [`lock`]).

pub mod backup;
pub mod cluster;
pub mod confine;
pub mod corrupt;
pub mod enable;
pub mod inspect;
pub mod lock;
