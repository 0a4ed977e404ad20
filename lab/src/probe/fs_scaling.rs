//! `numaio-probe fs-scaling`: one timed, multi-threaded file-system workload, for the
//! concurrency benchmark (lab/examples/fs_scaling.rs). Thread `i` of `--threads N` works on
//! its own file `DIR/SET-i` (or its own directory, for `create`), so a file system that
//! serves independent files concurrently takes about as long for N threads as for one, and
//! one that serialises them N times as long.
//!
//! Workloads, each `--ops K` operations per thread of `--block-size` bytes:
//! * `read`: `pread` of each of the file's blocks once with O_DIRECT (every read reaches
//!   the file system and, cold, the disk), in a random order (seeded by the thread's index)
//!   so no readahead can serve one from another, or in file order with `--sequential`; the
//!   files come from a `--prepare` run before.
//! * `append`: `write` of one block at the end (O_APPEND), then `fsync`, K times.
//! * `create`: K empty files made with `open(O_CREAT | O_EXCL)` in the thread's own
//!   directory `DIR/SET-i/`, each `fsync`ed unless `--no-fsync`.
//!
//! Threads open their files (and make their directories) before a barrier; the time is
//! taken from the barrier to the last thread's end. Prints one JSON line:
//! `{"workload","threads","ops","block_size","secs","thread_secs":[..]}`; exits 2 when an
//! operation fails, naming the file.

use anyhow::{bail, Context};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::Instant;

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Workload {
    Read,
    Append,
    Create,
}

#[derive(clap::Args)]
pub struct Args {
    /// The directory the files (or per-thread directories) are in.
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, value_enum)]
    workload: Workload,
    /// Threads, each on its own file or directory.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Operations per thread.
    #[arg(long, default_value_t = 64)]
    ops: usize,
    /// Bytes per read or append (K/M suffixes; a multiple of 4K).
    #[arg(long, default_value = "128K")]
    block_size: String,
    /// Name prefix of the files: thread `i` uses `SET-i`.
    #[arg(long, default_value = "f")]
    set: String,
    /// For `read`: write the files (ops × block size each, fsync'd) instead of reading them.
    #[arg(long)]
    prepare: bool,
    /// For `create`: do not fsync each new file.
    #[arg(long)]
    no_fsync: bool,
    /// For `read`: read the blocks in file order (readahead may serve them).
    #[arg(long)]
    sequential: bool,
}

