//! Residency without scanning: the daemon answers "on which nodes are this file's cached
//! pages?" from the eBPF collector's per-file counts, for `numaio where --source`.
//!
//! The collector counts, per file and node, the pages inserted into and removed from the
//! page cache and migrated between nodes, from the moment it attached. Pages cached before
//! then are unknown to it, so the first question about a file is answered by scanning it
//! once (mincore and the page's node, as `numaio where` does), and the scan is kept as the
//! file's *baseline* together with the counts at that moment; later answers are the
//! baseline plus what was counted since, without scanning again.
//!
//! A baseline is taken only when the file's counts are the same just before and just after
//! the scan (no page of it came, went or moved meanwhile; else up to [`BASELINE_TRIES`]
//! tries). An answer that would go below zero on some node means an event was missed: the
//! baseline is dropped and taken again. Files whose page cache the kernel fills without
//! the insert tracepoint (tmpfs, hugetlbfs), or whose pages belong to another inode than
//! the one `stat` shows (overlayfs, btrfs subvolumes), are never answered from the counts.
//!
//! The daemon serves this on a Unix socket ([`serve`]), not on its HTTP metrics endpoint:
//! which pages of which file are cached is what the kernel hides from unprivileged users
//! (mincore answers only the file's owner or writers), and the daemon would open any path
//! as root. The socket is created mode 0600 and every peer's credentials are checked (root
//! or the daemon's own user), which a loopback TCP port cannot do.

use numaio_bpf::{CacheReader, NetPages, NODE_UNKNOWN};
use numaio_pagecache::{open_regular, residency_of, FileResidency, OpenFile, WhereOptions};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Where the daemon listens and `numaio where` asks, unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/numaio/residency.sock";

/// Scans tried for a file's baseline before it is answered by a plain scan.
pub const BASELINE_TRIES: usize = 3;

/// Files asked about in one request, at most.
pub const MAX_FILES_PER_REQUEST: usize = 4096;

/// Baselines kept; beyond this the oldest-asked files are scanned again when next asked.
pub const MAX_BASELINES: usize = 1 << 18;

const MAX_REQUEST_BYTES: u64 = 4 << 20;

/// Connections answered at once; beyond it a client is told the daemon is busy. Each holds
/// a thread and, while a baseline is scanned, an open file.
pub const MAX_CONNECTIONS: usize = 16;

/// How long a connection may take to send its request, and the client to take the answer.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Per-node resident pages, as `numaio where` reports them.
pub type NodePages = BTreeMap<u32, u64>;

/// A file's scanned residency and the collector's counts at the moment of the scan.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    pub scanned: NodePages,
    /// Resident pages whose node the scan could not read.
    pub unknown: u64,
    pub counted: NetPages,
    /// When the scan was taken (seconds since the epoch).
    pub at: f64,
    /// When the scan was taken on the collector's clock ([`numaio_bpf::collector::clock_ns`]),
    /// with the file open (its inode alive).
    pub taken_ns: u64,
    /// Order of last use, for bounding the table.
    used: u64,
}

impl Baseline {
    pub fn new(scanned: NodePages, unknown: u64, counted: NetPages, at: f64) -> Baseline {
        Baseline {
            scanned,
            unknown,
            counted,
            at,
            taken_ns: 0,
            used: 0,
        }
    }

    /// The baseline, taken at `ns` on the collector's clock.
    pub fn taken_at(mut self, ns: u64) -> Baseline {
        self.taken_ns = ns;
        self
    }

    /// Whether the file's inode died after this baseline was taken (the collector freed its
    /// counters at `freed_at`): the baseline and the counted changes are then of another
    /// inode than the one of that number now, and must not be combined. The daemon holds
    /// the file open while it scans, so no freeing happens between the scan and `taken_ns`.
    pub fn outlived_by(&self, freed_at: Option<u64>) -> bool {
        freed_at.is_some_and(|t| t > self.taken_ns)
    }

