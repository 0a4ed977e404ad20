//! Parsers and readers for the `/proc/PID/...` files numaio looks at.
//!
//! Parsers are pure functions over text so they are tested with fixtures; the readers wrap
//! them and turn "the process is gone" (`ENOENT`/`ESRCH`) into [`ProcfsError::Gone`], because
//! a process may exit between any two reads and callers treat that as normal.

use crate::error::{ProcfsError, ProcfsResult};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// `PF_KTHREAD` in the `flags` field of `/proc/PID/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of `/proc/PID/stat` (or `/proc/PID/task/TID/stat`) numaio uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub comm: String,
    pub state: char,
    pub ppid: i32,
    pub flags: u64,
    /// User + system time in clock ticks.
    pub cpu_ticks: u64,
    pub num_threads: u32,
    pub start_ticks: u64,
    /// The CPU the task last ran on.
    pub processor: u32,
}

impl Stat {
    /// Kernel threads are children of kthreadd (pid 2) or carry `PF_KTHREAD`.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == 2 || self.ppid == 2
    }
}

/// Parses one `stat` line. The command name sits in parentheses and may itself contain
/// spaces and parentheses, so the fields are counted from the *last* `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_string();
    // Fields after the comm start at field 3 (state).
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let f = |n: usize| rest.get(n - 3).copied();
    let num = |n: usize| f(n).and_then(|s| s.parse::<u64>().ok());
    Some(Stat {
        pid,
        comm,
        state: f(3)?.chars().next()?,
        ppid: f(4)?.parse().ok()?,
        flags: num(9)?,
        // /proc is not trusted to stay in range: saturate rather than overflow.
        cpu_ticks: num(14)?.saturating_add(num(15)?),
        num_threads: num(20)? as u32,
        start_ticks: num(22)?,
        processor: num(39)? as u32,
    })
}

/// The fields of `/proc/PID/status` numaio uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    /// The main thread's affinity (`Cpus_allowed_list`).
    pub cpus_allowed: Vec<u32>,
    /// The nodes the process may allocate from (`Mems_allowed_list`).
    pub mems_allowed: Vec<u32>,
    pub vm_rss_bytes: u64,
    pub uid: u32,
    /// The thread group (process) id; for a thread's status, the process it belongs to.
    pub tgid: i32,
}

pub fn parse_status(text: &str) -> Status {
    let mut s = Status::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k {
            "Name" => s.name = v.to_string(),
            "Cpus_allowed_list" => {
                s.cpus_allowed = numaio_sys::cpulist::parse(v).unwrap_or_default()
            }
            "Mems_allowed_list" => {
                s.mems_allowed = numaio_sys::cpulist::parse(v).unwrap_or_default()
            }
            "VmRSS" => {
                s.vm_rss_bytes = v
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .map_or(0, |kb| kb.saturating_mul(1024))
            }
            "Tgid" => s.tgid = v.parse().unwrap_or(0),
            "Uid" => {
                s.uid = v
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            }
            _ => {}
        }
    }
    s
}

/// `/proc/PID/io`: bytes through read/write system calls (`rchar`/`wchar`, page-cache hits
/// included) and bytes that reached storage (`read_bytes`/`write_bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Io {
    pub rchar: u64,
    pub wchar: u64,
    pub syscr: u64,
    pub syscw: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

pub fn parse_io(text: &str) -> Io {
    let mut io = Io::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v: u64 = v.trim().parse().unwrap_or(0);
        match k {
            "rchar" => io.rchar = v,
            "wchar" => io.wchar = v,
            "syscr" => io.syscr = v,
            "syscw" => io.syscw = v,
            "read_bytes" => io.read_bytes = v,
            "write_bytes" => io.write_bytes = v,
            _ => {}
        }
    }
    io
}

/// Bytes of memory per node from `/proc/PID/numa_maps` (`N<node>=<pages>` tokens times the
/// mapping's `kernelpagesize_kB`).
pub fn parse_numa_maps(text: &str) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut page = 4096u64;
        let mut counts: Vec<(u32, u64)> = Vec::new();
        for tok in line.split_whitespace() {
            if let Some(kb) = tok.strip_prefix("kernelpagesize_kB=") {
                page = kb.parse::<u64>().map_or(4096, |k| k.saturating_mul(1024));
            } else if let Some(rest) = tok.strip_prefix('N') {
                if let Some((n, c)) = rest.split_once('=') {
                    if let (Ok(n), Ok(c)) = (n.parse::<u32>(), c.parse::<u64>()) {
                        counts.push((n, c));
                    }
                }
            }
        }
        for (n, c) in counts {
            let e = out.entry(n).or_insert(0u64);
            *e = e.saturating_add(c.saturating_mul(page));
        }
    }
    out
}

