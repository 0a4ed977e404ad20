//! Lab tests of numaio-fs over one NVMe disk per node: `numaio mkfs` takes each disk's node
//! from sysfs, writers pinned with `numactl --cpunodebind=N` put files through `numaio fs
//! put`, and the volume's block map (`numaio fs map --json`) and the disks' own write
//! counters (`node-disk-stat`) must both show the data on the writer's node. The
//! `directory` and `stripe` placements, spilling to another node when one fills, and the
//! misplaced-file fraction against ext4 over dm-linear are checked too.
//!
//! Needs the release binaries (`cargo build --release -p numaio-cli`) and the lab's kernel
//! cache; see lab/README.md.

use numaio_lab::{LabTopology, NodeDiskStat, Outcome, Scenario};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// Shell helpers: `$devs` (the first disk of each listed guest node, in order) and `$dargs`
/// (`-d DEV` for each).
fn prelude(nodes: &[u32], k: u32) -> String {
    let list: Vec<String> = nodes.iter().map(u32::to_string).collect();
    format!(
        r#"
devs=""; for n in {list}; do d=$(node-disk $n {k}) || exit 10; devs="$devs $d"; done
dargs=""; for d in $devs; do dargs="$dargs -d $d"; done
echo "@@begin devs"; echo $devs
"#,
        list = list.join(" ")
    )
}

/// The text between `@@begin NAME` and the next `@@begin`.
fn section<'a>(out: &'a Outcome, name: &str) -> &'a str {
    let start = out
        .output
        .find(&format!("@@begin {name}\n"))
        .unwrap_or_else(|| panic!("section {name} missing\n{}", out.report()));
    let body = &out.output[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    &body[..body.find("@@begin ").unwrap_or(body.len())]
}

/// The first JSON object line of a section.
fn json_in(out: &Outcome, name: &str) -> Value {
    let s = section(out, name);
    let line = s
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON in section {name}\n{}", out.report()));
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("bad JSON in section {name}: {e}\n{}", out.report()))
}

/// `fs map --json` output: path → (blocks per node, extents as (logical, len, node)).
type Map = BTreeMap<String, (BTreeMap<u64, u64>, Vec<(u64, u64, u64)>)>;

fn parse_map(v: &Value) -> Map {
    let mut m = Map::new();
    for f in v["files"].as_array().expect("files") {
        let mut per = BTreeMap::new();
        for n in f["nodes"].as_array().unwrap() {
            per.insert(n["node"].as_u64().unwrap(), n["blocks"].as_u64().unwrap());
        }
        let ext = f["extents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["logical"].as_u64().unwrap(),
                    e["len"].as_u64().unwrap(),
                    e["node"].as_u64().unwrap(),
                )
            })
            .collect();
        m.insert(f["path"].as_str().unwrap().to_string(), (per, ext));
    }
    m
}

fn fraction_on(per: &BTreeMap<u64, u64>, node: u64) -> f64 {
    let total: u64 = per.values().sum();
    per.get(&node).copied().unwrap_or(0) as f64 / total.max(1) as f64
}

/// Sectors written per disk between two `node-disk-stat` sections.
fn written(out: &Outcome, before: &str, after: &str) -> BTreeMap<String, (i64, u64)> {
    let b = NodeDiskStat::parse(section(out, before));
    let a = NodeDiskStat::parse(section(out, after));
    b.iter()
        .map(|d| {
            let now = a
                .iter()
                .find(|x| x.dev == d.dev)
                .unwrap_or_else(|| panic!("{} missing after\n{}", d.dev, out.report()));
            (
                d.dev.clone(),
                (d.node, now.sectors_written - d.sectors_written),
            )
        })
        .collect()
}

