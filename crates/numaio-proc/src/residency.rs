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
            used: 0,
        }
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
        let known = self.lock().0.get(&key).cloned();
        if let Some(b) = known {
            if let Some((nodes, unknown)) = b.answer(&counts(reader)?) {
                self.touch(key);
                return Ok(FileAnswer::Counted(Counted {
                    size_bytes: f.size,
                    nodes,
                    unknown_node_pages: unknown,
                    baseline_at: b.at,
                    baseline_new: false,
                }));
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
            let b = Baseline::new(r.nodes.clone(), r.unknown_node_pages, after, now_unix());
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

    fn touch(&self, key: (u64, u64)) {
        let mut g = self.lock();
        g.1 += 1;
        let t = g.1;
        if let Some(b) = g.0.get_mut(&key) {
            b.used = t;
        }
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

/// Answers requests on `listener` on a thread of its own, one connection at a time (each
/// bounded in time and size), until the process ends.
pub fn serve(listener: UnixListener, book: std::sync::Arc<Book>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("numaio-residency".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(s) => {
                        if let Err(e) = serve_one(s, &book) {
                            tracing::debug!("residency query: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("residency socket: accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
        .map(|_| ())
}

fn serve_one(s: UnixStream, book: &Book) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
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
    writeln!(w, "{req}").map_err(io)?;
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
