//! Lab tests of issue 4: `numaio ps` and the placement daemon with real processes in 2- and
//! 4-node guests. Several scenarios share one boot to save time; each prints its evidence
//! on lines with a tag (`DA {...}` = a daemon JSON line of scenario a, `WHERE0 {...}` = a
//! `where --json` document) and the host parses and checks them.
//!
//! The reader is `numaio-probe reader`: it loops over a file with read(2) and appends its
//! own `getcpu` (`... cpu=C node=N ...`) to a report file every 100 ms.
//!
//! The eBPF collector stays off here (`--no-ebpf`, `ps --source estimate`): attaching it
//! while readers run soft-locks these TCG guests (docs/bpf.md); `lab/tests/bpf.rs` tests it
//! with the measured process stopped while it attaches. These tests are about the decisions.
//!
//! Needs `cargo build --release` first (the guest runs `target/release` binaries); run with
//! `cargo test -p numaio-lab --release --test daemon -- --ignored` (`NUMAIO_LAB_SHOW=1` and
//! `--nocapture` print the guests' output).

use numaio_lab::{DiskFile, DiskSpec, LabTopology, Scenario};
use serde_json::Value;
use std::time::Duration;

const MB: u64 = 1 << 20;

/// The JSON documents on lines tagged `tag`.
fn tagged(out: &str, tag: &str) -> Vec<Value> {
    let prefix = format!("{tag} ");
    out.lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .filter_map(|l| serde_json::from_str(l.trim()).ok())
        .collect()
}

/// The raw text after `tag ` on the last line tagged `tag`.
fn tagged_text(out: &str, tag: &str) -> String {
    let prefix = format!("{tag} ");
    out.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// `node=N` from a reader report line.
fn reader_node(line: &str) -> Option<u32> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("node="))
        .and_then(|n| n.parse().ok())
}

/// Resident pages per node from a `where --json` document (first file).
fn where_nodes(v: &Value) -> Vec<(u32, u64)> {
    let f = &v["files"][0];
    let mut out: Vec<(u32, u64)> = f["nodes"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.parse().unwrap(), v.as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn pages_on(v: &Value, node: u32) -> u64 {
    where_nodes(v)
        .iter()
        .find(|(n, _)| *n == node)
        .map_or(0, |(_, p)| *p)
}

/// Prints the scenario's output when `NUMAIO_LAB_SHOW` is set (for reports and debugging).
fn show(out: &numaio_lab::Outcome) {
    if std::env::var_os("NUMAIO_LAB_SHOW").is_some() {
        eprintln!("{}", out.output);
    }
}

fn decisions<'a>(lines: &'a [Value], verdict: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["event"] == "decision" && l["verdict"] == verdict)
        .collect()
}

fn cpus_allowed(out: &str, tag: &str) -> String {
    tagged_text(out, tag)
        .split_whitespace()
        .last()
        .unwrap_or("")
        .to_string()
}

