//! The text `numaio mkfs` reads to refuse swap and node-less devices: every swap name comes
//! from a line, a node is a plain number.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_fs::device::parse_swaps;
use numaio_sys::blockdev::parse_numa_node;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let swaps = parse_swaps(&s);
    assert!(swaps.len() <= s.lines().count());
    for p in swaps {
        // Decoding escapes never makes a name longer.
        assert!(p.as_os_str().len() <= s.len());
    }
    if let Some(n) = parse_numa_node(&s) {
        assert_eq!(s.trim().parse::<i64>().ok(), Some(n as i64));
    }
});