    /// The residency now, given the counts now: baseline + (now − counted) per node, pages of
    /// an undecodable node with the unknown ones. `None` when a node would go below zero (an
    /// event was missed, or the baseline is of another file that had the same inode).
    pub fn answer(&self, now: &NetPages) -> Option<(NodePages, u64)> {
        let mut signed: BTreeMap<u32, i128> = self
            .scanned
            .iter()
            .map(|(&n, &p)| (n, i128::from(p)))
            .collect();
        signed.insert(NODE_UNKNOWN, i128::from(self.unknown));
        let nodes: std::collections::BTreeSet<u32> =
            now.keys().chain(self.counted.keys()).copied().collect();
        for n in nodes {
            let d = i128::from(now.get(&n).copied().unwrap_or(0))
                - i128::from(self.counted.get(&n).copied().unwrap_or(0));
            *signed.entry(n).or_default() += d;
        }
        let mut out = NodePages::new();
        let mut unknown = 0;
        for (n, p) in signed {
            let p = u64::try_from(p).ok()?;
            if n == NODE_UNKNOWN {
                unknown = p;
            } else if p > 0 {
                out.insert(n, p);
            }
        }
        Some((out, unknown))
    }
}

/// One file asked about: its path and the identity the asker saw, so that a daemon in
/// another mount namespace does not answer for another file at that path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileQuery {
    pub path: String,
    pub dev: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Request {
    files: Vec<FileQuery>,
}

/// The collector's answer for one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counted {
    pub size_bytes: u64,
    pub nodes: NodePages,
    pub unknown_node_pages: u64,
    /// When the baseline this answer builds on was scanned (seconds since the epoch).
    pub baseline_at: f64,
    /// Whether this very question took the baseline (the answer is a fresh scan).
    pub baseline_new: bool,
}

/// The answer for one file: counted, or why it must be scanned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileAnswer {
    Counted(Counted),
    Scan(String),
}

/// The daemon's answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Why the collector answers nothing (not running, residency not kept on this kernel,
    /// events lost); then `files` is empty.
    pub unavailable: Option<String>,
    pub files: Vec<FileAnswer>,
}

/// Baselines by `(dev, ino)`, and a clock of questions for dropping the least recently
/// asked.
type Baselines = (HashMap<(u64, u64), Baseline>, u64);

/// The daemon's side: the collector's counts and the baselines taken so far.
#[derive(Debug)]
pub struct Book {
    reader: Result<CacheReader, String>,
    baselines: Mutex<Baselines>,
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// File systems whose residency the counts cannot give, with the reason.
fn uncounted_fs(magic: i64) -> Option<&'static str> {
    Some(match magic {
        0x0102_1994 => "tmpfs pages enter the page cache without the insert tracepoint",
        0x9584_58f6 => "hugetlbfs pages enter the page cache without the insert tracepoint",
        0x794c_7630 => "overlayfs caches pages under the underlying file's inode",
        0x9123_683e => "btrfs subvolumes show another device than the one pages are counted under",
        _ => return None,
    })
}

fn fs_magic(f: &std::fs::File) -> std::io::Result<i64> {
    use std::os::fd::AsRawFd;
    // SAFETY: fstatfs writes into the zeroed struct we own; the descriptor is open.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as i64)
}

impl Book {
    /// Answers from `reader`, or says `why_not` to every question.
    pub fn new(reader: Result<CacheReader, String>) -> Book {
        Book {
            reader,
            baselines: Mutex::new((HashMap::new(), 0)),
        }
    }

    /// Answers a request.
    pub fn respond(&self, files: &[FileQuery]) -> Response {
        let reader = match &self.reader {
            Ok(r) => r,
            Err(why) => return unavailable(why.clone()),
        };
        if let Err(e) = reader.residency_ready() {
            return unavailable(e.reason);
        }
        let mut out = Vec::with_capacity(files.len());
        for q in files {
            match self.file(reader, q) {
                Ok(a) => out.push(a),
                // The collector itself failed: nothing more is answered from it.
                Err(Fatal(why)) => return unavailable(why),
            }
        }
        Response {
            unavailable: None,
            files: out,
        }
    }

