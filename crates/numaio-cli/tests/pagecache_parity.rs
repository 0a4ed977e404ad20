//! vmtouch/fincore parity of the page-cache commands: walking (-r, -f, -i/-I, -m, --batch
//! with -0, hard links once), ranges, fincore-style columns, `schema_version` in every JSON
//! document, streaming output, warm's room check and default node, and `lock`.

mod common;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

fn json(r: &Run) -> Value {
    serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", r.out(), r.stderr))
}

/// A tree: a.bin (64 KiB), sub/b.txt (8 KiB), sub/deep/c.bin (16 KiB), a hard link
/// sub/a-link.bin to a.bin, and a symlink `lnk` to sub/ (followed only with -f).
fn tree() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    std::fs::create_dir_all(r.join("sub/deep")).unwrap();
    std::fs::write(r.join("a.bin"), vec![1u8; 64 << 10]).unwrap();
    std::fs::write(r.join("sub/b.txt"), vec![2u8; 8 << 10]).unwrap();
    std::fs::write(r.join("sub/deep/c.bin"), vec![3u8; 16 << 10]).unwrap();
    std::fs::hard_link(r.join("a.bin"), r.join("sub/a-link.bin")).unwrap();
    std::os::unix::fs::symlink(r.join("sub"), r.join("lnk")).unwrap();
    d
}

fn paths(v: &Value, root: &Path) -> Vec<String> {
    let mut p: Vec<String> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            Path::new(f["path"].as_str().unwrap())
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    p.sort();
    p
}

#[test]
fn where_walks_like_vmtouch_and_counts_hard_links_once() {
    let d = tree();
    let r = d.path();
    let root = r.to_str().unwrap();
    let w = run(&["where", "-r", "--json", root]);
    assert_eq!(w.code, Some(0), "{}", w.stderr);
    let v = json(&w);
    assert_eq!(v["schema_version"], 1);
    let p = paths(&v, r);
    // The hard link is one file: exactly one of its two names, and its pages once.
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p.contains(&"sub/b.txt".into()) && p.contains(&"sub/deep/c.bin".into()));
    assert_eq!(v["total"]["pages"], (64 + 8 + 16) / 4);
    // -f follows the symlink into sub/ (its files are new names, b.txt and c.bin are not
    // hard links, so they count again).
    let f = json(&run(&["where", "-r", "-f", "--json", root]));
    assert!(paths(&f, r).contains(&"lnk/deep/c.bin".into()), "{f}");
    // -I only *.bin, -i ignores the deep directory.
    let g = json(&run(&[
        "where", "-r", "-I", "*.bin", "-i", "deep", "--json", root,
    ]));
    assert_eq!(paths(&g, r).len(), 1, "{g}");
    assert!(paths(&g, r)[0].ends_with(".bin"));
    // -m skips the larger files, with a note.
    let m = run(&["where", "-r", "-m", "10K", "--json", root]);
    assert_eq!(paths(&json(&m), r), ["sub/b.txt"]);
    assert!(
        m.stderr.contains("larger than --max-file-size"),
        "{}",
        m.stderr
    );
    let bad = run(&["where", "-r", "-I", "a[", root]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("bad pattern"), "{}", bad.stderr);
}

#[test]
fn batch_lists_from_stdin_newline_and_nul() {
    let d = tree();
    let r = d.path();
    let a = r.join("a.bin");
    let c = r.join("sub/deep/c.bin");
    for (sep, extra) in [("\n", vec![]), ("\0", vec!["-0"])] {
        let mut args = vec!["evict", "--json", "-b", "-"];
        args.extend(extra.iter().copied());
        let mut child = numaio(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let list = format!("{}{sep}{}{sep}", a.display(), c.display());
        child
            .stdin
            .take()
            .unwrap()
            .write_all(list.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["files"].as_array().unwrap().len(), 2, "{v}");
    }
    let e = run(&["where", "-0", r.to_str().unwrap()]);
    assert_eq!(e.code, Some(2), "-0 needs --batch: {}", e.stderr);
}

#[test]
fn where_streams_its_first_line_before_the_list_ends() {
    let d = tree();
    let a = d.path().join("a.bin");
    let mut child = numaio(&["where", "--batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", a.display()).unwrap();
    stdin.flush().unwrap();
    // stdin stays open: numaio cannot have finished, yet the row must be there.
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut header = String::new();
        let mut row = String::new();
        r.read_line(&mut header).unwrap();
        r.read_line(&mut row).unwrap();
        let _ = tx.send((header, row));
    });
    let got = rx.recv_timeout(Duration::from_secs(20));
    drop(stdin);
    let code = wait_limited(&mut child, Duration::from_secs(20));
    let (header, row) = got.expect("no row while the list was still open: output is not streamed");
    assert!(
        header.contains("RES") && header.contains("FILE"),
        "{header}"
    );
    assert!(row.contains("a.bin"), "{row}");
    assert_eq!(code, Some(0));
}

