//! `/proc/PID/numa_maps`: bytes per node only for nodes named by an `N<node>=` token.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_proc::procfs::parse_numa_maps;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    for (node, _) in parse_numa_maps(&s) {
        assert!(s.contains(&format!("N{node}=")), "node {node} from {s:?}");
    }
});