    fn file(&self, reader: &CacheReader, q: &FileQuery) -> Result<FileAnswer, Fatal> {
        let scan = |why: String| Ok(FileAnswer::Scan(why));
        let path = Path::new(&q.path);
        let f = match open_regular(path) {
            Ok(f) => f,
            Err(e) => return scan(format!("the daemon cannot open it: {e}")),
        };
        if (f.meta.dev(), f.meta.ino()) != (q.dev, q.ino) {
            return scan(format!(
                "the daemon sees another file at {} (another mount namespace?)",
                q.path
            ));
        }
        match fs_magic(&f.file) {
            Ok(m) => {
                if let Some(why) = uncounted_fs(m) {
                    return scan(why.to_string());
                }
            }
            Err(e) => return scan(format!("fstatfs {}: {e}", q.path)),
        }
        let key = (q.dev, q.ino);
        let counts = |r: &CacheReader| r.net_pages(q.dev, q.ino).map_err(|e| Fatal(e.reason));
        {
            // Under the lock: `prune` takes the collector's records of freed counters and
            // drops the baselines they outlive in one step, so a baseline seen here either
            // has no such record taken yet or is still checked against it.
            let mut g = self.lock();
            let freed = match g.0.get(&key) {
                Some(_) => reader.freed_at(q.dev, q.ino).map_err(|e| Fatal(e.reason))?,
                None => None,
            };
            if let Some(b) = g.0.get(&key) {
                if b.outlived_by(freed) {
                    g.0.remove(&key);
                } else if let Some((nodes, unknown)) = b.answer(&counts(reader)?) {
                    let at = b.at;
                    g.1 += 1;
                    let t = g.1;
                    if let Some(b) = g.0.get_mut(&key) {
                        b.used = t;
                    }
                    return Ok(FileAnswer::Counted(Counted {
                        size_bytes: f.size,
                        nodes,
                        unknown_node_pages: unknown,
                        baseline_at: at,
                        baseline_new: false,
                    }));
                }
            }
        }
        for _ in 0..BASELINE_TRIES {
            let before = counts(reader)?;
            let r = match residency_of(&f, &WhereOptions::default()) {
                Ok(r) => r,
                Err(e) => return scan(format!("the daemon's baseline scan failed: {e}")),
            };
            let after = counts(reader)?;
            if before != after || r.read_in_during_query > 0 {
                continue;
            }
            let b = Baseline::new(r.nodes.clone(), r.unknown_node_pages, after, now_unix())
                .taken_at(numaio_bpf::collector::clock_ns());
            let a = Counted {
                size_bytes: f.size,
                nodes: r.nodes,
                unknown_node_pages: r.unknown_node_pages,
                baseline_at: b.at,
                baseline_new: true,
            };
            self.keep(key, b);
            return Ok(FileAnswer::Counted(a));
        }
        self.lock().0.remove(&key);
        scan(format!(
            "its page cache changed during each of {BASELINE_TRIES} baseline scans"
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Baselines> {
        self.baselines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the collector's records of counters it freed (inodes the kernel destroyed) and
    /// drops the baselines they outlive; returns how many. Until the records are taken the
    /// collector's record table fills and it frees no more counters, so this runs
    /// periodically ([`serve`]).
    pub fn prune(&self) -> Result<usize, String> {
        let Ok(reader) = &self.reader else {
            return Ok(0);
        };
        let mut g = self.lock();
        let freed = reader.take_freed().map_err(|e| e.reason)?;
        Ok(drop_outlived(&mut g.0, &freed))
    }

    fn keep(&self, key: (u64, u64), mut b: Baseline) {
        let mut g = self.lock();
        if g.0.len() >= MAX_BASELINES && !g.0.contains_key(&key) {
            // Drop the least recently asked eighth in one go, so this stays rare.
            let mut ages: Vec<u64> = g.0.values().map(|b| b.used).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 8];
            g.0.retain(|_, b| b.used > cut);
        }
        g.1 += 1;
        b.used = g.1;
        g.0.insert(key, b);
    }

    /// How many files have a baseline.
    pub fn baselines(&self) -> usize {
        self.lock().0.len()
    }
}

/// Drops the baselines that the freeings `(dev, ino, when)` outlive; returns how many.
fn drop_outlived(
    baselines: &mut HashMap<(u64, u64), Baseline>,
    freed: &[(u64, u64, u64)],
) -> usize {
    let mut n = 0;
    for &(dev, ino, at) in freed {
        if baselines
            .get(&(dev, ino))
            .is_some_and(|b| b.outlived_by(Some(at)))
        {
            baselines.remove(&(dev, ino));
            n += 1;
        }
    }
    n
}

/// How often [`serve`] takes the collector's records of freed counters.
const PRUNE_EVERY: Duration = Duration::from_secs(5);

struct Fatal(String);

fn unavailable(why: String) -> Response {
    Response {
        unavailable: Some(why),
        files: Vec::new(),
    }
}

/// The uid of the process at the other end of `s`.
fn peer_uid(s: &UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    // SAFETY: getsockopt writes at most `len` bytes into the zeroed ucred we own.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Creates the socket at `path` (its directory too, mode 0755, if missing), mode 0600. A
/// socket left by an earlier daemon is replaced; any other file there is an error.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    let err = |what: &str, e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| err("cannot create the directory of", e))?;
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!(
                        "another daemon already answers on {}; stop it or give another \
                         --residency-socket",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path).map_err(|e| err("cannot remove the stale socket", e))?;
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; remove it or give another \
                     --residency-socket",
                    path.display()
                ),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("cannot stat", e)),
    }
    let l = UnixListener::bind(path).map_err(|e| err("cannot listen on", e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| err("cannot restrict the permissions of", e))?;
    Ok(l)
}

/// Answers requests on `listener` until the process ends: each connection on a thread of
/// its own, at most [`MAX_CONNECTIONS`] at once (a slow or stuck client holds only its own;
/// each is bounded by [`CONNECTION_TIMEOUT`] and in size).
pub fn serve(listener: UnixListener, book: std::sync::Arc<Book>) -> std::io::Result<()> {
    let pruned = book.clone();
    std::thread::Builder::new()
        .name("numaio-residency-prune".into())
        .spawn(move || loop {
            std::thread::sleep(PRUNE_EVERY);
            match pruned.prune() {
                Ok(0) => {}
                Ok(n) => tracing::debug!("residency: {n} baseline(s) of destroyed inodes dropped"),
                Err(e) => tracing::warn!("residency: taking the collector's freed records: {e}"),
            }
        })?;
    serve_bounded(listener, book, MAX_CONNECTIONS, CONNECTION_TIMEOUT).map(|_| ())
}

/// Releases a connection's place when its thread ends, however it ends.
struct Slot(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Returns the number of connections being answered, for tests.
fn serve_bounded(
    listener: UnixListener,
    book: std::sync::Arc<Book>,
    max: usize,
    timeout: Duration,
) -> std::io::Result<std::sync::Arc<std::sync::atomic::AtomicUsize>> {
    use std::sync::atomic::Ordering;
    let active = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let answering = active.clone();
    std::thread::Builder::new()
        .name("numaio-residency".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let s = match conn {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("residency socket: accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                };
                if active.fetch_add(1, Ordering::AcqRel) >= max {
                    let _slot = Slot(active.clone());
                    // Said without reading the request, within a short bound: the accept
                    // loop must not wait on this client either.
                    let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
                    let r = unavailable(format!(
                        "the daemon is answering {max} other connections; try again"
                    ));
                    let _ = writeln!(&s, "{}", serde_json::to_string(&r).unwrap_or_default());
                    continue;
                }
                let slot = Slot(active.clone());
                let book = book.clone();
                let spawned = std::thread::Builder::new()
                    .name("numaio-residency-conn".into())
                    .spawn(move || {
                        let _slot = slot;
                        if let Err(e) = serve_one(s, &book, timeout) {
                            tracing::debug!("residency query: {e}");
                        }
                    });
                if let Err(e) = spawned {
                    // The closure (and its slot) is dropped with the error.
                    tracing::warn!("residency socket: cannot start a thread for a query: {e}");
                }
            }
        })
        .map(|_| answering)
}

fn serve_one(s: UnixStream, book: &Book, timeout: Duration) -> std::io::Result<()> {
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let peer = peer_uid(&s)?;
    let mut w = &s;
    if peer != 0 && peer != me {
        let r = unavailable(format!(
            "uid {peer} may not ask: residency is answered to root and uid {me} only"
        ));
        return writeln!(w, "{}", serde_json::to_string(&r).unwrap_or_default());
    }
    let mut line = String::new();
    BufReader::new((&s).take(MAX_REQUEST_BYTES)).read_line(&mut line)?;
    let r = match serde_json::from_str::<Request>(&line) {
        Ok(req) if req.files.len() <= MAX_FILES_PER_REQUEST => book.respond(&req.files),
        Ok(req) => unavailable(format!(
            "{} files in one request; ask about at most {MAX_FILES_PER_REQUEST}",
            req.files.len()
        )),
        Err(e) => unavailable(format!("bad request: {e}")),
    };
    writeln!(w, "{}", serde_json::to_string(&r).unwrap_or_default())
}

/// Why the daemon could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no numaio daemon answers on {0}: start `numaio daemon` (as root, with the eBPF collector) or scan")]
    NotRunning(PathBuf),
    #[error("asking the numaio daemon on {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("the numaio daemon on {0} answered something unreadable: {1}")]
    Protocol(PathBuf, String),
}

/// Asks the daemon listening on `socket` about `files` (at most
/// [`MAX_FILES_PER_REQUEST`]); `timeout` bounds each read and write (a baseline scan of a
/// large file takes as long as scanning it).
pub fn query(
    socket: &Path,
    files: &[FileQuery],
    timeout: Duration,
) -> Result<Response, ClientError> {
    let io = |e: std::io::Error| ClientError::Io(socket.into(), e);
    let s = UnixStream::connect(socket).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            ClientError::NotRunning(socket.into())
        }
        _ => io(e),
    })?;
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    let req = serde_json::to_string(&Request {
        files: files.to_vec(),
    })
    .map_err(|e| ClientError::Protocol(socket.into(), e.to_string()))?;
    let mut w = &s;
    match writeln!(w, "{req}") {
        Ok(()) => {}
        // A busy daemon answers without reading the request and hangs up: its answer is
        // still there to read.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) => {}
        Err(e) => return Err(io(e)),
    }
    let mut line = String::new();
    BufReader::new((&s).take(64 << 20))
        .read_line(&mut line)
        .map_err(io)?;
    let r: Response = serde_json::from_str(&line)
        .map_err(|e| ClientError::Protocol(socket.into(), e.to_string()))?;
    if r.unavailable.is_none() && r.files.len() != files.len() {
        return Err(ClientError::Protocol(
            socket.into(),
            format!("{} answers for {} files", r.files.len(), files.len()),
        ));
    }
    Ok(r)
}