const TWO_NODE_SCRIPT: &str = r#"
F=/mnt/f
numactl --membind=1 cat $F > /dev/null
echo "WHERE0 $(numaio where --json $F)"
numactl --cpunodebind=0 numaio-probe reader --file $F --report /tmp/r1 --interval-ms 100 &
R=$!
sleep 1
echo "READER $R"
echo "PS $(numaio ps --source estimate --json --interval 0.5 $R)"
echo "WHEREG $(numaio where --json $F)"
# The reader is pinned by numactl: without --manage-pinned it is left alone.
numaio daemon --no-ebpf --policy follow-data --interval 0.5 --iterations 2 --json --include-pid $R | sed 's/^/DP /'
# (d) dry run
numaio daemon --no-ebpf --policy follow-data --interval 0.5 --iterations 3 --json --manage-pinned --dry-run --include-pid $R | sed 's/^/DD /'
echo "AFF_D $(grep Cpus_allowed_list /proc/$R/status)"
echo "NODE_D $(tail -n 1 /tmp/r1)"
echo "WHERED $(numaio where --json $F)"
# (e) excluded
numaio daemon --no-ebpf --policy follow-data --interval 0.5 --iterations 3 --json --manage-pinned --exclude-pid $R | sed 's/^/DE /'
echo "AFF_E $(grep Cpus_allowed_list /proc/$R/status)"
echo "NODE_E $(tail -n 1 /tmp/r1)"
# (a) follow-data
numaio daemon --no-ebpf --policy follow-data --interval 0.5 --iterations 2 --json --manage-pinned --include-pid $R | sed 's/^/DA /'
sleep 0.5
echo "NODE_A $(tail -n 1 /tmp/r1)"
echo "AFF_A $(grep Cpus_allowed_list /proc/$R/status)"
kill $R
wait $R 2>/dev/null
# (b) pull-data: a new reader on node 0, the file still on node 1
numactl --cpunodebind=0 numaio-probe reader --file $F --report /tmp/r2 --interval-ms 100 &
R2=$!
sleep 1
echo "WHEREB0 $(numaio where --json $F)"
numaio daemon --no-ebpf --policy pull-data --interval 0.5 --iterations 2 --json --manage-pinned --include-pid $R2 | sed 's/^/DB /'
echo "WHEREB $(numaio where --json $F)"
echo "NODE_B $(tail -n 1 /tmp/r2)"
kill $R2
wait $R2 2>/dev/null
# auto, the file now on node 0, two readers on node 1: 1 MiB reads follow the data,
# 4 KiB reads are left alone (Adams: no gain for small reads).
numactl --cpunodebind=1 numaio-probe reader --file $F --report /tmp/r3 --interval-ms 100 &
R3=$!
numactl --cpunodebind=1 numaio-probe reader --file $F --block-size 4K --report /tmp/r4 --interval-ms 100 &
R4=$!
sleep 1
echo "AUTOPIDS $R3 $R4"
numaio daemon --no-ebpf --policy auto --interval 0.5 --iterations 2 --json --manage-pinned --include-pid $R3 --include-pid $R4 | sed 's/^/DU /'
echo "NODE_U3 $(tail -n 1 /tmp/r3)"
echo "NODE_U4 $(tail -n 1 /tmp/r4)"
kill $R3 $R4
wait $R3 $R4 2>/dev/null
# pin --migrate-memory: a reader with a 16 MiB buffer, first touched on node 0.
numactl --cpunodebind=0 numaio-probe reader --file $F --block-size 16M --report /tmp/r5 --interval-ms 100 &
R5=$!
sleep 1
echo "PIN $(numaio pin $R5 --node 1 --migrate-memory --json)"
sleep 0.5
echo "NODE_PIN $(tail -n 1 /tmp/r5)"
kill $R5
wait $R5 2>/dev/null
# run --near: the file is cached on node 0 (pulled above); then --warm --node 1.
numaio run --near $F --json -- numaio-probe reader --file $F --duration 0.3 --report /tmp/r6 2> /tmp/run.err
echo "RUN $(cat /tmp/run.err)"
echo "NODE_RUN $(tail -n 1 /tmp/r6)"
numaio run --near $F --warm --node 1 --json -- numaio-probe reader --file $F --duration 0.3 --report /tmp/r7 2> /tmp/run2.err
echo "RUN2 $(cat /tmp/run2.err)"
echo "NODE_RUN2 $(tail -n 1 /tmp/r7)"
echo "WHERE_RUN2 $(numaio where --json $F)"
echo DONE
"#;

