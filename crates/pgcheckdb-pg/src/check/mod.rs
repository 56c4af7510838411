//! The checks, by level: the physical check of each block ([`physical`], [`placement`]), the
//! standard level's in-page structure checks ([`standard`]), the B-tree key order
//! ([`order`]) and the extended level's cross-page facts and merge ([`extended`]).
//! [`structure`] gathers what the structure checks need from the catalog and the plan.
//! Checks take a [`crate::plan::Plan`] and pages; they return findings and never print.

pub mod agreement;
pub mod extended;
pub mod order;
pub mod physical;
pub mod placement;
pub mod standard;
pub mod structure;
