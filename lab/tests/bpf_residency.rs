//! Residency without scanning, on both guest kernels (Debian 6.1 and 7.3), 2 nodes: with
//! the daemon and its eBPF collector running, files are cached on node 0 and node 1, one is
//! moved (`numaio move`), part of another evicted (`numaio evict --range`), and one was
//! cached before the daemon started (unknown to the collector until its baseline scan).
//! `numaio where --source collector --json` must then equal `numaio where --source scan
//! --json` page for page on every node, and be counted changes, not fresh scans. A file
//! deleted and made again at the same path (its inode destroyed, its counters freed, the
//! number usually reused) gets a fresh baseline equal to the scan. SIGKILL of the daemon
//! leaves none of its programs loaded.
//!
//! Needs the release binaries (`cargo build --release --bins`) and both lab kernels; see
//! lab/README.md.

use numaio_lab::guest_script::BPF_PRELUDE;
use numaio_lab::{DiskFile, DiskSpec, GuestKernel, LabTopology, Outcome, Scenario};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const MIB: u64 = 1 << 20;

const SCRIPT: &str = r#"
A=/mnt/a.bin; B=/mnt/b.bin; P=/mnt/p.bin
# Cached before the collector attaches: only a scan can know where these pages are.
numactl -m 0 cat $P > /dev/null
S=/run/numaio/residency.sock
numaio daemon --dry-run --interval 5 --json > /tmp/daemon.log 2>&1 &
D=$!
i=0; while [ ! -S $S ] && [ $i -lt 300 ]; do sleep 0.2; i=$((i+1)); done
# The first question takes each file's baseline (a and b are not cached yet).
echo "@@begin first"; numaio where --source collector --json $A $B $P
numactl -m 0 cat $A > /dev/null
numactl -m 1 cat $B > /dev/null
numaio move --to 1 $A > /dev/null || echo "move failed"
numaio move --to 1 $P > /dev/null || echo "move failed"
numaio evict --range 0:1M $B > /dev/null || echo "evict failed"
echo "@@begin collector"; numaio where --source collector --json $A $B $P
echo "@@begin scan"; numaio where --source scan --json $A $B $P
echo "@@begin auto"; numaio where --json $A
echo "@@begin daemon"; grep -m 1 '"start"' /tmp/daemon.log
# a.bin deleted (the kernel destroys its inode and the collector frees its counters) and a
# new file made at its path, on ext4 usually under the same inode number: the answer must
# not build on a.bin's baseline.
echo "@@begin reused-ino"; stat -c %i $A
rm $A; cp $P $A; sync; stat -c %i $A
numactl -m 0 cat $A > /dev/null
echo "@@begin reused-collector"; numaio where --source collector --json $A
echo "@@begin reused-scan"; numaio where --source scan --json $A
# SIGKILL of the daemon leaves none of its programs loaded.
kill -9 $D; wait $D
echo "@@begin progs-after"; no_nio_programs
echo "@@begin end"
"#;

fn run(k: GuestKernel) -> Outcome {
    let disk = DiskSpec::new()
        .file(DiskFile::pattern("a.bin", 4 * MIB))
        .file(DiskFile::pattern("b.bin", 4 * MIB))
        .file(DiskFile::pattern("p.bin", 2 * MIB));
    let script = format!("{BPF_PRELUDE}{SCRIPT}");
    let out = Scenario::new(LabTopology::from_nodes(&[(1, 512), (1, 512)]), script)
        .kernel(k)
        .disk(disk)
        .timeout(Duration::from_secs(180))
        .must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    out
}

/// Per file name: (source, resident pages, pages per node, baseline_scanned).
type Answers = BTreeMap<String, (String, u64, BTreeMap<String, u64>, Option<bool>)>;