/// Scenarios a, b, d, e, g, "pinned processes are left alone" and the auto policy's
/// read-size rule, in one 2-node boot.
#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn two_node_follow_pull_dry_run_exclude_ps() {
    let s = Scenario::new(LabTopology::uniform(2), TWO_NODE_SCRIPT)
        .disk(DiskSpec::new().file(DiskFile::pattern("f", 32 * MB)))
        .timeout(Duration::from_secs(300));
    let out = s.run().expect("lab run");
    show(&out);
    let o = &out.output;
    assert!(out.success() && o.contains("DONE"), "{}", out.report());
    let page = 4096u64;
    let total_pages = 32 * MB / page;

    // Setup: the file is cached on node 1.
    let w0 = &tagged(o, "WHERE0")[0];
    assert!(
        pages_on(w0, 1) >= total_pages * 99 / 100,
        "{w0}\n{}",
        out.report()
    );

    // (g) ps --json for the reader matches `where` for its file.
    let ps = &tagged(o, "PS")[0];
    let reader_pid: i64 = tagged_text(o, "READER").parse().unwrap();
    let p = ps["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"].as_i64() == Some(reader_pid))
        .unwrap_or_else(|| panic!("reader missing from ps: {ps}"));
    let f = p["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/mnt/f")
        .unwrap_or_else(|| panic!("file missing from ps: {p}"));
    let wg = &tagged(o, "WHEREG")[0];
    for (node, pages) in where_nodes(wg) {
        let ps_bytes = f["nodes"][node.to_string()].as_u64().unwrap_or(0);
        let diff = (ps_bytes as i64 - (pages * page) as i64).unsigned_abs();
        assert!(
            diff <= page * 16,
            "node {node}: ps {ps_bytes} vs where {pages} pages\n{p}"
        );
    }
    assert_eq!(p["main_node"], 0, "{p}");
    assert!(p["locality"].as_f64().unwrap() < 0.05, "{p}");
    let n1 = p["numa_io"]["numa1_read_bytes"].as_u64().unwrap();
    let n0 = p["numa_io"]["numa0_read_bytes"].as_u64().unwrap();
    assert!(n1 > 0 && n0 * 100 <= n1, "numa_io {}", p["numa_io"]);
    assert_eq!(n0 + n1, p["read_bytes"].as_u64().unwrap());

    // Pinned by the user and no --manage-pinned: skipped, nothing done.
    let dp = tagged(o, "DP");
    assert!(decisions(&dp, "act").is_empty(), "{dp:?}");
    assert!(
        decisions(&dp, "skipped")
            .iter()
            .any(|d| d["reason"].as_str().unwrap().contains("pinned")),
        "{dp:?}"
    );

    // (d) dry run: advice printed, nothing changed.
    let dd = tagged(o, "DD");
    let advice = decisions(&dd, "advise");
    assert!(!advice.is_empty(), "{}", out.report());
    assert_eq!(advice[0]["action"]["kind"], "follow-data");
    assert_eq!(advice[0]["action"]["to"], 1);
    assert!(decisions(&dd, "act").is_empty());
    assert_eq!(cpus_allowed(o, "AFF_D"), "0", "{}", out.report());
    assert_eq!(reader_node(&tagged_text(o, "NODE_D")), Some(0));
    assert!(pages_on(&tagged(o, "WHERED")[0], 1) >= total_pages * 99 / 100);

    // (e) excluded: skipped with the reason, nothing changed.
    let de = tagged(o, "DE");
    assert!(decisions(&de, "act").is_empty(), "{de:?}");
    assert!(
        decisions(&de, "skipped")
            .iter()
            .any(|d| d["pid"].as_i64() == Some(reader_pid)
                && d["reason"].as_str().unwrap().contains("excluded")),
        "{de:?}"
    );
    assert_eq!(cpus_allowed(o, "AFF_E"), "0");
    assert_eq!(reader_node(&tagged_text(o, "NODE_E")), Some(0));

    // (a) follow-data: moved to node 1 within two intervals; its own getcpu says node 1.
    let da = tagged(o, "DA");
    let acts = decisions(&da, "act");
    assert_eq!(acts.len(), 1, "{}", out.report());
    assert!(acts[0]["iteration"].as_u64().unwrap() <= 2);
    assert_eq!(acts[0]["outcome"], "done", "{}", acts[0]);
    assert_eq!(acts[0]["action"]["to"], 1);
    assert!(acts[0]["numbers"]["remote_share"].as_f64().unwrap() > 0.9);
    assert_eq!(cpus_allowed(o, "AFF_A"), "1");
    assert_eq!(
        reader_node(&tagged_text(o, "NODE_A")),
        Some(1),
        "{}",
        out.report()
    );

    // (b) pull-data: the file's pages end up on node 0, the reader stays there.
    assert!(pages_on(&tagged(o, "WHEREB0")[0], 1) >= total_pages * 99 / 100);
    let db = tagged(o, "DB");
    let acts = decisions(&db, "act");
    assert_eq!(acts.len(), 1, "{}", out.report());
    assert_eq!(acts[0]["action"]["kind"], "pull-data");
    assert_eq!(acts[0]["outcome"], "done", "{}", acts[0]);
    let wb = &tagged(o, "WHEREB")[0];
    assert!(
        pages_on(wb, 0) >= total_pages * 95 / 100,
        "{wb}\n{}",
        out.report()
    );
    assert_eq!(reader_node(&tagged_text(o, "NODE_B")), Some(0));

    // auto: the 1 MiB reader follows its data to node 0; the 4 KiB reader is skipped.
    let pids: Vec<i64> = tagged_text(o, "AUTOPIDS")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let du = tagged(o, "DU");
    let acts = decisions(&du, "act");
    assert_eq!(acts.len(), 1, "{}", out.report());
    assert_eq!(acts[0]["pid"].as_i64(), Some(pids[0]));
    assert_eq!(acts[0]["action"]["kind"], "follow-data");
    assert_eq!(acts[0]["action"]["to"], 0);
    assert!(acts[0]["numbers"]["follow_gain"].as_f64().unwrap() > 0.02);
    assert!(
        decisions(&du, "skipped")
            .iter()
            .any(|d| d["pid"].as_i64() == Some(pids[1])
                && d["reason"].as_str().unwrap().contains("small reads")),
        "{}",
        out.report()
    );
    assert_eq!(reader_node(&tagged_text(o, "NODE_U3")), Some(0));
    assert_eq!(reader_node(&tagged_text(o, "NODE_U4")), Some(1));

    // pin --migrate-memory: threads on node 1, and most of the memory followed.
    let pin = &tagged(o, "PIN")[0];
    assert_eq!(pin["node"], 1, "{pin}");
    assert_eq!(pin["affinity"]["threads_set"], 1, "{pin}");
    let mem = |k: &str, n: &str| pin[k][n].as_u64().unwrap_or(0);
    assert!(mem("memory_per_node_before", "0") >= 16 * MB, "{pin}");
    let after_total = mem("memory_per_node_after", "0") + mem("memory_per_node_after", "1");
    assert!(
        mem("memory_per_node_after", "1") * 10 >= after_total * 8,
        "{pin}"
    );
    assert_eq!(reader_node(&tagged_text(o, "NODE_PIN")), Some(1));

    // run --near starts the command on the node holding the cache; --warm --node 1 moves
    // the cache there first and starts it on node 1.
    let run = &tagged(o, "RUN")[0];
    assert_eq!(run["node"], 0, "{run}");
    assert_eq!(reader_node(&tagged_text(o, "NODE_RUN")), Some(0));
    let run2 = &tagged(o, "RUN2")[0];
    assert_eq!(run2["node"], 1, "{run2}");
    assert_eq!(run2["warmed"], true);
    assert_eq!(reader_node(&tagged_text(o, "NODE_RUN2")), Some(1));
    let wr = &tagged(o, "WHERE_RUN2")[0];
    assert!(pages_on(wr, 1) >= total_pages * 95 / 100, "{wr}");
}

