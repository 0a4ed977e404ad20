//! Lab tests: `numaio probe --json` in 2-, 4- and 8-node guests (CPU-less nodes included)
//! gives matrices of the right shape in the guest's node order, and reads back exactly the
//! HMAT latency and bandwidth QEMU advertises, from the raw table as root and from sysfs's
//! access classes (local pairs only) as an unprivileged user. Timing inside an emulated guest
//! means nothing, so no timing is asserted.

use numaio_lab::{LabTopology, Scenario};
use serde_json::Value;
use std::time::Duration;

/// Distinct advertised values per (initiator, target) QEMU node pair.
fn hmat_values(n: usize) -> (Vec<Vec<u32>>, Vec<Vec<u64>>) {
    let lat = (0..n)
        .map(|i| {
            (0..n)
                .map(|t| {
                    if i == t {
                        10
                    } else {
                        20 + 3 * (i * n + t) as u32
                    }
                })
                .collect()
        })
        .collect();
    let bw = (0..n)
        .map(|i| {
            (0..n)
                .map(|t| {
                    if i == t {
                        20480
                    } else {
                        4096 + 64 * (i * n + t) as u64
                    }
                })
                .collect()
        })
        .collect();
    (lat, bw)
}

fn matrix(v: &Value, what: &str) -> Vec<Vec<Option<f64>>> {
    v.as_array()
        .unwrap_or_else(|| panic!("{what} is not a matrix: {v}"))
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap_or_else(|| panic!("{what} row is not a list: {r}"))
                .iter()
                .map(Value::as_f64)
                .collect()
        })
        .collect()
}

fn check(topo: LabTopology) {
    let n = topo.nodes.len();
    let (lat, bw) = hmat_values(n);
    // Root first (raw ACPI table), then the same as nobody (sysfs only); one JSON line each.
    let script = "numaio probe --quick --buffer-mib 4 --json --dir /tmp && \
                  as-nobody numaio probe --quick --buffer-mib 4 --json --dir /tmp";
    let out = Scenario::new(topo.clone(), script)
        .hmat(lat.clone(), bw.clone())
        .timeout(Duration::from_secs(600))
        .must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    // The guest's stderr is its console, a terminal, so the progress bar is drawn there and
    // its last frame shares a line with the JSON: parse each line from its first brace.
    let docs: Vec<Value> = out
        .output
        .lines()
        .filter_map(|l| {
            l.find('{')
                .and_then(|k| serde_json::from_str(l[k..].trim()).ok())
        })
        .collect();
    assert_eq!(docs.len(), 2, "two JSON profiles\n{}", out.report());
    let expected = topo.expected_guest();
    let ids: Vec<u64> = expected.iter().map(|e| u64::from(e.id)).collect();
    for (k, p) in docs.iter().enumerate() {
        let root = k == 0;
        let got: Vec<u64> = p["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(got, ids, "node ids\n{}", out.report());
        let l = matrix(&p["latency_ns"], "latency_ns");
        assert_eq!(l.len(), n);
        for (gi, e) in expected.iter().enumerate() {
            assert_eq!(l[gi].len(), n);
            if e.cpus.is_empty() {
                assert!(
                    l[gi].iter().all(Option::is_none),
                    "CPU-less node {} has a latency row",
                    e.id
                );
            } else {
                // Every node has memory: a full row (no node was skipped).
                assert!(
                    l[gi].iter().all(Option::is_some),
                    "node {}: {:?}\n{}",
                    e.id,
                    l[gi],
                    out.report()
                );
            }
        }
        for key in [
            "read", "write", "write_nt", "rw_3_1", "rw_2_1", "rw_1_1", "copy",
        ] {
            let m = matrix(&p["bandwidth_mb_s"][key], key);
            assert_eq!(m.len(), n, "{key}");
            for (gi, e) in expected.iter().enumerate() {
                assert_eq!(
                    m[gi].iter().filter(|x| x.is_some()).count(),
                    if e.cpus.is_empty() { 0 } else { n },
                    "{key} row of node {}",
                    e.id
                );
            }
        }
        // SLIT distances, in guest order.
        let d = matrix(&p["advertised"]["distance"], "distance");
        for (gi, e) in expected.iter().enumerate() {
            for (gj, f) in expected.iter().enumerate() {
                assert_eq!(d[gi][gj], Some(f64::from(e.distances[&f.id])));
            }
        }
        // HMAT: the value set for QEMU pair (initiator, target) at guest (i, j).
        let hl = matrix(&p["advertised"]["latency_ns"], "advertised latency");
        let hb = matrix(&p["advertised"]["bandwidth_mb_s"], "advertised bandwidth");
        let notes = p["notes"].to_string();
        for (gi, e) in expected.iter().enumerate() {
            for (gj, f) in expected.iter().enumerate() {
                let (qi, qj) = (e.qemu_id as usize, f.qemu_id as usize);
                let want =
                    (!e.cpus.is_empty()).then(|| (f64::from(lat[qi][qj]), bw[qi][qj] as f64));
                // sysfs shows each target's best initiators only: here the local one, or for
                // a CPU-less target the node named as its initiator (the first with CPUs).
                let local = if f.cpus.is_empty() {
                    e.qemu_id == 0
                } else {
                    gi == gj
                };
                let want = if root || local { want } else { None };
                assert_eq!(
                    (hl[gi][gj], hb[gi][gj]),
                    want.map_or((None, None), |(a, b)| (Some(a), Some(b))),
                    "{} HMAT at guest ({}, {}) = QEMU ({qi}, {qj}); notes {notes}\n{}",
                    if root { "root" } else { "nobody" },
                    e.id,
                    f.id,
                    out.report()
                );
            }
        }
        if !root {
            assert!(
                notes.contains("needs root"),
                "unprivileged run says what it skipped: {notes}"
            );
        }
    }
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn probe_two_nodes_hmat() {
    check(LabTopology::from_nodes(&[(1, 512), (1, 512)]));
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn probe_four_nodes_cpuless_in_the_middle() {
    // QEMU node 2 is CPU-less: the guest calls it node 3.
    let topo = LabTopology::from_nodes(&[(1, 384), (2, 384), (0, 384), (1, 384)]);
    assert_eq!(topo.guest_node_ids(), vec![0, 1, 3, 2]);
    check(topo);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn probe_eight_nodes_with_cpuless_nodes() {
    let topo = LabTopology::from_nodes(&[
        (1, 256),
        (0, 256),
        (1, 256),
        (1, 256),
        (0, 256),
        (1, 256),
        (0, 256),
        (1, 256),
    ]);
    check(topo);
}
