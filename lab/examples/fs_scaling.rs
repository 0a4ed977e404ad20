//! Measurement, not a test: the file-system concurrency benchmark (`numaio_lab::fs_scaling`).
//! In a 2-node guest with each node's NVMe disk behind dm-delay, time(N threads) /
//! time(1 thread) for O_DIRECT cold reads, append + fsync and create (+ fsync) on stock ext4
//! and on numaio-fs (`numaio mkfs` + `numaio mount`), same guest, same run; 1.0 is fully
//! concurrent, N fully serial. Needs the release binaries (`cargo build --release --bins`)
//! and the lab kernel (`scripts/setup.sh`):
//!
//! `cargo run --release -p numaio-lab --example fs_scaling -- --out bench/results/fs-scaling-DATE.txt`
//!
//! Options: `--threads 8 --delay-ms 20 --read-ops 64 --append-ops 32 --create-ops 32
//! --rounds 1 --out FILE` (the table and the guest's raw output), `--render RAW` (the
//! table of a saved raw output, nothing booted). `NUMAIO_LAB_KERNEL=7.3` boots the 7.3
//! kernel.

use clap::Parser;
use numaio_lab::fs_scaling::{io_profile, parse_results, sanity, table, Config};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
struct Cli {
    #[arg(long, default_value_t = 8)]
    threads: usize,
    #[arg(long, default_value_t = 20)]
    delay_ms: u32,
    #[arg(long, default_value_t = 64)]
    read_ops: usize,
    #[arg(long, default_value_t = 32)]
    append_ops: usize,
    #[arg(long, default_value_t = 32)]
    create_ops: usize,
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Write the table and the guest's raw output here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Boot nothing: print the table of a saved raw output (its `RESULT` lines; give the
    /// options it was run with).
    #[arg(long, value_name = "RAW")]
    render: Option<PathBuf>,
}

fn main() -> ExitCode {
    let a = Cli::parse();
    let c = Config {
        threads: a.threads,
        delay_ms: a.delay_ms,
        read_ops: a.read_ops,
        append_ops: a.append_ops,
        create_ops: a.create_ops,
        rounds: a.rounds.max(1),
        ..Config::default()
    };
    if let Some(p) = &a.render {
        return match std::fs::read_to_string(p) {
            Ok(raw) => {
                let runs = parse_results(&raw);
                print!("{}{}", table(&runs, &c), io_profile(&runs, &c));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("fs_scaling: cannot read {}: {e}", p.display());
                ExitCode::from(2)
            }
        };
    }
    let started = std::time::Instant::now();
    let out = match c.scenario().run() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fs_scaling: the lab run failed: {e}");
            return ExitCode::from(2);
        }
    };
    let runs = parse_results(&out.output);
    let head = format!(
        "fs-scaling: 2-node lab guest (1 vCPU + 512 MiB per node, TCG), kernel {}, dm-delay {} ms \
         per I/O on each node's NVMe disk; ext4 on node 0's delayed disk, numaio-fs over both; \
         {} threads vs 1, each on its own file; rounds {} (median); ratio = time({}T) / time(1T): \
         1.0 fully concurrent, {}.0 fully serial; guest run {:.0} s, exit status {}\n",
        std::env::var("NUMAIO_LAB_KERNEL").unwrap_or_else(|_| "6.1".into()),
        c.delay_ms,
        c.threads,
        c.rounds,
        c.threads,
        c.threads,
        started.elapsed().as_secs_f64(),
        out.exit_code
    );
    let mut text = head + &table(&runs, &c) + &io_profile(&runs, &c);
    for w in sanity(&runs, &c) {
        text += &format!("warning: {w}\n");
    }
    match numaio_lab::guest_script::section(&out.output, "fsck") {
        Some(f) if f.contains("rc=0") => text += "numaio fsck after the runs: clean\n",
        _ => text += "warning: numaio fsck after the runs is missing or not clean (raw output)\n",
    }
    print!("{text}");
    if let Some(p) = &a.out {
        let raw = format!(
            "{text}\n--- guest output ---\n{}\n--- console tail ---\n{}\n",
            out.output, out.console_tail
        );
        if let Err(e) = std::fs::File::create(p).and_then(|mut f| f.write_all(raw.as_bytes())) {
            eprintln!("fs_scaling: cannot write {}: {e}", p.display());
            return ExitCode::from(2);
        }
        eprintln!("fs_scaling: raw output in {}", p.display());
    }
    if out.exit_code != 0 || runs.is_empty() {
        eprintln!("fs_scaling: the scenario failed:\n{}", out.report());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
