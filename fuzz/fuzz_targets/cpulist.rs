//! The kernel list parser: accepted lists come back sorted and unique, and survive a
//! format → parse round trip.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_sys::cpulist;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    match cpulist::parse(&s) {
        Ok(ids) => {
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "not sorted/unique: {s:?}"
            );
            let text = cpulist::format(&ids);
            assert_eq!(
                cpulist::parse(&text).ok(),
                Some(ids),
                "round trip of {s:?} via {text:?}"
            );
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
        }
    }
});
