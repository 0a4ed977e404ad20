//! `numaio-probe bpf-io`: what the eBPF collector counts for one process over an interval,
//! beside the process's own `rchar`/`wchar` deltas from `/proc/PID/io`, as one JSON object;
//! or (`--rewrite FILE`) a writer that overwrites a file's first bytes in place, again and
//! again, for the collector's write checks; or (`--fault FILE`) a process that takes one
//! page fault on each page of a file (a private writable mapping, each page written once).
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
    /// With --rewrite: after this many passes idle (no I/O) until killed instead of writing
    /// for --secs.
    #[arg(long)]
    passes: Option<u64>,
    /// With --rewrite: stop itself (SIGSTOP) before the first write; a test lets it run with
    /// SIGCONT once whatever measures it has taken its first sample.
    #[arg(long)]
    stopped: bool,
    /// Be a faulting process: map this file privately and write one byte of each page.
    #[arg(long)]
    fault: Option<PathBuf>,
    /// The process (stopped by the caller) runs only while the collector is attached:
    /// SIGCONT after attaching, SIGSTOP before the last count, so no code is patched while
    /// it runs and both counts cover exactly the same reads.
    #[arg(long)]
    run_while_attached: bool,
    /// Attach kprobes even where fentry works.
    #[arg(long)]
    kprobe: bool,
    /// Print how many of the collector's programs the kernel holds, as `{"programs": N}`.
    #[arg(long)]
    count_programs: bool,
    /// Create this file once the collector is attached (watch mode).
    #[arg(long)]
    ready: Option<PathBuf>,
}

fn fault_pages(path: &PathBuf) -> anyhow::Result<ExitCode> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = usize::try_from(f.metadata()?.len())?;
    if len == 0 {
        bail!("{} is empty: nothing to map", path.display());
    }
    // SAFETY: a new private mapping of `len` bytes of an open file; unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        bail!(
            "mmap of {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    let mut pages = 0u64;
    for off in (0..len).step_by(4096) {
        // SAFETY: `off` is inside the mapping; a write to a private mapping copies the page.
        unsafe { std::ptr::write_volatile((p as *mut u8).add(off), 1) };
        pages += 1;
    }
    // SAFETY: the mapping made above.
    if unsafe { libc::munmap(p, len) } != 0 {
        bail!("munmap: {}", std::io::Error::last_os_error());
    }
    println!("{{\"pages\": {pages}}}");
    Ok(ExitCode::SUCCESS)
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

fn signal(pid: i32, sig: i32) -> anyhow::Result<()> {
    // SAFETY: kill has no memory preconditions; the result is checked.
    if unsafe { libc::kill(pid, sig) } != 0 {
        bail!("kill({pid}, {sig}): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Waits (at most 10 s) until `pid` is stopped (state `T` in /proc/PID/stat).
fn wait_stopped(pid: i32) -> anyhow::Result<()> {
    let path = format!("/proc/{pid}/stat");
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        if state == Some('T') {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("process {pid} did not stop within 10 s of SIGSTOP")
}

fn rewrite(a: &Args, path: &PathBuf) -> anyhow::Result<ExitCode> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("opening {} to write", path.display()))?;
    let block = vec![0xa5u8; 64 << 10];
    let bytes = a.bytes;
    if a.stopped {
        super::stop_self();
    }
    let end = Instant::now() + Duration::from_secs_f64(a.secs);
    let mut passes = 0u64;
    while a.passes.is_some() || Instant::now() < end {
        if a.passes == Some(passes) {
            super::idle_forever();
        }
        passes += 1;
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
        return rewrite(&a, path);
    }
    if let Some(path) = &a.fault {
        return fault_pages(path);
    }
    if a.count_programs {
        println!("{{\"programs\": {}}}", numaio_bpf::loaded_programs()?);
        return Ok(ExitCode::SUCCESS);
    }
    let pids = match (a.pid, a.all) {
        (Some(p), false) => vec![p],
        (None, true) => Vec::new(),
        _ => bail!("give one of --pid PID, --all, --rewrite FILE, --fault FILE"),
    };
    let pid = a.pid.unwrap_or(0);
    let c = Collector::start(&CollectorOptions {
        pids,
        kprobe_only: a.kprobe,
    })
    .map_err(|e| anyhow::anyhow!("the eBPF collector is unavailable: {e}"))?;
    let s0 = c.snapshot()?;
    let io0 = if pid > 0 { io_chars(pid)? } else { (0, 0) };
    if a.run_while_attached {
        signal(pid, libc::SIGCONT)?;
    }
    if let Some(r) = &a.ready {
        std::fs::write(r, b"").with_context(|| format!("creating {}", r.display()))?;
    }
    std::thread::sleep(Duration::from_secs_f64(a.secs));
    if a.run_while_attached {
        signal(pid, libc::SIGSTOP)?;
        wait_stopped(pid)?;
    }
    let s1 = c.snapshot()?;
    let io1 = if pid > 0 { io_chars(pid)? } else { (0, 0) };
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
        "missed": d.missed,
    });
    println!("{out}");
    Ok(ExitCode::SUCCESS)
}
