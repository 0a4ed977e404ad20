//! Reads of a process's `/proc` files that give up after a time limit.
//!
//! A read of `/proc/PID/...` can block in the kernel for as long as the process holds some
//! of its locks (`exec_update_lock` for `stat` and `io`, `mmap_lock` for `maps` and
//! `numa_maps`, ...): a process exiting while one of its threads waits in `close` on a FUSE
//! server that does not answer holds them forever. No signal or timeout ends such a read,
//! so it runs on a reader thread and the caller waits for the answer with a deadline. Past
//! the deadline the process is reported unresponsive ([`ProcfsError::Unresponsive`]) and the
//! stuck reader is abandoned: a new thread takes its place, and further reads of that pid
//! fail at once until the stuck read returns (then its thread ends). The abandoned threads
//! are capped; beyond the cap every read fails at once ([`ProcfsError::ReadersExhausted`])
//! instead of spawning without bound. In the common case the same few threads serve every
//! read.

use crate::error::{ProcfsError, ProcfsResult};
use crate::pid as procfs;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The default limit of one read (or one process's light sample) in `numaio ps` and the
/// daemon: a healthy `/proc` read takes microseconds.
pub const DEFAULT_LIMIT: Duration = Duration::from_millis(200);
/// Readers that may be left stuck at once before every read fails fast.
pub const DEFAULT_ABANDON_CAP: usize = 16;

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const CANCELLED: u8 = 3;
const ABANDONED: u8 = 4;

type Job = Box<dyn FnOnce() + Send>;

struct Task {
    /// The pid being read (a batch sets it before each read): the one to blame if the
    /// task is given up on.
    pid: Arc<AtomicI32>,
    state: Arc<AtomicU8>,
    run: Job,
}

#[derive(Default)]
struct Pool {
    queue: VecDeque<Task>,
    /// Reader threads that serve the queue (abandoned ones not counted).
    live: usize,
    /// Threads still inside a read their caller gave up on.
    abandoned: usize,
    /// Pids with such a read, and how many.
    stuck: HashMap<i32, (usize, Instant)>,
    /// Threads started so far.
    spawned: u64,
    shutdown: bool,
}

struct Shared {
    pool: Mutex<Pool>,
    ready: Condvar,
    workers: usize,
    cap: usize,
}

/// A few reader threads and the bookkeeping of stuck ones. Dropping it lets the idle
/// threads end; stuck ones end when their read returns.
pub struct Readers {
    shared: Arc<Shared>,
}

/// What the pool is doing, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderCounts {
    pub live: usize,
    pub abandoned: usize,
    pub spawned: u64,
}

impl Readers {
    /// `workers` threads (at least one) serve reads; at most `abandon_cap` may be left stuck.
    pub fn new(workers: usize, abandon_cap: usize) -> Readers {
        Readers {
            shared: Arc::new(Shared {
                pool: Mutex::new(Pool::default()),
                ready: Condvar::new(),
                workers: workers.max(1),
                cap: abandon_cap,
            }),
        }
    }

    pub fn counts(&self) -> ReaderCounts {
        let p = lock(&self.shared.pool);
        ReaderCounts {
            live: p.live,
            abandoned: p.abandoned,
            spawned: p.spawned,
        }
    }

