//! Lab tests of numaio-fs over one NVMe disk per node: `numaio mkfs` takes each disk's node
//! from sysfs, writers pinned with `numactl --cpunodebind=N` put files through `numaio fs
//! put`, and the volume's block map (`numaio fs map --json`) and the disks' own write
//! counters (`node-disk-stat`) must both show the data on the writer's node. The
//! `directory` and `stripe` placements, spilling to another node when one fills, and the
//! misplaced-file fraction against ext4 over dm-linear are checked too.
//!
//! Needs the release binaries (`cargo build --release -p numaio -p numaio-lab --bins`) and the lab's kernel
//! cache; see lab/README.md.

use numaio_lab::dm_linear;
use numaio_lab::fs_map::{fraction_on, map_section, misplaced_ext4_vs_numaio, written};
use numaio_lab::guest_script::node_disks_prelude;
use numaio_lab::{LabTopology, Scenario};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

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
        prelude = node_disks_prelude(nodes, 0),
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
    let mkfs = out.section_json("mkfs");
    let devs: Vec<String> = out
        .section("devs")
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
    let map = map_section(&out, "map");
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
    assert!(out.section("fsck").contains("rc=0"), "{}", out.report());
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
fn directory_and_stripe_placements_hold() {
    let topo = LabTopology::from_nodes(&[(1, 256), (1, 256)]);
    let script = format!(
        r#"{prelude}
numaio mkfs $devs >/dev/null || exit 11
head -c 1048576 /dev/urandom > /tmp/src
numaio fs policy $dargs / directory || exit 12
numaio fs mkdir $dargs /t0 || exit 13
numaio fs mkdir $dargs /t1 || exit 13
numaio fs mkdir $dargs /s || exit 13
numaio fs policy $dargs /s stripe:2:64K || exit 14
for n in 0 1; do
  for t in t0 t1; do
    numactl --cpunodebind=$n numaio fs put $dargs /tmp/src /$t/n$n || exit 15
  done
  numactl --cpunodebind=$n numaio fs put $dargs /tmp/src /s/n$n || exit 16
done
echo "@@begin map"; numaio fs map --json $dargs / || exit 17
echo "@@begin policy"; numaio fs policy --json $dargs /s/n0 || exit 18
"#,
        prelude = node_disks_prelude(&[0, 1], 0)
    );
    let t = Instant::now();
    let out = Scenario::new(topo, script)
        .node_disk(0, 64 * MIB)
        .node_disk(1, 64 * MIB)
        .timeout(Duration::from_secs(240))
        .must_run();
    eprintln!(
        "numaio-fs directory and stripe: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let map = map_section(&out, "map");
    // directory: both writers' files of a top-level directory are on one node, and the two
    // directories got different nodes
    let mut homes = Vec::new();
    for t in ["t0", "t1"] {
        let mut home = None;
        for n in 0..2 {
            let (per, _) = &map[&format!("/{t}/n{n}")];
            assert_eq!(
                per.len(),
                1,
                "/{t}/n{n} spread over {per:?}\n{}",
                out.report()
            );
            let node = *per.keys().next().unwrap();
            assert!(
                home.is_none() || home == Some(node),
                "/{t}: files on nodes {home:?} and {node}\n{}",
                out.report()
            );
            home = Some(node);
        }
        homes.push(home.unwrap());
    }
    assert_ne!(
        homes[0],
        homes[1],
        "both directories on one node\n{}",
        out.report()
    );
    // stripe:2:64K: 16-block chunks alternate between the nodes, whoever writes
    for n in 0..2 {
        let (per, ext) = &map[&format!("/s/n{n}")];
        assert_eq!(per.len(), 2, "/s/n{n}: {per:?}\n{}", out.report());
        let mut chunk_node: BTreeMap<u64, u64> = BTreeMap::new();
        for &(l, len, node) in ext {
            for b in l..l + len {
                let prev = chunk_node.insert(b / 16, node);
                assert!(
                    prev.is_none() || prev == Some(node),
                    "/s/n{n}: chunk {} on two nodes\n{}",
                    b / 16,
                    out.report()
                );
            }
        }
        for (c, node) in &chunk_node {
            if let Some(next) = chunk_node.get(&(c + 1)) {
                assert_ne!(
                    node,
                    next,
                    "/s/n{n}: chunks {c} and {} both on node {node}",
                    c + 1
                );
            }
        }
        assert_eq!(chunk_node.len(), 16, "1 MiB = 16 chunks of 64K");
    }
    assert!(
        out.section_json("policy")["policy"]
            .as_str()
            .unwrap()
            .starts_with("stripe:2:"),
        "{}",
        out.report()
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
        prelude = node_disks_prelude(&[0, 1], 0)
    );
    let t = Instant::now();
    let out = Scenario::new(topo, script)
        .node_disk(0, 48 * MIB)
        .node_disk(1, 16 * MIB)
        .timeout(Duration::from_secs(480))
        .must_run();
    eprintln!("numaio-fs fill: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let puts = out.section("puts");
    let n: u64 = puts.lines().next().unwrap().trim().parse().expect("count");
    assert!(n <= 200, "the volume never filled\n{}", out.report());
    assert!(
        puts.contains("no space"),
        "the failing put must say ENOSPC\n{}",
        out.report()
    );
    let st0 = out.section_json("stat0");
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
    let map = map_section(&out, "map");
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
    assert!(out.section("fsck").contains("rc=0"), "{}", out.report());
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn misplaced_files_numaio_vs_ext4_over_dm_linear() {
    // One disk per node. Creators pinned to node 0 and node 1 take turns creating 64 KiB
    // files, first on stock ext4 over dm-linear of the two disks, then on a numaio-fs
    // volume over the same disks. A file is misplaced when most of its blocks are not on
    // its creator's node's disk: ext4's blocks are mapped from `filefrag` through the
    // dm-linear table, numaio-fs's come from its block map.
    if let Some(t) = dm_linear::missing_tool() {
        numaio_testkit::skip!(
            "dmsetup",
            "{t} is missing on the host (apt-get install dmsetup e2fsprogs)"
        );
    }
    let per_node = numaio_testkit::env_u64("NUMAIO_LAB_FS_FILES", 40);
    let script = format!(
        r#"{prelude}
{setup}
head -c 65536 /dev/urandom > /tmp/src
i=0
while [ $i -lt {per_node} ]; do
  for n in 0 1; do
    numactl --cpunodebind=$n --membind=$n dd if=/tmp/src of=/mnt/n$n-$i bs=64k conv=fsync 2>/dev/null || exit 30
  done
  i=$((i+1))
done
echo "@@begin ext4"
filefrag -v -b4096 /mnt/n* || exit 31
{teardown}
numaio mkfs --force $devs >/dev/null || exit 32
i=0
while [ $i -lt {per_node} ]; do
  for n in 0 1; do
    numactl --cpunodebind=$n --membind=$n numaio fs put $dargs /tmp/src /n$n-$i || exit 33
  done
  i=$((i+1))
done
echo "@@begin map"; numaio fs map --json $dargs / || exit 34
echo "@@begin fsck"; numaio fsck $devs; echo "rc=$?"
"#,
        prelude = node_disks_prelude(&[0, 1], 0),
        setup = dm_linear::setup_script("lin", "-g 8192"),
        teardown = dm_linear::teardown_script("lin"),
    );
    let s = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 256)]), script)
        .node_disk(0, 64 * MIB)
        .node_disk(1, 64 * MIB)
        .timeout(Duration::from_secs(420));
    let t = Instant::now();
    let out = dm_linear::with_tools(s).must_run();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let files = 2 * per_node as usize;

    let (ext4_bad, numaio_bad) = misplaced_ext4_vs_numaio(&out, per_node);
    let pct = |bad: usize| bad as f64 * 100.0 / files as f64;
    eprintln!(
        "misplaced files ({files} files of 64 KiB, creators alternating between 2 nodes): \
         ext4 over dm-linear {ext4_bad} ({:.1} %), numaio-fs {numaio_bad} ({:.1} %); {secs:.1} s",
        pct(ext4_bad),
        pct(numaio_bad)
    );
    assert!(
        numaio_bad * 20 <= files,
        "numaio-fs misplaced {numaio_bad} of {files} files (more than 5 %)\n{}",
        out.report()
    );
    assert!(out.section("fsck").contains("rc=0"), "{}", out.report());
}
