//! The `pgcheckdb` binary: parses arguments, wires the commands to the library crates and maps
//! results to the exit codes of the contract (0 clean, 1 could not run, 2 corruption found).

/// `eprintln!` for one line of text, its control characters escaped (names and messages come
/// from the data directory: docs/OUTPUT.md, "Text output"). Every line on stderr uses it.
macro_rules! eprintln_text {
    ($($arg:tt)*) => {
        ::std::eprintln!(
            "{}",
            ::pgcheckdb_report::escape::escape_control(&::std::format!($($arg)*))
        )
    };
}

/// `println!` for one line of text (not JSON), its control characters escaped.
macro_rules! println_text {
    ($($arg:tt)*) => {
        ::std::println!(
            "{}",
            ::pgcheckdb_report::escape::escape_control(&::std::format!($($arg)*))
        )
    };
}

mod bench_cmd;
mod checksums_cmd;
mod cli;
mod clock;
mod corrupt_cmd;
mod demo_cmd;
mod docs_cmd;
mod exit;
mod inspect_cmd;
mod ledger;
mod ledger_cmd;
mod progress;
mod signals;
mod verbose;
mod verify_cmd;

use std::process::ExitCode;

use exit::{EXIT_FAILED, EXIT_STDOUT_CLOSED};

fn main() -> ExitCode {
    let args = match cli::parse() {
        Ok(args) => args,
        Err(code) => return ExitCode::from(code),
    };
    let common = args.common();
    closed_stdout::install_quiet_hook();
    // A `println!` to a closed pipe panics; the panic unwinds (dropping temporary clusters and
    // locks) up to here and ends the run quietly.
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(args.command, &common)));
    match result {
        Ok(Ok(code)) => ExitCode::from(code),
        Ok(Err(e)) if closed_stdout::is_broken_pipe(&e) => ExitCode::from(EXIT_STDOUT_CLOSED),
        Ok(Err(e)) => {
            eprintln_text!("pgcheckdb: error: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
        Err(payload) if closed_stdout::is_print_panic(payload.as_ref()) => {
            ExitCode::from(EXIT_STDOUT_CLOSED)
        }
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// A closed stdout (EPIPE) is a quiet exit for every command, never a panic message.
mod closed_stdout {
    use std::any::Any;
    use std::io;

    /// Whether a panic payload is the standard library's "failed printing to stdout" for a
    /// broken pipe.
    pub fn is_print_panic(payload: &(dyn Any + Send)) -> bool {
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        text.contains("failed printing to stdout") && text.contains("Broken pipe")
    }

    /// Silences the panic message of a print to a closed pipe; every other panic is reported
    /// as before.
    pub fn install_quiet_hook() {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_print_panic(info.payload()) {
                default(info);
            }
        }));
    }

    /// Whether an error was caused by writing to a closed pipe.
    pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
        e.chain().any(|c| {
            c.downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
        })
    }
}

fn run(command: cli::Command, common: &cli::Common) -> anyhow::Result<u8> {
    use cli::Command;
    let name = command_name(&command);
    let result = match &command {
        Command::Verify(v) => return verify_cmd::run(common, &v.args),
        Command::Inspect(i) => inspect_cmd::run(common, &i.args),
        Command::Corrupt(c) => corrupt_cmd::run(common, &c.args),
        Command::Demo(d) => return demo_cmd::run(common, d),
        Command::Bench(b) => bench_cmd::run(common, &b.args),
        Command::Checksums(c) => checksums_cmd::run(common, c),
        Command::Ledger(l) => ledger_cmd::run(common, l),
        Command::Man(m) => return docs_cmd::man(&m.command),
        Command::Completions(c) => return docs_cmd::completions(c.shell),
    };
    if common.format == cli::OutputFormat::Json {
        closing_summary(&command, name, &result);
    }
    result
}

fn command_name(command: &cli::Command) -> &'static str {
    use cli::{ChecksumsAction, Command};
    match command {
        Command::Verify(_) => "verify",
        Command::Checksums(a) => match a.action {
            ChecksumsAction::Status(_) => "checksums status",
            ChecksumsAction::Enable(_) => "checksums enable",
            ChecksumsAction::Disable(_) => "checksums disable",
        },
        Command::Inspect(_) => "inspect",
        Command::Corrupt(_) => "corrupt",
        Command::Demo(_) => "demo",
        Command::Bench(_) => "bench",
        Command::Ledger(_) => "ledger",
        Command::Man(_) => "man",
        Command::Completions(_) => "completions",
    }
}

/// The JSON stream of every command ends with a `summary` line (docs/OUTPUT.md). `verify`,
/// `checksums enable` and `checksums disable` write their own on every outcome, refusals and
/// errors included; for the others it is written here, carrying the error on failure.
fn closing_summary(command: &cli::Command, name: &str, result: &anyhow::Result<u8>) {
    use cli::{ChecksumsAction, Command};
    let writes_own = match command {
        Command::Checksums(c) => !matches!(c.action, ChecksumsAction::Status(_)),
        _ => false,
    };
    let line = match result {
        _ if writes_own => return,
        Ok(code) => serde_json::json!({"type": "summary", "command": name, "exit_status": code}),
        Err(e) => {
            serde_json::json!({"type": "summary", "command": name, "exit_status": EXIT_FAILED,
                                     "error": format!("{e:#}")})
        }
    };
    println!("{line}");
}
