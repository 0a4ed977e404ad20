//! Guest-side workload of the lab's power-cut tests: `write` records through the numaio
//! engine (O_DIRECT, fsync, `ACK <seq>` after each fsync) until the power is cut, then
//! `verify` the file after the next boot. See `numaio_lab::powerload`.

use anyhow::Context;
use clap::{Parser, Subcommand};
use numaio_lab::powerload::{self, Layout, WriteOpts};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;

#[derive(Parser)]
#[command(
    name = "numaio-powerload",
    about = "Power-cut workload for the numaio lab: write acknowledged records, verify them after reboot"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args)]
struct LayoutArgs {
    /// The file (write creates it; it must not exist).
    #[arg(long)]
    file: PathBuf,
    /// Seed of sizes, offsets, write order and payloads.
    #[arg(long)]
    seed: u64,
    /// Number of records.
    #[arg(long, default_value_t = 2000)]
    records: u64,
    /// Largest record in bytes.
    #[arg(long, default_value_t = 256 << 10)]
    max_record: u32,
    /// Writer threads (thread t writes the records with seq % threads == t).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

impl LayoutArgs {
    fn layout(&self) -> Layout {
        Layout {
            seed: self.seed,
            records: self.records,
            max_record: self.max_record,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Write the records through the engine, printing `ACK <seq>` after each fsync.
    Write {
        #[command(flatten)]
        layout: LayoutArgs,
        /// Engine cache size in MiB (small: the evictor writes back between fsyncs).
        #[arg(long, default_value_t = 4)]
        cache_mib: u64,
        /// Engine I/O through the page cache instead of O_DIRECT.
        #[arg(long)]
        buffered: bool,
        /// Print acknowledgements without calling fsync (a deliberately broken writer, to
        /// check that a power cut exposes it).
        #[arg(long)]
        skip_fsync: bool,
        /// Also write each acknowledgement as a block to this new file (O_DIRECT |
        /// O_DSYNC), so a disk write log shows when it happened.
        #[arg(long)]
        ack_file: Option<PathBuf>,
    },
    /// Check the file: every record up to --acked intact, no record forged. Prints a JSON
    /// report; exit status 1 when the check fails.
    Verify {
        #[command(flatten)]
        layout: LayoutArgs,
        /// Highest acknowledged sequence number of each writer thread, comma-separated,
        /// `-` for a thread that acknowledged nothing (leave out if nothing was).
        #[arg(long)]
        acked: Option<String>,
    },
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Write {
            layout,
            cache_mib,
            buffered,
            skip_fsync,
            ack_file,
        } => {
            if cache_mib == 0 || cache_mib > 1 << 20 {
                anyhow::bail!("--cache-mib {cache_mib} out of range (1 to 1048576)");
            }
            let opts = WriteOpts {
                layout: layout.layout(),
                threads: layout.threads,
                cache_bytes: cache_mib << 20,
                direct: !buffered,
                skip_fsync,
                ack_file,
            };
            powerload::write(&layout.file, &opts, &Mutex::new(std::io::stdout()))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Verify { layout, acked } => {
            let acked = parse_acked(acked.as_deref(), layout.threads)?;
            let rep = powerload::verify(&layout.file, &layout.layout(), &acked)?;
            println!(
                "{}",
                serde_json::to_string(&rep).context("encoding the report")?
            );
            Ok(if rep.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// `12,-,15` -> [Some(12), None, Some(15)]; one entry per writer thread.
fn parse_acked(arg: Option<&str>, threads: usize) -> anyhow::Result<Vec<Option<u64>>> {
    let Some(arg) = arg else {
        return Ok(vec![None; threads.max(1)]);
    };
    let list = arg
        .split(',')
        .map(|v| match v.trim() {
            "-" => Ok(None),
            n => n.parse().map(Some).map_err(|_| {
                anyhow::anyhow!("--acked {arg:?}: {n:?} is neither a sequence number nor `-`")
            }),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if list.len() != threads.max(1) {
        anyhow::bail!(
            "--acked {arg:?} has {} entries; give one per writer thread ({threads})",
            list.len()
        );
    }
    Ok(list)
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("numaio-powerload: {e:#}");
            ExitCode::from(2)
        }
    }
}