    /// Runs `f`, which reads `/proc/<pid>/<file>` (or several files of `pid`; `file` names
    /// the one reported), on a reader thread and waits at most `limit` for its answer.
    pub fn run<T, F>(&self, pid: i32, file: &str, limit: Duration, f: F) -> ProcfsResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let path = || PathBuf::from(format!("/proc/{pid}/{file}"));
        let (tx, rx) = sync_channel::<T>(1);
        let state = Arc::new(AtomicU8::new(QUEUED));
        {
            let mut p = lock(&self.shared.pool);
            if let Some((_, since)) = p.stuck.get(&pid) {
                return Err(ProcfsError::Unresponsive {
                    pid,
                    path: path(),
                    why: format!(
                        "an earlier read of it has been stuck for {:.1} s",
                        since.elapsed().as_secs_f64()
                    ),
                });
            }
            if p.abandoned >= self.shared.cap {
                return Err(ProcfsError::ReadersExhausted {
                    pid,
                    path: path(),
                    stuck: p.abandoned,
                });
            }
            self.fill(&mut p).map_err(|source| ProcfsError::Read {
                path: path(),
                source,
            })?;
            p.queue.push_back(Task {
                pid: Arc::new(AtomicI32::new(pid)),
                state: state.clone(),
                run: Box::new(move || {
                    let _ = tx.send(f());
                }),
            });
        }
        self.shared.ready.notify_one();
        let err = match rx.recv_timeout(limit) {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(ProcfsError::ReaderFailed { path: path() })
            }
            Err(RecvTimeoutError::Timeout) => {
                if state
                    .compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    // Never started: the readers were busy with other processes.
                    format!(
                        "no reader was free within {} ms (other reads are slow)",
                        limit.as_millis()
                    )
                } else if state
                    .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.abandon(pid, limit);
                    format!("no answer within {} ms", limit.as_millis())
                } else {
                    // It finished just now.
                    String::new()
                }
            }
        };
        // The answer may have arrived between the timeout and the state change.
        match rx.try_recv() {
            Ok(v) => Ok(v),
            Err(_) => Err(ProcfsError::Unresponsive {
                pid,
                path: path(),
                why: if err.is_empty() {
                    format!("no answer within {} ms", limit.as_millis())
                } else {
                    err
                },
            }),
        }
    }

    /// Runs `f(pid)` for each of `pids` in turn on one reader thread, so a scan pays one
    /// hand-off for many processes; answers come back in the order of `pids`. Each answer
    /// must come within `limit` of the one before: a pid whose read does not is reported
    /// unresponsive and abandoned with its thread, and the pids after it go on on another.
    pub fn run_each<T, F>(
        &self,
        pids: &[i32],
        file: &str,
        limit: Duration,
        f: F,
    ) -> Vec<ProcfsResult<T>>
    where
        T: Send + 'static,
        F: Fn(i32) -> T + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        let path = |pid: i32| PathBuf::from(format!("/proc/{pid}/{file}"));
        let mut out: Vec<Option<ProcfsResult<T>>> = (0..pids.len()).map(|_| None).collect();
        let mut todo: Vec<usize> = (0..pids.len()).collect();
        while !todo.is_empty() {
            let (tx, rx) = std::sync::mpsc::channel::<(usize, T)>();
            let state = Arc::new(AtomicU8::new(QUEUED));
            let blame = Arc::new(AtomicI32::new(0));
            let mut batch = Vec::with_capacity(todo.len());
            {
                let mut p = lock(&self.shared.pool);
                for &i in &todo {
                    let pid = pids[i];
                    if let Some((_, since)) = p.stuck.get(&pid) {
                        out[i] = Some(Err(ProcfsError::Unresponsive {
                            pid,
                            path: path(pid),
                            why: format!(
                                "an earlier read of it has been stuck for {:.1} s",
                                since.elapsed().as_secs_f64()
                            ),
                        }));
                    } else if p.abandoned >= self.shared.cap {
                        out[i] = Some(Err(ProcfsError::ReadersExhausted {
                            pid,
                            path: path(pid),
                            stuck: p.abandoned,
                        }));
                    } else {
                        batch.push(i);
                    }
                }
                if batch.is_empty() {
                    break;
                }
                if let Err(e) = self.fill(&mut p) {
                    for &i in &batch {
                        out[i] = Some(Err(ProcfsError::Read {
                            path: path(pids[i]),
                            source: std::io::Error::new(e.kind(), e.to_string()),
                        }));
                    }
                    break;
                }
                let items: Vec<(usize, i32)> = batch.iter().map(|&i| (i, pids[i])).collect();
                let (f, b) = (f.clone(), blame.clone());
                p.queue.push_back(Task {
                    pid: blame.clone(),
                    state: state.clone(),
                    run: Box::new(move || {
                        for (i, pid) in items {
                            b.store(pid, Ordering::Release);
                            // The caller gave up on this batch: stop.
                            if tx.send((i, f(pid))).is_err() {
                                return;
                            }
                        }
                    }),
                });
            }
            self.shared.ready.notify_one();
            let mut left = batch.len();
            todo = Vec::new();
            while left > 0 {
                match rx.recv_timeout(limit) {
                    Ok((i, v)) => {
                        out[i] = Some(Ok(v));
                        left -= 1;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                    Err(RecvTimeoutError::Timeout) => {
                        let why = if state
                            .compare_exchange(
                                QUEUED,
                                CANCELLED,
                                Ordering::AcqRel,
                                Ordering::Acquire,
                            )
                            .is_ok()
                        {
                            Some(format!(
                                "no reader was free within {} ms (other reads are slow)",
                                limit.as_millis()
                            ))
                        } else if state
                            .compare_exchange(
                                RUNNING,
                                ABANDONED,
                                Ordering::AcqRel,
                                Ordering::Acquire,
                            )
                            .is_ok()
                        {
                            let stuck = blame.load(Ordering::Acquire);
                            self.abandon(stuck, limit);
                            // Answers that came in meanwhile are kept; the stuck pid is
                            // reported; the rest go to the next batch.
                            while let Ok((i, v)) = rx.try_recv() {
                                out[i] = Some(Ok(v));
                            }
                            let mut blamed = false;
                            for &i in &batch {
                                if out[i].is_some() {
                                    continue;
                                }
                                if pids[i] == stuck && !blamed {
                                    blamed = true;
                                    out[i] = Some(Err(ProcfsError::Unresponsive {
                                        pid: stuck,
                                        path: path(stuck),
                                        why: format!("no answer within {} ms", limit.as_millis()),
                                    }));
                                } else {
                                    todo.push(i);
                                }
                            }
                            break;
                        } else {
                            // It finished just now: collect what is left.
                            while let Ok((i, v)) = rx.try_recv() {
                                out[i] = Some(Ok(v));
                            }
                            break;
                        };
                        for &i in &batch {
                            if out[i].is_none() {
                                out[i] = Some(Err(ProcfsError::Unresponsive {
                                    pid: pids[i],
                                    path: path(pids[i]),
                                    why: why.clone().unwrap_or_default(),
                                }));
                            }
                        }
                        break;
                    }
                }
            }
        }
        out.into_iter()
            .zip(pids)
            .map(|(o, &pid)| {
                o.unwrap_or_else(|| Err(ProcfsError::ReaderFailed { path: path(pid) }))
            })
            .collect()
    }

    /// Books a reader thread given up on while reading `pid`, and starts its replacement.
    fn abandon(&self, pid: i32, limit: Duration) {
        let mut p = lock(&self.shared.pool);
        p.live = p.live.saturating_sub(1);
        p.abandoned += 1;
        p.stuck
            .entry(pid)
            .or_insert((
                0,
                Instant::now()
                    .checked_sub(limit)
                    .unwrap_or_else(Instant::now),
            ))
            .0 += 1;
        // If the replacement cannot start, the next read reports that.
        let _ = self.fill(&mut p);
        drop(p);
        self.shared.ready.notify_one();
    }

    /// Reads `/proc/<pid>/<name>` as text.
    pub fn read(&self, pid: i32, name: &str, limit: Duration) -> ProcfsResult<String> {
        let n = name.to_string();
        self.run(pid, name, limit, move || procfs::read_proc(pid, &n))?
    }

    /// Reads and parses `/proc/<pid>/stat`.
    pub fn read_stat(&self, pid: i32, limit: Duration) -> ProcfsResult<procfs::Stat> {
        self.run(pid, "stat", limit, move || procfs::read_stat(pid))?
    }

    /// Reads and parses `/proc/<pid>/status`.
    pub fn read_status(&self, pid: i32, limit: Duration) -> ProcfsResult<procfs::Status> {
        self.run(pid, "status", limit, move || procfs::read_status(pid))?
    }

    /// Starts reader threads until `workers` serve the queue.
    fn fill(&self, p: &mut MutexGuard<'_, Pool>) -> std::io::Result<()> {
        while p.live < self.shared.workers {
            let shared = self.shared.clone();
            std::thread::Builder::new()
                .name("numaio-proc-read".into())
                .spawn(move || serve(shared))?;
            p.live += 1;
            p.spawned += 1;
        }
        Ok(())
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        lock(&self.shared.pool).shutdown = true;
        self.shared.ready.notify_all();
    }
}

