//! The catalog reader: the visible-row scan of a catalog file and every row decoder.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pgcheckdb_pg::catalog::xact::CommitLog;

static CLOG: OnceLock<CommitLog> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let clog = CLOG.get_or_init(pgcheckdb_pg::fuzzing::committed_clog);
    pgcheckdb_pg::fuzzing::catalog(data, clog);
});
