//! Lab test: memory bound to node 1 with our mbind wrapper lands on node 1, as our
//! move_pages query reports.

use numaio_lab::{LabTopology, Scenario};

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn bind_check_node_1() {
    let out = Scenario::new(
        LabTopology::uniform(2),
        "numaio-probe bind-check --node 1 --mib 32 && numaio-probe bind-check --node 0 --mib 8",
    )
    .must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let lines: Vec<serde_json::Value> = out
        .output
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{}", out.report())))
        .collect();
    assert_eq!(lines.len(), 2, "{}", out.report());
    assert_eq!(lines[0]["pages"], 32 * 256);
    assert_eq!(lines[0]["on_node"]["1"], 32 * 256, "{}", out.report());
    assert!(lines[0]["on_node"].get("0").is_none(), "{}", out.report());
    assert_eq!(lines[1]["on_node"]["0"], 8 * 256, "{}", out.report());
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn bind_check_fails_for_a_missing_node() {
    // node 5 does not exist in a 2-node guest: the probe must report an error, not success
    let out = Scenario::new(
        LabTopology::uniform(2),
        "numaio-probe bind-check --node 5 --mib 1",
    )
    .must_run();
    assert_ne!(out.exit_code, 0, "{}", out.report());
    assert!(
        out.output.contains("node 5") || out.output.contains("mbind"),
        "{}",
        out.report()
    );
}
