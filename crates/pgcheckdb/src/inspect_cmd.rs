//! `pgcheckdb inspect`: find the segment file that holds an absolute block of a fork and print
//! the decoded page (text or JSON) with the verdict of `verify`'s standard level, optionally
//! with a hex dump. Reads only, and only a stopped cluster (as `verify`): a running server
//! changes pages under the reader.

use anyhow::{bail, Context};
use pgcheckdb_pg::ops::cluster::check_stopped;
use pgcheckdb_pg::ops::inspect::{
    apply_standard_level, hex_dump, inspect_block, render_text, standard_problems,
};
use pgcheckdb_pg::ops::open::{check_pid_file, read_control, resolve_datadir};
use pgcheckdb_pg::ops::target::{resolve, BlockTarget};
use pgcheckdb_report::escape::escape_control_keep_newlines;

use crate::cli::{Common, InspectArgs, OutputFormat};
use crate::exit::EXIT_OK;

pub fn run(common: &Common, args: &InspectArgs) -> anyhow::Result<u8> {
    let datadir = resolve_datadir(args.pgdata.as_ref())?;
    let control = read_control(&datadir)?;
    check_pid_file(&datadir)?;
    if let Err(reason) = check_stopped(&datadir, &control) {
        bail!("cannot inspect \"{}\" offline: {reason}", datadir.display());
    }
    let target = resolve(&datadir, &control, &args.target.request())?;
    target.check_exists()?;
    let (mut dump, page) = inspect_block(
        &target.path,
        &target.shown,
        target.segno,
        target.block_in_file,
        target.fork,
        &control,
    )
    .with_context(|| {
        format!(
            "could not read block {} of \"{}\"",
            target.block, target.shown
        )
    })?;
    // One verdict with `verify`'s: the standard level's checks of a physically valid page.
    if dump.physically_valid() {
        let checked = standard_problems(&datadir, &control, &target.path, target.block, &page);
        apply_standard_level(&mut dump, checked);
    }
    match common.format {
        OutputFormat::Json => {
            let mut line = serde_json::json!({"type": "page", "database": target.database,
                "relation": target.relation, "page": dump});
            if args.hex {
                line["hex"] = serde_json::json!(hex_string(&page));
            }
            println!("{}", serde_json::to_string(&line)?);
        }
        OutputFormat::Text => {
            // Several lines each: the newlines between them kept, every other control
            // character (in a relation or file name) escaped.
            print!("{}", escape_control_keep_newlines(&where_line(&target)));
            print!("{}", escape_control_keep_newlines(&render_text(&dump)));
            if args.hex {
                print!("{}", hex_dump(&page));
            }
        }
    }
    Ok(EXIT_OK)
}

/// `database D, relation R` as far as they are known.
fn where_line(t: &BlockTarget) -> String {
    let db = t.database.as_deref().map(|d| format!("database {d}"));
    let rel = t.relation.as_deref().map(|r| format!("relation {r}"));
    let parts: Vec<String> = [db, rel].into_iter().flatten().collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("{}\n", parts.join(", "))
    }
}

fn hex_string(page: &[u8]) -> String {
    page.iter().map(|b| format!("{b:02x}")).collect()
}
