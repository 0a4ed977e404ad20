//! Replica file names (`numaio_pagecache::replica::Version`), read back from the replica
//! directories when listing, dropping and checking freshness: a name parses only if it is
//! exactly the name of the version it parses to, and every version's name parses back.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_pagecache::Version;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    if let Some(v) = Version::parse(&s) {
        assert_eq!(v.name(), s);
        assert!((0..1_000_000_000).contains(&v.mtime.1));
        assert!((0..1_000_000_000).contains(&v.ctime.1));
    }
    // Any version built from the bytes round-trips.
    if data.len() >= 40 {
        let n = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().unwrap());
        let v = Version {
            dev: n(0),
            ino: n(8),
            size: n(16),
            mtime: (n(24) as i64, (n(32) % 1_000_000_000) as i64),
            ctime: (n(24).rotate_left(7) as i64, (n(32) >> 7) as i64 % 1_000_000_000),
        };
        assert_eq!(Version::parse(&v.name()), Some(v));
    }
});
