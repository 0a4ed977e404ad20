//! Lab test of `numaio top` in a 2-node guest: a reader pinned to node 1 loops over a file
//! cached on node 0, so node 0's bytes, the reader's and the file's are all remote; after
//! `numaio move` puts the file on node 1 they are local. Checks `--json --once` and the
//! `--once` text with the estimate as source: attaching the eBPF collector while the reader
//! runs soft-locks these TCG guests (docs/bpf.md; `lab/tests/bpf.rs` tests the collector).
//!
//! Needs `cargo build --release` first (the guest runs `target/release` binaries); run with
//! `cargo test -p numaio-lab --release --test top -- --ignored` (`NUMAIO_LAB_SHOW=1` and
//! `--nocapture` print the guest's output).

use numaio_lab::{DiskFile, DiskSpec, LabTopology, Scenario};
use serde_json::Value;
use std::time::Duration;

const MB: u64 = 1 << 20;

const SCRIPT: &str = r#"
F=/mnt/f
numactl --membind=0 cat $F > /dev/null
numactl --cpunodebind=1 --membind=1 numaio-probe reader --file $F --report /tmp/r --interval-ms 100 &
R=$!
sleep 1
echo "READER $R"
echo "TOP1 $(numaio top --source estimate --json --once --interval 1)"
numaio top --source estimate --once --interval 0.5 | sed 's/^/ONCE /'
numaio move $F --to 1 > /dev/null
echo "TOP2 $(numaio top --source estimate --json --once --interval 1)"
kill $R
wait $R 2>/dev/null
true
"#;

fn tagged(out: &str, tag: &str) -> Value {
    let prefix = format!("{tag} ");
    out.lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .find_map(|l| serde_json::from_str(l.trim()).ok())
        .unwrap_or_else(|| panic!("no {tag} line in:\n{out}"))
}

fn tagged_text(out: &str, tag: &str) -> String {
    let prefix = format!("{tag} ");
    out.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .unwrap_or("")
        .trim()
        .to_string()
}

fn node(frame: &Value, n: u64) -> &Value {
    frame["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["node"] == n)
        .unwrap_or_else(|| panic!("node {n} missing: {frame}"))
}

fn rate(by_node: &Value, n: u32) -> f64 {
    by_node[n.to_string()]["read_bytes_per_sec"]
        .as_f64()
        .unwrap_or(0.0)
}

/// The reader's row and its file's row.
fn reader_rows(frame: &Value, pid: i64) -> (&Value, &Value) {
    let p = frame["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("reader {pid} missing: {frame}"));
    let f = frame["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/mnt/f")
        .unwrap_or_else(|| panic!("/mnt/f missing: {frame}"));
    (p, f)
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn two_node_remote_then_local() {
    let s = Scenario::new(LabTopology::uniform(2), SCRIPT)
        .disk(DiskSpec::new().file(DiskFile::pattern("f", 32 * MB)))
        .timeout(Duration::from_secs(300));
    let out = s.run().expect("lab run");
    if std::env::var_os("NUMAIO_LAB_SHOW").is_some() {
        eprintln!("{}", out.output);
    }
    let o = &out.output;
    assert!(out.success(), "{}", out.report());
    let pid: i64 = tagged_text(o, "READER").parse().unwrap();

    // The file on node 0, read from node 1: remote.
    let t1 = tagged(o, "TOP1");
    assert_eq!(t1["nodes"].as_array().unwrap().len(), 2, "{t1}");
    let n0 = node(&t1, 0);
    assert!(n0["page_cache_bytes"].as_u64().unwrap() >= 30 * MB, "{n0}");
    assert!(n0["read_bytes_per_sec"].as_f64().unwrap() > 0.0, "{n0}");
    assert!(n0["remote_share"].as_f64().unwrap() > 0.95, "{n0}");
    let (p, f) = reader_rows(&t1, pid);
    assert_eq!(p["main_node"], 1, "{p}");
    let (r0, r1) = (rate(&p["by_data_node"], 0), rate(&p["by_data_node"], 1));
    assert!(r0 > 0.0 && r1 <= r0 / 100.0, "{p}");
    assert!(p["remote_share"].as_f64().unwrap() > 0.99, "{p}");
    assert!(
        f["pids"].as_array().unwrap().contains(&Value::from(pid)),
        "{f}"
    );
    assert!(f["remote_share"].as_f64().unwrap() > 0.99, "{f}");
    assert!(
        rate(&f["by_data_node"], 1) <= rate(&f["by_data_node"], 0) / 100.0,
        "{f}"
    );

    // The same as text.
    let once: Vec<&str> = o
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("ONCE"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    assert!(once[0].starts_with("numaio top  interval "), "{once:?}");
    assert!(once[2].starts_with("NODE  PAGE CACHE"), "{once:?}");
    assert!(once[3].trim_start().starts_with("0 "), "{once:?}");
    assert!(once[4].trim_start().starts_with("1 "), "{once:?}");
    assert!(
        once.iter()
            .any(|l| l.trim_start().starts_with(&format!("{pid}  numaio-probe"))),
        "{once:?}"
    );

    // Moved to node 1, where the reader runs: local.
    let t2 = tagged(o, "TOP2");
    assert!(
        node(&t2, 1)["page_cache_bytes"].as_u64().unwrap() >= 30 * MB,
        "{t2}"
    );
    let (p, f) = reader_rows(&t2, pid);
    let (r0, r1) = (rate(&p["by_data_node"], 0), rate(&p["by_data_node"], 1));
    assert!(r1 > 0.0 && r0 <= r1 / 100.0, "{p}");
    assert!(p["remote_share"].as_f64().unwrap() < 0.01, "{p}");
    assert!(f["remote_share"].as_f64().unwrap() < 0.01, "{f}");
}
