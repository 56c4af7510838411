//! `pgcheckdb inspect`: find the segment file that holds an absolute block of a fork and print
//! the decoded page (text or JSON). Reads only.

use anyhow::Context;
use pgcheckdb_pg::inspect::{inspect_block, render_text};

use crate::cli::{Common, InspectArgs, OutputFormat};
use crate::target::resolve;
use crate::verify_cmd::{read_control, resolve_datadir};
use crate::EXIT_OK;

pub fn run(common: &Common, args: &InspectArgs) -> anyhow::Result<u8> {
    let datadir = resolve_datadir(args.target.pgdata.as_ref())?;
    let control = read_control(&datadir)?;
    let target = resolve(&datadir, &control, &args.target)?;
    let dump = inspect_block(
        &target.path,
        &target.shown,
        target.segno,
        target.block_in_file,
        &control,
    )
    .with_context(|| {
        format!(
            "could not read block {} of \"{}\"",
            target.block, target.shown
        )
    })?;
    match common.format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string(
                &serde_json::json!({"type": "page", "relation": target.relation, "page": dump})
            )?
        ),
        OutputFormat::Text => {
            if let Some(rel) = &target.relation {
                println!("relation {rel}");
            }
            print!("{}", render_text(&dump));
        }
    }
    Ok(EXIT_OK)
}
