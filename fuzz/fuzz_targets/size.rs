//! Sizes with K/M/G/T suffixes: an accepted size reads back the same from its decimal form
//! and from the largest exact unit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_sys::topology::parse_size;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    if let Some(v) = parse_size(&s) {
        assert_eq!(parse_size(&v.to_string()), Some(v), "{s:?}");
        for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
            if v != 0 && v % (1u64 << shift) == 0 {
                let n = v >> shift;
                assert_eq!(parse_size(&format!("{n}{unit}")), Some(v), "{s:?}");
                assert_eq!(parse_size(&format!("{n}{unit}iB")), Some(v), "{s:?}");
                break;
            }
        }
    }
});
