//! The standard level's structure checks of one page, for every page format.
#![no_main]

use std::cell::RefCell;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pgcheckdb_pg::fuzzing::{standard, StandardContext};
use pgcheckdb_pg::check::standard::Scratch;

static CONTEXT: OnceLock<StandardContext> = OnceLock::new();

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

fuzz_target!(|data: &[u8]| {
    let ctx = CONTEXT.get_or_init(StandardContext::new);
    SCRATCH.with(|s| standard(data, ctx, &mut s.borrow_mut()));
});
