//! Lab tests of `numaio mount`: unmodified programs (busybox `dd`, `numaio-probe reader`)
//! use the volume through FUSE in guests with one NVMe disk per node, on both lab kernels
//! (Debian 6.1, FUSE a module; Debian 7.3, FUSE built in) where it makes sense; the
//! choice per test is in lab/README.md.
//!
//! - Writers pinned with `numactl --cpunodebind=N` put ≥ 99 % of their blocks on node N
//!   (the volume's map after umount) and their file's metadata on node N (`meta_node` in
//!   `numaio fs ls --json`), node N's disk gets the writes (its write counter),
//!   and the mount's per-process accounting (`numaio fs stat MOUNTPOINT --json`:
//!   `processes[].nodes[] {node, read_bytes, write_bytes}`) shows the bytes on node N.
//! - With `--move-work migrate-thread`, an unpinned reader of a file on node 1 ends on node
//!   1's CPUs, and ≥ 95 % of its reads are local by the accounting.
//! - Misplaced files: node-pinned creators through the mount against stock ext4 over
//!   dm-linear of the same disks.
//!
//! fio is not used in the guest: it would bring about 80 MB of shared libraries (librbd,
//! ...) into the RAM initramfs of 256 MiB-per-node guests. Needs the release binaries
//! (`cargo build --release -p numaio -p numaio-lab --bins`) and both kernels in the lab
//! cache (`scripts/setup.sh`).

use numaio_lab::dm_linear;
use numaio_lab::fs_map::{fraction_on, map_section, misplaced_ext4_vs_numaio, written};
use numaio_lab::guest_script::node_disks_prelude;
use numaio_lab::{GuestKernel, LabTopology, Outcome, Scenario};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// Shell lines that make a volume of `$devs` and mount it on /v (section `mount`).
const MOUNT: &str = r#"
numaio mkfs $devs >/dev/null || exit 11
mkdir -p /v
echo "@@begin mount"; numaio mount --json $devs /v || exit 12
"#;

/// Shell lines that unmount /v and print the volume's map and fsck (sections `map`, `fsck`).
const UMOUNT_MAP: &str = r#"
numaio umount /v || exit 14
echo "@@begin map"; numaio fs map --json $dargs / || exit 15
echo "@@begin ls"; numaio fs ls --json $dargs / || exit 16
echo "@@begin fsck"; numaio fsck $devs; echo "rc=$?"
"#;

/// Per node of the data, `(read_bytes, write_bytes)` of process `pid` from `numaio fs stat
/// MOUNTPOINT --json`; panics, naming what is missing, when the accounting lacks it.
fn process_io(out: &Outcome, section: &str, pid: u64) -> BTreeMap<u64, (u64, u64)> {
    let text = out.section(section);
    let stat = numaio_lab::guest_script::first_json(text).unwrap_or_else(|| {
        panic!(
            "`numaio fs stat MOUNTPOINT --json` printed no JSON (per-process accounting of \
             the mount missing?):\n{text}\n{}",
            out.report()
        )
    });
    let procs = stat["processes"].as_array().unwrap_or_else(|| {
        panic!(
            "`numaio fs stat MOUNTPOINT --json` has no processes[] (per-process accounting \
             missing):\n{stat}"
        )
    });
    let p = procs
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("no accounting for pid {pid} in processes[]:\n{stat}"));
    p["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("pid {pid}: no nodes[] in {p}"))
        .iter()
        .map(|n| {
            let field = |k: &str| {
                n[k].as_u64()
                    .unwrap_or_else(|| panic!("pid {pid}: nodes[] entry without {k}: {n}"))
            };
            (field("node"), (field("read_bytes"), field("write_bytes")))
        })
        .collect()
}

