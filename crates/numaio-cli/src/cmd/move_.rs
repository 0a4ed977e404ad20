//! Not written yet; see the issue tracker.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct MoveArgs {}

pub fn run(_a: MoveArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("this subcommand is not implemented yet")
}