/// A block-aligned buffer for O_DIRECT.
struct Aligned {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, fill: u8) -> Aligned {
        const ALIGN: usize = 4096;
        let buf = vec![fill; len + ALIGN];
        let off = buf.as_ptr().align_offset(ALIGN);
        Aligned { buf, off, len }
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

fn file_of(a: &Args, i: usize) -> PathBuf {
    a.dir.join(format!("{}-{i}", a.set))
}

fn prepare(a: &Args, bs: usize) -> anyhow::Result<()> {
    for i in 0..a.threads {
        let p = file_of(a, i);
        let f = File::create(&p).with_context(|| format!("cannot create {}", p.display()))?;
        let block = vec![(i as u8).wrapping_add(1); bs];
        for k in 0..a.ops {
            f.write_all_at(&block, (k * bs) as u64)
                .with_context(|| format!("write to {}", p.display()))?;
        }
        f.sync_all()
            .with_context(|| format!("fsync {}", p.display()))?;
    }
    Ok(())
}

/// What a thread does after the barrier; returns its own seconds.
type Job = Box<dyn FnOnce() -> anyhow::Result<f64> + Send>;

fn reader(p: PathBuf, order: Vec<usize>, bs: usize) -> anyhow::Result<Job> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .with_context(|| format!("cannot open {} with O_DIRECT", p.display()))?;
    Ok(Box::new(move || {
        let mut buf = Aligned::new(bs, 0);
        let t = Instant::now();
        for k in order {
            let n = f
                .read_at(buf.get(), (k * bs) as u64)
                .with_context(|| format!("read of {} at {}", p.display(), k * bs))?;
            if n != bs {
                bail!(
                    "{}: read at {} returned {n} bytes, not {bs}: prepare the files first",
                    p.display(),
                    k * bs
                );
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }))
}

fn appender(p: PathBuf, ops: usize, bs: usize) -> anyhow::Result<Job> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .with_context(|| format!("cannot open {} for appending", p.display()))?;
    Ok(Box::new(move || {
        let block = vec![0x5a; bs];
        let t = Instant::now();
        for _ in 0..ops {
            use std::io::Write;
            (&f).write_all(&block)
                .with_context(|| format!("append to {}", p.display()))?;
            f.sync_all()
                .with_context(|| format!("fsync {}", p.display()))?;
        }
        Ok(t.elapsed().as_secs_f64())
    }))
}

fn creator(d: PathBuf, ops: usize, fsync: bool) -> anyhow::Result<Job> {
    std::fs::create_dir(&d).with_context(|| format!("cannot make directory {}", d.display()))?;
    Ok(Box::new(move || {
        let t = Instant::now();
        for k in 0..ops {
            let p = d.join(format!("c{k}"));
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p)
                .with_context(|| format!("cannot create {}", p.display()))?;
            if fsync {
                f.sync_all()
                    .with_context(|| format!("fsync {}", p.display()))?;
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }))
}

fn check_dir(d: &Path) -> anyhow::Result<()> {
    if !d.is_dir() {
        bail!("--dir {}: not a directory", d.display());
    }
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let bs = numaio_sys::topology::parse_size(&a.block_size)
        .filter(|&b| b > 0 && b % 4096 == 0 && b <= 64 << 20)
        .with_context(|| {
            format!(
                "--block-size {:?}: use a multiple of 4K up to 64M, such as 128K",
                a.block_size
            )
        })? as usize;
    if a.threads == 0 || a.threads > 1024 {
        bail!("--threads {}: give 1 to 1024", a.threads);
    }
    check_dir(&a.dir)?;
    if a.prepare {
        if a.workload != Workload::Read {
            bail!("--prepare makes the files of the read workload only");
        }
        prepare(&a, bs)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut jobs = Vec::with_capacity(a.threads);
    for i in 0..a.threads {
        let p = file_of(&a, i);
        jobs.push(match a.workload {
            Workload::Read => {
                let mut order: Vec<usize> = (0..a.ops).collect();
                if !a.sequential {
                    fastrand::Rng::with_seed(i as u64 + 1).shuffle(&mut order);
                }
                reader(p, order, bs)?
            }
            Workload::Append => appender(p, a.ops, bs)?,
            Workload::Create => creator(p, a.ops, !a.no_fsync)?,
        });
    }
    let barrier = Arc::new(Barrier::new(a.threads + 1));
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|job| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                job()
            })
        })
        .collect();
    barrier.wait();
    let t = Instant::now();
    let mut thread_secs = Vec::with_capacity(handles.len());
    let mut failed = None;
    for h in handles {
        match h.join() {
            Ok(Ok(s)) => thread_secs.push(s),
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(anyhow::anyhow!("a worker thread panicked")),
        }
    }
    let secs = t.elapsed().as_secs_f64();
    if let Some(e) = failed {
        return Err(e);
    }
    let workload = match a.workload {
        Workload::Read if a.sequential => "read-seq",
        Workload::Read => "read",
        Workload::Append => "append",
        Workload::Create if a.no_fsync => "create-nofsync",
        Workload::Create => "create",
    };
    println!(
        "{}",
        serde_json::json!({
            "workload": workload,
            "threads": a.threads,
            "ops": a.ops,
            "block_size": (a.workload != Workload::Create).then_some(bs),
            "secs": secs,
            "thread_secs": thread_secs,
        })
    );
    Ok(ExitCode::SUCCESS)
}
