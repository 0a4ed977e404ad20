//! Not written yet; see the issue tracker.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct PinArgs {}

pub fn run(_a: PinArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("this subcommand is not implemented yet")
}
