//! `pgcheckdb man` and `pgcheckdb completions`: the manual page and shell completion scripts,
//! generated from the same clap definitions that parse the command line, so they cannot drift
//! from the flags. `cargo install` installs only the binary; these print what a package or a
//! user puts in place (docs/man/pgcheckdb.1 is the committed copy of `pgcheckdb man`).

use std::io::{self, Write};

use anyhow::{bail, Context};
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::EXIT_OK;

/// Prints the roff page of pgcheckdb, or of the command named by `path` (`checksums enable`).
pub fn man(path: &[String]) -> anyhow::Result<u8> {
    let mut cmd = Cli::command();
    cmd.build();
    let mut page = cmd;
    let mut name = "pgcheckdb".to_string();
    for word in path {
        let Some(sub) = page.find_subcommand(word).cloned() else {
            bail!("no command \"{}\" in pgcheckdb", path.join(" "));
        };
        name = format!("{name}-{word}");
        page = sub;
    }
    // clap names are `&'static str` here; the process prints one page and exits.
    let title: &'static str = Box::leak(name.into_boxed_str());
    let page = page.name(title);
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .context("could not render the manual page")?;
    write_stdout(&out)
}

/// Prints the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<u8> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "pgcheckdb", &mut out);
    write_stdout(&out)
}

fn write_stdout(bytes: &[u8]) -> anyhow::Result<u8> {
    let stdout = io::stdout();
    let mut lock = stdout.lock();
    match lock.write_all(bytes).and_then(|()| lock.flush()) {
        Ok(()) => Ok(EXIT_OK),
        // `pgcheckdb man | head`: the reader went away; not our error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(EXIT_OK),
        Err(e) => Err(e).context("could not write to stdout"),
    }
}
