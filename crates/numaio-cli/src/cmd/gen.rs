//! `numaio generate` (hidden, for packagers): man pages and shell completions from the same
//! argument definitions the binary parses with, so they never drift from `--help`.

use anyhow::Context;
use clap_complete::Shell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct GenArgs {
    /// Write numaio.1 and numaio-SUBCOMMAND.1 for every subcommand into DIR.
    #[arg(long, value_name = "DIR")]
    man: Option<PathBuf>,
    /// Write bash (numaio.bash), zsh (_numaio) and fish (numaio.fish) completions into DIR.
    #[arg(long, value_name = "DIR")]
    completions: Option<PathBuf>,
}

fn ensure_dir(d: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(d).with_context(|| {
        format!(
            "cannot create directory {}; give a writable directory",
            crate::output::quote(d)
        )
    })
}

/// Writes what `a` asks for, from `cmd` (the whole `numaio` command).
pub fn run(a: GenArgs, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    if a.man.is_none() && a.completions.is_none() {
        crate::usage_bail!("nothing to generate: give --man DIR and/or --completions DIR");
    }
    if let Some(d) = &a.man {
        ensure_dir(d)?;
        clap_mangen::generate_to(cmd.clone(), d)
            .with_context(|| format!("cannot write man pages into {}", crate::output::quote(d)))?;
    }
    if let Some(d) = &a.completions {
        ensure_dir(d)?;
        let mut cmd = cmd;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            clap_complete::generate_to(shell, &mut cmd, "numaio", d).with_context(|| {
                format!(
                    "cannot write {shell} completions into {}",
                    crate::output::quote(d)
                )
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
