//! `numaio`: the command-line front end. Each subcommand lives in its own module under
//! `cmd/` and is a thin layer over the library crates (`numaio-sys`, `numaio-pagecache`,
//! `numaio-proc`, `numaio-engine`; `numaio bench` is the `numaio-bench` crate): parse arguments, call the library, print a human table
//! by default or JSON with `--json`.

mod cmd;
mod walk;

use numaio_cli_support::{args, exit, output};
use numaio_cli_support::{exit_status_help, out, outln, usage_bail, warnln};

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "numaio",
    version,
    about = "Keep file data and the threads that use it on the same NUMA node",
    after_help = concat!(
        "Names in human output are quoted like `ls` does when they hold control characters \
         ($'a\\nb'); --json output is exact.\n\n",
        exit_status_help!()
    )
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the NUMA topology: nodes, CPUs, memory, file cache per node, distances.
    #[command(after_help = exit::HELP)]
    Topo(cmd::topo::TopoArgs),
    /// Show on which nodes files' cached pages sit (never reads uncached pages in).
    Where(cmd::where_::WhereArgs),
    /// Make files' pages resident on chosen nodes, and verify it.
    Warm(cmd::warm::WarmArgs),
    /// Migrate files' resident pages to chosen nodes (reads nothing new).
    Move(cmd::move_::MoveArgs),
    /// Drop files' clean cached pages.
    Evict(cmd::evict::EvictArgs),
    /// Lock files' pages in memory (mlock), optionally on a chosen node, until signalled.
    Lock(cmd::lock::LockArgs),
    /// Give each node its own copy of read-mostly files (for `run --replica`).
    Replicate(cmd::replicate::ReplicateArgs),
    /// Show processes' file I/O locality per node.
    #[command(after_help = exit::HELP)]
    Ps(cmd::ps::PsArgs),
    /// A live view of file I/O per node, process and file (read-only; --once, --json).
    #[command(after_help = exit::HELP)]
    Top(cmd::top::TopArgs),
    /// Pin a process's threads (and optionally its memory) to a node.
    #[command(after_help = exit::HELP)]
    Pin(cmd::pin::PinArgs),
    /// Run a command near its files' cache, or with numactl's CPU and memory bindings.
    #[command(after_help = exit::HELP)]
    Run(cmd::run::RunArgs),
    /// The placement daemon: move I/O-heavy processes next to their data, or the data to them.
    #[command(after_help = exit::HELP)]
    Daemon(cmd::daemon::DaemonArgs),
    /// Benchmark the I/O engine or the kernel page cache.
    Bench(numaio_bench::BenchArgs),
    /// Measure this machine's NUMA latency and bandwidth costs (an MLC-style profile).
    #[command(after_help = exit::HELP)]
    Probe(cmd::probe::ProbeArgs),
    /// Predict a placement's throughput and latency on a machine profile.
    #[command(after_help = exit::HELP)]
    Model(cmd::model::ModelArgs),
    /// Advise settings for a workload, learned from measured runs (needs Python; `--help`).
    #[command(after_help = exit::HELP)]
    Advise(cmd::advise::AdviseArgs),
    /// Format devices, files or persistent memory zones as one numaio-fs volume.
    Mkfs(cmd::mkfs::MkfsArgs),
    /// Check (and with -y repair) an unmounted numaio-fs volume; exit codes like e2fsck.
    Fsck(cmd::fsck::FsckArgs),
    /// Offline tools on an unmounted numaio-fs volume: stat, put, get, ls, mkdir, rm, map, policy.
    Fs(cmd::fs::FsArgs),
    /// Mount a numaio-fs volume through FUSE (detaches unless -f).
    Mount(cmd::mount::MountArgs),
    /// Unmount a numaio-fs FUSE mount; the server flushes the volume before it exits.
    Umount(cmd::umount::UmountArgs),
}

/// `numaio generate`: a packagers' command kept out of `--help`, the man pages and the
/// completions (clap's completions would still offer a hidden subcommand).
#[derive(Parser)]
#[command(
    name = "numaio generate",
    bin_name = "numaio generate",
    about = "Write numaio's man pages and shell completions (for packagers)"
)]
struct GenCli {
    #[command(flatten)]
    a: cmd::gen::GenArgs,
}

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == "generate") {
        let g = GenCli::parse_from(std::env::args_os().skip(1));
        return finish(cmd::gen::run(g.a, Cli::command()));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Usage errors (exit 2) go to stderr; --help and --version (exit 0) to stdout, whose
        // write errors count like any command's.
        Err(e) => {
            let mut code = u8::try_from(e.exit_code()).unwrap_or(exit::USAGE);
            // fsck keeps e2fsck's codes, where a usage error is 16.
            if code == exit::USAGE && std::env::args_os().nth(1).is_some_and(|a| a == "fsck") {
                code = cmd::fsck::USAGE;
            }
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
                    exit::code(exit::ERROR)
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
        Command::Lock(a) => cmd::lock::run(a),
        Command::Replicate(a) => cmd::replicate::run(a),
        Command::Ps(a) => cmd::ps::run(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Pin(a) => cmd::pin::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Bench(a) => numaio_bench::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Model(a) => cmd::model::run(a),
        Command::Advise(a) => cmd::advise::run(a),
        Command::Mkfs(a) => cmd::mkfs::run(a),
        Command::Fsck(a) => cmd::fsck::run(a),
        Command::Fs(a) => cmd::fs::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Umount(a) => cmd::umount::run(a),
    };
    finish(result)
}

/// The exit status for a command's result, after writing what is still buffered.
fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    // Text still buffered is written here, so its write errors are caught too.
    let result = result.and_then(|code| output::flush_out().map(|_| code));
    match result {
        Ok(code) => code,
        // The reader is gone: nobody is left to tell, and nothing was lost that it wanted.
        Err(e) if output::is_broken_pipe(&e) => exit::code(exit::OK),
        Err(e) => {
            warnln!("{e:#}");
            if e.downcast_ref::<args::UsageError>().is_some() {
                exit::code(exit::USAGE)
            } else {
                exit::code(exit::ERROR)
            }
        }
    }
}