/// One data file mapped in `/proc/PID/maps`, by its first data mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsFile {
    /// The path as the kernel prints it for us: relative to our root, or, for a file of a
    /// mount namespace we cannot reach, relative to that namespace's root.
    pub path: PathBuf,
    /// The mapping's address range as `START-END` in hex, the name of its
    /// `/proc/PID/map_files` entry.
    pub range: String,
    pub inode: u64,
}

/// The distinct data files mapped in `/proc/PID/maps`: deleted files are skipped, and so
/// is any file with an executable mapping (program code and shared libraries are not the
/// data a process reads, and querying them all would dominate the scan). Files are told
/// apart by device and inode, not path: two namespaces may map different files under one
/// path.
pub fn parse_maps_files(text: &str) -> Vec<MapsFile> {
    use std::collections::HashSet;
    // Sets, not vectors: a process may have tens of thousands of mappings.
    let mut out: Vec<(String, MapsFile)> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut code: HashSet<String> = HashSet::new();
    for line in text.lines() {
        // address perms offset dev inode pathname (the path may contain spaces)
        let mut it = line.splitn(6, ' ');
        let range = it.next().unwrap_or("");
        let perms = it.next().unwrap_or("");
        let dev = it.nth(1).unwrap_or("");
        let inode = it.next().unwrap_or("0");
        let path = it.next().unwrap_or("").trim_start();
        let Ok(ino) = inode.parse::<u64>() else {
            continue;
        };
        if ino == 0
            || !path.starts_with('/')
            || path.ends_with(" (deleted)")
            || is_pseudo(Path::new(path))
        {
            continue;
        }
        let key = format!("{dev} {ino}");
        if perms.contains('x') {
            code.insert(key);
        } else if seen.insert(key.clone()) {
            out.push((
                key,
                MapsFile {
                    path: PathBuf::from(path),
                    range: range.to_string(),
                    inode: ino,
                },
            ));
        }
    }
    out.into_iter()
        .filter(|(k, _)| !code.contains(k))
        .map(|(_, f)| f)
        .collect()
}

/// The file offset (`pos:`) from `/proc/PID/fdinfo/FD`.
pub fn parse_fdinfo_pos(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("pos:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The access mode (`O_RDONLY`, `O_WRONLY` or `O_RDWR`) in `/proc/PID/fdinfo/FD`'s
/// `flags:` (octal).
fn parse_fdinfo_access(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .map(|f| f & libc::O_ACCMODE as u32)
}

/// Whether `/proc/PID/fdinfo/FD` says the descriptor is write-only (`flags:` is octal).
pub fn parse_fdinfo_write_only(text: &str) -> bool {
    parse_fdinfo_access(text) == Some(libc::O_WRONLY as u32)
}

/// Whether `/proc/PID/fdinfo/FD` says the descriptor may write (write-only or read-write).
pub fn parse_fdinfo_writable(text: &str) -> bool {
    matches!(parse_fdinfo_access(text), Some(m) if m == libc::O_WRONLY as u32 || m == libc::O_RDWR as u32)
}

/// The cgroup path of the process (the v2 `0::` line, else the first v1 line's path).
pub fn parse_cgroup(text: &str) -> String {
    let mut first = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(_), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" {
            return path.to_string();
        }
        first.get_or_insert_with(|| path.to_string());
    }
    first.unwrap_or_else(|| "/".into())
}

fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

/// Reads `/proc/<pid>/<name>`, mapping a vanished process to [`ProcfsError::Gone`].
pub fn read_proc(pid: i32, name: &str) -> ProcfsResult<String> {
    let path = PathBuf::from(format!("/proc/{pid}/{name}"));
    std::fs::read_to_string(&path).map_err(|e| classify(pid, path, e))
}

pub(crate) fn classify(pid: i32, path: PathBuf, e: io::Error) -> ProcfsError {
    if is_gone(&e) {
        ProcfsError::Gone { pid }
    } else if e.kind() == io::ErrorKind::PermissionDenied {
        ProcfsError::Permission { pid, path }
    } else {
        ProcfsError::Read { path, source: e }
    }
}