/// One reader thread: runs queued reads until shut down, or until a read it ran was given
/// up on (a replacement already serves the queue).
fn serve(shared: Arc<Shared>) {
    loop {
        let task = {
            let mut p = lock(&shared.pool);
            loop {
                if let Some(t) = p.queue.pop_front() {
                    break t;
                }
                if p.shutdown {
                    p.live = p.live.saturating_sub(1);
                    return;
                }
                p = shared.ready.wait(p).unwrap_or_else(|e| e.into_inner());
            }
        };
        if task
            .state
            .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        // A panicking parser must not take the thread (and the answer) with it unnoticed:
        // the caller then sees the channel closed.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task.run));
        if task
            .state
            .compare_exchange(RUNNING, DONE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            let mut p = lock(&shared.pool);
            p.abandoned = p.abandoned.saturating_sub(1);
            let pid = task.pid.load(Ordering::Acquire);
            if let Some(e) = p.stuck.get_mut(&pid) {
                e.0 -= 1;
                if e.0 == 0 {
                    p.stuck.remove(&pid);
                }
            }
            return;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The pool's state stays consistent across a panic elsewhere: ignore the poison.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process-wide readers for one-off reads (two threads, [`DEFAULT_ABANDON_CAP`]).
pub fn global() -> &'static Readers {
    static G: OnceLock<Readers> = OnceLock::new();
    G.get_or_init(|| Readers::new(2, DEFAULT_ABANDON_CAP))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    const SLACK: Duration = Duration::from_millis(500);

    #[test]
    fn reads_equal_direct_reads_and_reuse_threads() {
        let r = Readers::new(1, 4);
        let me = std::process::id() as i32;
        for name in ["stat", "status", "cgroup", "maps"] {
            let a = r.read(me, name, Duration::from_secs(5)).unwrap();
            let b = procfs::read_proc(me, name).unwrap();
            // Counters in stat/status move between two reads; the line structure and the
            // first field do not.
            assert_eq!(a.lines().count(), b.lines().count(), "{name}");
            let first = |t: &str| t.split_whitespace().next().map(str::to_string);
            assert_eq!(first(&a), first(&b), "{name}");
        }
        let st = r.read_stat(me, Duration::from_secs(5)).unwrap();
        let direct = procfs::read_stat(me).unwrap();
        assert_eq!(
            (st.pid, st.comm.clone(), st.start_ticks),
            (direct.pid, direct.comm, direct.start_ticks)
        );
        assert_eq!(
            r.read_status(me, Duration::from_secs(5)).unwrap().tgid,
            procfs::read_status(me).unwrap().tgid
        );
        // A file that does not change reads identically.
        let a = r.read(me, "cmdline", Duration::from_secs(5)).unwrap();
        assert_eq!(a, procfs::read_proc(me, "cmdline").unwrap());
        for _ in 0..100 {
            r.read_stat(me, Duration::from_secs(5)).unwrap();
        }
        assert_eq!(
            r.counts(),
            ReaderCounts {
                live: 1,
                abandoned: 0,
                spawned: 1
            },
            "one thread serves every read"
        );
        // Errors are the direct read's errors.
        assert!(matches!(
            r.read_stat(i32::MAX, Duration::from_secs(5)),
            Err(ProcfsError::Gone { .. })
        ));
    }

    #[test]
    fn a_blocked_read_times_out_and_later_reads_work() {
        let r = Readers::new(1, 4);
        let (release, wait) = channel::<()>();
        let limit = Duration::from_millis(100);
        let t = Instant::now();
        let e = r
            .run(4242, "stat", limit, move || {
                let _ = wait.recv();
            })
            .unwrap_err();
        let took = t.elapsed();
        assert!(took >= limit && took < limit + SLACK, "{took:?}");
        assert!(e.is_unresponsive(), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("4242") && msg.contains("/proc/4242/stat"),
            "{msg}"
        );
        assert_eq!(r.counts().abandoned, 1);
        // The same pid fails at once while its read is stuck; others are served.
        let t = Instant::now();
        let e = r.read(4242, "io", limit).unwrap_err();
        assert!(e.is_unresponsive() && t.elapsed() < limit, "{e}");
        assert!(e.to_string().contains("stuck"), "{e}");
        let me = std::process::id() as i32;
        assert_eq!(r.read_stat(me, limit).unwrap().pid, me);
        assert_eq!(r.counts().live, 1);
        // Once the stuck read returns, its thread ends and the pid is readable again.
        release.send(()).unwrap();
        let t = Instant::now();
        while r.counts().abandoned > 0 {
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", r.counts());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(r.run(4242, "stat", limit, || 7).unwrap(), 7);
        assert_eq!(r.counts().spawned, 2);
    }

    /// A real blocking file read: opening a FIFO nobody writes blocks like a stuck /proc
    /// file does (and, like it, ignores timeouts).
    #[test]
    fn a_fifo_nobody_writes_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let r = Readers::new(1, 4);
        let limit = Duration::from_millis(100);
        let p = fifo.clone();
        let t = Instant::now();
        let e = r
            .run(31337, "stat", limit, move || std::fs::read_to_string(&p))
            .unwrap_err();
        assert!(e.is_unresponsive() && t.elapsed() < limit + SLACK, "{e}");
        // A writer comes: the stuck reader gets its answer and its thread ends.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        let t = Instant::now();
        while r.counts().abandoned > 0 {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
        let me = std::process::id() as i32;
        assert_eq!(r.read_stat(me, limit).unwrap().pid, me);
    }

    #[test]
    fn the_abandoned_cap_holds_then_reads_fail_fast() {
        let cap = 3;
        let r = Readers::new(1, cap);
        let limit = Duration::from_millis(50);
        let (release, wait) = channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        for pid in 0..cap as i32 {
            let w = wait.clone();
            let e = r
                .run(1000 + pid, "maps", limit, move || {
                    let _ = w.lock().unwrap().recv();
                })
                .unwrap_err();
            assert!(e.is_unresponsive(), "{e}");
        }
        assert_eq!(r.counts().abandoned, cap);
        let spawned = r.counts().spawned;
        // Every further read fails at once, naming the pid and file, and starts no thread.
        let t = Instant::now();
        for _ in 0..10 {
            let e = r.read(2000, "status", limit).unwrap_err();
            assert!(
                matches!(e, ProcfsError::ReadersExhausted { pid: 2000, .. }),
                "{e}"
            );
            assert!(e.to_string().contains("/proc/2000/status"), "{e}");
        }
        assert!(t.elapsed() < limit, "{:?}", t.elapsed());
        assert_eq!(r.counts().spawned, spawned);
        assert!(spawned <= (cap + 1) as u64, "{spawned}");
        // The stuck reads return: reads work again.
        for _ in 0..cap {
            release.send(()).unwrap();
        }
        let t = Instant::now();
        while r.counts().abandoned > 0 {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
        let me = std::process::id() as i32;
        assert_eq!(r.read_stat(me, limit).unwrap().pid, me);
    }

    /// A batch: answers in order, one thread for all; a pid that blocks mid-batch is
    /// reported, the ones after it are still read, and the batch ends within the limit.
    #[test]
    fn a_batch_reports_the_blocked_pid_and_reads_the_rest() {
        let r = Readers::new(1, 4);
        let me = std::process::id() as i32;
        let pids: Vec<i32> = vec![me; 50];
        let got = r.run_each(&pids, "stat", Duration::from_secs(5), procfs::read_stat);
        assert!(got
            .iter()
            .all(|s| s.as_ref().unwrap().as_ref().unwrap().pid == me));
        assert_eq!(r.counts().spawned, 1, "one thread, one hand-off");
        let (release, wait) = channel::<()>();
        let wait = Arc::new(Mutex::new(Some(wait)));
        let limit = Duration::from_millis(100);
        let t = Instant::now();
        let got = r.run_each(&[1, 2, 3, 4, 5], "io", limit, move |pid| {
            if pid == 3 {
                if let Some(w) = wait.lock().unwrap().take() {
                    let _ = w.recv();
                }
            }
            pid * 10
        });
        let took = t.elapsed();
        assert!(took >= limit && took < limit + SLACK, "{took:?}");
        let ok: Vec<Option<i32>> = got.iter().map(|g| g.as_ref().ok().copied()).collect();
        assert_eq!(ok, vec![Some(10), Some(20), None, Some(40), Some(50)]);
        let e = got[2].as_ref().unwrap_err();
        assert!(
            e.is_unresponsive() && e.to_string().contains("/proc/3/io"),
            "{e}"
        );
        assert_eq!(r.counts().abandoned, 1);
        // Pid 3 fails at once while stuck; the others are read.
        let t = Instant::now();
        let got = r.run_each(&[3, 4], "io", limit, |pid| pid);
        assert!(got[0].is_err() && *got[1].as_ref().unwrap() == 4);
        assert!(t.elapsed() < limit, "{:?}", t.elapsed());
        release.send(()).unwrap();
        let t = Instant::now();
        while r.counts().abandoned > 0 {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            *r.run_each(&[3], "io", limit, |pid| pid)[0]
                .as_ref()
                .unwrap(),
            3
        );
    }

    #[test]
    fn a_queued_read_behind_a_slow_one_is_not_blamed_on_its_pid() {
        // One reader, busy with a slow read whose caller waits longer: the second caller's
        // read never starts, and its pid is not marked stuck.
        let r = Arc::new(Readers::new(1, 4));
        let r2 = r.clone();
        let slow = std::thread::spawn(move || {
            r2.run(1, "stat", Duration::from_secs(5), || {
                std::thread::sleep(Duration::from_millis(300))
            })
        });
        std::thread::sleep(Duration::from_millis(50));
        let e = r
            .run(2, "stat", Duration::from_millis(50), || ())
            .unwrap_err();
        assert!(e.to_string().contains("no reader was free"), "{e}");
        slow.join().unwrap().unwrap();
        assert_eq!(r.run(2, "stat", Duration::from_secs(1), || 5).unwrap(), 5);
        assert_eq!(r.counts().abandoned, 0);
    }
}
