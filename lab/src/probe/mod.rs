//! `numaio-probe`: small guest-side checks that lab tests run inside a guest. Each
//! subcommand lives in its own module here; to add one, write `probe/<name>.rs` with an
//! `Args` (clap) and `run(Args) -> anyhow::Result<ExitCode>`, then add a variant to
//! [`Cmd`] and a line to [`main`]'s match.

pub mod bind_check;
pub mod bpf_io;
pub mod fs_scaling;
pub mod pages;
pub mod reader;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "numaio-probe",
    about = "Guest-side checks for the numaio NUMA lab"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bind anonymous memory to a node with mbind, fault it in, verify with move_pages.
    BindCheck(bind_check::Args),
    /// What the eBPF collector counts for one process over an interval (or a rewriting writer).
    BpfIo(bpf_io::Args),
    /// One timed multi-threaded workload, each thread on its own file (read, append, create).
    FsScaling(fs_scaling::Args),
    /// Read a file once (read(2) or mmap): its checksum and the nodes of the pages touched.
    Pages(pages::Args),
    /// Loop reading a file with read(2), reporting the own CPU and node (getcpu).
    Reader(reader::Args),
}

/// Entry point of the `numaio-probe` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::BindCheck(a) => bind_check::run(a),
        Cmd::BpfIo(a) => bpf_io::run(a),
        Cmd::FsScaling(a) => fs_scaling::run(a),
        Cmd::Pages(a) => pages::run(a),
        Cmd::Reader(a) => reader::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("numaio-probe: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Stops the calling process (SIGSTOP to itself); returns once someone sends SIGCONT.
pub(crate) fn stop_self() {
    // SAFETY: raise has no memory preconditions; SIGSTOP cannot fail to be delivered.
    unsafe { libc::raise(libc::SIGSTOP) };
}

/// Does nothing until the process is killed: a worker that finished its fixed amount of I/O
/// stays listed in /proc with its counters unchanged.
pub(crate) fn idle_forever() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
