//! The text `numaio mkfs` reads to refuse mounted, swap and node-less devices: every parsed
//! `MAJ:MIN` occurs in the text, every swap name comes from a line, a node is a plain number.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_fs::device::{parse_mountinfo_devs, parse_numa_node, parse_swaps};

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let devs = parse_mountinfo_devs(&s);
    assert!(devs.len() <= s.lines().count());
    for (maj, min) in devs {
        assert!(
            s.contains(&min.to_string()) && s.contains(&maj.to_string()),
            "{maj}:{min} from {s:?}"
        );
    }
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
