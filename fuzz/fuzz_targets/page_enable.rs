//! `checksums enable`'s `classify_block` and `stamp_chunk`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pgcheckdb_pg::fuzzing::enable(data));
