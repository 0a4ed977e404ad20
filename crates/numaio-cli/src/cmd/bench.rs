//! Not written yet; see the issue tracker.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("this subcommand is not implemented yet")
}
