//! Hostile numbers, lists and files at the command line: every one is refused promptly with
//! exit status 2 and a message naming the argument (or file) and what is accepted; none
//! panics, aborts, hangs or allocates without bound.

mod common;
use common::*;
use std::time::Duration;

/// Runs `args`, expecting a usage error (exit 2) within a few seconds whose stderr holds
/// every string of `want`.
fn refused(args: &[&str], want: &[&str]) {
    // In an empty directory, which must stay empty: nothing is created before the check.
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = numaio(args);
    cmd.current_dir(cwd.path());
    let r = run_limited(cmd, Duration::from_secs(20));
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
    assert!(left.is_empty(), "{args:?} created {left:?}");
    assert_eq!(r.code, Some(2), "{args:?}: {r:?}");
    assert!(
        r.elapsed < Duration::from_secs(5),
        "{args:?} took {:?}",
        r.elapsed
    );
    assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    for w in want {
        assert!(r.stderr.contains(w), "{args:?}: want {w:?} in {}", r.stderr);
    }
    assert!(r.stdout.is_empty(), "{args:?}: {}", r.out());
}

#[test]
fn non_finite_and_huge_durations() {
    refused(
        &["ps", "--interval", "1e300"],
        &["--interval", "(0, 86400]"],
    );
    refused(&["ps", "--interval", "nan"], &["--interval"]);
    refused(&["ps", "--interval=-1"], &["--interval"]);
    refused(&["ps", "--watch", "inf"], &["--watch"]);
    refused(&["ps", "--watch", "0.5", "--count", "0"], &["--count"]);
    refused(
        &["bench", "--duration", "nan"],
        &["--duration", "(0, 86400]"],
    );
    refused(&["bench", "--duration", "inf"], &["--duration"]);
    refused(&["bench", "--duration", "0"], &["--duration"]);
    refused(&["daemon", "--interval", "inf"], &["--interval", "3600"]);
    refused(&["daemon", "--interval", "0"], &["--interval"]);
    refused(&["daemon", "--min-residence", "nan"], &["--min-residence"]);
    refused(&["daemon", "--iterations", "0"], &["--iterations"]);
}

#[test]
fn counts_and_sizes_out_of_range() {
    refused(
        &["bench", "--threads", "100000"],
        &["--threads", "1 to 1024"],
    );
    refused(&["bench", "--threads", "0"], &["--threads"]);
    refused(&["bench", "--bs", "0"], &["--bs"]);
    refused(&["bench", "--bs", "1T"], &["--bs"]);
    refused(&["bench", "--size", "0"], &["--size"]);
    refused(&["bench", "--size", "99999999999T"], &["--size"]);
    refused(
        &["bench", "--size", "4K", "--bs", "8K"],
        &["--size", "--bs"],
    );
    refused(&["bench", "--queue-depth", "0"], &["--queue-depth"]);
    refused(
        &["bench", "--block-size", "3K"],
        &["--block-size", "power of two"],
    );
    refused(&["bench", "--io-workers", "100000"], &["--io-workers"]);
    refused(&["bench", "--batch", "0"], &["--batch"]);
    refused(&["bench", "--slices", "0"], &["--slices"]);
    refused(&["bench", "--files", "10000000"], &["--files"]);
    refused(&["bench", "--alternate", "0"], &["--alternate"]);
    refused(&["bench", "--cache", "0"], &["--cache"]);
    refused(
        &["bench", "--index", "sharded:4000000000"],
        &["--index", "1 to 65536"],
    );
    refused(
        &["bench", "--policy", "split-lru:4000000000"],
        &["LRU_FACTOR", "1 to 65536"],
    );
    refused(&["bench", "--lru-factor", "100000"], &["--lru-factor"]);
    refused(&["bench", "--placement", "stripe:0"], &["stripe"]);
    refused(
        &[
            "bench",
            "--placement",
            "interleave",
            "--hysteresis",
            "window:0:2",
        ],
        &["hysteresis"],
    );
    refused(
        &[
            "bench",
            "--checksum",
            "xxh3",
            "--checksum-rule",
            "bang:1e300",
        ],
        &["bang:1e300"],
    );
    let nodes: Vec<String> = (0..1100).map(|i| format!("n{i}=@1G")).collect();
    refused(
        &["topo", "--synthetic", &nodes.join(" ")],
        &["--synthetic", "1024"],
    );
    refused(
        &["topo", "--synthetic", &"x".repeat(70_000)],
        &["--synthetic"],
    );
    refused(&["where", "--map=0", "/dev/null"], &["--map"]);
    refused(&["where", "--range", "x:1", "/dev/null"], &["--range"]);
    refused(&["ps", "0"], &["PID"]);
    refused(&["ps", "-5"], &[]);
    refused(&["pin", "0", "--node", "0"], &["PID"]);
    refused(&["pin", "1", "--node", "99999"], &["--node", "0 to 1023"]);
    refused(
        &[
            "run",
            "--node",
            "4294967296",
            "--near",
            "/dev/null",
            "--",
            "true",
        ],
        &["--node"],
    );
}

