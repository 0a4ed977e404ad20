//! Not written yet; see the issue tracker.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct EvictArgs {}

pub fn run(_a: EvictArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("this subcommand is not implemented yet")
}
