//! `pgcheckdb man` and `pgcheckdb completions`: the manual page and shell completion scripts,
//! generated from the same clap definitions that parse the command line, so they cannot drift
//! from the flags. `cargo install` installs only the binary; these print what a package or a
//! user puts in place (docs/man/pgcheckdb.1 is the committed copy of `pgcheckdb man`).

use std::io::{self, Write};

use anyhow::{bail, Context};
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::EXIT_OK;

/// Prints the roff page of pgcheckdb, or of the command named by `path`: `checksums enable`
/// as one word or two, as the help shows it.
pub fn man(path: &[String]) -> anyhow::Result<u8> {
    let mut cmd = Cli::command();
    cmd.build();
    let mut page = cmd;
    let mut name = "pgcheckdb".to_string();
    let words: Vec<&str> = path.iter().flat_map(|w| w.split_whitespace()).collect();
    for word in &words {
        let Some(sub) = page.find_subcommand(word).cloned() else {
            bail!("no command \"{}\" in pgcheckdb", words.join(" "));
        };
        name = format!("{name}-{word}");
        page = sub;
    }
    // clap names are `&'static str` here; the process prints one page and exits.
    let title: &'static str = Box::leak(name.into_boxed_str());
    let page = page.name(title);
    let has_args = page.get_arguments().any(|a| !a.is_hide_set());
    let has_commands = page.has_subcommands();
    let has_version = page.get_version().is_some() || page.get_long_version().is_some();
    let man = clap_mangen::Man::new(page);
    let mut out = Vec::new();
    let rendered = (|| -> io::Result<()> {
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        if has_args {
            man.render_options_section(&mut out)?;
        }
        if has_commands {
            man.render_subcommands_section(&mut out)?;
        }
        out.extend_from_slice(sections(words.is_empty()).as_bytes());
        if has_version {
            man.render_version_section(&mut out)?;
        }
        Ok(())
    })();
    rendered.context("could not render the manual page")?;
    write_stdout(&out)
}

/// EXIT STATUS, EXAMPLES, ENVIRONMENT, FILES and SEE ALSO in roff: all of them on
/// pgcheckdb(1), the exit status and a pointer to pgcheckdb(1) on a command's page.
fn sections(top: bool) -> String {
    let mut roff = String::from(EXIT_STATUS_ROFF);
    if top {
        roff += EXAMPLES_ROFF;
        roff += ENVIRONMENT_ROFF;
        roff += FILES_ROFF;
        roff += SEE_ALSO_ROFF;
    } else {
        roff += ".SH \"SEE ALSO\"\n\\fBpgcheckdb\\fR(1)\n";
    }
    roff
}

const EXIT_STATUS_ROFF: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
The run finished and found nothing (\fBverify\fR), or the command did what was asked.
.TP
\fB1\fR
Could not run or finish: bad arguments, a running cluster, an unreadable control file, a
PostgreSQL version other than 14\(en19, anything pgcheckdb could not read or write. A
\fBverify\fR that stopped early never exits 0.
.TP
\fB2\fR
Corruption found (\fBverify\fR; \fBchecksums enable\fR and its dry run when damaged pages are
in the way).
.TP
\fB130\fR, \fB143\fR
Interrupted by SIGINT, SIGTERM (128 + the signal number).
"#;

const EXAMPLES_ROFF: &str = r#".SH EXAMPLES
Check a stopped cluster at the standard level (page headers, checksums, page structure):
.PP
.nf
    pgcheckdb verify \-D /path/to/data
.fi
.PP
Physical checks only, JSON Lines for a script, one table with its indexes and TOAST:
.PP
.nf
    pgcheckdb verify \-D /path/to/data \-\-physical\-only
    pgcheckdb verify \-D /path/to/data \-\-format json
    pgcheckdb verify \-D /path/to/data \-t public.orders
.fi
.PP
Cross\-page checks, per\-relation lines and progress in a log:
.PP
.nf
    pgcheckdb verify \-D /path/to/data \-\-level extended \-v \-\-progress 2>>verify.log
.fi
.PP
A running server, with a connection for the end of WAL and a checkpoint:
.PP
.nf
    pgcheckdb verify \-D /path/to/data \-\-online \-\-dbname postgres
.fi
.PP
A tar\-format base backup, and the checksum state and switch of a stopped cluster:
.PP
.nf
    pgcheckdb verify \-\-backup /path/to/tar_backup
    pgcheckdb checksums status \-D /path/to/data
    pgcheckdb checksums enable \-D /path/to/data \-j 4
.fi
.PP
One page decoded, and a drill on a copy:
.PP
.nf
    pgcheckdb inspect \-D /path/to/data \-d shop \-\-relation orders \-\-block 7 \-\-hex
    pgcheckdb corrupt \-D /path/to/copy \-\-relation public.orders \-\-block 7 \-\-how flip\-bit \-\-yes
.fi
"#;

const ENVIRONMENT_ROFF: &str = r#".SH ENVIRONMENT
.TP
\fBPGDATA\fR
The data directory when \fB\-D\fR is not given (never used by \fBcorrupt\fR, which must be
told).
.TP
\fBPGHOST\fR, \fBPGPORT\fR, \fBPGUSER\fR, \fBPGDATABASE\fR
Fill in what \fBverify \-\-online \-\-dbname\fR leaves out, as libpq does.
.TP
\fBTMPDIR\fR
Where \fBverify \-\-backup\fR stages a tar\-format backup's members, and the extended level
spills its facts without \fB\-\-temp\-dir\fR.
"#;

const FILES_ROFF: &str = r#".SH FILES
.TP
\fIPGDATA\fR/global/pg_control
Read first by every command: the version, block size and checksum state.
.TP
\fIPGDATA\fR/postmaster.pid
A running server's lock: \fBverify\fR, \fBinspect\fR and \fBcorrupt\fR refuse a running
cluster (unless \fBverify \-\-online\fR); \fBchecksums enable\fR and \fBdisable\fR create it
themselves while they write.
.TP
\fI$TMPDIR\fR/pgcheckdb\-tar\-XXXXXX, \fI$TMPDIR\fR/pgcheckdb\-spill\-XXXXXX
Staging of a tar\-format backup and spill files of the extended level (mode 0700, removed at
the end).
"#;

const SEE_ALSO_ROFF: &str = r#".SH "SEE ALSO"
\fBpgcheckdb\-verify\fR(1), \fBpgcheckdb\-checksums\fR(1), \fBpgcheckdb\-inspect\fR(1),
\fBpgcheckdb\-corrupt\fR(1) (printed by \fBpgcheckdb man verify\fR, ...),
\fBpg_checksums\fR(1), \fBpg_amcheck\fR(1), \fBpg_basebackup\fR(1), \fBpg_verifybackup\fR(1).
The output contract (every JSON field, finding kind and metric) is docs/OUTPUT.md in
pgcheckdb's sources.
"#;

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
