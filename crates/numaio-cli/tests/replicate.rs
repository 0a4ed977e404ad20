//! `numaio replicate` and `numaio run --replica` on this host (one node): a replica holds
//! the original's bytes on its node, is reused while the original is unchanged and replaced
//! when it changes, hostile input is refused and changes nothing, and inside `run
//! --replica` the path reads the replica and refuses writes (EROFS), while outside nothing
//! is mounted. Needs root (tmpfs and bind mounts); skips visibly otherwise. Each test uses
//! its own store directory and drops it at the end, mounts included.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn json(r: &Run) -> Value {
    serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", r.out(), r.stderr))
}

/// A replica store in a temp dir, dropped (and its tmpfs unmounted) when the test ends.
struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        Store {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }

    fn run(&self, args: &[&str]) -> Run {
        let mut a = args.to_vec();
        a.extend(["--dir", self.path()]);
        run(&a)
    }

    /// `numaio run -q BINDING --replica PATH` with this store, running `cmd`.
    fn run_replica(&self, binding: &[&str], path: &str, cmd: &[&str]) -> Run {
        let mut a = vec!["run", "-q"];
        a.extend(binding);
        a.extend(["--replica", path, "--replica-dir", self.path(), "--"]);
        a.extend(cmd);
        run(&a)
    }

    fn list(&self) -> Vec<Value> {
        let r = self.run(&["replicate", "--list", "--json"]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        json(&r)["replicas"].as_array().unwrap().clone()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.run(&["replicate", "--drop"]);
    }
}

fn mounted(point: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(point.to_str().unwrap()))
}

#[test]
fn replicas_are_made_reused_replaced_and_dropped() {
    if !numaio_testkit::is_root() {
        skip("root", "replicas mount a tmpfs per node");
        return;
    }
    let s = Store::new();
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("data.bin");
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&f, &bytes).unwrap();
    let fp = f.to_str().unwrap();

    let r = s.run(&["replicate", fp, "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["schema_version"], 1);
    let reps = v["replicas"].as_array().unwrap();
    assert_eq!(reps.len(), 1, "one node here: {v}");
    let rep = &reps[0];
    assert_eq!(rep["original"], fp);
    assert_eq!(rep["made"], true);
    assert_eq!(rep["fresh"], true);
    assert_eq!(rep["bytes"], bytes.len());
    assert_eq!(rep["pages_on_node"], rep["pages"]);
    let copy = PathBuf::from(rep["replica"].as_str().unwrap());
    assert_eq!(std::fs::read(&copy).unwrap(), bytes);
    assert!(copy.starts_with(s.dir.path().join("node0")));
    assert!(mounted(&s.dir.path().join("node0")));
    // Read-only, as the original's mode less write permission.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
        0o444
    );

    // Unchanged: reused. Human output names the replica.
    let r = s.run(&["replicate", fp]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.out().contains("already there"), "{}", r.out());
    assert_eq!(s.list().len(), 1);

    // Changed: the listing says stale, and the next replicate replaces it.
    std::fs::write(&f, b"new contents").unwrap();
    let l = s.list();
    assert_eq!((l.len(), &l[0]["fresh"]), (1, &Value::Bool(false)));
    let r = s.run(&["replicate", fp, "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let new = PathBuf::from(json(&r)["replicas"][0]["replica"].as_str().unwrap());
    assert_ne!(new, copy);
    assert!(!copy.exists(), "the stale copy is gone");
    assert_eq!(std::fs::read(&new).unwrap(), b"new contents");
    let l = s.list();
    assert_eq!((l.len(), &l[0]["fresh"]), (1, &Value::Bool(true)));

    // Drop by path: gone, and the node's tmpfs with it.
    let r = s.run(&["replicate", "--drop", fp, "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(json(&r)["dropped"].as_array().unwrap().len(), 1);
    assert!(s.list().is_empty());
    assert!(!mounted(&s.dir.path().join("node0")));
}

#[test]
fn hostile_input_is_refused_and_changes_nothing() {
    if !numaio_testkit::is_root() {
        skip("root", "replicas mount a tmpfs per node");
        return;
    }
    let s = Store::new();
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, vec![7u8; 64 << 10]).unwrap();
    let fifo = d.path().join("fifo");
    mkfifo(&fifo);
    let dp = d.path().to_str().unwrap();
    for (args, code, want) in [
        (vec!["replicate", dp], 1, "is a directory"),
        (vec!["replicate", fifo.to_str().unwrap()], 1, "is a FIFO"),
        (vec!["replicate", "/nonexistent/x"], 1, "no such file"),
        (
            vec!["replicate", f.to_str().unwrap(), "--nodes", "99"],
            2,
            "node 99 does not exist",
        ),
        (
            vec!["replicate", f.to_str().unwrap(), "--max-memory", "4K"],
            1,
            "replica budget",
        ),
        (vec!["replicate"], 2, "give the files to replicate"),
        (
            vec!["replicate", "--list", f.to_str().unwrap()],
            2,
            "cannot be used",
        ),
    ] {
        let r = s.run(&args);
        assert_eq!(r.code, Some(code), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
    }
    // Open for writing by someone: refused, naming the writer.
    let _w = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
    let r = s.run(&["replicate", f.to_str().unwrap()]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("open for writing by pid"), "{}", r.stderr);
    assert!(s.list().is_empty(), "nothing was made");
}

#[test]
fn run_replica_reads_the_copy_and_refuses_writes_inside_only() {
    if !numaio_testkit::is_root() {
        skip("root", "run --replica needs a mount namespace");
        return;
    }
    let s = Store::new();
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("model.bin");
    std::fs::write(&f, b"weights v1").unwrap();
    let fp = f.to_str().unwrap();
    let script = format!(
        "cat {fp}; echo; if echo x >> {fp}; then echo WROTE; else echo REFUSED; fi; \
         grep -c ' {fp} ' /proc/self/mountinfo"
    );
    let r = s.run_replica(&["--node", "0"], fp, &["sh", "-c", &script]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = r.out();
    assert!(out.starts_with("weights v1\n"), "{out}");
    assert!(out.contains("REFUSED"), "{out}");
    assert!(r.stderr.contains("Read-only file system"), "{}", r.stderr);
    assert!(out.trim_end().ends_with('1'), "the bind inside: {out}");
    // Outside: the original is untouched and nothing is mounted over it.
    assert_eq!(std::fs::read(&f).unwrap(), b"weights v1");
    assert!(!mounted(&f));
    assert_eq!(s.list().len(), 1, "made on demand");

    // The original changes: the next run reads the new version.
    std::fs::write(&f, b"weights v2").unwrap();
    let r = s.run_replica(&["--node", "0"], fp, &["cat", fp]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.out(), "weights v2");

    // A binding to no single node is a usage error, before anything is made.
    let r = s.run_replica(&["--membind", "0"], fp, &["true"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("one node"), "{}", r.stderr);
}
