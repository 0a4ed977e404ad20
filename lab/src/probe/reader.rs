//! `numaio-probe reader`: a process that reads a file over and over with read(2) and keeps
//! reporting the CPU and node it runs on (its own `getcpu`), so lab tests can watch the
//! daemon move it: "the reader's own getcpu shows node 1 afterwards".
//!
//! Each report is one line `<ms since start> cpu=<C> node=<N> passes=<P>`, appended to
//! `--report FILE` (or printed on stdout). The first line is written before the first read.

use anyhow::Context;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// The file to read, from start to end, again and again.
    #[arg(long)]
    file: PathBuf,
    /// Bytes per read(2) call (K/M/G suffixes).
    #[arg(long, default_value = "1M")]
    block_size: String,
    /// Append reports to this file instead of stdout.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Milliseconds between reports.
    #[arg(long, default_value_t = 200)]
    interval_ms: u64,
    /// Exit after this many seconds (default: run until killed).
    #[arg(long)]
    duration: Option<f64>,
    /// Sleep this many microseconds after each read (to be a light reader).
    #[arg(long, default_value_t = 0)]
    pause_us: u64,
    /// Open with O_DIRECT, so every read reaches the file system (on FUSE: one request
    /// per read) instead of being answered from the page cache after the first pass.
    #[arg(long)]
    direct: bool,
    /// After the first report, wait (at most 10 s) until the process may run on more CPUs
    /// than it started with, then read: a test can start it pinned away from its data and
    /// unpin it before any read, so the file system sees only an unpinned reader.
    #[arg(long)]
    wait_unpinned: bool,
    /// Stop after this many passes over the file and idle (no I/O) until killed, so the
    /// process stays listed with a fixed amount of I/O done.
    #[arg(long)]
    passes: Option<u64>,
    /// Stop itself (SIGSTOP) before the first read: a test lets it run with SIGCONT once
    /// whatever measures it has taken its first sample.
    #[arg(long)]
    stopped: bool,
}

/// How many CPUs this process may run on.
fn allowed_cpus() -> anyhow::Result<usize> {
    Ok(numaio_sys::affinity::get_affinity(0)
        .context("sched_getaffinity of the reader")?
        .count())
}

fn report(out: &mut Option<std::fs::File>, line: &str) -> anyhow::Result<()> {
    match out {
        Some(f) => {
            writeln!(f, "{line}")?;
            f.flush()?;
        }
        None => {
            let mut s = std::io::stdout().lock();
            writeln!(s, "{line}")?;
            s.flush()?;
        }
    }
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let bs = numaio_sys::topology::parse_size(&a.block_size)
        .filter(|&b| b > 0 && b <= 1 << 30)
        .with_context(|| format!("--block-size {:?}: use a size such as 1M", a.block_size))?
        as usize;
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    if a.direct {
        use std::os::unix::fs::OpenOptionsExt;
        open.custom_flags(libc::O_DIRECT);
    }
    let mut f = open
        .open(&a.file)
        .with_context(|| format!("cannot open {}", a.file.display()))?;
    let mut out = match &a.report {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open report file {}", p.display()))?,
        ),
        None => None,
    };
    // O_DIRECT wants a block-aligned buffer: take an aligned window of a larger one
    const ALIGN: usize = 4096;
    let mut backing = vec![0u8; bs + ALIGN];
    let skip = backing.as_ptr().align_offset(ALIGN).min(ALIGN);
    let buf = &mut backing[skip..skip + bs];
    let start = Instant::now();
    let every = Duration::from_millis(a.interval_ms.max(1));
    let mut next = start;
    let mut passes = 0u64;
    if a.stopped {
        super::stop_self();
    }
    let mut pinned = if a.wait_unpinned {
        Some(allowed_cpus()?)
    } else {
        None
    };
    loop {
        if Instant::now() >= next {
            let cn = numaio_sys::getcpu()?;
            report(
                &mut out,
                &format!(
                    "{} cpu={} node={} passes={passes}",
                    start.elapsed().as_millis(),
                    cn.cpu,
                    cn.node
                ),
            )?;
            next += every;
            if let Some(cpus) = pinned.take() {
                let until = Instant::now() + Duration::from_secs(10);
                while allowed_cpus()? <= cpus && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        if a.duration
            .is_some_and(|d| start.elapsed().as_secs_f64() >= d)
        {
            return Ok(ExitCode::SUCCESS);
        }
        let n = f
            .read(buf)
            .with_context(|| format!("read of {} failed", a.file.display()))?;
        if n == 0 {
            passes += 1;
            f.seek(SeekFrom::Start(0))?;
            if a.passes == Some(passes) {
                super::idle_forever();
            }
        }
        if a.pause_us > 0 {
            std::thread::sleep(Duration::from_micros(a.pause_us));
        }
    }
}
