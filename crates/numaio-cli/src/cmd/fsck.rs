//! `numaio fsck`: check (and with `-y`, repair) an unmounted numaio-fs volume. Exit codes
//! are e2fsck's (docs/exit-codes.md).

use crate::output::{print_json, quote};
use crate::{outln, warnln};
use numaio_fs::fsck::{fsck, FsckOptions, FsckReport};
use numaio_fs::volume::{uuid_text, Volume};
use numaio_fs::FsError;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

/// The file system is clean.
pub const CLEAN: u8 = 0;
/// Errors were found and repaired.
pub const REPAIRED: u8 = 1;
/// Errors are left (found without `-y`, or not repairable).
pub const ERRORS_LEFT: u8 = 4;
/// The check could not run: a device could not be opened or read, devices missing.
pub const OPERATIONAL: u8 = 8;
/// A usage error (bad arguments).
pub const USAGE: u8 = 16;

pub const HELP: &str = "Exit status (like e2fsck):\n  \
    0    the volume is clean\n  \
    1    errors were found and repaired (-y)\n  \
    4    errors are left (found without -y, or not repairable)\n  \
    8    operational error: a device could not be opened or read, devices missing or foreign\n  \
    16   usage error (bad arguments)";

#[derive(clap::Args)]
#[command(after_help = HELP)]
pub struct FsckArgs {
    /// The volume's devices, in any order.
    #[arg(value_name = "DEV", required = true)]
    devices: Vec<PathBuf>,
    /// Check only, write nothing (the default).
    #[arg(short = 'n', long = "no")]
    no: bool,
    /// Repair what can be repaired and write a new checkpoint.
    #[arg(
        short = 'y',
        long = "repair",
        visible_alias = "yes",
        conflicts_with = "no"
    )]
    repair: bool,
    /// Print JSON: {"schema_version":1,"devices":[PATH...],"uuid","exit_code","errors":[..],
    /// "repaired":[..],"inodes","files","directories","symlinks","orphans","total_blocks",
    /// "used_blocks","free_blocks","checkpoint_seq","journal_records_replayed",
    /// "journal_data_blocks"} (an
    /// operational error: {"schema_version":1,"devices","exit_code":8,"error"})
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    schema_version: u32,
    devices: &'a [PathBuf],
    uuid: Option<String>,
    exit_code: u8,
    #[serde(flatten)]
    report: &'a FsckReport,
}

#[derive(Serialize)]
struct JsonFailure<'a> {
    schema_version: u32,
    devices: &'a [PathBuf],
    exit_code: u8,
    error: String,
}

pub fn run(a: FsckArgs) -> anyhow::Result<ExitCode> {
    let opened = Volume::open(&a.devices, !a.repair);
    let result = opened.and_then(|v| {
        let r = fsck(&*v.store, &FsckOptions { repair: a.repair })?;
        Ok((v, r))
    });
    let (v, r) = match result {
        Ok(x) => x,
        Err(e) => {
            // A device that is not a numaio-fs device or is damaged before the volume can
            // even be put together counts as errors left; anything else stopped the check.
            let code = match e {
                FsError::Corrupt { .. } => ERRORS_LEFT,
                _ => OPERATIONAL,
            };
            if a.json {
                print_json(&JsonFailure {
                    schema_version: 1,
                    devices: &a.devices,
                    exit_code: code,
                    error: e.to_string(),
                })?;
            }
            warnln!("fsck: {e}");
            return Ok(ExitCode::from(code));
        }
    };
    let code = r.exit_code() as u8;
    let paths = v.paths();
    if a.json {
        print_json(&JsonReport {
            schema_version: 1,
            devices: &paths,
            uuid: Some(uuid_text(&v.uuid)),
            exit_code: code,
            report: &r,
        })?;
    } else {
        let names: Vec<String> = paths.iter().map(|p| quote(p).into_owned()).collect();
        outln!(
            "numaio-fs volume {} on {}",
            uuid_text(&v.uuid),
            names.join(" ")
        )?;
        outln!(
            "  {} inodes: {} files, {} directories, {} symlinks, {} orphans",
            r.inodes,
            r.files,
            r.directories,
            r.symlinks,
            r.orphans
        )?;
        outln!(
            "  blocks: {} used, {} free of {}; checkpoint {}, {} journal records replayed",
            r.used_blocks,
            r.free_blocks,
            r.total_blocks,
            r.checkpoint_seq,
            r.journal_records_replayed
        )?;
        if r.journal_data_blocks > 0 && !a.repair {
            outln!(
                "  journal: the newest record carries {} blocks of data, written back at mount",
                r.journal_data_blocks
            )?;
        }
        for f in &r.repaired {
            outln!("  repaired: {f}")?;
        }
        for e in &r.errors {
            outln!("  error: {e}")?;
        }
        match code {
            CLEAN => outln!("  clean")?,
            REPAIRED => outln!("  {} problems repaired", r.repaired.len())?,
            _ if a.repair => outln!("  {} errors left after repair", r.errors.len())?,
            _ => outln!(
                "  {} errors found; nothing was written (repair with `numaio fsck -y`)",
                r.errors.len()
            )?,
        }
    }
    Ok(ExitCode::from(code))
}
