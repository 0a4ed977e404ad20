//! Processes in another mount namespace (a container, a service with PrivateTmp=): `ps`
//! reports the file the process holds, not the file its path names in our namespace, and
//! marks it; the page-cache operations the daemon uses reach that same file through /proc.
//!
//! The child runs under `unshare -m` with a tmpfs over a directory that also exists here,
//! holding open a file whose path exists here too, with another size and inode.

mod common;
use common::*;
use numaio_proc::{CacheOps, FileRef, PageCache};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What the namespace tests need besides root.
const MOUNT_NS: &str = "mount-namespace";

const CHILD_BYTES: u64 = 3 * 4096;

struct NsChild {
    child: Child,
    pid: i32,
    ino: u64,
}

impl Drop for NsChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the child: a private mount namespace, a tmpfs on `dir`, a file `dir/x` of
/// [`CHILD_BYTES`] held open as fd 3 by `sleep`. `Err` says why it could not start.
fn spawn_child(dir: &std::path::Path) -> Result<NsChild, String> {
    let d = dir.to_str().unwrap();
    let script = format!(
        "mount -t tmpfs -o size=1m numaio-ns-test '{d}' || exit 9; \
         head -c {CHILD_BYTES} /dev/zero > '{d}/x' || exit 9; \
         stat -c %i '{d}/x'; exec 3<'{d}/x'; echo ready; exec sleep 60"
    );
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    let pid = child.id() as i32;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ino = lines
        .next()
        .and_then(|l| l.ok())
        .and_then(|l| l.trim().parse().ok());
    let ready = lines.next().and_then(|l| l.ok());
    match (ino, ready.as_deref()) {
        (Some(ino), Some("ready")) => Ok(NsChild { child, pid, ino }),
        _ => {
            let _ = child.kill();
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            Err(format!(
                "unshare -m failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// The child's fd 3 points at its tmpfs file once `sleep` has replaced the shell.
fn wait_for_sleep(pid: i32) {
    for _ in 0..200 {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "sleep" {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("pid {pid} never became sleep");
}

/// Our file at the same path: bigger, and evicted, so its residency differs too.
fn host_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("x");
    std::fs::write(&p, vec![7u8; 256 << 10]).unwrap();
    let r = run(&["evict", "--sync", p.to_str().unwrap()]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    p
}

#[test]
fn ps_reports_the_file_of_the_processs_namespace() {
    if !is_root() {
        skip(
            numaio_testkit::needs::ROOT,
            "unshare -m and mount need root",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let host = host_file(dir.path());
    let host_ino = std::fs::metadata(&host).unwrap().ino();
    let c = match spawn_child(dir.path()) {
        Ok(c) => c,
        Err(why) => {
            skip(MOUNT_NS, &why);
            return;
        }
    };
    wait_for_sleep(c.pid);
    assert_ne!(c.ino, host_ino);
    let ns_ino = std::fs::metadata(format!("/proc/{}/ns/mnt", c.pid))
        .unwrap()
        .ino();
    let pid = c.pid.to_string();

    let r = run(&["ps", &pid, "--json", "--interval", "0.1"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let j: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let p = &j["processes"][0];
    assert_eq!(p["pid"].as_i64(), Some(c.pid as i64), "{j}");
    assert_eq!(p["mount_ns"], "foreign", "{p}");
    assert_eq!(p["mount_ns_inode"].as_u64(), Some(ns_ino), "{p}");
    let files = p["files"].as_array().unwrap();
    let f = files
        .iter()
        .find(|f| f["path"] == host.to_str().unwrap())
        .unwrap_or_else(|| panic!("{} not listed: {p}", host.display()));
    // The child's file: its inode, its size, all of it resident (tmpfs); not ours (256 KiB,
    // evicted).
    assert_eq!(f["ino"].as_u64(), Some(c.ino), "{f}");
    assert_eq!(f["size_bytes"].as_u64(), Some(CHILD_BYTES), "{f}");
    assert_eq!(f["cached_bytes"].as_u64(), Some(CHILD_BYTES), "{f}");
    assert_eq!(f["mount_ns"], "foreign", "{f}");
    assert_eq!(f["mount_ns_inode"].as_u64(), Some(ns_ino), "{f}");
    assert!(f.get("error").is_none(), "{f}");
    // Its mappings (sleep's locale files, say) are resolved in its namespace as well.
    for m in files {
        assert!(m.get("error").is_none(), "{m}");
        assert_eq!(m["mount_ns"], "foreign", "{m}");
    }

    let r = run(&["ps", &pid, "--interval", "0.1"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let want = format!(
        "{} [mnt:{ns_ino}]  12.0 KiB of 12.0 KiB cached",
        host.display()
    );
    assert!(r.out().contains(&want), "want {want:?} in:\n{}", r.out());

    // What the daemon does to a pulled file goes through the same handles: the descriptor,
    // or (when it has none) the process's root.
    let cache = PageCache;
    for open in [
        format!("/proc/{pid}/fd/3"),
        format!("/proc/{pid}/root{}", host.display()),
    ] {
        let fr = FileRef {
            path: host.clone(),
            open: open.clone().into(),
        };
        let res = cache.residency(&fr).unwrap();
        assert_eq!(res.size_bytes, CHILD_BYTES, "{open}");
        assert_eq!(res.path, host);
        let node = *res.nodes.keys().next().expect("resident somewhere");
        let m = cache.move_to(&fr, node).unwrap();
        assert_eq!(
            m.moved_bytes + m.already_bytes,
            CHILD_BYTES,
            "{open}: {m:?}"
        );
        cache.warm(&fr, node).unwrap();
    }
    // Our own file at that path was never read in.
    let r = run(&["where", "--json", host.to_str().unwrap()]);
    let w: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(w["files"][0]["resident_pages"].as_u64(), Some(0), "{w}");
    assert_eq!(w["files"][0]["size_bytes"].as_u64(), Some(256 << 10), "{w}");
}

/// A process of our own namespace is marked `own` and keeps its plain path.
#[test]
fn own_namespace_is_not_marked() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("mine");
    std::fs::write(&p, vec![1u8; 8192]).unwrap();
    let mut child = Command::new("sh")
        .args(["-c", "exec 3<\"$0\"; exec sleep 60"])
        .arg(&p)
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    wait_for_sleep(pid);
    let r = run(&["ps", &pid.to_string(), "--json", "--interval", "0.1"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let j: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let proc0 = &j["processes"][0];
    assert_eq!(proc0["mount_ns"], "own", "{proc0}");
    let canon = p.canonicalize().unwrap();
    let f = proc0["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == canon.to_str().unwrap())
        .unwrap_or_else(|| panic!("not listed: {proc0}"));
    assert_eq!(f["mount_ns"], "own");
    assert!(f.get("mount_ns_inode").is_none(), "{f}");
    assert_eq!(
        f["ino"].as_u64(),
        Some(std::fs::metadata(&p).unwrap().ino())
    );
    assert_eq!(f["size_bytes"].as_u64(), Some(8192), "{f}");
}
