//! Lab topologies from node sizes and a distance matrix spec (`"10,20;20,10"`): accepted
//! ones renumber nodes as the guest kernel will (a permutation), and produce QEMU options.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_lab::{LabNode, LabTopology};

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = (n % 10) as usize;
    if rest.len() < 3 * n {
        return;
    }
    let (sizes, spec) = rest.split_at(3 * n);
    let nodes = sizes
        .chunks(3)
        .map(|c| LabNode {
            cpus: u32::from(c[0] % 5),
            mem_mib: u64::from(u16::from_le_bytes([c[1], c[2]])),
        })
        .collect();
    let spec = String::from_utf8_lossy(spec);
    let distances = if spec.is_empty() {
        None
    } else {
        match LabTopology::parse_distances(&spec) {
            Ok(m) => Some(m),
            Err(e) => {
                assert!(!e.to_string().is_empty());
                return;
            }
        }
    };
    let t = LabTopology { nodes, distances };
    if t.validate().is_err() {
        return;
    }
    let ids = t.guest_node_ids();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..n as u32).collect::<Vec<_>>(),
        "not a permutation: {ids:?}"
    );
    for q in 0..n {
        assert_eq!(t.qemu_node_id(t.guest_node_id(q)), Some(q));
    }
    let expected = t.expected_guest();
    assert!(expected.windows(2).all(|w| w[0].id < w[1].id));
    for e in &expected {
        assert_eq!(e.distances.get(&e.id), Some(&10));
        assert!(e.mem_total_min_bytes() <= e.mem_total_max_bytes());
    }
    let total: usize = expected.iter().map(|e| e.cpus.len()).sum();
    assert_eq!(total, t.total_cpus() as usize);
    let args = t.qemu_args();
    let numa = args.iter().filter(|a| a.as_str() == "-numa").count();
    assert!(numa >= n, "{numa} -numa options for {n} nodes: {args:?}");
});