const FOUR_NODE_SCRIPT: &str = r#"
F=/mnt/s
G=/mnt/g
numactl --membind=2 cat $F > /dev/null
numactl --membind=2 cat $G > /dev/null
# (c) two readers on nodes 0 and 1 share one file cached on node 2.
numactl --cpunodebind=0 numaio-probe reader --file $F --report /tmp/ca --interval-ms 100 &
A=$!
numactl --cpunodebind=1 numaio-probe reader --file $F --report /tmp/cb --interval-ms 100 &
B=$!
sleep 1
echo "CPIDS $A $B"
numaio daemon --no-ebpf --policy pull-data --interval 0.5 --iterations 10 --json --manage-pinned --include-pid $A --include-pid $B | sed 's/^/CP /'
echo "WHEREC $(numaio where --json $F)"
numaio daemon --no-ebpf --policy follow-data --interval 0.5 --iterations 10 --json --manage-pinned --include-pid $A --include-pid $B | sed 's/^/CF /'
echo "NODE_CA $(tail -n 1 /tmp/ca)"
echo "NODE_CB $(tail -n 1 /tmp/cb)"
kill $A $B
wait $A $B 2>/dev/null
# (f) a process that exits while the daemon acts on it: each action waits 1.5 s after
# checking the process, and the short reader exits 1.5 s after it starts.
NUMAIO_DAEMON_ACT_DELAY_MS=1500 numaio daemon --no-ebpf --policy follow-data --interval 0.5 --iterations 14 --json --manage-pinned --exclude-comm sh > /tmp/df.log &
D=$!
sleep 1
numactl --cpunodebind=0 numaio-probe reader --file $G --report /tmp/fs --duration 1.5 &
S=$!
echo "SHORT $S"
sleep 3
numactl --cpunodebind=1 numaio-probe reader --file $G --report /tmp/fl --interval-ms 100 &
L=$!
echo "LONG $L"
wait $D
echo "DAEMON_RC $?"
sed 's/^/DF /' /tmp/df.log
echo "NODE_FL $(tail -n 1 /tmp/fl)"
kill $L
# ps as an unprivileged user: other users' processes are unreadable, not an error.
as-nobody numaio ps --source estimate --json --interval 0.2 > /tmp/psn
echo "PSN_RC $?"
echo "PSN $(cat /tmp/psn)"
echo DONE
"#;

