//! The physical check of one block (`physical::check_page` / `check_page_with_sum`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pgcheckdb_pg::fuzzing::physical(data));