pub fn read_stat(pid: i32) -> ProcfsResult<Stat> {
    let text = read_proc(pid, "stat")?;
    parse_stat(&text).ok_or_else(|| ProcfsError::Parse {
        path: PathBuf::from(format!("/proc/{pid}/stat")),
        what: "unexpected format".into(),
    })
}

pub fn read_status(pid: i32) -> ProcfsResult<Status> {
    Ok(parse_status(&read_proc(pid, "status")?))
}

pub fn read_io(pid: i32) -> ProcfsResult<Io> {
    Ok(parse_io(&read_proc(pid, "io")?))
}

/// All numeric entries of `/proc` (process ids), sorted.
pub fn list_pids() -> ProcfsResult<Vec<i32>> {
    list_numeric(Path::new("/proc"), 0)
}

/// The thread ids of `pid`.
pub fn list_tids(pid: i32) -> ProcfsResult<Vec<i32>> {
    list_numeric(Path::new(&format!("/proc/{pid}/task")), pid)
}

fn list_numeric(dir: &Path, pid: i32) -> ProcfsResult<Vec<i32>> {
    let rd = std::fs::read_dir(dir).map_err(|e| classify(pid, dir.to_path_buf(), e))?;
    let mut v: Vec<i32> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// The CPU each thread of `pid` last ran on (threads that exit meanwhile are skipped).
pub fn thread_processors(pid: i32) -> ProcfsResult<Vec<(i32, u32)>> {
    let mut out = Vec::new();
    for tid in list_tids(pid)? {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) {
            if let Some(st) = parse_stat(&text) {
                out.push((tid, st.processor));
            }
        }
    }
    Ok(out)
}

/// Files of /proc and /sys look regular but have no page cache.
fn is_pseudo(p: &Path) -> bool {
    p.starts_with("/proc") || p.starts_with("/sys")
}

/// The inode of a process's mount namespace (`/proc/PID/ns/mnt`); `None` when it cannot be
/// read (another user's process without CAP_SYS_PTRACE, or the process is gone).
pub fn mount_ns(pid: i32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

/// The inode of our own mount namespace.
pub fn own_mount_ns() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/mnt").ok().map(|m| m.ino())
}

/// One regular file the process has open through a descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFd {
    pub fd: i32,
    /// The path as the kernel prints it for us (see [`MapsFile::path`]): for display only,
    /// since in another mount namespace it may name a different file or none.
    pub path: PathBuf,
    /// `/proc/PID/fd/FD`: opening it opens the process's file itself, in any namespace.
    pub handle: PathBuf,
    pub dev: u64,
    pub ino: u64,
    /// The descriptor's file offset, if readable.
    pub pos: Option<u64>,
    /// Opened write-only: its offset moves with writes, not reads.
    pub write_only: bool,
}

/// The regular files `pid` has open (sockets, pipes, devices and deleted files skipped).
pub fn open_files(pid: i32) -> ProcfsResult<Vec<OpenFd>> {
    use std::os::unix::fs::MetadataExt;
    let dir = PathBuf::from(format!("/proc/{pid}/fd"));
    let rd = std::fs::read_dir(&dir).map_err(|e| classify(pid, dir.clone(), e))?;
    let mut out = Vec::new();
    for ent in rd.filter_map(|e| e.ok()) {
        let Some(fd) = ent.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(target) = std::fs::read_link(ent.path()) else {
            continue;
        };
        if !target.is_absolute()
            || target.to_string_lossy().ends_with(" (deleted)")
            || is_pseudo(&target)
        {
            continue;
        }
        // Stat through the fd link: the open file itself, even if renamed since or in
        // another mount namespace.
        let m = match std::fs::metadata(ent.path()) {
            Ok(m) if m.is_file() => m,
            _ => continue,
        };
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
        out.push(OpenFd {
            fd,
            path: target,
            handle: ent.path(),
            dev: m.dev(),
            ino: m.ino(),
            pos: parse_fdinfo_pos(&info),
            write_only: parse_fdinfo_write_only(&info),
        });
    }
    out.sort_by_key(|f| f.fd);
    Ok(out)
}

/// The processes (pid and command name) that have the file `(dev, ino)` open for writing
/// through a descriptor, as far as this process may look (others' descriptors need root or
/// the same user). Processes that end during the scan are skipped.
pub fn writers_of(dev: u64, ino: u64) -> ProcfsResult<Vec<(i32, String)>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for pid in list_pids()? {
        let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for ent in rd.filter_map(|e| e.ok()) {
            match std::fs::metadata(ent.path()) {
                Ok(m) if m.dev() == dev && m.ino() == ino => {}
                _ => continue,
            }
            let fd = ent.file_name();
            let info =
                std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy()))
                    .unwrap_or_default();
            if parse_fdinfo_writable(&info) {
                let comm = read_proc(pid, "comm").unwrap_or_default();
                out.push((pid, comm.trim_end().to_string()));
                break;
            }
        }
    }
    Ok(out)
}

