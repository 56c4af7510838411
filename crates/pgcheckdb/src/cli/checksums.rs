//! The flags of `pgcheckdb checksums enable` and `disable`.

use std::path::PathBuf;

use clap::Args;

/// `checksums enable` flags.
#[derive(Debug, Args)]
pub struct EnableArgs {
    /// Data directory (default: $PGDATA).
    #[arg(short = 'D', long = "pgdata", env = "PGDATA")]
    pub pgdata: Option<PathBuf>,
    /// Scan and report what would be written; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Enable checksums even if damaged pages (a bad header, a non-zero page with pd_upper 0, a
    /// page failing the structure checks, a misplaced page) are found. They stay unstamped, so the server keeps rejecting them.
    #[arg(long)]
    pub allow_damaged: bool,
    /// Stamp every page whose header the server accepts, without the standard level's
    /// structure checks (about twice as fast). RISK: a page damaged inside (a bit flip in a
    /// line pointer or a tuple) then gets a valid checksum, and the damage can no longer be
    /// told from a valid page by a checksum. Use only after `verify --level standard` ran clean.
    #[arg(long)]
    pub skip_structure_checks: bool,
}

/// `checksums disable` flags.
#[derive(Debug, Args)]
pub struct DisableArgs {
    /// Data directory (default: $PGDATA).
    #[arg(short = 'D', long = "pgdata", env = "PGDATA")]
    pub pgdata: Option<PathBuf>,
}