/// Where an answer of `numaio where` came from (`source` in its JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The daemon's collector counts (a baseline scan once, then counted changes).
    Collector,
    /// mincore and the pages' nodes, scanned by the asker.
    Scan,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Collector => "collector",
            Source::Scan => "scan",
        }
    }
}

/// A file's residency from the collector's counts.
#[derive(Debug, Clone)]
pub struct CountedResidency {
    pub residency: FileResidency,
    /// Whether this question took the file's baseline (so the answer is a fresh scan by
    /// the daemon rather than counted changes).
    pub baseline_new: bool,
}

/// Asks the daemon on `socket` about `files`: per file, its residency from the collector's
/// counts, or why it must be scanned. The outer error says why the daemon answers nothing.
pub fn ask_daemon(
    socket: &Path,
    files: &[&OpenFile],
    timeout: Duration,
) -> Result<Vec<Result<CountedResidency, String>>, String> {
    let mut out: Vec<Option<Result<CountedResidency, String>>> = vec![None; files.len()];
    let mut asked = Vec::new();
    let mut queries = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let abs = std::fs::canonicalize(&f.path)
            .map_err(|e| format!("cannot resolve {}: {e}", f.path.display()))
            .and_then(|p| {
                p.into_os_string()
                    .into_string()
                    .map_err(|_| "its path is not UTF-8, which the daemon's protocol needs".into())
            });
        match abs {
            Ok(path) => {
                asked.push(i);
                queries.push(FileQuery {
                    path,
                    dev: f.meta.dev(),
                    ino: f.meta.ino(),
                });
            }
            Err(why) => out[i] = Some(Err(why)),
        }
    }
    for (idx, q) in asked
        .chunks(MAX_FILES_PER_REQUEST)
        .zip(queries.chunks(MAX_FILES_PER_REQUEST))
    {
        let r = query(socket, q, timeout).map_err(|e| e.to_string())?;
        if let Some(why) = r.unavailable {
            return Err(format!("the daemon's collector cannot answer: {why}"));
        }
        for (&i, a) in idx.iter().zip(r.files) {
            out[i] = Some(match a {
                FileAnswer::Counted(c) => Ok(CountedResidency {
                    residency: counted_residency(files[i], &c),
                    baseline_new: c.baseline_new,
                }),
                FileAnswer::Scan(why) => Err(why),
            });
        }
    }
    Ok(out
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err("not answered".into())))
        .collect())
}

