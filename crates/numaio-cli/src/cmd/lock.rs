//! `numaio lock`: keep files' pages in memory with `mlock` (vmtouch -l/-L), optionally
//! warmed onto a node first, until SIGTERM, SIGINT or SIGHUP; in the foreground or as a
//! daemon (`-d`) with a pidfile (`-P`).
//!
//! Locks are all or nothing: if any file cannot be opened, warmed or locked, nothing stays
//! locked and the command exits 1. The pages stay on their node while locked (a locked
//! page is not reclaimed; the kernel migrates it only for compaction, to the same node).

use crate::cmd::where_::{report_error, JsonError};
use crate::output::{human_bytes, quote};
use crate::walk::{JsonDoc, Out, Selection, WalkArgs};
use crate::warnln;
use numaio_pagecache::{page_span, warm_opened, MoveOptions, OpenFile, WarmOptions};
use serde::Serialize;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(
    after_help = concat!("The pages stay locked until numaio gets SIGTERM, SIGINT or SIGHUP. \
    Locking needs RLIMIT_MEMLOCK (ulimit -l) large enough for the files, or root \
    (CAP_IPC_LOCK). It exits 0 after a signal, or once the daemon is running; on an error \
    nothing stays locked.\n\n", crate::exit_status_help!())
)]
pub struct LockArgs {
    #[command(flatten)]
    walk: WalkArgs,
    #[command(flatten)]
    sel: Selection,
    /// Warm the pages onto this node first (read what is missing there, migrate the rest).
    #[arg(long, value_name = "N", value_parser = crate::args::node)]
    node: Option<u32>,
    /// Lock with mlockall(MCL_CURRENT) once everything is mapped, like vmtouch -L.
    #[arg(short = 'L', long)]
    lock_all: bool,
    /// Run as a daemon: return once the pages are locked, and keep them locked in the background.
    #[arg(short = 'd', long)]
    daemon: bool,
    /// Write the process id of the process holding the locks to FILE (removed on exit).
    #[arg(short = 'P', long, value_name = "FILE")]
    pidfile: Option<PathBuf>,
    /// Print JSON: {"schema_version":1,"files":[{"path","offset","bytes","pages"}],"total":{"files","pages","bytes"},"pid","errors":[]}
    #[arg(long)]
    json: bool,
}

/// One file's locked range.
#[derive(Serialize)]
struct Locked {
    #[serde(serialize_with = "numaio_pagecache::serialize_path")]
    path: PathBuf,
    offset: u64,
    bytes: u64,
    pages: u64,
}

#[derive(Serialize, Default)]
struct Total {
    files: u64,
    pages: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct Rest {
    total: Total,
    pid: u32,
    errors: Vec<JsonError>,
}

/// A read-only shared mapping of a file range, unmapped (and so unlocked) on drop.
struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mmap returned; nothing refers to it any more.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

fn mlock_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN) => {
            "; raise RLIMIT_MEMLOCK (ulimit -l, LimitMEMLOCK= in a unit) or run as root (CAP_IPC_LOCK)"
        }
        _ => "",
    }
}

/// Maps (and unless `defer`, locks) the range of `f`.
fn map_and_lock(
    f: &OpenFile,
    range: Option<(u64, u64)>,
    defer: bool,
) -> anyhow::Result<Option<(Mapping, Locked)>> {
    let ps = numaio_sys::page_size() as u64;
    let (first, end) = page_span(f.size, range, ps);
    if end == first {
        return Ok(None);
    }
    let len = ((end - first) * ps) as usize;
    // SAFETY: a fresh read-only shared mapping of a file we hold open.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.file.as_raw_fd(),
            (first * ps) as libc::off_t,
        )
    };
    if addr == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        anyhow::bail!("{}: mmap failed: {e}", quote(&f.path));
    }
    let m = Mapping { addr, len };
    if !defer {
        // SAFETY: locks our own mapping; mlock faults the pages in (reading what is missing).
        if unsafe { libc::mlock(m.addr, m.len) } != 0 {
            let e = std::io::Error::last_os_error();
            anyhow::bail!(
                "{}: mlock of {} failed: {e}{}",
                quote(&f.path),
                human_bytes(len as u64),
                mlock_hint(&e)
            );
        }
    }
    let bytes = ((end * ps).min(f.size)).saturating_sub(first * ps);
    Ok(Some((
        m,
        Locked {
            path: f.path.clone(),
            offset: first * ps,
            bytes,
            pages: end - first,
        },
    )))
}

/// Blocks the termination signals in this thread, so that they wait for `sigwait`.
fn block_signals() -> libc::sigset_t {
    // SAFETY: set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    loop {
        // SAFETY: set is a valid signal set; sig receives the signal number.
        let r = unsafe { libc::sigwait(set, &mut sig) };
        if r == 0 {
            return sig;
        }
    }
}

fn write_pidfile(p: &Path) -> anyhow::Result<()> {
    std::fs::write(p, format!("{}\n", std::process::id()))
        .map_err(|e| anyhow::anyhow!("{}: cannot write the pidfile: {e}", quote(p)))
}

