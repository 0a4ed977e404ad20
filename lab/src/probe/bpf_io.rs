//! `numaio-probe bpf-io`: what the eBPF collector counts for one process over an interval,
//! beside the process's own `rchar`/`wchar` deltas from `/proc/PID/io`, as one JSON object;
//! or (`--rewrite FILE`) a writer that overwrites a file's first bytes in place, again and
//! again, for the collector's write checks.
//!
//! Output (watch mode): `{"attached": {mode, hooks, not_covered}, "pid", "secs", "rchar",
//! "wchar", "process": {by_data_node, local, remote}, "io": [IoRecord], "cache":
//! [CacheRecord], "faults": [FaultRecord]}`, counts over the interval.

use anyhow::{bail, Context};
use numaio_bpf::{Collector, CollectorOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds to count for (or, with --rewrite, to write for).
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// The process to count (watch mode).
    #[arg(long)]
    pid: Option<i32>,
    /// Count every process instead of one.
    #[arg(long)]
    all: bool,
    /// Be a writer: overwrite this file's first --bytes bytes again and again.
    #[arg(long)]
    rewrite: Option<PathBuf>,
    /// Bytes per pass of --rewrite.
    #[arg(long, default_value_t = 1 << 20)]
    bytes: u64,
}

/// `(rchar, wchar)` of `pid`.
fn io_chars(pid: i32) -> anyhow::Result<(u64, u64)> {
    let path = format!("/proc/{pid}/io");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("no {name} in {path}"))
    };
    Ok((field("rchar:")?, field("wchar:")?))
}

fn rewrite(path: &PathBuf, bytes: u64, secs: f64) -> anyhow::Result<ExitCode> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("opening {} to write", path.display()))?;
    let block = vec![0xa5u8; 64 << 10];
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let mut off = 0u64;
        while off < bytes {
            let n = (bytes - off).min(block.len() as u64) as usize;
            f.write_all_at(&block[..n], off)
                .with_context(|| format!("writing {}", path.display()))?;
            off += n as u64;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if let Some(path) = &a.rewrite {
        return rewrite(path, a.bytes, a.secs);
    }
    let pid = match (a.pid, a.all) {
        (Some(p), false) => p,
        _ => bail!("give --pid PID (the process to count) or --rewrite FILE"),
    };
    let c = Collector::start(&CollectorOptions { pids: vec![pid] })
        .map_err(|e| anyhow::anyhow!("the eBPF collector is unavailable: {e}"))?;
    let s0 = c.snapshot()?;
    let io0 = io_chars(pid)?;
    std::thread::sleep(Duration::from_secs_f64(a.secs));
    let s1 = c.snapshot()?;
    let io1 = io_chars(pid)?;
    let d = s1.since(&s0);
    let process = d.per_process().remove(&pid).unwrap_or_default();
    let out = serde_json::json!({
        "attached": c.attached(),
        "pid": pid,
        "secs": a.secs,
        "rchar": io1.0 - io0.0,
        "wchar": io1.1 - io0.1,
        "process": process,
        "io": d.io,
        "cache": d.cache,
        "faults": d.faults,
    });
    println!("{out}");
    Ok(ExitCode::SUCCESS)
}
