//! `numaio`: the command-line front end. Each subcommand lives in its own module under
//! `cmd/` and is a thin layer over the library crates (`numaio-sys`, `numaio-pagecache`,
//! `numaio-proc`, `numaio-engine`): parse arguments, call the library, print a human table
//! by default or JSON with `--json`.

mod args;
mod benchfile;
mod cmd;
mod output;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "numaio",
    version,
    about = "Keep file data and the threads that use it on the same NUMA node",
    after_help = "Exit status: 0 on success, 1 on errors, 2 on usage errors (some commands \
                  document more). Names in human output are quoted like `ls` does when they \
                  hold control characters ($'a\\nb'); --json output is exact. When the \
                  reader of the output goes away (a closed pipe), numaio stops quietly with \
                  status 0."
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
    /// Advise settings for a workload, learned from measured runs (needs Python; `--help`).
    Advise(cmd::advise::AdviseArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Usage errors (exit 2) go to stderr; --help and --version (exit 0) to stdout, whose
        // write errors count like any command's.
        Err(e) => {
            let code = u8::try_from(e.exit_code()).unwrap_or(args::USAGE_EXIT);
            return match e
                .print()
                .and_then(|_| std::io::Write::flush(&mut std::io::stdout()))
            {
                Ok(()) => ExitCode::from(code),
                Err(io) if io.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(code),
                // Nowhere left to report a failed write to stderr.
                Err(_) if e.use_stderr() => ExitCode::from(code),
                Err(io) => {
                    warnln!("{}", output::StdoutError(io));
                    ExitCode::FAILURE
                }
            };
        }
    };
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
        Command::Advise(a) => cmd::advise::run(a),
    };
    // Text still buffered is written here, so its write errors are caught too.
    let result = result.and_then(|code| output::flush_out().map(|_| code));
    match result {
        Ok(code) => code,
        // The reader is gone: nobody is left to tell, and nothing was lost that it wanted.
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            warnln!("{e:#}");
            if e.downcast_ref::<args::UsageError>().is_some() {
                ExitCode::from(args::USAGE_EXIT)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