#[test]
fn an_engine_cache_larger_than_memory_is_refused() {
    refused(
        &[
            "bench",
            "--target",
            "engine",
            "--cache",
            "1024T",
            "--size",
            "4K",
            "--file",
            "/nonexistent-dir/x",
        ],
        &["--cache", "memory"],
    );
    refused(
        &[
            "bench",
            "--files",
            "1024",
            "--size",
            "1024T",
            "--dir",
            "/nonexistent-dir",
        ],
        &["memory"],
    );
    assert!(!std::path::Path::new("/nonexistent-dir").exists());
}

#[test]
fn huge_node_lists_are_refused_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"data").unwrap();
    let fs = f.to_str().unwrap();
    refused(
        &["warm", "--interleave", "0-1048576", fs],
        &["above the largest allowed"],
    );
    refused(
        &["move", "--interleave", "0-1048576", fs],
        &["above the largest allowed"],
    );
    let many = vec!["0-1023"; 5000].join(",");
    refused(&["warm", "--interleave", &many, fs], &["node list"]);
    refused(
        &["warm", "--stripe", "0-4000000000", "--chunk", "1M", fs],
        &["node list"],
    );
    refused(&["warm", "--stripe", "0", "--chunk", "0", fs], &["--chunk"]);
    refused(
        &["warm", "--stripe", "0", "--chunk", "1000", fs],
        &["page size"],
    );
    let weights = vec!["0:1"; 5000].join(",");
    refused(&["warm", "--weights", &weights, fs], &["weights"]);
    refused(&["warm", "--weights", "0:99999999999", fs], &["weight"]);
    refused(&["warm", "--node", "5000", fs], &["--node"]);
    refused(&["warm", "--node", "1023", fs], &["node 1023"]);
    assert_eq!(std::fs::read(&f).unwrap(), b"data");
}

#[test]
fn config_files_that_are_not_small_regular_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("cfg.fifo");
    mkfifo(&fifo);
    refused(
        &["daemon", "--config", "/dev/zero", "--once"],
        &["/dev/zero", "character device"],
    );
    refused(
        &["daemon", "--config", fifo.to_str().unwrap(), "--once"],
        &["cfg.fifo", "FIFO"],
    );
    refused(
        &["daemon", "--config", dir.path().to_str().unwrap(), "--once"],
        &["directory"],
    );
    let log_fifo = dir.path().join("log.fifo");
    mkfifo(&log_fifo);
    let r = run_limited(
        numaio(&[
            "daemon",
            "--dry-run",
            "--once",
            "--log-file",
            log_fifo.to_str().unwrap(),
        ]),
        Duration::from_secs(20),
    );
    assert!(matches!(r.code, Some(1) | Some(2)), "{r:?}");
    assert!(r.stderr.contains("log.fifo"), "{}", r.stderr);
    let big = dir.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; (1 << 20) + 1]).unwrap();
    refused(
        &["daemon", "--config", big.to_str().unwrap(), "--once"],
        &["big.toml", "larger than"],
    );
    for (text, field) in [
        ("residency_ttl_secs = inf\n", "residency_ttl_secs"),
        ("residency_ttl_secs = nan\n", "residency_ttl_secs"),
        ("interval_secs = 1e300\n", "interval_secs"),
        ("win_factor = nan\n", "win_factor"),
        ("min_residence_secs = inf\n", "min_residence_secs"),
    ] {
        let p = dir.path().join("c.toml");
        std::fs::write(&p, text).unwrap();
        refused(
            &["daemon", "--config", p.to_str().unwrap(), "--once"],
            &["c.toml", field],
        );
    }
}