fn answers(out: &Outcome, k: GuestKernel, section: &str) -> Answers {
    let j = out.section_json(section);
    assert_eq!(
        j["errors"].as_array().map_or(0, Vec::len),
        0,
        "{k} {section}: {j}\n{}",
        out.report()
    );
    j["files"]
        .as_array()
        .unwrap_or_else(|| panic!("{k} {section}: no files\n{j}"))
        .iter()
        .map(|f| {
            let name = f["path"].as_str().unwrap_or("").rsplit('/').next();
            let nodes = f["nodes"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(n, v)| (n.clone(), v.as_u64().unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default();
            (
                name.unwrap_or("").to_string(),
                (
                    f["source"].as_str().unwrap_or("").to_string(),
                    f["resident_pages"].as_u64().unwrap_or(0),
                    nodes,
                    f["baseline_scanned"].as_bool(),
                ),
            )
        })
        .collect()
}

fn nodes(v: &[(&str, u64)]) -> BTreeMap<String, u64> {
    v.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

fn lab(k: GuestKernel) {
    let out = run(k);
    let start: Value = out.section_json("daemon");
    eprintln!("{k} daemon: {start}");
    assert_eq!(start["numa_io_source"], "ebpf", "{k}: {}", out.report());
    // First question: every answer is the daemon's baseline scan; only p.bin is cached, on
    // node 0 (512 pages of 2 MiB).
    let first = answers(&out, k, "first");
    eprintln!("{k} first: {first:?}");
    for (f, a) in &first {
        assert_eq!(
            (a.0.as_str(), a.3),
            ("collector", Some(true)),
            "{k} {f}: {a:?}"
        );
    }
    assert_eq!(first["p.bin"].2, nodes(&[("0", 512)]), "{k}: {first:?}");
    assert_eq!(first["a.bin"].1 + first["b.bin"].1, 0, "{k}: {first:?}");
    let counted = answers(&out, k, "collector");
    let scanned = answers(&out, k, "scan");
    eprintln!("{k} collector: {counted:?}\n{k} scan: {scanned:?}");
    for f in ["a.bin", "b.bin", "p.bin"] {
        let (c, s) = (&counted[f], &scanned[f]);
        // Counted changes since the baseline, not a new scan.
        assert_eq!((c.0.as_str(), c.3), ("collector", Some(false)), "{k} {f}");
        assert_eq!(s.0, "scan", "{k} {f}");
        assert_eq!((c.1, &c.2), (s.1, &s.2), "{k} {f}: collector vs scan");
    }
    // And the scan saw what was done: a.bin (1024 pages) and p.bin moved to node 1, b.bin
    // read on node 1 less its first MiB.
    assert_eq!(scanned["a.bin"].2, nodes(&[("1", 1024)]), "{k}");
    assert_eq!(scanned["b.bin"].2, nodes(&[("1", 768)]), "{k}");
    assert_eq!(scanned["p.bin"].2, nodes(&[("1", 512)]), "{k}");
    // Without --source, the daemon's counts answer.
    let auto = answers(&out, k, "auto");
    assert_eq!(auto["a.bin"].0, "collector", "{k}: {auto:?}");
    assert_eq!(auto["a.bin"].2, nodes(&[("1", 1024)]), "{k}");
    // A new file at a.bin's path (and, usually, inode number): a fresh baseline, equal to
    // the scan.
    let inos: Vec<&str> = out.section("reused-ino").split_whitespace().collect();
    let c = &answers(&out, k, "reused-collector")["a.bin"];
    let s = &answers(&out, k, "reused-scan")["a.bin"];
    eprintln!(
        "{k} a.bin remade (inode {inos:?}, reused: {}): collector {c:?}, scan {s:?}",
        inos.len() == 2 && inos[0] == inos[1]
    );
    assert_eq!((c.0.as_str(), c.3), ("collector", Some(true)), "{k}: {c:?}");
    assert_eq!(
        (c.1, &c.2),
        (s.1, &s.2),
        "{k} remade a.bin: collector vs scan"
    );
    assert_eq!(
        c.1, 512,
        "{k}: the remade a.bin is 2 MiB, all cached: {c:?}"
    );
    let after = out.section_json("progs-after");
    assert_eq!(
        after["programs"], 0,
        "{k}: programs left loaded after SIGKILL of the daemon"
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn collector_residency_equals_scan_on_debian_6_1() {
    lab(GuestKernel::Debian61);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn collector_residency_equals_scan_on_debian_7_3() {
    lab(GuestKernel::Debian73);
}