/// A file mapped by a process, with a path that opens that very file from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedFile {
    /// As the kernel prints it for us (see [`MapsFile::path`]).
    pub path: PathBuf,
    /// What to open: `/proc/PID/map_files/RANGE` where we may (CAP_SYS_ADMIN), else the
    /// path through `/proc/PID/root` (or the path itself when the process shares our mount
    /// namespace), checked to be the mapped inode.
    pub handle: Result<PathBuf, String>,
    pub dev: u64,
    pub ino: u64,
}

/// The data files mapped by `pid`. `same_ns` says whether the process shares our mount
/// namespace (`None`: unknown, treated as not).
pub fn mapped_files(pid: i32, same_ns: Option<bool>) -> ProcfsResult<Vec<MappedFile>> {
    let maps = parse_maps_files(&read_proc(pid, "maps")?);
    Ok(maps
        .into_iter()
        .map(|m| resolve_mapping(pid, m, same_ns == Some(true)))
        .collect())
}

fn resolve_mapping(pid: i32, m: MapsFile, same_ns: bool) -> MappedFile {
    use std::os::unix::fs::MetadataExt;
    let map_files = PathBuf::from(format!("/proc/{pid}/map_files/{}", m.range));
    // The path as printed is relative to our root when the file is reachable from it (the
    // same namespace), else to the process's namespace root, which `/proc/PID/root` opens.
    let by_path = if same_ns {
        m.path.clone()
    } else {
        let rel = m.path.strip_prefix("/").unwrap_or(&m.path);
        PathBuf::from(format!("/proc/{pid}/root")).join(rel)
    };
    let mut why = String::new();
    for cand in [map_files, by_path] {
        match std::fs::metadata(&cand) {
            Ok(md) if md.is_file() && md.ino() == m.inode => {
                return MappedFile {
                    path: m.path,
                    handle: Ok(cand),
                    dev: md.dev(),
                    ino: md.ino(),
                };
            }
            Ok(_) => {
                why = format!(
                    "{} is no longer the mapped file (inode {}): replaced since it was mapped",
                    cand.display(),
                    m.inode
                )
            }
            Err(e) if why.is_empty() || e.kind() != io::ErrorKind::PermissionDenied => {
                why = format!(
                    "cannot open the mapped file through {}: {e}",
                    cand.display()
                )
            }
            Err(_) => {}
        }
    }
    MappedFile {
        path: m.path,
        handle: Err(why),
        dev: 0,
        ino: m.inode,
    }
}

/// Bytes of the process's memory on each node.
pub fn memory_per_node(pid: i32) -> ProcfsResult<BTreeMap<u32, u64>> {
    Ok(parse_numa_maps(&read_proc(pid, "numa_maps")?))
}

/// The CPUs of the process's cpuset (cgroup v2 `cpuset.cpus.effective`, or v1
/// `cpuset.cpus`); `None` when it cannot be read, in which case callers use all CPUs.
pub fn cpuset_cpus(pid: i32) -> Option<Vec<u32>> {
    let rel = read_proc(pid, "cpuset").ok()?;
    let rel = rel.trim().trim_start_matches('/');
    let candidates = [
        Path::new("/sys/fs/cgroup")
            .join(rel)
            .join("cpuset.cpus.effective"),
        Path::new("/sys/fs/cgroup/cpuset")
            .join(rel)
            .join("cpuset.effective_cpus"),
        Path::new("/sys/fs/cgroup/cpuset")
            .join(rel)
            .join("cpuset.cpus"),
    ];
    for c in candidates {
        if let Ok(t) = std::fs::read_to_string(&c) {
            if let Ok(v) = numaio_sys::cpulist::parse(t.trim()) {
                if !v.is_empty() {
                    return Some(v);
                }
            }
        }
    }
    None
}

