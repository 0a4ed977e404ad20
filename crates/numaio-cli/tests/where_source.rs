//! `numaio where --source`: asking a running daemon on its residency socket, what comes back
//! where its collector cannot answer (this host may refuse BPF tracing: then every answer
//! must be a scan, said as such), and what happens with no daemon at all.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn json(r: &Run) -> Value {
    serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", r.out(), r.stderr))
}

fn file0(r: &Run) -> Value {
    json(r)["files"][0].clone()
}

#[test]
fn where_asks_the_daemon_or_says_why_it_scanned() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f.bin");
    std::fs::write(&f, vec![7u8; 64 << 10]).unwrap();
    let f = f.to_str().unwrap();
    let sock = d.path().join("res.sock");
    let s = sock.to_str().unwrap();

    // No daemon: auto scans without a word; collector is an error naming the socket.
    let auto = run(&["where", "--json", "--socket", s, f]);
    assert_eq!(auto.code, Some(0), "{}", auto.stderr);
    assert_eq!(file0(&auto)["source"], "scan");
    assert!(file0(&auto).get("source_note").is_none(), "{}", auto.out());
    let only = run(&["where", "--json", "--source", "collector", "--socket", s, f]);
    assert_eq!(only.code, Some(1), "{}", only.out());
    assert!(
        only.stderr.contains("no numaio daemon answers on") && only.stderr.contains("res.sock"),
        "{}",
        only.stderr
    );
    // Counts are per file: a range needs a scan.
    let range = run(&["where", "--source", "collector", "--range", "0:4K", f]);
    assert_eq!(range.code, Some(2), "{}", range.stderr);
    assert!(range.stderr.contains("--source scan"), "{}", range.stderr);

    let mut daemon = numaio(&[
        "daemon",
        "--dry-run",
        "--interval",
        "1",
        "--iterations",
        "30",
        "--residency-socket",
        s,
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // The socket appears once the daemon runs with its collector; a daemon without one
    // (this host may refuse BPF tracing) serves none, and says why on its start line.
    let t0 = Instant::now();
    while !Path::new(s).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let served = Path::new(s).exists();
    let scan = run(&["where", "--json", "--source", "scan", f]);
    let auto = run(&["where", "--json", "--socket", s, f]);
    let only = run(&["where", "--json", "--source", "collector", "--socket", s, f]);
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(scan.code, Some(0), "{}", scan.stderr);
    assert_eq!(file0(&scan)["source"], "scan");
    let a = file0(&auto);
    if served {
        // The collector runs: the answer is the scan's, page for page.
        assert_eq!(a["source"], "collector", "{}", auto.out());
        assert_eq!(a["nodes"], file0(&scan)["nodes"], "{}", auto.out());
        assert_eq!(only.code, Some(0), "{}", only.stderr);
        assert_eq!(file0(&only)["source"], "collector");
        assert_eq!(file0(&only)["baseline_scanned"], false, "{}", only.out());
    } else {
        // No collector, no socket: auto scans without a word, collector only is an error.
        eprintln!("SKIPPED (part): the daemon's collector did not attach here; checked the scan fallback only");
        assert_eq!(a["source"], "scan", "{}", auto.out());
        assert_eq!(a["nodes"], file0(&scan)["nodes"]);
        assert_eq!(only.code, Some(1), "{}", only.out());
        assert!(
            only.stderr.contains("no numaio daemon answers on"),
            "{}",
            only.stderr
        );
    }
}