pub fn run(a: LockArgs) -> anyhow::Result<ExitCode> {
    // The daemon's child reports on this pipe whether the locks are in place.
    let mut ready: Option<OwnedFd> = None;
    if a.daemon {
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            anyhow::bail!("pipe failed: {}", std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here only.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        crate::output::flush_out()?;
        // SAFETY: numaio is single-threaded here (nothing has started a thread yet), so the
        // child may go on running Rust code.
        match unsafe { libc::fork() } {
            -1 => anyhow::bail!("fork failed: {}", std::io::Error::last_os_error()),
            0 => {
                drop(rd);
                // SAFETY: the child leaves the caller's session and terminal.
                unsafe { libc::setsid() };
                ready = Some(wr);
            }
            _ => {
                drop(wr);
                let mut b = [0u8; 1];
                let mut f = std::fs::File::from(rd);
                let ok = matches!(std::io::Read::read(&mut f, &mut b), Ok(1) if b[0] == 0);
                return Ok(if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
        }
    }
    let res = lock_all(&a);
    // Until here a signal ends numaio the default way (the kernel drops the locks); from
    // now on it is waited for, so that the pidfile is removed too.
    let set = block_signals();
    let (maps, code) = match res {
        Ok(m) => (m, 0u8),
        Err(e) => {
            if !crate::output::is_broken_pipe(&e) {
                warnln!("{e:#}");
            }
            (Vec::new(), 1)
        }
    };
    if code == 0 {
        if let Some(p) = &a.pidfile {
            if let Err(e) = write_pidfile(p) {
                warnln!("{e:#}");
                drop(maps);
                return finish(ready, 1);
            }
        }
    }
    let _ = crate::output::flush_out();
    if code != 0 {
        return finish(ready, code);
    }
    if let Some(w) = ready.take() {
        let mut f = std::fs::File::from(w);
        let _ = f.write_all(&[0]);
        drop(f);
        detach_stdio();
    }
    wait_for_signal(&set);
    drop(maps);
    if let Some(p) = &a.pidfile {
        let _ = std::fs::remove_file(p);
    }
    Ok(ExitCode::SUCCESS)
}

/// Tells a waiting daemon parent the outcome, and exits with `code`.
fn finish(ready: Option<OwnedFd>, code: u8) -> anyhow::Result<ExitCode> {
    if let Some(w) = ready {
        let mut f = std::fs::File::from(w);
        let _ = f.write_all(&[code]);
    }
    Ok(ExitCode::from(code))
}

/// Points stdin, stdout and stderr at /dev/null (the daemon has no terminal left).
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: replaces a standard descriptor with /dev/null.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// Opens, warms (with --node) and locks every file; all or nothing.
fn lock_all(a: &LockArgs) -> anyhow::Result<Vec<Mapping>> {
    let target = a
        .node
        .map(|n| crate::cmd::warm::build_target(Some(n), None, None, None, None))
        .transpose()?;
    let mut out = Out::new();
    let mut doc = if a.json {
        Some(JsonDoc::begin(&mut out)?)
    } else {
        None
    };
    let files = a.walk.files(a.sel.batch.as_deref())?;
    let batch_failed = files.batch_failed.clone();
    let mut maps = Vec::new();
    let mut locked = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for item in files {
        let f = match item {
            Ok(f) => f,
            Err(e) => {
                report_error(&e, a.json);
                errors.push(e.to_string());
                continue;
            }
        };
        if let Some(t) = &target {
            let opts = WarmOptions {
                move_opts: MoveOptions {
                    range: a.sel.range,
                    ..Default::default()
                },
                ..Default::default()
            };
            match warm_opened(&f, t, opts) {
                Ok(r) if !r.target_reached => warnln!(
                    "warning: {}: {} of {} pages on node {} before locking",
                    quote(&f.path),
                    r.on_target_pages,
                    r.pages,
                    a.node.unwrap_or(0)
                ),
                Ok(_) => {}
                Err(e) => {
                    report_error(&e, a.json);
                    errors.push(e.to_string());
                    continue;
                }
            }
        }
        match map_and_lock(&f, a.sel.range, a.lock_all) {
            Ok(Some((m, l))) => {
                maps.push(m);
                locked.push(l);
            }
            Ok(None) => {}
            Err(e) => {
                warnln!("{e:#}");
                errors.push(format!("{e:#}"));
            }
        }
    }
    if errors.is_empty() && a.lock_all && !maps.is_empty() {
        // SAFETY: locks every current mapping of this process.
        if unsafe { libc::mlockall(libc::MCL_CURRENT) } != 0 {
            let e = std::io::Error::last_os_error();
            let msg = format!("mlockall failed: {e}{}", mlock_hint(&e));
            warnln!("{msg}");
            errors.push(msg);
        }
    }
    if batch_failed.get() {
        errors.push("the --batch list could not be read".into());
    }
    if !errors.is_empty() {
        anyhow::bail!("{} error(s): nothing stays locked", errors.len());
    }
    let mut total = Total::default();
    for l in &locked {
        total.files += 1;
        total.pages += l.pages;
        total.bytes += l.bytes;
    }
    match doc.as_mut() {
        Some(d) => {
            for l in &locked {
                d.file(&mut out, l)?;
            }
        }
        None => {
            out.push(&format!(
                "locked {} file(s), {} pages ({}){}; pid {}; SIGTERM unlocks\n",
                total.files,
                total.pages,
                human_bytes(total.bytes),
                a.node.map_or(String::new(), |n| format!(" on node {n}")),
                std::process::id()
            ))?;
        }
    }
    match doc {
        Some(d) => d.end(
            &mut out,
            &Rest {
                total,
                pid: std::process::id(),
                errors: Vec::new(),
            },
        )?,
        None => out.flush()?,
    }
    Ok(maps)
}
