//! The exit codes of the contract (docs/OUTPUT.md): 0 clean, 1 could not run, 2 corruption
//! found; 128 + the signal when stdout was closed or a signal interrupted the run.

/// Exit status: nothing found.
pub const EXIT_OK: u8 = 0;
/// Exit status: could not run or finish.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: corruption found.
pub const EXIT_CORRUPT: u8 = 2;

/// Exit status when stdout was closed by the reader (`pgcheckdb demo | head`): 128 + SIGPIPE,
/// what a shell reports for a program killed by the signal, but reached quietly, after cleanup.
pub const EXIT_STDOUT_CLOSED: u8 = 128 + libc::SIGPIPE as u8;
