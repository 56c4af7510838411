//! The `pgcheckdb` binary: parses arguments, wires the commands to the library crates and maps
//! results to the exit codes of the contract (0 clean, 1 could not run, 2 corruption found).

mod bench_cmd;
mod checksums_cmd;
mod cli;
mod clock;
mod corrupt_cmd;
mod demo_cmd;
mod estimate;
mod inspect_cmd;
mod progress;
mod signals;
mod target;
mod verify_cmd;

use std::process::ExitCode;

/// Exit status: nothing found.
pub const EXIT_OK: u8 = 0;
/// Exit status: could not run or finish.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: corruption found.
pub const EXIT_CORRUPT: u8 = 2;

fn main() -> ExitCode {
    let args = match cli::parse() {
        Ok(args) => args,
        Err(code) => return ExitCode::from(code),
    };
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("pgcheckdb: error: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

fn run(args: cli::Cli) -> anyhow::Result<u8> {
    match args.command {
        cli::Command::Verify(v) => verify_cmd::run(&args.common, &v),
        cli::Command::Inspect(i) => inspect_cmd::run(&args.common, &i),
        cli::Command::Corrupt(c) => corrupt_cmd::run(&args.common, &c),
        cli::Command::Demo(d) => demo_cmd::run(&args.common, &d),
        cli::Command::Bench(b) => bench_cmd::run(&args.common, &b),
        cli::Command::Checksums(c) => checksums_cmd::run(&args.common, &c),
    }
}
