//! Synthetic topologies from a spec (`n0=0-1@1G n1=2-3@1G dist=...`) or JSON: an accepted
//! topology has unique node ids, each CPU on one node, a full distance matrix, and
//! survives a JSON round trip.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_sys::Topology;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let Ok(t) = Topology::synthetic(&s) else {
        return;
    };
    let ids = t.node_ids();
    assert!(!ids.is_empty());
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "duplicate node ids in {s:?}");
    for n in &t.nodes {
        for &c in &n.cpus {
            assert_eq!(t.cpu_to_node(c), Some(n.id), "cpu {c} in {s:?}");
        }
        for &to in &ids {
            assert!(
                t.distance(n.id, to).is_some(),
                "no distance {}->{to} in {s:?}",
                n.id
            );
        }
    }
    let json = serde_json::to_string(&t).unwrap();
    let back = Topology::synthetic(&json).expect("a synthetic topology's JSON must parse");
    assert_eq!(back, t, "JSON round trip of {s:?}");
});
