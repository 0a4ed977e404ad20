//! Lab test: `numaio run` on a guest with far memory, a CPU-less node (as CXL memory shows
//! up): `--near` picks the CPU node nearest to cache held there, numactl's flags reach the
//! command, and a CPU binding to the CPU-less node is refused as a usage error.

use numaio_lab::{DiskFile, DiskSpec, LabTopology, Scenario};
use std::time::Duration;

/// The text after `TAG ` on the line starting with it.
fn tagged<'a>(out: &'a str, tag: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{tag} ")))
        .unwrap_or_else(|| panic!("no {tag} line in:\n{out}"))
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn run_near_far_memory_and_numactl_flags() {
    // Guest nodes 0 and 1 have a CPU each; node 2 is memory only, 14 from node 1 and 26
    // from node 0 (the far memory sits behind node 1).
    let topo = LabTopology::from_nodes(&[(1, 384), (1, 256), (0, 256)]).with_distances(vec![
        vec![10, 20, 26],
        vec![20, 10, 14],
        vec![26, 14, 10],
    ]);
    let script = r#"
F=/mnt/f.bin; G=/mnt/g.bin
numaio warm $F --node 2 >/dev/null; echo "WARM rc=$?"
numaio where $F --json > /tmp/w; echo "WHEREF $(head -c 2000 /tmp/w)"
numaio run --near $F --json -- sh -c 'grep Cpus_allowed_list /proc/self/status' 2>/tmp/plan >/tmp/near
echo "NEAR rc=$? $(cat /tmp/near)"
echo "PLAN $(cat /tmp/plan)"
numaio run -q --cpunodebind 2 -- true 2>/tmp/e; echo "CPULESS rc=$? $(cat /tmp/e)"
numaio run -q -N 1 -m 2 -- sh -c 'grep Cpus_allowed_list /proc/self/status; grep -o "bind:[0-9,-]*" /proc/self/numa_maps | head -1' >/tmp/b
echo "BIND rc=$? $(cat /tmp/b | tr '\n' ' ')"
numaio run -q -i all -- sh -c 'grep -o "interleave:[0-9,-]*" /proc/self/numa_maps | head -1' >/tmp/i
echo "INTERLEAVE rc=$? $(cat /tmp/i)"
numaio run -q -p 2 -- sh -c 'grep -o "prefer[a-z]*:[0-9]*" /proc/self/numa_maps | head -1' >/tmp/p
echo "PREFER rc=$? $(cat /tmp/p)"
numaio run -q --membind 2 -- cat $G >/dev/null; echo "CATG rc=$?"
numaio where $G --json > /tmp/g; echo "WHEREG $(head -c 2000 /tmp/g)"
numaio run -q -m 2 -- no-such-program; echo "MISSING rc=$?"
true
"#;
    let out = Scenario::new(topo, script)
        .disk(
            DiskSpec::new()
                .file(DiskFile::pattern("f.bin", 8 << 20))
                .file(DiskFile::pattern("g.bin", 4 << 20)),
        )
        .timeout(Duration::from_secs(180))
        .must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let o = &out.output;
    let rep = out.report();
    assert_eq!(tagged(o, "WARM"), "rc=0", "{rep}");
    let wf: serde_json::Value = serde_json::from_str(tagged(o, "WHEREF")).unwrap();
    let pages = wf["files"][0]["pages"].as_u64().unwrap();
    assert_eq!(wf["files"][0]["nodes"]["2"].as_u64(), Some(pages), "{rep}");

    // Cache on the CPU-less node 2: the command runs on node 1 (CPU 1), nearest to it.
    assert_eq!(tagged(o, "NEAR"), "rc=0 Cpus_allowed_list:\t1", "{rep}");
    let plan: serde_json::Value = serde_json::from_str(tagged(o, "PLAN")).unwrap();
    assert_eq!(plan["node"], 1, "{rep}");
    assert!(
        plan["reason"].as_str().unwrap().contains("no CPUs"),
        "{rep}"
    );
    assert!(
        plan["distance_cost"]["1"].as_u64() < plan["distance_cost"]["0"].as_u64(),
        "{rep}"
    );

    let e = tagged(o, "CPULESS");
    assert!(e.starts_with("rc=2 "), "{rep}");
    assert!(e.contains("node 2 has no CPUs"), "{rep}");

    assert_eq!(
        tagged(o, "BIND"),
        "rc=0 Cpus_allowed_list:\t1 bind:2 ",
        "{rep}"
    );
    assert_eq!(tagged(o, "INTERLEAVE"), "rc=0 interleave:0-2", "{rep}");
    assert!(tagged(o, "PREFER").starts_with("rc=0 prefer"), "{rep}");
    assert!(tagged(o, "PREFER").ends_with(":2"), "{rep}");

    // The page cache `cat` read in under --membind 2 is on node 2.
    assert_eq!(tagged(o, "CATG"), "rc=0", "{rep}");
    let wg: serde_json::Value = serde_json::from_str(tagged(o, "WHEREG")).unwrap();
    let pages = wg["files"][0]["pages"].as_u64().unwrap();
    assert_eq!(wg["files"][0]["nodes"]["2"].as_u64(), Some(pages), "{rep}");

    assert_eq!(tagged(o, "MISSING"), "rc=127", "{rep}");
}