/// Per-CPU busy and total ticks from `/proc/stat` (`cpuN` lines).
pub fn parse_proc_stat_cpus(text: &str) -> BTreeMap<u32, (u64, u64)> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let mut it = rest.split_whitespace();
        let Some(Ok(cpu)) = it.next().map(|s| s.parse::<u32>()) else {
            continue;
        };
        let v: Vec<u64> = it.filter_map(|s| s.parse().ok()).collect();
        if v.len() < 4 {
            continue;
        }
        let total: u64 = v.iter().take(8).fold(0u64, |a, &x| a.saturating_add(x));
        // idle + iowait are not busy.
        let idle = v[3].saturating_add(v.get(4).copied().unwrap_or(0));
        out.insert(cpu, (total.saturating_sub(idle), total));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_comm() {
        let line = "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 3 0 555 1000 50 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 5 0 0 0 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.pid, 1234);
        assert_eq!(s.comm, "my (odd) cmd");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.cpu_ticks, 10);
        assert_eq!(s.num_threads, 3);
        assert_eq!(s.start_ticks, 555);
        assert_eq!(s.processor, 5);
        assert!(!s.is_kernel_thread());
        let k = "77 (kworker/0:1) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 0 0 0 0 0 0";
        assert!(parse_stat(k).unwrap().is_kernel_thread());
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S 1").is_none());
    }

    #[test]
    fn status_fields() {
        let t = "Name:\tcat\nTgid:\t4242\nUid:\t1000\t1000\t1000\t1000\nVmRSS:\t    2048 kB\nCpus_allowed_list:\t0-1,4\nMems_allowed_list:\t0-1\n";
        let s = parse_status(t);
        assert_eq!(s.name, "cat");
        assert_eq!(s.uid, 1000);
        assert_eq!(s.tgid, 4242);
        assert_eq!(parse_status("Tgid:\tnope\n").tgid, 0);
        assert_eq!(s.vm_rss_bytes, 2048 * 1024);
        assert_eq!(s.cpus_allowed, vec![0, 1, 4]);
        assert_eq!(s.mems_allowed, vec![0, 1]);
    }

    #[test]
    fn io_fields() {
        let io = parse_io("rchar: 100\nwchar: 5\nsyscr: 3\nsyscw: 1\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n");
        assert_eq!(io.rchar, 100);
        assert_eq!(io.wchar, 5);
        assert_eq!(io.syscr, 3);
        assert_eq!(io.read_bytes, 4096);
    }

    #[test]
    fn numa_maps_pages_times_pagesize() {
        let t = "55d0 default file=/usr/bin/cat mapped=5 N0=3 N1=2 kernelpagesize_kB=4\n\
                 7f00 default anon=10 dirty=10 N1=10 kernelpagesize_kB=4\n\
                 7e00 default huge anon=1 N0=1 kernelpagesize_kB=2048\n";
        let m = parse_numa_maps(t);
        assert_eq!(m[&0], 3 * 4096 + 2 * 1024 * 1024);
        assert_eq!(m[&1], 12 * 4096);
    }

    #[test]
    fn maps_files_distinct_and_regular() {
        let t = "55d0-55d1 r--p 00000000 08:01 131 /usr/bin/my cat\n\
                 55d1-55d2 r-xp 00001000 08:01 131 /usr/bin/my cat\n\
                 7f00-7f01 rw-p 00000000 00:00 0 \n\
                 7f01-7f02 rw-p 00000000 00:00 0 [heap]\n\
                 7f02-7f03 r--s 00000000 08:01 99 /data/f (deleted)\n\
                 7f03-7f04 r--s 00000000 08:01 98 /data/g\n\
                 7f04-7f05 r--s 00001000 08:01 98 /data/g\n";
        assert_eq!(
            parse_maps_files(t),
            vec![MapsFile {
                path: PathBuf::from("/data/g"),
                range: "7f03-7f04".into(),
                inode: 98
            }]
        );
        let t2 = "7f03-7f04 r--p 00000000 08:01 98 /data/my file\n";
        assert_eq!(parse_maps_files(t2)[0].path, PathBuf::from("/data/my file"));
        // One path, two files (two mount namespaces, or replaced): both listed.
        let t3 =
            "7f03-7f04 r--s 00000000 00:2a 5 /tmp/x\n7f05-7f06 r--s 00000000 08:01 77 /tmp/x\n";
        let v = parse_maps_files(t3);
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!((v[0].inode, v[1].inode), (5, 77));
    }

    #[test]
    fn fdinfo_and_cgroup() {
        assert_eq!(
            parse_fdinfo_pos("pos:\t8192\nflags:\t0100000\n"),
            Some(8192)
        );
        assert_eq!(parse_fdinfo_pos("flags: 0"), None);
        assert!(parse_fdinfo_write_only("pos:\t0\nflags:\t02100001\n"));
        assert!(!parse_fdinfo_write_only("pos:\t0\nflags:\t0100002\n"));
        assert!(!parse_fdinfo_write_only("pos:\t0\nflags:\t0100000\n"));
        assert!(parse_fdinfo_writable("pos:\t0\nflags:\t02100001\n"));
        assert!(parse_fdinfo_writable("pos:\t0\nflags:\t0100002\n"));
        assert!(!parse_fdinfo_writable("pos:\t0\nflags:\t0100000\n"));
        assert!(!parse_fdinfo_writable("pos:\t0\nflags:\tzz\n"));
        assert_eq!(
            parse_cgroup("0::/system.slice/x.service\n"),
            "/system.slice/x.service"
        );
        assert_eq!(parse_cgroup("4:cpuset:/a\n3:memory:/b\n"), "/a");
        assert_eq!(parse_cgroup(""), "/");
    }

    #[test]
    fn writers_of_finds_this_process_writing_a_file_and_not_reading_one() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let (w, r) = (d.path().join("w"), d.path().join("r"));
        std::fs::write(&r, b"x").unwrap();
        let _wf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&w)
            .unwrap();
        let _rf = std::fs::File::open(&r).unwrap();
        let me = std::process::id() as i32;
        let of = |p: &std::path::Path| {
            let m = std::fs::metadata(p).unwrap();
            writers_of(m.dev(), m.ino()).unwrap()
        };
        assert!(of(&w).iter().any(|(pid, _)| *pid == me));
        assert!(!of(&r).iter().any(|(pid, _)| *pid == me));
    }

    #[test]
    fn proc_stat_cpus() {
        let t = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 30 10 0 0 0 0 0\nintr 1\n";
        let m = parse_proc_stat_cpus(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[&0], (10, 50));
        assert_eq!(m[&1], (10, 50));
    }

    #[test]
    fn live_self() {
        let me = std::process::id() as i32;
        let st = read_stat(me).unwrap();
        assert_eq!(st.pid, me);
        assert!(!st.is_kernel_thread());
        assert!(!read_status(me).unwrap().cpus_allowed.is_empty());
        assert!(!thread_processors(me).unwrap().is_empty());
        let f = tempfile::NamedTempFile::new().unwrap();
        let files = open_files(me).unwrap();
        let canon = f.path().canonicalize().unwrap();
        let o = files
            .iter()
            .find(|o| o.path == canon)
            .expect("open file listed");
        let m = std::os::unix::fs::MetadataExt::ino(&f.as_file().metadata().unwrap());
        assert_eq!(o.ino, m);
        assert_eq!(o.handle, PathBuf::from(format!("/proc/{me}/fd/{}", o.fd)));
        assert_eq!(mount_ns(me), own_mount_ns());
        assert!(own_mount_ns().is_some());
        assert!(matches!(read_stat(i32::MAX), Err(ProcfsError::Gone { .. })));
    }

    /// A mapped file resolves to a handle that opens the mapped inode, by map_files or
    /// by path; a file replaced since it was mapped is never read in its place.
    #[test]
    fn mapped_file_handles() {
        use std::os::unix::fs::MetadataExt;
        let me = std::process::id() as i32;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mapped");
        std::fs::write(&p, vec![1u8; 8192]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let ino = f.metadata().unwrap().ino();
        // SAFETY: a fresh shared read-only mapping of a file we hold open; unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::unix::io::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        let canon = p.canonicalize().unwrap();
        for same in [Some(true), None] {
            let v = mapped_files(me, same).unwrap();
            let m = v.iter().find(|m| m.path == canon).expect("mapping listed");
            let h = m.handle.as_ref().expect("resolved");
            assert_eq!(m.ino, ino);
            assert_eq!(std::fs::metadata(h).unwrap().ino(), ino, "{h:?}");
            assert!(
                h.starts_with(format!("/proc/{me}/")) || *h == canon,
                "{h:?}"
            );
        }
        // Replace the file under its path: the path no longer leads to the mapped inode.
        let maps = parse_maps_files(&read_proc(me, "maps").unwrap());
        let mf = maps.into_iter().find(|m| m.path == canon).unwrap();
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, b"other").unwrap();
        let bad = MapsFile {
            range: "0-1".into(),
            ..mf
        };
        let r = resolve_mapping(me, bad, true);
        assert!(r.handle.is_err(), "{r:?}");
        assert!(r.handle.unwrap_err().contains("replaced"));
        // SAFETY: the mapping made above, not used after this.
        unsafe { libc::munmap(addr, 8192) };
    }
}
