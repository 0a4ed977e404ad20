//! Lab test: per-node replicas on a 2-node guest. A file on the guest's ext4 disk is cached
//! on node 0; `numaio run --cpunodebind 1 --replica F` reads it with read(2) and mmap and
//! sees the original's bytes on node 1's pages only, while the original's cache stays on
//! node 0 and writes to F fail with EROFS inside. After the original is rewritten the next
//! run sees the new bytes; the memory budget and hostile input are refused and change
//! nothing. The daemon's `[replicas]` pass, with `auto`, gives a file read from both
//! nodes a replica on the node that does not cache it, and refreshes it once the original
//! changes. The daemon runs with `--no-ebpf`: attaching the collector while readers run
//! soft-locks these TCG guests (docs/bpf.md), and the pass is tested on the estimate.

use numaio_lab::{DiskFile, DiskSpec, GuestKernel, LabTopology, Outcome, Scenario};
use serde_json::Value;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const PAGES: u64 = 4 * MIB / 4096;

/// `sum=… bytes=… nodes={…}` of `numaio-probe pages`: the sum and the pages per node.
fn pages_line(out: &Outcome, section: &str) -> (String, Value) {
    let s = out.section(section);
    let line = s
        .lines()
        .find(|l| l.starts_with("sum="))
        .unwrap_or_else(|| panic!("no probe line in {section}\n{}", out.report()));
    let sum = line
        .split_whitespace()
        .next()
        .and_then(|w| w.strip_prefix("sum="))
        .unwrap()
        .to_string();
    let nodes = line.split_once("nodes=").map(|(_, j)| j).unwrap();
    (sum, serde_json::from_str(nodes).unwrap())
}

/// Pages per node of the one file in a `numaio where --json` section.
fn where_nodes(out: &Outcome, section: &str) -> Value {
    out.section_json(section)["files"][0]["nodes"].clone()
}

