//! `numaio`: the command-line front end. Each subcommand lives in its own module under
//! `cmd/` and is a thin layer over the library crates (`numaio-sys`, `numaio-pagecache`,
//! `numaio-proc`, `numaio-engine`): parse arguments, call the library, print a human table
//! by default or JSON with `--json`.

mod cmd;
mod output;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "numaio",
    version,
    about = "Keep file data and the threads that use it on the same NUMA node"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the NUMA topology: nodes, CPUs, memory, file cache per node, distances.
    Topo(cmd::topo::TopoArgs),
    /// Show on which nodes files' cached pages sit (never reads uncached pages in).
    Where(cmd::where_::WhereArgs),
    /// Make files' pages resident on chosen nodes, and verify it.
    Warm(cmd::warm::WarmArgs),
    /// Migrate files' resident pages to chosen nodes (reads nothing new).
    Move(cmd::move_::MoveArgs),
    /// Drop files' clean cached pages.
    Evict(cmd::evict::EvictArgs),
    /// Show processes' file I/O locality per node.
    Ps(cmd::ps::PsArgs),
    /// Pin a process's threads (and optionally its memory) to a node.
    Pin(cmd::pin::PinArgs),
    /// Run a command on the node that holds most of the given files' cache.
    Run(cmd::run::RunArgs),
    /// The placement daemon: move I/O-heavy processes next to their data, or the data to them.
    Daemon(cmd::daemon::DaemonArgs),
    /// Benchmark the I/O engine or the kernel page cache.
    Bench(cmd::bench::BenchArgs),
    /// Measure this machine's NUMA latency and bandwidth costs (an MLC-style profile).
    Probe(cmd::probe::ProbeArgs),
    /// Predict a placement's throughput and latency on a machine profile.
    Model(cmd::model::ModelArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Topo(a) => cmd::topo::run(a),
        Command::Where(a) => cmd::where_::run(a),
        Command::Warm(a) => cmd::warm::run(a),
        Command::Move(a) => cmd::move_::run(a),
        Command::Evict(a) => cmd::evict::run(a),
        Command::Ps(a) => cmd::ps::run(a),
        Command::Pin(a) => cmd::pin::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Model(a) => cmd::model::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("numaio: {e:#}");
            ExitCode::FAILURE
        }
    }
}
