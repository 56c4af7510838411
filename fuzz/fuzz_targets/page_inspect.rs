//! `inspect`'s page decoder and renderings, with the PostgreSQL 18 seed cluster's control file.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pgcheckdb_pg::format::control::ControlFile;

static CONTROL: OnceLock<ControlFile> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let control = CONTROL.get_or_init(|| {
        let raw = include_bytes!("../corpus/control_file/pg18_pg_control").to_vec();
        ControlFile::parse(raw, "pg18_pg_control").expect("the seed control file parses")
    });
    pgcheckdb_pg::fuzzing::inspect(data, control);
});
