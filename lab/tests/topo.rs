//! Lab tests: `numaio topo --json` inside guests must match the QEMU configuration exactly
//! (node ids after the guest's renumbering, CPUs, distances; MemTotal within the
//! documented tolerance).

use numaio_lab::{LabTopology, Scenario};
use serde_json::Value;

fn check_topo(topo: LabTopology) {
    let out = Scenario::new(topo.clone(), "numaio topo --json").must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let json: Value = out
        .json()
        .unwrap_or_else(|| panic!("no JSON in output\n{}", out.report()));
    let nodes = json["nodes"].as_array().expect("nodes array");
    let expected = topo.expected_guest();
    assert_eq!(nodes.len(), expected.len(), "node count\n{}", out.report());
    for (got, want) in nodes.iter().zip(&expected) {
        let id = got["id"].as_u64().expect("id") as u32;
        assert_eq!(id, want.id, "node order/ids\n{}", out.report());
        let cpus: Vec<u32> = got["cpus"]
            .as_array()
            .expect("cpus")
            .iter()
            .map(|c| c.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(
            cpus, want.cpus,
            "cpus of guest node {id} (QEMU node {})",
            want.qemu_id
        );
        let dist: std::collections::BTreeMap<u32, u32> = got["distances"]
            .as_object()
            .expect("distances")
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.as_u64().unwrap() as u32))
            .collect();
        assert_eq!(dist, want.distances, "distances of guest node {id}");
        let mem = got["mem_total_bytes"].as_u64().expect("mem_total_bytes");
        assert!(
            want.mem_total_matches(mem),
            "guest node {id} (QEMU node {}, {} MiB backend): MemTotal {mem} outside [{}, {}]",
            want.qemu_id,
            want.mem_mib,
            want.mem_total_min_bytes(),
            want.mem_total_max_bytes()
        );
        let free = got["mem_free_bytes"].as_u64().expect("mem_free_bytes");
        assert!(free > 0 && free <= mem, "node {id}: free {free} of {mem}");
    }
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn topo_two_nodes() {
    check_topo(LabTopology::uniform(2));
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn topo_four_nodes_unequal_cpuless_custom_distances() {
    // QEMU node 2 is CPU-less, so the guest calls it node 3 and QEMU node 3 node 2.
    let dist =
        LabTopology::parse_distances("10,15,30,40;15,10,25,35;30,25,10,20;40,35,20,10").unwrap();
    let topo =
        LabTopology::from_nodes(&[(1, 768), (2, 512), (0, 384), (1, 256)]).with_distances(dist);
    assert_eq!(topo.guest_node_ids(), vec![0, 1, 3, 2]);
    check_topo(topo);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn topo_eight_nodes_with_cpu_less_nodes_in_between() {
    // CPU-less QEMU nodes 1, 4, 6 become guest nodes 5, 6, 7.
    let topo = LabTopology::from_nodes(&[
        (1, 256),
        (0, 128),
        (1, 192),
        (1, 128),
        (0, 256),
        (1, 128),
        (0, 128),
        (1, 128),
    ]);
    assert_eq!(topo.guest_node_ids(), vec![0, 5, 1, 2, 6, 3, 7, 4]);
    check_topo(topo);
}