/// Scenarios c and f in one 4-node boot.
#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn four_node_shared_file_no_ping_pong_and_exit_mid_action() {
    let s = Scenario::new(LabTopology::uniform(4), FOUR_NODE_SCRIPT)
        .disk(
            DiskSpec::new()
                .file(DiskFile::pattern("s", 16 * MB))
                .file(DiskFile::pattern("g", 16 * MB)),
        )
        .timeout(Duration::from_secs(400));
    let out = s.run().expect("lab run");
    show(&out);
    let o = &out.output;
    assert!(out.success() && o.contains("DONE"), "{}", out.report());
    let total_pages = 16 * MB / 4096;

    // (c) pull-data: the shared file is never pulled (it would ping-pong); it stays on 2.
    let cp = tagged(o, "CP");
    assert_eq!(
        cp.iter().filter(|l| l["event"] == "interval").count(),
        10,
        "{}",
        out.report()
    );
    assert!(decisions(&cp, "act").is_empty(), "{cp:?}");
    assert!(
        decisions(&cp, "blocked")
            .iter()
            .any(|d| d["reason"].as_str().unwrap().contains("ping-pong")),
        "{}",
        out.report()
    );
    assert!(pages_on(&tagged(o, "WHEREC")[0], 2) >= total_pages * 99 / 100);

    // follow-data: each reader moves at most once (to node 2), no oscillation in 10 intervals.
    let cf = tagged(o, "CF");
    let acts = decisions(&cf, "act");
    assert!(acts.len() <= 2, "{acts:?}");
    let pids: Vec<i64> = tagged_text(o, "CPIDS")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    for pid in &pids {
        assert!(
            acts.iter()
                .filter(|a| a["pid"].as_i64() == Some(*pid))
                .count()
                <= 1,
            "{acts:?}"
        );
    }
    assert!(acts.iter().all(|a| a["action"]["to"] == 2), "{acts:?}");
    // A moved reader runs on node 2 now; one left alone (e.g. by the CPU-congestion guard,
    // node 2 having one CPU) still runs where it started.
    for (i, (pid, tag)) in pids.iter().zip(["NODE_CA", "NODE_CB"]).enumerate() {
        let moved = acts.iter().any(|a| a["pid"].as_i64() == Some(*pid));
        let expect = if moved { 2 } else { i as u32 };
        assert_eq!(
            reader_node(&tagged_text(o, tag)),
            Some(expect),
            "{}",
            out.report()
        );
    }
    assert!(!acts.is_empty(), "{}", out.report());

    // (f) the daemon keeps going after a process exits during its move.
    assert_eq!(tagged_text(o, "DAEMON_RC"), "0", "{}", out.report());
    let df = tagged(o, "DF");
    assert_eq!(
        df.iter().filter(|l| l["event"] == "interval").count(),
        14,
        "{}",
        out.report()
    );
    let short: i64 = tagged_text(o, "SHORT").parse().unwrap();
    let long: i64 = tagged_text(o, "LONG").parse().unwrap();
    let exited: Vec<_> = df
        .iter()
        .filter(|l| l["pid"].as_i64() == Some(short) && l["outcome"] == "process-exited")
        .collect();
    assert!(!exited.is_empty(), "{}", out.report());
    let moved: Vec<_> = df
        .iter()
        .filter(|l| l["pid"].as_i64() == Some(long) && l["outcome"] == "done")
        .collect();
    assert_eq!(moved.len(), 1, "{}", out.report());
    assert_eq!(
        reader_node(&tagged_text(o, "NODE_FL")),
        Some(2),
        "{}",
        out.report()
    );
}