/// Bytes process `pid` read while it ran on the node holding them (`local_read_bytes`
/// summed over its `nodes[]` in `numaio fs stat MOUNTPOINT --json`).
fn local_reads(out: &Outcome, section: &str, pid: u64) -> u64 {
    let stat = numaio_lab::guest_script::first_json(out.section(section))
        .unwrap_or_else(|| panic!("fs stat MOUNTPOINT printed no JSON\n{}", out.report()));
    let p = stat["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"].as_u64() == Some(pid)))
        .unwrap_or_else(|| panic!("no accounting for pid {pid}:\n{stat}"));
    p["nodes"]
        .as_array()
        .map(|ns| {
            ns.iter()
                .map(|n| {
                    n["local_read_bytes"]
                        .as_u64()
                        .unwrap_or_else(|| panic!("pid {pid}: no local_read_bytes in {n}"))
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Writers pinned to each of `nodes` write a 4 MiB file with `dd conv=fsync` through the
/// mount; each file is ≥ 99 % on its writer's node with its metadata there too, the
/// writer's disk got the writes, and the accounting shows the writer's bytes on its node.
fn pinned_writers(k: GuestKernel, topo: LabTopology, nodes: &[u32]) {
    let list: Vec<String> = nodes.iter().map(u32::to_string).collect();
    let script = format!(
        r#"{prelude}{mount}
head -c 4194304 /dev/urandom > /tmp/src
for n in {list}; do
  echo "@@begin before-$n"; node-disk-stat
  numactl --cpunodebind=$n --membind=$n dd if=/tmp/src of=/v/w$n bs=64k conv=fsync 2>/dev/null &
  p=$!; wait $p || exit 13
  echo "@@begin pid-$n"; echo $p
  echo "@@begin after-$n"; node-disk-stat
done
cmp /tmp/src /v/w{first} || exit 17
echo "@@begin acct"; numaio fs stat /v --json
{umount}"#,
        prelude = node_disks_prelude(nodes, 0),
        mount = MOUNT,
        umount = UMOUNT_MAP,
        list = list.join(" "),
        first = nodes[0],
    );
    let mut s = Scenario::new(topo.clone(), script)
        .kernel(k)
        .fuse()
        .retry_after_guest_lockup()
        .timeout(Duration::from_secs(300));
    for &n in nodes {
        s = s.node_disk(topo.qemu_node_id(n).expect("node"), 64 * MIB);
    }
    let t = Instant::now();
    let out = s.must_run();
    eprintln!(
        "mount, pinned dd writers, {} nodes, {k}: {:.1} s",
        nodes.len(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let devs: Vec<String> = out
        .section("devs")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let map = map_section(&out, "map");
    let ls = out.section_json("ls");
    for (i, &n) in nodes.iter().enumerate() {
        let name = format!("w{n}");
        let entry = ls["entries"]
            .as_array()
            .and_then(|e| e.iter().find(|e| e["name"] == name.as_str()))
            .unwrap_or_else(|| panic!("/{name} missing from fs ls\n{}", out.report()));
        assert_eq!(entry["size"].as_u64(), Some(4 * MIB), "{entry}");
        // The inode's metadata goes on its creator's node: the pinned dd's, not the node of
        // the thread that served its CREATE.
        assert_eq!(
            entry["meta_node"].as_u64(),
            Some(u64::from(n)),
            "/{name}: metadata node of a file created by a node-{n} dd: {entry}\n{}",
            out.report()
        );
        let (per, _) = map
            .get(&format!("/{name}"))
            .unwrap_or_else(|| panic!("/{name} missing from the map\n{}", out.report()));
        let frac = fraction_on(per, n as u64);
        eprintln!(
            "  node-{n} dd: {:.2} % of its blocks on node {n}",
            frac * 100.0
        );
        assert!(
            frac >= 0.99,
            "/{name}: {per:?} blocks per node, {:.1} % on node {n} (pinned writers must be \
             placed by the requesting thread's node)\n{}",
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
        eprintln!("  node-{n} dd: sectors written per disk (node, sectors): {w:?}");
        // the other disks get < 1 % of the file's sectors; device 0 also takes the journal
        // and checkpoints, which are metadata only
        for (d, (_, sectors)) in &w {
            if d != mine {
                assert!(
                    *sectors * 100 < 4 * MIB / 512,
                    "{d} got {sectors} sectors from a node-{n} writer: {w:?}\n{}",
                    out.report()
                );
            }
        }
    }
    assert!(out.section("fsck").contains("rc=0"), "{}", out.report());
    // the accounting last, so a run without it still shows every placement above
    for &n in nodes {
        assert_wrote_on_its_node(&out, n);
    }
}

/// The `dd` whose pid is in section `pid-N` wrote its 4 MiB on node N (≥ 99 % of its bytes)
/// by the accounting in section `acct`.
fn assert_wrote_on_its_node(out: &Outcome, n: u32) {
    let pid: u64 = out
        .section(&format!("pid-{n}"))
        .trim()
        .parse()
        .expect("pid");
    let io = process_io(out, "acct", pid);
    let total: u64 = io.values().map(|&(_, w)| w).sum();
    let here = io.get(&(n as u64)).map_or(0, |&(_, w)| w);
    eprintln!("  node-{n} dd (pid {pid}): accounting {io:?}");
    assert!(
        here >= 4 * MIB && here * 100 >= total * 99,
        "pid {pid}, pinned to node {n}, wrote 4 MiB: accounting {io:?}\n{}",
        out.report()
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn pinned_dd_writers_through_the_mount_two_nodes_debian61() {
    pinned_writers(
        GuestKernel::Debian61,
        LabTopology::from_nodes(&[(1, 256), (1, 256)]),
        &[0, 1],
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn pinned_dd_writers_through_the_mount_two_nodes_debian73() {
    pinned_writers(
        GuestKernel::Debian73,
        LabTopology::from_nodes(&[(1, 256), (1, 256)]),
        &[0, 1],
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn pinned_dd_writers_through_the_mount_four_nodes_debian73() {
    pinned_writers(
        GuestKernel::Debian73,
        LabTopology::from_nodes(&[(1, 192), (1, 192), (1, 192), (1, 192)]),
        &[0, 1, 2, 3],
    );
}

/// A file written by a node-1 writer is read by an unpinned `numaio-probe reader` (O_DIRECT,
/// so every read is a FUSE request) on a mount with `--move-work migrate-thread`: the
/// reader's Cpus_allowed_list ends as node 1's CPUs, and ≥ 95 % of what it read after the
/// move was asked for from node 1. How long the mount takes to notice is timing, which means
/// nothing in a guest (a loaded host stretches it), so the reads before the move are
/// reported, not judged.
fn migrate_thread(k: GuestKernel) {
    let script = format!(
        r#"{prelude}{mount}
numactl --cpunodebind=1 --membind=1 dd if=/dev/urandom of=/v/f bs=64k count=64 conv=fsync 2>/dev/null || exit 20
numaio umount /v || exit 21
echo "@@begin remount"; numaio mount --move-work migrate-thread $devs /v || exit 22
# start it pinned to node 0's CPU (exec would otherwise balance it anywhere), and once it
# runs give it every CPU back: unpinned, but away from its data's node. It reads only once
# unpinned (--wait-unpinned), or the mount would see a pinned reader, leave it (a user's
# pinning is respected), and the kernel might move it before the mount looks again.
numactl --cpunodebind=0 numaio-probe reader --file /v/f --direct --block-size 64K --duration 40 --interval-ms 500 --report /tmp/r --wait-unpinned &
p=$!
i=0; while [ ! -s /tmp/r ] && [ $i -lt 100 ]; do usleep 100000; i=$((i+1)); done
# Keep node 1's CPU busy until the mount has moved the reader: with it idle the scheduler
# may itself wake the reader there (the server's threads run on both CPUs), and then the
# mount has nothing to move. The spinner ends once the reader is restricted to CPU 1.
taskset -c 1 sh -c 'while :; do :; done' &
spin=$!
echo "@@begin cpus-before"; taskset -p 3 $p || exit 23
# the accounting at the move: what the reader asked for after it is judged for locality
( i=0; while [ $i -lt 300 ]; do
    grep -q 'Cpus_allowed_list:[[:space:]]*1$' /proc/$p/status 2>/dev/null && break
    usleep 100000; i=$((i+1))
  done; numaio fs stat /v --json > /tmp/acct-moved; kill $spin ) &
echo "@@begin acct0"; numaio fs stat /v --json
echo "@@begin pid"; echo $p
i=0
# wait for 16 passes over the file (or 30 s), then look while the reader still runs
while [ $i -lt 60 ]; do
  grep -Eq 'passes=(1[6-9]|[2-9][0-9]|[0-9]{{3,}})' /tmp/r 2>/dev/null && break
  sleep 0.5; i=$((i+1))
done
echo "@@begin cpus-after"; grep Cpus_allowed_list /proc/$p/status
echo "@@begin acct"; numaio fs stat /v --json
echo "@@begin acct-moved"; cat /tmp/acct-moved
echo "@@begin reports"; cat /tmp/r
kill $p; wait $p
kill $spin 2>/dev/null; wait
{umount}"#,
        prelude = node_disks_prelude(&[0, 1], 0),
        mount = MOUNT,
        umount = UMOUNT_MAP,
    );
    let t = Instant::now();
    let out = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 256)]), script)
        .kernel(k)
        .fuse()
        .retry_after_guest_lockup()
        .node_disk(0, 64 * MIB)
        .node_disk(1, 64 * MIB)
        .timeout(Duration::from_secs(300))
        .must_run();
    eprintln!(
        "mount --move-work migrate-thread, {k}: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    if out.exit_code == 22 {
        panic!(
            "`numaio mount --move-work migrate-thread` failed: the mount has no task placement \
             yet\n{}",
            out.report()
        );
    }
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let map = map_section(&out, "map");
    let (per, _) = &map["/f"];
    assert!(
        fraction_on(per, 1) >= 0.99,
        "the file must sit on node 1 for this test: {per:?}\n{}",
        out.report()
    );
    assert!(
        out.section("cpus-before").contains("new affinity mask: 3"),
        "the reader is given every CPU once it runs on node 0\n{}",
        out.report()
    );
    let after = out.section("cpus-after");
    let list = after.split(':').nth(1).map(str::trim).unwrap_or("");
    eprintln!("  reader's Cpus_allowed_list after: {list:?}");
    assert_eq!(
        list,
        "1",
        "the unpinned reader of node-1 data ends on node 1's CPU\n{}",
        out.report()
    );
    let pid: u64 = out.section("pid").trim().parse().expect("pid");
    let stat = numaio_lab::guest_script::first_json(out.section("acct"))
        .unwrap_or_else(|| panic!("fs stat MOUNTPOINT printed no JSON\n{}", out.report()));
    let moved = stat["moves"]["moved"].as_u64().unwrap_or(0);
    assert!(
        moved >= 1 && stat["moves"]["mode"] == "migrate-thread",
        "the mount counts the move: {}\n{}",
        stat["moves"],
        out.report()
    );
    let io = process_io(&out, "acct", pid);
    let reads: u64 = io.values().map(|&(r, _)| r).sum();
    assert!(
        reads >= 8 * MIB,
        "at least two passes over the 4 MiB file: {io:?}\n{stat}"
    );
    // Local bytes: asked for while the reader ran on the node holding them (the mount
    // records the caller's node with every request). Judged from the move (acct-moved, taken
    // as soon as the reader's CPU list became node 1's); from the unpinning (acct0) on is
    // reported. The reader may not have read yet at acct0 (it starts once unpinned).
    let listed = |section: &str| {
        numaio_lab::guest_script::first_json(out.section(section))
            .and_then(|s| {
                s["processes"]
                    .as_array()
                    .map(|ps| ps.iter().any(|p| p["pid"].as_u64() == Some(pid)))
            })
            .unwrap_or(false)
    };
    let totals = |section: &str| {
        if listed(section) {
            let io = process_io(&out, section, pid);
            (
                io.values().map(|&(r, _)| r).sum::<u64>(),
                local_reads(&out, section, pid),
            )
        } else {
            (0, 0)
        }
    };
    let (reads_unpinned0, local_unpinned0) = totals("acct0");
    let (reads_moved0, local_moved0) = totals("acct-moved");
    let local_end = local_reads(&out, "acct", pid);
    let unpinned = (local_end - local_unpinned0) as f64 / (reads - reads_unpinned0).max(1) as f64;
    let reads_after_move = reads - reads_moved0;
    assert!(
        reads_after_move >= 4 * MIB,
        "reads after the move: {reads_after_move}\n{stat}"
    );
    let local = (local_end - local_moved0) as f64 / reads_after_move as f64;
    // the reader's own getcpu samples say where it ran while reading
    let samples: Vec<&str> = out
        .section("reports")
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("node=")))
        .collect();
    let on1 = samples.iter().filter(|w| **w == "node=1").count();
    eprintln!(
        "  reader: {:.1} % of its read bytes after the move asked from the data's node \
         ({:.1} % since unpinned; accounting), {on1} of {} getcpu samples on node 1, moves {}",
        local * 100.0,
        unpinned * 100.0,
        samples.len(),
        stat["moves"]
    );
    assert!(
        local >= 0.95,
        "{:.1} % of the reader's bytes after the move were asked for from the data's node\n{}",
        local * 100.0,
        out.report()
    );
    assert!(
        samples.first() == Some(&"node=0") && samples.last() == Some(&"node=1"),
        "the reader starts on node 0 and ends on node 1: {samples:?}\n{}",
        out.report()
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn migrate_thread_moves_an_unpinned_reader_to_its_data_debian61() {
    migrate_thread(GuestKernel::Debian61);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn migrate_thread_moves_an_unpinned_reader_to_its_data_debian73() {
    migrate_thread(GuestKernel::Debian73);
}

/// Creators pinned to node 0 and node 1 take turns creating 64 KiB files with `dd
/// conv=fsync`, on stock ext4 over dm-linear of the two disks, then through `numaio mount`
/// on a volume over the same disks; a file is misplaced when most of its blocks are not on
/// its creator's node.
fn misplaced_through_the_mount(k: GuestKernel) {
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
create() {{
  i=0
  while [ $i -lt {per_node} ]; do
    for n in 0 1; do
      numactl --cpunodebind=$n --membind=$n dd if=/tmp/src of=$1/n$n-$i bs=64k conv=fsync 2>/dev/null || exit 30
    done
    i=$((i+1))
  done
}}
create /mnt
echo "@@begin ext4"
filefrag -v -b4096 /mnt/n* || exit 31
{teardown}
numaio mkfs --force $devs >/dev/null || exit 32
mkdir -p /v
numaio mount $devs /v || exit 12
create /v
{umount}"#,
        prelude = node_disks_prelude(&[0, 1], 0),
        setup = dm_linear::setup_script("lin", "-g 8192"),
        teardown = dm_linear::teardown_script("lin"),
        umount = UMOUNT_MAP,
    );
    let s = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 256)]), script)
        .kernel(k)
        .fuse()
        .retry_after_guest_lockup()
        .node_disk(0, 64 * MIB)
        .node_disk(1, 64 * MIB)
        .timeout(Duration::from_secs(480));
    let t = Instant::now();
    let out = dm_linear::with_tools(s).must_run();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let files = 2 * per_node as usize;

    let (ext4_bad, numaio_bad) = misplaced_ext4_vs_numaio(&out, per_node);
    let pct = |bad: usize| bad as f64 * 100.0 / files as f64;
    eprintln!(
        "misplaced files through the mount, {k} ({files} files of 64 KiB, creators \
         alternating between 2 nodes): ext4 over dm-linear {ext4_bad} ({:.1} %), numaio mount \
         {numaio_bad} ({:.1} %); {secs:.1} s",
        pct(ext4_bad),
        pct(numaio_bad)
    );
    assert!(
        numaio_bad * 20 <= files,
        "numaio mount misplaced {numaio_bad} of {files} files (more than 5 %)\n{}",
        out.report()
    );
    assert!(out.section("fsck").contains("rc=0"), "{}", out.report());
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn misplaced_files_through_the_mount_vs_ext4_over_dm_linear_debian61() {
    misplaced_through_the_mount(GuestKernel::Debian61);
}

/// A RAM zone volume (`numaio mount --zone 0:32M --zone 1:32M`): each zone's memory is on its
/// node (the server's numa_maps: every page of a `bind:N` mapping counted on node N), and
/// writers pinned to each node put their data in their node's zone (the accounting, by the
/// node of the data).
fn ram_zones(k: GuestKernel) {
    let script = r#"
mkdir -p /v
echo "@@begin mount"; numaio mount --json --zone 0:32M --zone 1:32M /v || exit 12
head -c 4194304 /dev/urandom > /tmp/src
for n in 0 1; do
  numactl --cpunodebind=$n --membind=$n dd if=/tmp/src of=/v/w$n bs=64k conv=fsync 2>/dev/null &
  p=$!; wait $p || exit 13
  echo "@@begin pid-$n"; echo $p
done
cmp /tmp/src /v/w1 || exit 17
echo "@@begin acct"; numaio fs stat /v --json
echo "@@begin numa_maps"; cat /proc/$(cat /proc/mounts | sed -n 's/^numaio-ram:\([0-9]*\) \/v .*/\1/p')/numa_maps
numaio umount /v || exit 14
echo "@@begin after"; ls /v | wc -l
"#;
    let t = Instant::now();
    let out = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 256)]), script)
        .kernel(k)
        .fuse()
        .retry_after_guest_lockup()
        .timeout(Duration::from_secs(300))
        .must_run();
    eprintln!(
        "mount --zone, RAM zones, {k}: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.exit_code, 0, "{}", out.report());
    // Pages of the node-bound mappings, per node: all 8192 pages of each zone on its node.
    let mut bound: BTreeMap<u64, BTreeMap<u64, u64>> = BTreeMap::new();
    for l in out.section("numa_maps").lines() {
        let Some(node) = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("bind:"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        for w in l.split_whitespace() {
            if let Some((n, pages)) = w.strip_prefix('N').and_then(|r| r.split_once('=')) {
                *bound
                    .entry(node)
                    .or_default()
                    .entry(n.parse().unwrap())
                    .or_default() += pages.parse::<u64>().unwrap();
            }
        }
    }
    eprintln!("  zone pages per bound node: {bound:?}");
    for n in [0u64, 1] {
        let pages = bound.get(&n).cloned().unwrap_or_default();
        assert!(
            pages.get(&n).copied().unwrap_or(0) >= 32 * MIB / 4096
                && pages.iter().all(|(m, p)| *m == n || *p == 0),
            "zone of node {n}: pages per node {pages:?}\n{}",
            out.report()
        );
    }
    for n in [0u32, 1] {
        assert_wrote_on_its_node(&out, n);
    }
    assert_eq!(out.section("after").trim(), "0", "{}", out.report());
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn ram_zone_volume_places_each_writer_in_its_nodes_zone_debian61() {
    ram_zones(GuestKernel::Debian61);
}
