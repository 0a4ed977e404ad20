//! Not written yet; see the issue tracker.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct WhereArgs {}

pub fn run(_a: WhereArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("this subcommand is not implemented yet")
}
