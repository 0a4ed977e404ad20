//! Lab tests of node devices: NVMe disks behind a PCI expander bridge on each node, and
//! persistent memory on a node. The guest must show each device on its own node (after the
//! guest's renumbering of CPU-less nodes), writes to one node's disk must show in that
//! disk's counters only, and pmem contents must survive a killed QEMU.
//!
//! Needs the release binaries (`cargo build --release`) and the lab's kernel cache; see
//! lab/README.md.

use numaio_lab::dm_linear::{self, LinearMap};
use numaio_lab::filefrag;
use numaio_lab::guest_script::node_disks_prelude;
use numaio_lab::{
    blank_image, GuestNodeDisk, LabTopology, NodeDiskStat, Outcome, PowerCut, Scenario,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// Prints every NVMe namespace as `@@dev NAME NUMA_NODE SERIAL WRITE_SECTORS`, read
/// straight from sysfs (not from /tmp/node-disks, which is under test).
const PRELUDE: &str = r#"
disks() { for b in /sys/block/nvme*n*; do set -- $(cat $b/stat); echo "@@dev ${b##*/} $(cat $b/device/numa_node) $(cat $b/device/serial) $7"; done; }
"#;

/// One `@@dev` line.
#[derive(Debug, Clone)]
struct Dev {
    node: i64,
    serial: String,
    written: u64,
}

/// The `@@dev` lines between `@@begin NAME` and the next `@@begin`/end, by device name.
fn devs(out: &Outcome, section: &str) -> BTreeMap<String, Dev> {
    let mut in_section = false;
    let mut m = BTreeMap::new();
    for l in out.output.lines() {
        if let Some(name) = l.strip_prefix("@@begin ") {
            in_section = name.trim() == section;
        } else if let (true, Some(rest)) = (in_section, l.strip_prefix("@@dev ")) {
            let w: Vec<&str> = rest.split_whitespace().collect();
            assert_eq!(w.len(), 4, "bad @@dev line {l:?}\n{}", out.report());
            m.insert(
                w[0].to_string(),
                Dev {
                    node: w[1].parse().expect("numa_node"),
                    serial: w[2].to_string(),
                    written: w[3].parse().expect("write sectors"),
                },
            );
        }
    }
    assert!(
        !m.is_empty(),
        "no devices in section {section}\n{}",
        out.report()
    );
    m
}

/// QEMU node of a serial `node<N>-<K>`.
fn qemu_node_of(serial: &str) -> usize {
    serial
        .strip_prefix("node")
        .and_then(|r| r.split('-').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("serial {serial:?} does not name a node"))
}

/// Boots `topo` with `disks` (QEMU node of each disk, 16 MiB each), writes 4 MiB with
/// O_DIRECT to the first disk of guest node `target` from a writer pinned to that node,
/// and checks placement and counters.
fn disks_on_nodes(topo: LabTopology, disks: &[usize], target: u32) {
    let script = format!(
        r#"{PRELUDE}
echo "@@begin list"; cat /tmp/node-disks
echo "@@begin before"; disks
d=$(node-disk {target}) || exit 10
echo "@@begin target"; echo "$d"
echo "@@begin dd"
numactl --cpunodebind={target} --membind={target} dd if=/dev/zero of=$d bs=1M count=4 oflag=direct || exit 11
echo "@@begin after"; disks
echo "@@begin stat"; node-disk-stat
echo "@@begin numaio-run"
numaio run --cpunodebind {target} -- grep Cpus_allowed_list /proc/self/status || exit 12
echo "@@begin none"; node-disk 99; echo "rc=$?"
"#
    );
    let mut s = Scenario::new(topo.clone(), script).timeout(Duration::from_secs(90));
    for &n in disks {
        s = s.node_disk(n, 16 * MIB);
    }
    let t = Instant::now();
    let out = s.must_run();
    eprintln!(
        "{} nodes, {} disks: boot {:.1} s, whole run {:.1} s",
        topo.nodes.len(),
        disks.len(),
        out.boot_time.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.exit_code, 0, "{}", out.report());

    // every disk on its node, guest numbering
    let before = devs(&out, "before");
    assert_eq!(before.len(), disks.len(), "{}", out.report());
    let mut per_node: BTreeMap<usize, usize> = BTreeMap::new();
    for (name, d) in &before {
        let q = qemu_node_of(&d.serial);
        *per_node.entry(q).or_default() += 1;
        assert_eq!(
            d.node,
            topo.guest_node_id(q) as i64,
            "{name} ({}) is on guest node {}, expected guest node {} (QEMU node {q})\n{}",
            d.serial,
            d.node,
            topo.guest_node_id(q),
            out.report()
        );
    }
    let mut want: BTreeMap<usize, usize> = BTreeMap::new();
    for &n in disks {
        *want.entry(n).or_default() += 1;
    }
    assert_eq!(per_node, want, "disks per QEMU node\n{}", out.report());

    // /tmp/node-disks says the same
    let list = GuestNodeDisk::parse(out.section("list"));
    assert_eq!(list.len(), disks.len(), "{}", out.report());
    for l in &list {
        let name = l.dev.trim_start_matches("/dev/");
        let d = &before[name];
        assert_eq!((l.node, &l.serial), (d.node, &d.serial), "{}", out.report());
    }

    // the helper picked the target node's first disk, and only it was written to
    let target_dev = out.section("target").trim().to_string();
    let target_name = target_dev.trim_start_matches("/dev/");
    let q = topo.qemu_node_id(target).expect("target node exists");
    assert_eq!(
        before[target_name].serial,
        format!("node{q}-0"),
        "{}",
        out.report()
    );
    let after = devs(&out, "after");
    for (name, b) in &before {
        let delta = after[name].written - b.written;
        let expect = if name == target_name {
            4 * MIB / 512
        } else {
            0
        };
        assert_eq!(
            delta,
            expect,
            "{name} ({}): {delta} sectors written, expected {expect}\n{}",
            b.serial,
            out.report()
        );
    }

    // node-disk-stat agrees with sysfs
    let stat = NodeDiskStat::parse(out.section("stat"));
    assert_eq!(stat.len(), disks.len(), "{}", out.report());
    for st in &stat {
        let d = &after[st.dev.trim_start_matches("/dev/")];
        assert_eq!(
            (st.node, &st.serial, st.sectors_written),
            (d.node, &d.serial, d.written),
            "{}",
            out.report()
        );
    }

    // `numaio run --cpunodebind` pins to the node's CPUs
    let cpus = topo.cpus_of(q);
    let want_cpus = match (cpus.first(), cpus.last()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a}-{b}"),
        _ => panic!("target node {target} has no CPUs"),
    };
    assert!(
        out.section("numaio-run")
            .contains(&format!("Cpus_allowed_list:\t{want_cpus}")),
        "{}",
        out.report()
    );
    let none = out.section("none");
    assert!(
        none.contains("has no disk") && none.contains("rc=1"),
        "{}",
        out.report()
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn two_nodes_one_disk_each() {
    disks_on_nodes(LabTopology::from_nodes(&[(1, 256), (1, 192)]), &[0, 1], 1);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn four_nodes_with_a_cpu_less_node() {
    // QEMU node 2 has no CPU: the guest calls it node 3 and calls QEMU node 3 node 2. Node 1
    // has two disks, so the write must pick the right one of them too.
    let topo = LabTopology::from_nodes(&[(1, 256), (1, 128), (0, 128), (1, 128)]);
    disks_on_nodes(topo, &[0, 1, 2, 3, 1], 1);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn pmem_and_disk_survive_a_killed_guest() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pmem = dir.path().join("pmem1.img");
    let disk = dir.path().join("disk1.img");
    blank_image(&pmem, 16 * MIB).expect("pmem image");
    blank_image(&disk, 16 * MIB).expect("disk image");
    let topo = LabTopology::from_nodes(&[(1, 256), (1, 192)]);
    let boot = |script: &str| {
        Scenario::new(topo.clone(), script)
            .node_pmem_image(1, &pmem)
            .node_disk_image(1, &disk)
            .timeout(Duration::from_secs(90))
    };
    // 1 MiB of random data at 1 MiB into each device; the guest prints its checksum, then
    // idles until the host kills QEMU
    let write = r#"
cat /tmp/node-pmem
p=$(node-pmem 1) || exit 10
d=$(node-disk 1) || exit 11
n=/sys/block/${p#/dev/}/device
echo "pmem-node $(cat $n/numa_node) $(cat $n/target_node)"
head -c 1048576 /dev/urandom > /tmp/data
echo "sum $(md5sum < /tmp/data)"
dd if=/tmp/data of=$p bs=4096 seek=256 oflag=direct conv=fsync 2>/dev/null || exit 12
dd if=/tmp/data of=$d bs=4096 seek=256 oflag=direct conv=fsync 2>/dev/null || exit 13
echo WRITTEN
sleep 600
"#;
    let t = Instant::now();
    let first = boot(write)
        .run_with_cut(&PowerCut::after_lines("WRITTEN", 1))
        .unwrap_or_else(|e| panic!("numaio lab could not run the scenario: {e}"));
    eprintln!(
        "pmem boot 1 (write, kill): {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(first.cut_at.is_some(), "{}", first.report());
    assert!(
        first.output.contains("pmem-node 1 1"),
        "pmem numa_node/target_node\n{}",
        first.report()
    );
    let sum = first
        .output
        .lines()
        .find_map(|l| l.strip_prefix("sum "))
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no checksum\n{}", first.report()))
        .to_string();

    // the host file holds the bytes at the same offset (a label-less NVDIMM is one raw
    // namespace covering the whole file)
    let host = std::fs::read(&pmem).expect("reading the pmem image");
    let host_disk = std::fs::read(&disk).expect("reading the disk image");
    assert_eq!(
        host[MIB as usize..2 * MIB as usize],
        host_disk[MIB as usize..2 * MIB as usize],
        "pmem and disk images differ at 1 MiB"
    );
    assert!(
        host[MIB as usize..2 * MIB as usize].iter().any(|&b| b != 0),
        "the pmem image has no data at 1 MiB"
    );

    let read = r#"
p=$(node-pmem 1) || exit 10
d=$(node-disk 1) || exit 11
echo "pmem $(dd if=$p bs=4096 skip=256 count=256 2>/dev/null | md5sum)"
echo "disk $(dd if=$d bs=4096 skip=256 count=256 iflag=direct 2>/dev/null | md5sum)"
"#;
    let t = Instant::now();
    let second = boot(read).must_run();
    eprintln!("pmem boot 2 (read): {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(second.exit_code, 0, "{}", second.report());
    for dev in ["pmem", "disk"] {
        let got = second
            .output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{dev} ")))
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {dev} checksum\n{}", second.report()));
        assert_eq!(
            got,
            sum,
            "{dev} lost data across the kill\n{}",
            second.report()
        );
    }
}

#[test]
fn bad_node_devices_fail_before_booting() {
    let s = Scenario::new(LabTopology::uniform(2), "true").node_disk(5, 16 * MIB);
    let err = s.run().expect_err("node 5 does not exist");
    let msg = err.to_string();
    assert!(msg.contains("node 5") && msg.contains("0..=1"), "{msg}");
    let s =
        Scenario::new(LabTopology::uniform(2), "true").node_pmem_image(1, "/nonexistent/pmem.img");
    let msg = s.run().expect_err("no image").to_string();
    assert!(msg.contains("/nonexistent/pmem.img"), "{msg}");
}

#[test]
fn a_kernel_without_pmem_modules_fails_before_booting() {
    // an extracted kernel package with the virtio modules only
    let dir = tempfile::tempdir().expect("temp dir");
    let ver = "6.1.0-test";
    let vmlinuz = dir.path().join(format!("boot/vmlinuz-{ver}"));
    std::fs::create_dir_all(vmlinuz.parent().unwrap()).unwrap();
    std::fs::write(&vmlinuz, b"").unwrap();
    for m in numaio_lab::kernel::VIRTIO_MODULES {
        let p = dir.path().join("lib/modules").join(ver).join(m);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"").unwrap();
    }
    let cfg = numaio_lab::LabConfig {
        kernel: Some(vmlinuz),
        ..numaio_lab::LabConfig::from_env()
    };
    let s = Scenario::new(LabTopology::uniform(2), "true").node_pmem(1, 16 * MIB);
    let err = cfg.run(&s).expect_err("no nvdimm modules, no run");
    let msg = err.to_string();
    match err {
        numaio_lab::LabError::MissingHostFile { .. } => {
            assert!(msg.contains("libnvdimm.ko"), "{msg}")
        }
        // a machine without QEMU fails earlier, with its own hint
        numaio_lab::LabError::NoQemu(_) => numaio_testkit::skipped("qemu", &msg),
        other => panic!("unexpected error: {other}"),
    }
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn ext4_over_dm_linear_of_node_disks() {
    // The stock-kernel baseline the file system is compared with: ext4 on the node disks
    // joined by dm-linear. This proves the pieces work (dm-mod from the kernel package,
    // host dmsetup/mkfs.ext4/filefrag, per-disk counters under dm) and shows the recipe.
    if let Some(t) = dm_linear::missing_tool() {
        numaio_testkit::skip!(
            "dmsetup",
            "{t} is missing on the host (apt-get install dmsetup e2fsprogs)"
        );
    }
    let script = format!(
        r#"{prelude}
{setup}
sync
echo "@@begin before"; node-disk-stat
numactl --cpunodebind=1 --membind=1 dd if=/dev/zero of=/mnt/f bs=1M count=4 conv=fsync 2>/dev/null || exit 15
echo "@@begin after"; node-disk-stat
echo "@@begin filefrag"; filefrag -v -b4096 /mnt/f
"#,
        prelude = node_disks_prelude(&[0, 1], 0),
        setup = dm_linear::setup_script("lin", ""),
    );
    let s = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 192)]), script)
        .node_disk(0, 32 * MIB)
        .node_disk(1, 32 * MIB)
        .timeout(Duration::from_secs(90));
    let t = Instant::now();
    let out = dm_linear::with_tools(s).must_run();
    eprintln!("ext4 over dm-linear: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let lin = LinearMap::parse(out.section("dm-table"), out.section("dm-disks"))
        .unwrap_or_else(|e| panic!("{e}\n{}", out.report()));
    assert_eq!(lin.segments.len(), 2, "{}", out.report());
    // the file's extents (4 KiB blocks of the dm device) tell which disk holds it
    let files = filefrag::parse(out.section("filefrag"))
        .unwrap_or_else(|e| panic!("{e}\n{}", out.report()));
    assert_eq!(files.len(), 1, "{}", out.report());
    let mut on: BTreeMap<i64, u64> = BTreeMap::new();
    for e in &files[0].extents {
        for (n, c) in lin.blocks_per_node(e.physical, e.len, files[0].block_size) {
            *on.entry(n).or_insert(0) += c;
        }
    }
    assert_eq!(
        on.values().sum::<u64>(),
        1024,
        "4 MiB in 4 KiB blocks\n{}",
        out.report()
    );
    assert!(!on.contains_key(&-1), "blocks outside the table: {on:?}");
    // each disk was written at least what the file put on it (plus journal and metadata)
    let before = NodeDiskStat::parse(out.section("before"));
    let after = NodeDiskStat::parse(out.section("after"));
    for b in &before {
        let a = after
            .iter()
            .find(|a| a.dev == b.dev)
            .unwrap_or_else(|| panic!("{} missing after\n{}", b.dev, out.report()));
        let blocks = on.get(&b.node).copied().unwrap_or(0);
        assert!(
            a.sectors_written - b.sectors_written >= blocks * 8,
            "{} (node {}): {} sectors written, the file has {blocks} blocks there\n{}",
            b.dev,
            b.node,
            a.sectors_written - b.sectors_written,
            out.report()
        );
    }
    eprintln!(
        "ext4 over dm-linear: a node-1 writer's 4 MiB file has {} blocks on node 0's disk, {} on node 1's",
        on.get(&0).unwrap_or(&0),
        on.get(&1).unwrap_or(&0)
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn fsdax_pmem_keeps_a_dax_file_system_across_a_kill() {
    // the pmem device is switched to fsdax mode, carries ext4 mounted with -o dax, and both
    // the mode and a file written through DAX come back after QEMU is killed
    let mkfs = "/usr/sbin/mkfs.ext4";
    if !std::path::Path::new(mkfs).is_file() {
        numaio_testkit::skip!(
            "mkfs.ext4",
            "{mkfs} is missing on the host (apt-get install e2fsprogs)"
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let pmem = dir.path().join("pmem1.img");
    blank_image(&pmem, 32 * MIB).expect("pmem image");
    let topo = LabTopology::from_nodes(&[(1, 256), (1, 192)]);
    let boot = |script: &str| {
        Scenario::new(topo.clone(), script)
            .node_pmem_image(1, &pmem)
            .host_binary(mkfs)
            .timeout(Duration::from_secs(90))
    };
    let write = r#"
p=$(node-pmem-fsdax 1) || exit 10
b=/sys/block/${p#/dev/}
echo "dax $(cat $b/queue/dax) node $(cat $b/device/numa_node)"
mkfs.ext4 -q -F -b 4096 $p || exit 11
mount -t ext4 -o dax $p /mnt || exit 12
grep -q "/mnt ext4 .*dax" /proc/mounts || exit 13
head -c 262144 /dev/urandom > /tmp/data
echo "sum $(md5sum < /tmp/data)"
numactl --cpunodebind=1 dd if=/tmp/data of=/mnt/f bs=64k conv=fsync 2>/dev/null || exit 14
sync
echo WRITTEN
sleep 600
"#;
    let t = Instant::now();
    let first = boot(write)
        .run_with_cut(&PowerCut::after_lines("WRITTEN", 1))
        .unwrap_or_else(|e| panic!("numaio lab could not run the scenario: {e}"));
    eprintln!(
        "fsdax boot 1 (switch, mkfs, write, kill): {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(first.cut_at.is_some(), "{}", first.report());
    assert!(first.output.contains("dax 1 node 1"), "{}", first.report());
    let sum = first
        .output
        .lines()
        .find_map(|l| l.strip_prefix("sum "))
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no checksum\n{}", first.report()))
        .to_string();
    let read = r#"
cat /tmp/node-pmem
p=$(node-pmem 1) || exit 10
echo "dax $(cat /sys/block/${p#/dev/}/queue/dax)"
mount -t ext4 -o dax $p /mnt || exit 11
echo "sum $(md5sum < /mnt/f)"
"#;
    let t = Instant::now();
    let second = boot(read).must_run();
    eprintln!("fsdax boot 2 (read): {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(second.exit_code, 0, "{}", second.report());
    assert!(
        second.output.contains("dax 1"),
        "fsdax mode not kept\n{}",
        second.report()
    );
    assert!(
        second.output.contains(&format!("sum {sum}")),
        "the file changed across the kill (wrote {sum})\n{}",
        second.report()
    );
}