/// A counted answer in `numaio where`'s terms, for the file as the asker opened it.
pub fn counted_residency(f: &OpenFile, c: &Counted) -> FileResidency {
    let ps = numaio_sys::page_size() as u64;
    let (first, end) = numaio_pagecache::page_span(f.size, None, ps);
    FileResidency {
        path: f.path.clone(),
        size_bytes: f.size,
        pages: end - first,
        resident_pages: c.nodes.values().sum::<u64>() + c.unknown_node_pages,
        nodes: c.nodes.clone(),
        range: None,
        page_size: ps,
        evicted_during_query: 0,
        read_in_during_query: 0,
        unknown_node_pages: c.unknown_node_pages,
        mincore_truthful: true,
        map: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(v: &[(u32, u64)]) -> NodePages {
        v.iter().copied().collect()
    }

    fn net(v: &[(u32, i64)]) -> NetPages {
        v.iter().copied().collect()
    }

    #[test]
    fn answer_is_baseline_plus_changes_since() {
        // Scanned: 10 pages on node 0, 4 on node 1, counts then 0:+3 (pages the collector saw
        // arrive before the scan, already in the scan).
        let b = Baseline::new(pages(&[(0, 10), (1, 4)]), 0, net(&[(0, 3)]), 0.0);
        // Nothing since: the scan itself.
        assert_eq!(
            b.answer(&net(&[(0, 3)])),
            Some((pages(&[(0, 10), (1, 4)]), 0))
        );
        // 6 pages moved 0 -> 1, 2 evicted from node 1, 5 read in on node 2.
        let now = net(&[(0, 3 - 6), (1, 6 - 2), (2, 5)]);
        assert_eq!(b.answer(&now), Some((pages(&[(0, 4), (1, 8), (2, 5)]), 0)));
        // Everything evicted: the nodes drop out.
        let gone = net(&[(0, 3 - 10), (1, -4)]);
        assert_eq!(b.answer(&gone), Some((NodePages::new(), 0)));
    }

    #[test]
    fn an_answer_below_zero_means_a_missed_event() {
        let b = Baseline::new(pages(&[(0, 2)]), 0, NetPages::new(), 0.0);
        assert_eq!(b.answer(&net(&[(0, -3)])), None);
        // Pages of an undecodable node join the unknown ones, and may not go negative either.
        let b = Baseline::new(pages(&[(0, 2)]), 1, NetPages::new(), 0.0);
        assert_eq!(
            b.answer(&net(&[(NODE_UNKNOWN, 2)])),
            Some((pages(&[(0, 2)]), 3))
        );
        assert_eq!(b.answer(&net(&[(NODE_UNKNOWN, -2)])), None);
    }

    #[test]
    fn extreme_counts_do_not_overflow() {
        let b = Baseline::new(pages(&[(0, u64::MAX)]), 0, net(&[(0, i64::MIN)]), 0.0);
        assert_eq!(b.answer(&net(&[(0, i64::MAX)])), None);
        let b = Baseline::new(pages(&[(0, 1)]), 0, net(&[(0, i64::MAX)]), 0.0);
        assert_eq!(
            b.answer(&net(&[(0, i64::MAX)])),
            Some((pages(&[(0, 1)]), 0))
        );
    }

    #[test]
    fn without_a_collector_every_question_gets_the_reason() {
        let book = Book::new(Err("the eBPF collector was not asked for".into()));
        let q = FileQuery {
            path: "/etc/hostname".into(),
            dev: 1,
            ino: 2,
        };
        let r = book.respond(&[q]);
        assert_eq!(
            r.unavailable.as_deref(),
            Some("the eBPF collector was not asked for")
        );
        assert!(r.files.is_empty());
    }

    /// A file deleted after its baseline, its inode destroyed (the collector frees its
    /// counters) and the number reused by a new file: combining the old baseline with the
    /// new counts would be wrong, and is refused; an older freeing (of an inode before the
    /// baseline's) is not.
    #[test]
    fn a_baseline_outlived_by_its_inode_is_dropped() {
        let b = Baseline::new(pages(&[(0, 100)]), 0, NetPages::new(), 0.0).taken_at(1_000);
        // The new file's 30 pages on node 0, counted from zero after the freeing.
        let new_counts = net(&[(0, 30)]);
        // Unchecked, the arithmetic goes wrong without going negative: 100 + 30.
        assert_eq!(b.answer(&new_counts), Some((pages(&[(0, 130)]), 0)));
        assert!(b.outlived_by(Some(2_000)));
        assert!(!b.outlived_by(Some(999)));
        assert!(!b.outlived_by(None));
        let mut table = HashMap::from([((7, 11), b.clone()), ((7, 12), b.clone())]);
        let n = drop_outlived(&mut table, &[(7, 11, 2_000), (7, 12, 500), (7, 13, 2_000)]);
        assert_eq!(n, 1);
        assert!(!table.contains_key(&(7, 11)));
        assert!(table.contains_key(&(7, 12)));
        // Without freeing (the counters kept, as where the hook is missing) the old
        // arithmetic stays right: the deletion's removals bring the count back down.
        let kept = net(&[(0, -100 + 30)]);
        assert_eq!(b.answer(&kept), Some((pages(&[(0, 30)]), 0)));
    }

    #[test]
    fn a_stalled_client_does_not_hold_up_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("residency.sock");
        let book = std::sync::Arc::new(Book::new(Err("no collector here".into())));
        let active = serve_bounded(bind(&path).unwrap(), book, 2, Duration::from_secs(30)).unwrap();
        // Connects and never sends its request.
        let stalled = UnixStream::connect(&path).unwrap();
        let q = |what| {
            let t = std::time::Instant::now();
            let r = query(&path, &[], Duration::from_secs(10)).unwrap();
            (
                r.unavailable.unwrap_or_else(|| panic!("{what}: no reason")),
                t.elapsed(),
            )
        };
        let (why, took) = q("beside the stalled client");
        assert_eq!(why, "no collector here");
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
        // The answered client's place is given back after it read its answer: wait for it,
        // or the next client could find both places taken and be turned away itself.
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while active.load(std::sync::atomic::Ordering::Acquire) != 1 {
            assert!(
                std::time::Instant::now() < end,
                "the daemon holds {} connections, want only the stalled one",
                active.load(std::sync::atomic::Ordering::Acquire)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // With every place taken, a client is told so at once instead of waiting.
        let stalled2 = UnixStream::connect(&path).unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while active.load(std::sync::atomic::Ordering::Acquire) < 2 {
            assert!(
                std::time::Instant::now() < end,
                "the daemon holds {} of the 2 stalled clients",
                active.load(std::sync::atomic::Ordering::Acquire)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let (why, took) = q("with every place taken");
        assert!(why.contains("answering 2 other connections"), "{why}");
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
        // A place comes back when its client goes away.
        drop(stalled2);
        let end = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (why, _) = q("after a client left");
            if why == "no collector here" {
                break;
            }
            assert!(std::time::Instant::now() < end, "no place came back: {why}");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(stalled);
    }

    #[test]
    fn a_client_that_sends_nothing_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("residency.sock");
        let book = std::sync::Arc::new(Book::new(Err("no collector here".into())));
        serve_bounded(bind(&path).unwrap(), book, 1, Duration::from_millis(300)).unwrap();
        let mut stalled = UnixStream::connect(&path).unwrap();
        stalled
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // The daemon gives up on it after its read timeout and closes the connection.
        let mut rest = String::new();
        let t = std::time::Instant::now();
        let _ = stalled.read_to_string(&mut rest);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        // Its place is free again.
        let end = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let r = query(&path, &[], Duration::from_secs(5)).unwrap();
            if r.unavailable.as_deref() == Some("no collector here") {
                break;
            }
            assert!(std::time::Instant::now() < end, "{r:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn socket_is_private_and_answers_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/residency.sock");
        let l = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A second daemon does not steal a live socket.
        let e = bind(&path).unwrap_err();
        assert!(e.to_string().contains("already answers"), "{e}");
        let book = std::sync::Arc::new(Book::new(Err("no collector here".into())));
        serve(l, book).unwrap();
        let q = FileQuery {
            path: "/x".into(),
            dev: 0,
            ino: 0,
        };
        let r = query(&path, &[q], Duration::from_secs(5)).unwrap();
        assert_eq!(r.unavailable.as_deref(), Some("no collector here"));
        // Nobody there: said as such, so `--source auto` scans.
        let none = dir.path().join("none.sock");
        assert!(matches!(
            query(&none, &[], Duration::from_secs(1)),
            Err(ClientError::NotRunning(_))
        ));
        // A file that is not a socket is not replaced.
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "x").unwrap();
        let e = bind(&plain).unwrap_err();
        assert!(e.to_string().contains("is not a socket"), "{e}");
        assert_eq!(std::fs::read(&plain).unwrap(), b"x");
    }
}