fn replicas(k: GuestKernel) {
    let script = r#"
F=/mnt/f.bin; G=/mnt/g.bin
numaio warm $F --node 0 >/dev/null || exit 10
echo "@@begin orig-sum"; numaio-probe pages --file $F
echo "@@begin in"
numaio run -q --cpunodebind 1 --replica $F -- sh -c '
  echo "@@begin in-read"; numaio-probe pages --file /mnt/f.bin --mode read
  echo "@@begin in-mmap"; numaio-probe pages --file /mnt/f.bin --mode mmap
  echo "@@begin in-where"; numaio where --json /mnt/f.bin
  echo "@@begin in-write"; echo x >> /mnt/f.bin; echo "rc=$?"
  echo "@@begin in-cpus"; grep Cpus_allowed_list /proc/self/status'
r=$?; echo "@@begin run-rc"; echo "rc=$r"
echo "@@begin orig-where"; numaio where --json $F
echo "@@begin host-mounts"; grep -c " /mnt/f.bin " /proc/self/mountinfo
echo "@@begin list"; numaio replicate --list --json
dd if=/dev/zero of=$F bs=1M count=4 conv=notrunc 2>/dev/null || exit 11
echo "@@begin list-stale"; numaio replicate --list --json
echo "@@begin new-sum"; numaio-probe pages --file $F
echo "@@begin new-in"
numaio run -q --cpunodebind 1 --replica $F -- numaio-probe pages --file /mnt/f.bin --mode mmap
echo "@@begin list-new"; numaio replicate --list --json
echo "@@begin budget"; numaio replicate $G --nodes 1 --max-memory 6M --json; echo "rc=$?"
echo "@@begin dir"; numaio replicate /mnt 2>&1; echo "rc=$?"
mkfifo /tmp/fifo
echo "@@begin fifo"; numaio replicate /tmp/fifo 2>&1; echo "rc=$?"
echo "@@begin missing"; numaio replicate /mnt/nothing-here 2>&1; echo "rc=$?"
(exec 3>>$G; sleep 20) & w=$!
sleep 1
echo "@@begin writing"; numaio replicate $G 2>&1; echo "rc=$?"
kill $w; wait $w 2>/dev/null
echo "@@begin nonode"; numaio replicate $G --nodes 7 2>&1; echo "rc=$?"
echo "@@begin list-after"; numaio replicate --list --json
numaio evict $G >/dev/null
echo "@@begin cold"; numactl --cpunodebind=0 numaio replicate $G --nodes 1 --json
echo "@@begin cold-where"; numaio where --json $G
echo "@@begin both"; numaio replicate $G --json; echo "rc=$?"
echo "@@begin drop"; numaio replicate --drop --json; echo "rc=$?"
echo "@@begin mounts-after"; grep -c numaio-replicas /proc/self/mountinfo
echo "@@begin end"
"#;
    let out = Scenario::new(LabTopology::from_nodes(&[(1, 320), (1, 320)]), script)
        .kernel(k)
        .disk(
            DiskSpec::new()
                .file(DiskFile::pattern("f.bin", 4 * MIB))
                .file(DiskFile::pattern("g.bin", 4 * MIB)),
        )
        .timeout(Duration::from_secs(240))
        .must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let rep = out.report();

    // Inside: the original's bytes, every page the mmap touched on node 1.
    let (orig, _) = pages_line(&out, "orig-sum");
    let (read, _) = pages_line(&out, "in-read");
    let (mapped, nodes) = pages_line(&out, "in-mmap");
    assert_eq!((&read, &mapped), (&orig, &orig), "{rep}");
    assert_eq!(nodes, serde_json::json!({ "1": PAGES }), "{rep}");
    assert_eq!(
        where_nodes(&out, "in-where"),
        serde_json::json!({ "1": PAGES }),
        "{rep}"
    );
    let w = out.section("in-write");
    assert!(
        w.contains("Read-only file system") && w.contains("rc=1"),
        "{rep}"
    );
    assert!(
        out.section("in-cpus").contains("Cpus_allowed_list:\t1"),
        "{rep}"
    );
    assert!(out.section("run-rc").contains("rc=0"), "{rep}");
    // Outside: the original's cache stayed on node 0, and no bind is visible.
    assert_eq!(
        where_nodes(&out, "orig-where"),
        serde_json::json!({ "0": PAGES }),
        "{rep}"
    );
    assert_eq!(out.section("host-mounts").trim(), "0", "{rep}");
    let list = out.section_json("list");
    let l = list["replicas"].as_array().unwrap();
    assert_eq!(l.len(), 1, "{rep}");
    assert_eq!(
        (&l[0]["node"], &l[0]["fresh"], &l[0]["original"]),
        (
            &serde_json::json!(1),
            &serde_json::json!(true),
            &serde_json::json!("/mnt/f.bin")
        ),
        "{rep}"
    );
    assert_eq!(l[0]["pages_on_node"], serde_json::json!(PAGES), "{rep}");

    // Rewritten: the old replica is stale, and the next run reads the new bytes.
    let stale = out.section_json("list-stale");
    assert_eq!(
        stale["replicas"][0]["fresh"],
        serde_json::json!(false),
        "{rep}"
    );
    let (new, _) = pages_line(&out, "new-sum");
    assert_ne!(new, orig, "{rep}");
    let (seen, nodes) = pages_line(&out, "new-in");
    assert_eq!(seen, new, "{rep}");
    assert_eq!(nodes, serde_json::json!({ "1": PAGES }), "{rep}");
    let fresh = out.section_json("list-new");
    let l = fresh["replicas"].as_array().unwrap();
    assert_eq!(l.len(), 1, "the stale replica was removed: {rep}");
    assert_eq!(l[0]["fresh"], serde_json::json!(true), "{rep}");

    // The budget: f.bin's 4 MiB on node 1 plus g.bin's 4 MiB exceed 6 MiB.
    let b = out.section("budget");
    let j = out.section_json("budget");
    assert_eq!(
        j["errors"][0]["kind"],
        serde_json::json!("no_room"),
        "{rep}"
    );
    assert!(
        j["errors"][0]["error"].as_str().unwrap().contains("node 1"),
        "{rep}"
    );
    assert!(b.contains("rc=1"), "{rep}");
    for (s, want) in [
        ("dir", "is a directory"),
        ("fifo", "is a FIFO"),
        ("missing", "no such file"),
        ("writing", "open for writing by pid"),
        ("nonode", "node 7 does not exist"),
    ] {
        let t = out.section(s);
        assert!(t.contains(want), "{s}: {t}\n{rep}");
        assert!(!t.contains("rc=0"), "{s}: {t}\n{rep}");
    }
    // Nothing changed: still the one replica of f.bin.
    let after = out.section_json("list-after");
    assert_eq!(after["replicas"], fresh["replicas"], "{rep}");

    // An uncached original replicated onto node 1 by a process on node 0: the copy is on
    // node 1, the original's pages the copy read in are where that reader's would be.
    let cold = out.section_json("cold");
    assert_eq!(
        cold["replicas"][0]["pages_on_node"],
        serde_json::json!(PAGES),
        "{rep}"
    );
    assert_eq!(
        where_nodes(&out, "cold-where"),
        serde_json::json!({ "0": PAGES }),
        "{rep}"
    );

    // Both nodes by default; dropping all unmounts the per-node tmpfs mounts.
    let both = out.section_json("both");
    let mut nodes: Vec<u64> = both["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["node"].as_u64().unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, vec![0, 1], "{rep}");
    for r in both["replicas"].as_array().unwrap() {
        assert_eq!(r["pages_on_node"], serde_json::json!(PAGES), "{rep}");
    }
    let dropped = out.section_json("drop");
    assert_eq!(dropped["dropped"].as_array().unwrap().len(), 3, "{rep}");
    assert_eq!(out.section("mounts-after").trim(), "0", "{rep}");
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn replicas_give_each_node_its_own_copy_debian61() {
    replicas(GuestKernel::Debian61);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn replicas_give_each_node_its_own_copy_debian73() {
    replicas(GuestKernel::Debian73);
}

/// Readers pinned to node 0 and node 1 read one file cached on node 0: the daemon's replica
/// pass makes a replica on node 1 only (node 0 caches the whole file), logged with its read
/// source; after the original is rewritten, the next interval replaces the copy with one of
/// the new version.
fn daemon_replicas(k: GuestKernel) {
    let script = r#"
F=/mnt/f.bin
numaio warm $F --node 0 >/dev/null || exit 10
printf '[replicas]\nenabled = true\nauto = true\nmax_memory_per_node = "64M"\nmin_read_bytes_per_sec = "64K"\n' > /tmp/d.toml
numactl --cpunodebind=0 numaio-probe reader --file $F --report /tmp/r0 --interval-ms 200 &
a=$!
numactl --cpunodebind=1 numaio-probe reader --file $F --report /tmp/r1 --interval-ms 200 &
b=$!
sleep 1
echo "@@begin daemon"; numaio daemon --no-ebpf --config /tmp/d.toml --interval 1 --iterations 3 --json
echo "@@begin list"; numaio replicate --list --json
kill $a $b; wait $a $b 2>/dev/null
dd if=/dev/zero of=$F bs=1M count=1 conv=notrunc 2>/dev/null || exit 11
echo "@@begin new-sum"; numaio-probe pages --file $F
echo "@@begin refresh"; numaio daemon --no-ebpf --config /tmp/d.toml --once --json
echo "@@begin list-after"; numaio replicate --list --json
echo "@@begin copy-sum"
for r in /run/numaio/replicas/node1/*_*; do case $r in *.src) ;; *) numaio-probe pages --file $r --mode mmap;; esac; done
echo "@@begin end"
"#;
    let out = Scenario::new(LabTopology::from_nodes(&[(1, 320), (1, 320)]), script)
        .kernel(k)
        .disk(DiskSpec::new().file(DiskFile::pattern("f.bin", 4 * MIB)))
        .timeout(Duration::from_secs(240))
        .must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let rep = out.report();
    let events = |section: &str, action: &str| -> Vec<Value> {
        out.section(section)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .filter(|l| l["event"] == "replica" && l["action"] == action)
            .collect()
    };
    let made = events("daemon", "make");
    assert_eq!(made.len(), 1, "one replica made: {made:?}\n{rep}");
    assert_eq!(made[0]["outcome"], "done", "{rep}");
    assert_eq!(made[0]["numbers"]["read_source"], "estimate", "{rep}");
    let list = out.section_json("list");
    let l = list["replicas"].as_array().unwrap();
    assert_eq!(l.len(), 1, "{rep}");
    assert_eq!(l[0]["node"], serde_json::json!(1), "{rep}");
    assert_eq!(l[0]["fresh"], serde_json::json!(true), "{rep}");
    assert_eq!(l[0]["pages_on_node"], serde_json::json!(PAGES), "{rep}");

    let refreshed = events("refresh", "refresh");
    assert_eq!(refreshed.len(), 1, "{rep}");
    assert_eq!(refreshed[0]["outcome"], "done", "{rep}");
    let after = out.section_json("list-after");
    let l = after["replicas"].as_array().unwrap();
    assert_eq!(l.len(), 1, "the stale copy is gone: {rep}");
    assert_eq!(l[0]["fresh"], serde_json::json!(true), "{rep}");
    let (new, _) = pages_line(&out, "new-sum");
    let (copy, nodes) = pages_line(&out, "copy-sum");
    assert_eq!(copy, new, "{rep}");
    assert_eq!(nodes, serde_json::json!({ "1": PAGES }), "{rep}");
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn daemon_replicates_a_file_read_from_both_nodes_and_refreshes_it_debian73() {
    daemon_replicas(GuestKernel::Debian73);
}
