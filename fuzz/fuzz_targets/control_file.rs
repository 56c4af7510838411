//! The control-file parser (`ControlFile::parse`), with the input's CRC as it is and made right.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pgcheckdb_pg::fuzzing::control_file(data);
});
