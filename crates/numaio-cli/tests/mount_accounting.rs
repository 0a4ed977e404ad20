//! A mount's per-process, per-node accounting and its exposure: `numaio fs stat MOUNTPOINT`
//! (JSON, human, `--pid`), `numaio ps` counting the interval's bytes exactly, the hidden stats xattr, and
//! the serving threads bound to their nodes (needs root and /dev/fuse; skips visibly).

mod common;

use common::mount::{can_mount, numaio_out, ok, Unmount, Volume};
use std::ffi::{CString, OsStr};
use std::io::{BufRead, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

fn numaio(args: &[&OsStr]) -> Output {
    numaio_out(args)
}

/// A mounted volume (see [`Volume`]) and its server's pid; unmounted on drop.
struct Mount {
    vol: Volume,
    mnt: PathBuf,
    pid: i32,
}

impl Mount {
    fn new(extra: &[&str]) -> Mount {
        let vol = Volume::new("64M");
        let mut a = vec!["--json"];
        a.extend(extra);
        let j: serde_json::Value =
            serde_json::from_str(&ok(&vol.mount(&a), "mount")).expect("mount --json");
        Mount {
            mnt: vol.mnt.clone(),
            vol,
            pid: j["pid"].as_i64().unwrap() as i32,
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        drop(Unmount(&self.vol.mnt));
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn cpulist(s: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// CPUs of each node with CPUs, ascending by node (one node of all CPUs online without
/// NUMA information in sysfs).
fn node_cpus() -> Vec<Vec<u32>> {
    let mut nodes: Vec<(u32, Vec<u32>)> = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let n: u32 = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
                    let cpus = cpulist(&std::fs::read_to_string(e.path().join("cpulist")).ok()?);
                    (!cpus.is_empty()).then_some((n, cpus))
                })
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    if nodes.is_empty() {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
        return vec![cpulist(&online)];
    }
    nodes.into_iter().map(|(_, c)| c).collect()
}

/// (index, allowed CPUs) of the server's `fuser-<index>` threads.
fn serving_threads(pid: i32) -> Vec<(usize, Vec<u32>)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let p = e.unwrap().path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let Some(i) = comm
            .trim()
            .strip_prefix("fuser-")
            .and_then(|i| i.parse().ok())
        else {
            continue;
        };
        let status = std::fs::read_to_string(p.join("status")).unwrap_or_default();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(cpulist)
            .unwrap_or_default();
        v.push((i, cpus));
    }
    v.sort();
    v
}

fn xattr_errno(r: libc::ssize_t) -> Option<i32> {
    (r < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap())
}

#[test]
fn serving_threads_are_bound_to_their_nodes() {
    if !can_mount("serving_threads_are_bound_to_their_nodes") {
        return;
    }
    let m = Mount::new(&[]);
    let nodes = node_cpus();
    // Binding follows the mount's readiness by a moment: wait for it.
    let t = Instant::now();
    loop {
        let threads = serving_threads(m.pid);
        // The default: 8 serving threads per node.
        let want = nodes.len() * 8;
        let bound = threads.len() >= want
            && threads
                .iter()
                .all(|(i, cpus)| *cpus == nodes[i % nodes.len()]);
        if bound {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "serving threads {threads:?}, node CPUs {nodes:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn accounting_is_exact_per_process_thread_and_node() {
    if !can_mount("accounting_is_exact_per_process_thread_and_node") {
        return;
    }
    let m = Mount::new(&["--move-work", "migrate-thread"]);
    let file = m.mnt.join("data");
    let f2 = file.clone();
    // dd-like: 1 MiB in 64 KiB writes, fsync, then read back after dropping the kernel's
    // cached pages of the file (opens keep them), so the reads reach the mount.
    let tid = std::thread::spawn(move || {
        let mut f = std::fs::File::create(&f2).unwrap();
        let block = vec![0x5au8; 64 * 1024];
        for _ in 0..16 {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
        // SAFETY: fadvise on a descriptor we own; it only drops clean cached pages.
        let r = unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        assert_eq!(r, 0, "posix_fadvise DONTNEED");
        drop(f);
        let mut back = Vec::new();
        std::fs::File::open(&f2)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back.len(), MIB);
        assert!(back.iter().all(|&b| b == 0x5a));
        gettid()
    })
    .join()
    .unwrap();
    let me = std::process::id();

    let j: serde_json::Value = serde_json::from_str(&ok(
        &numaio(&[
            "fs".as_ref(),
            "stat".as_ref(),
            m.mnt.as_os_str(),
            "--json".as_ref(),
        ]),
        "fs stat --json",
    ))
    .unwrap();
    // The default (auto) serves over io_uring where the kernel has it enabled.
    assert!(
        matches!(j["fuse_mode"].as_str(), Some("classic" | "io_uring")),
        "{}",
        j["fuse_mode"]
    );
    assert_eq!(
        Path::new(j["mountpoint"].as_str().unwrap()),
        std::fs::canonicalize(&m.mnt).unwrap()
    );
    let n0 = j["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == 0)
        .expect("node 0 listed");
    assert_eq!(n0["write_bytes"], MIB as u64, "{j}");
    assert_eq!(n0["read_bytes"], MIB as u64, "{j}");
    assert!(n0["used_bytes"].as_u64().unwrap() >= MIB as u64, "{j}");
    for k in [
        "capacity_bytes",
        "free_bytes",
        "cache_bytes",
        "misplaced_blocks",
    ] {
        assert!(n0[k].is_u64(), "{k} in {j}");
    }
    let p = j["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == me)
        .unwrap_or_else(|| panic!("pid {me} in {j}"));
    assert_eq!(
        p["nodes"],
        serde_json::json!([{"node": 0, "read_bytes": MIB, "write_bytes": MIB,
            "local_read_bytes": MIB, "local_write_bytes": MIB}])
    );
    let t = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("tid {tid} in {p}"));
    assert_eq!(
        t["nodes"],
        serde_json::json!([{"node": 0, "read_bytes": MIB, "write_bytes": MIB,
            "local_read_bytes": MIB, "local_write_bytes": MIB}])
    );
    assert_eq!(j["moves"]["mode"], "migrate-thread");
    if node_cpus().len() == 1 {
        // One node: all data is local, nothing is due.
        assert_eq!(j["moves"]["moved"], 0);
        assert_eq!(j["moves"]["skipped"], 0);
    }

    // Tofalos's text form for one process.
    let pid = me.to_string();
    let text = ok(
        &numaio(&[
            "fs".as_ref(),
            "stat".as_ref(),
            m.mnt.as_os_str(),
            "--pid".as_ref(),
            pid.as_ref(),
        ]),
        "fs stat --pid",
    );
    assert!(
        text.contains(&format!(
            "numa0_read_bytes: {MIB}\nnuma0_write_bytes: {MIB}\n"
        )),
        "{text}"
    );
    // A pid that names no process and did no I/O here is an error, not a row of zeros.
    let r = numaio(&[
        "fs".as_ref(),
        "stat".as_ref(),
        m.mnt.as_os_str(),
        "--pid".as_ref(),
        "0".as_ref(),
    ]);
    assert_eq!(r.status.code(), Some(1), "fs stat --pid 0: {r:?}");
    assert!(String::from_utf8_lossy(&r.stderr).contains("pid 0: no such process"));
    // Human form: the node table and this process.
    let human = ok(
        &numaio(&["fs".as_ref(), "stat".as_ref(), m.mnt.as_os_str()]),
        "fs stat",
    );
    assert!(
        human.contains("misplaced") && human.contains(&pid),
        "{human}"
    );

    // numaio ps: a process using the mount gets the mount's exact counts for the interval,
    // the bytes written while ps sampled and none of those before.
    let _open = std::fs::File::open(&file).unwrap();
    // Two rounds of `ps --watch`: the first line comes after ps's first samples (/proc's and
    // the mount's), however long its start took; the write then falls in the second round.
    let mut child = std::process::Command::new(common::BIN)
        .args(["ps", &pid, "--watch", "4", "--count", "2", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("ps printed no first round").unwrap();
    serde_json::from_str::<serde_json::Value>(&first).expect("first round is JSON");
    let mut w = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    w.write_all(&vec![0xa5u8; MIB]).unwrap();
    w.sync_all().unwrap();
    drop(w);
    let second = lines.next().expect("ps printed no second round").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "ps --watch: {status}");
    let ps: serde_json::Value = serde_json::from_str(&second).unwrap();
    let v = &ps["processes"][0];
    assert_eq!(v["numa_io_exact"], true, "{v}");
    assert_eq!(v["numa_io_source"], "mount", "{v}");
    assert_eq!(v["numa_io_mount"], m.mnt.display().to_string(), "{v}");
    assert_eq!(v["numa_io"]["numa0_write_bytes"], MIB as u64, "{v}");
    assert_eq!(v["numa_io"]["numa0_read_bytes"], 0, "{v}");
    assert_eq!(ps["numa_io_source"], "mount", "{ps}");
    let ps_text = ok(
        &numaio(&[
            "ps".as_ref(),
            pid.as_ref(),
            "--interval".as_ref(),
            "0.1".as_ref(),
        ]),
        "ps",
    );
    assert!(ps_text.contains("numa_io exact"), "{ps_text}");
}

#[test]
fn stats_xattr_is_hidden_and_read_only() {
    if !can_mount("stats_xattr_is_hidden_and_read_only") {
        return;
    }
    let m = Mount::new(&[]);
    let p = CString::new(m.mnt.as_os_str().as_bytes()).unwrap();
    let name = CString::new("user.numaio.stats").unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: NUL-terminated strings and a buffer valid for its length.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(n > 0, "getxattr: {:?}", xattr_errno(n));
    let j: serde_json::Value = serde_json::from_slice(&buf[..n as usize]).unwrap();
    assert!(j["nodes"].is_array());
    // SAFETY: as above.
    let n = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0);
    assert!(
        !buf[..n as usize]
            .split(|&b| b == 0)
            .any(|x| x == b"user.numaio.stats"),
        "listed"
    );
    // SAFETY: as above.
    let r = unsafe { libc::setxattr(p.as_ptr(), name.as_ptr(), b"x".as_ptr().cast(), 1, 0) };
    assert_eq!(xattr_errno(r as libc::ssize_t), Some(libc::EPERM));
    // SAFETY: as above.
    let r = unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) };
    assert_eq!(xattr_errno(r as libc::ssize_t), Some(libc::EPERM));
    // Ordinary user xattrs of the root still work.
    let other = CString::new("user.other").unwrap();
    // SAFETY: as above.
    let r = unsafe { libc::setxattr(p.as_ptr(), other.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(r, 0);
    // A directory that is not a numaio mount is refused with its path.
    let o = numaio(&["fs".as_ref(), "stat".as_ref(), m.vol.dir.path().as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not the root of a running numaio mount"),
        "{err}"
    );
}