/// Writers pinned to each node put a 4 MiB file; ≥ 99 % of each file's blocks are on its
/// writer's node, and the writer's disk got the writes.
fn writer_local(topo: LabTopology, nodes: &[u32]) {
    let list: Vec<String> = nodes.iter().map(u32::to_string).collect();
    let script = format!(
        r#"{prelude}
echo "@@begin mkfs"; numaio mkfs --json $devs || exit 11
head -c 4194304 /dev/urandom > /tmp/src
for n in {list}; do
  echo "@@begin before-$n"; node-disk-stat
  numactl --cpunodebind=$n --membind=$n numaio fs put $dargs /tmp/src /w$n || exit 12
  echo "@@begin after-$n"; node-disk-stat
done
echo "@@begin map"; numaio fs map --json $dargs / || exit 13
echo "@@begin stat"; numaio fs stat $dargs || exit 14
echo "@@begin fsck"; numaio fsck $devs; echo "rc=$?"
"#,
        prelude = prelude(nodes, 0),
        list = list.join(" ")
    );
    let mut s = Scenario::new(topo.clone(), script).timeout(Duration::from_secs(240));
    for &n in nodes {
        s = s.node_disk(topo.qemu_node_id(n).expect("node"), 64 * MIB);
    }
    let t = Instant::now();
    let out = s.must_run();
    eprintln!(
        "numaio-fs writer-local, {} nodes: {:.1} s",
        nodes.len(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let mkfs = json_in(&out, "mkfs");
    let devs: Vec<String> = section(&out, "devs")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for (i, &n) in nodes.iter().enumerate() {
        assert_eq!(
            mkfs["devices"][i]["node"].as_u64(),
            Some(n as u64),
            "mkfs took device {i}'s node from sysfs\n{}",
            out.report()
        );
    }
    let map = parse_map(&json_in(&out, "map"));
    for (i, &n) in nodes.iter().enumerate() {
        let (per, _) = &map[&format!("/w{n}")];
        let frac = fraction_on(per, n as u64);
        eprintln!(
            "  node-{n} writer: {:.2} % of its blocks on node {n}",
            frac * 100.0
        );
        assert!(
            frac >= 0.99,
            "/w{n}: {per:?} blocks per node, {:.1} % on node {n}\n{}",
            frac * 100.0,
            out.report()
        );
        let w = written(&out, &format!("before-{n}"), &format!("after-{n}"));
        let mine = &devs[i];
        assert!(
            w[mine].1 >= 4 * MIB / 512,
            "{mine} (node {n}) got {} sectors for a 4 MiB file: {w:?}\n{}",
            w[mine].1,
            out.report()
        );
        // Other disks than device 0 (which holds the journal and checkpoints) get none of it.
        for (d, (_, sectors)) in &w {
            if d != mine && d != &devs[0] {
                assert!(
                    *sectors < MIB / 512,
                    "{d} got {sectors} sectors from a node-{n} writer: {w:?}\n{}",
                    out.report()
                );
            }
        }
    }
    assert!(section(&out, "fsck").contains("rc=0"), "{}", out.report());
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn writer_local_two_nodes() {
    writer_local(LabTopology::from_nodes(&[(1, 256), (1, 256)]), &[0, 1]);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn writer_local_four_nodes() {
    writer_local(
        LabTopology::from_nodes(&[(1, 192), (1, 192), (1, 192), (1, 192)]),
        &[0, 1, 2, 3],
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn a_full_node_spills_to_the_other_until_the_volume_is_full() {
    // Node 1's disk is small; node-1 writers fill it, go on on node 0, and fail only
    // when the volume is full (ENOSPC).
    let topo = LabTopology::from_nodes(&[(1, 256), (1, 256)]);
    let script = format!(
        r#"{prelude}
numaio mkfs --group-size 1M $devs >/dev/null || exit 11
echo "@@begin stat0"; numaio fs stat --json $dargs || exit 12
head -c 2097152 /dev/urandom > /tmp/src
i=0
while numactl --cpunodebind=1 numaio fs put $dargs /tmp/src /f$i 2>/tmp/err; do
  i=$((i+1)); [ $i -gt 200 ] && break
done
echo "@@begin puts"; echo "$i"; cat /tmp/err
numaio fs rm $dargs /f$i 2>/dev/null
echo "@@begin map"; numaio fs map --json $dargs / || exit 13
echo "@@begin stat1"; numaio fs stat --json $dargs || exit 14
echo "@@begin fsck"; numaio fsck $devs; echo "rc=$?"
"#,
        prelude = prelude(&[0, 1], 0)
    );
    let t = Instant::now();
    let out = Scenario::new(topo, script)
        .node_disk(0, 48 * MIB)
        .node_disk(1, 16 * MIB)
        .timeout(Duration::from_secs(480))
        .must_run();
    eprintln!("numaio-fs fill: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let puts = section(&out, "puts");
    let n: u64 = puts.lines().next().unwrap().trim().parse().expect("count");
    assert!(n <= 200, "the volume never filled\n{}", out.report());
    assert!(
        puts.contains("no space"),
        "the failing put must say ENOSPC\n{}",
        out.report()
    );
    let st0 = json_in(&out, "stat0");
    let cap: u64 = st0["total_bytes"].as_u64().unwrap();
    let node1_cap = st0["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["node"] == 1)
        .unwrap()["capacity_bytes"]
        .as_u64()
        .unwrap();
    // every put before the failing one succeeded, and they filled the volume
    assert!(
        n * 2 * MIB + 2 * MIB >= cap - cap / 20,
        "{n} puts of 2 MiB before ENOSPC on {cap} bytes\n{}",
        out.report()
    );
    let map = parse_map(&json_in(&out, "map"));
    let mut on1 = 0u64;
    let mut first_remote = None;
    for i in 0..n {
        let (per, _) = &map[&format!("/f{i}")];
        let f1 = fraction_on(per, 1);
        on1 += per.get(&1).copied().unwrap_or(0);
        if f1 < 1.0 && first_remote.is_none() {
            first_remote = Some(i);
        }
        if let Some(r) = first_remote {
            if i > r {
                assert!(
                    f1 == 0.0,
                    "/f{i} has blocks on node 1 after /f{r} spilled: {per:?}\n{}",
                    out.report()
                );
            }
        }
    }
    let r = first_remote.expect("some files spilled to node 0");
    assert!(r >= 1, "the first file already spilled\n{}", out.report());
    // node 1 was filled before spilling (less than one file's worth left)
    assert!(
        on1 * 4096 + 2 * MIB >= node1_cap,
        "{on1} blocks on node 1 of {node1_cap} bytes\n{}",
        out.report()
    );
    eprintln!("  {n} puts of 2 MiB: the first {r} on node 1, the rest on node 0; then ENOSPC");
    assert!(section(&out, "fsck").contains("rc=0"), "{}", out.report());
}
