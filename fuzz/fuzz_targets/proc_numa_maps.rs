//! `/proc/PID/numa_maps`: bytes per node only for nodes named by an `N<node>=` token.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::parse_numa_maps;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let named: Vec<u32> = s
        .split_whitespace()
        .filter_map(|t| t.strip_prefix('N')?.split_once('=')?.0.parse().ok())
        .collect();
    for (node, _) in parse_numa_maps(&s) {
        assert!(
            named.contains(&node),
            "node {node} is named by no N<node>= token"
        );
    }
});