#[test]
fn where_columns_like_fincore() {
    let d = tree();
    let a = d.path().join("a.bin");
    let a = a.to_str().unwrap();
    // Make the whole file resident (mincore sees our own read).
    let _ = std::fs::read(a).unwrap();
    let t = run(&["where", a]);
    let lines: Vec<&str> = t
        .stdout
        .split(|&b| b == b'\n')
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["RES", "PAGES", "SIZE", "NODES", "FILE"]
    );
    assert_eq!(
        lines[0].find("FILE"),
        lines[1].find(a),
        "aligned:\n{}",
        t.out()
    );
    let raw = run(&["where", "--raw", "-b", "-o", "res,pages,size,file", a]);
    assert_eq!(raw.out(), format!("65536 16 65536 {a}\n"));
    let nh = run(&["where", "-n", "-o", "PAGES,FILEPAGES,PERCENT", a]);
    assert_eq!(
        nh.out().split_whitespace().collect::<Vec<_>>(),
        ["16", "16", "100.0%"]
    );
    let bad = run(&["where", "-o", "res,nope", a]);
    assert_eq!(bad.code, Some(2));
    assert!(bad.stderr.contains("unknown column"), "{}", bad.stderr);
}

#[test]
fn ranges_and_schema_versions_of_warm_move_evict() {
    let d = tree();
    let a = d.path().join("a.bin");
    let a = a.to_str().unwrap();
    let e = json(&run(&["evict", "--sync", "--json", a]));
    assert_eq!(e["schema_version"], 1);
    // Warm 16 KiB at offset 16 KiB: exactly those 4 pages become resident.
    let w = run(&["warm", "--json", "--range", "16K:16K", a]);
    assert_eq!(w.code, Some(0), "{}", w.stderr);
    let wv = json(&w);
    assert_eq!(wv["schema_version"], 1);
    assert_eq!(wv["files"][0]["pages"], 4);
    assert_eq!(wv["files"][0]["target_reached"], true);
    let m = json(&run(&["where", "--json", "--map=4K", a]));
    let cells: Vec<u64> = m["files"][0]["map"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["resident_pages"].as_u64().unwrap())
        .collect();
    assert_eq!(cells, [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mv = run(&["move", "--json", "--to", "0", "--range", "16K:8K", a]);
    assert_eq!(mv.code, Some(0), "{}", mv.stderr);
    let mvv = json(&mv);
    assert_eq!(mvv["schema_version"], 1);
    assert_eq!(mvv["files"][0]["pages"], 2);
    // Evict one page of the range back out.
    let ev = json(&run(&["evict", "--json", "--range", "20K:4K", a]));
    assert_eq!(ev["files"][0]["resident_before"], 1);
    assert_eq!(ev["files"][0]["resident_after"], 0);
    let after = json(&run(&["where", "--json", a]));
    assert_eq!(after["files"][0]["resident_pages"], 3);
}

#[test]
fn warm_defaults_to_the_only_node_and_refuses_without_room() {
    let one = std::fs::read_to_string("/sys/devices/system/node/has_memory")
        .map(|s| !s.contains([',', '-']))
        .unwrap_or(true);
    if !one {
        return skip(
            "one-memory-node",
            "warm's default node needs a one-node machine",
        );
    }
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, vec![7u8; 256 << 10]).unwrap();
    let fs = f.to_str().unwrap();
    run(&["evict", "--sync", fs]);
    let w = run(&["warm", "--json", fs]);
    assert_eq!(w.code, Some(0), "{}", w.stderr);
    let v = json(&w);
    assert_eq!(v["files"][0]["target_reached"], true);
    assert_eq!(v["files"][0]["migration"]["moved"], 0);
    // A sparse file larger than the machine's memory: refused up front, nothing read.
    let big = d.path().join("huge");
    let mem: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024;
    std::fs::File::create(&big)
        .unwrap()
        .set_len(mem * 2)
        .unwrap();
    let bs = big.to_str().unwrap();
    let r = run_limited(numaio(&["warm", bs]), Duration::from_secs(60));
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("has room for about") && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    let wv = json(&run(&["where", "--json", bs]));
    assert!(
        wv["files"][0]["resident_pages"].as_u64().unwrap() < 1024,
        "{wv}"
    );
}

/// `VmLck` of a process, in bytes.
fn vm_locked(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

fn wait_file(p: &Path) -> String {
    for _ in 0..500 {
        if let Ok(s) = std::fs::read_to_string(p) {
            if s.ends_with('\n') {
                return s;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} never appeared", p.display());
}

#[test]
fn lock_holds_pages_until_sigterm_foreground_and_daemon() {
    if !is_root() {
        // Without root the default RLIMIT_MEMLOCK (often 64 KiB or 8 MiB) decides.
        return skip(numaio_testkit::needs::ROOT, "mlock beyond RLIMIT_MEMLOCK");
    }
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, vec![9u8; 1 << 20]).unwrap();
    let fs = f.to_str().unwrap();
    run(&["evict", "--sync", fs]);
    // Foreground.
    let pf = d.path().join("pid");
    let mut child = numaio(&["lock", "-P", pf.to_str().unwrap(), fs])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid: u32 = wait_file(&pf).trim().parse().unwrap();
    assert_eq!(pid, child.id());
    assert!(vm_locked(pid) >= 1 << 20, "VmLck {}", vm_locked(pid));
    let w = json(&run(&["where", "--json", fs]));
    assert_eq!(w["files"][0]["resident_pages"], 256);
    // SAFETY: signals our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    assert_eq!(wait_limited(&mut child, Duration::from_secs(20)), Some(0));
    assert!(!pf.exists(), "pidfile left behind");
    // Daemon, one range, JSON.
    let pf2 = d.path().join("pid2");
    let r = run(&[
        "lock",
        "-d",
        "--json",
        "-P",
        pf2.to_str().unwrap(),
        "--range",
        "0:256K",
        "--node",
        "0",
        fs,
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["total"]["bytes"], 256 << 10);
    let pid2: u32 = wait_file(&pf2).trim().parse().unwrap();
    assert_eq!(v["pid"], pid2);
    assert!(vm_locked(pid2) >= 256 << 10);
    // SAFETY: signals the daemon this test started.
    unsafe { libc::kill(pid2 as i32, libc::SIGTERM) };
    for _ in 0..500 {
        if !Path::new(&format!("/proc/{pid2}")).exists() && !pf2.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!pf2.exists(), "daemon left its pidfile");
    // All or nothing: a missing file fails the whole lock.
    let bad = run(&["lock", fs, "/nonexistent/x"]);
    assert_eq!(bad.code, Some(1));
    assert!(
        bad.stderr.contains("nothing stays locked"),
        "{}",
        bad.stderr
    );
}

#[test]
fn lock_names_rlimit_memlock_when_it_is_too_small() {
    if !is_root()
        || !Path::new("/usr/bin/setpriv").exists()
        || !Path::new("/usr/bin/prlimit").exists()
    {
        return skip(
            numaio_testkit::needs::ROOT,
            "needs root, setpriv and prlimit to lower the limit as another user",
        );
    }
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, vec![9u8; 1 << 20]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = std::process::Command::new("/usr/bin/prlimit");
    c.args([
        "--memlock=65536",
        "/usr/bin/setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        BIN,
        "lock",
        f.to_str().unwrap(),
    ]);
    let r = run_limited(c, Duration::from_secs(30));
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("RLIMIT_MEMLOCK"), "{}", r.stderr);
}

#[test]
fn one_file_system_stays_on_its_file_system() {
    use std::os::unix::fs::MetadataExt;
    let (Ok(dev), Ok(shm)) = (std::fs::metadata("/dev"), std::fs::metadata("/dev/shm")) else {
        return skip(numaio_testkit::needs::TMPFS, "no /dev/shm");
    };
    if dev.dev() == shm.dev() || tempfile::tempdir_in("/dev/shm").is_err() {
        return skip(
            numaio_testkit::needs::TMPFS,
            "/dev/shm is not a separate writable mount",
        );
    }
    let d = tempfile::tempdir_in("/dev/shm").unwrap();
    let marker = format!("numaio-onefs-{}", std::process::id());
    std::fs::write(d.path().join(&marker), b"x").unwrap();
    // /dev holds devices (skipped while walking, never opened) and the /dev/shm mount.
    let all = json(&run(&["where", "-r", "--json", "-I", &marker, "/dev"]));
    assert_eq!(all["files"].as_array().unwrap().len(), 1, "{all}");
    let one = json(&run(&[
        "where", "-r", "-F", "--json", "-I", &marker, "/dev",
    ]));
    assert_eq!(one["files"].as_array().unwrap().len(), 0, "{one}");
}
