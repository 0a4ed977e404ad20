//! Node and CPU masks parsed from kernel lists hold exactly the listed ids and print back
//! to a list that parses to the same mask.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_sys::cpulist;
use numaio_sys::mask::{CpuSet, NodeMask};

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let ids = cpulist::parse(&s).ok();
    match NodeMask::parse(&s) {
        Ok(m) => {
            assert_eq!(Some(m.to_vec()), ids, "{s:?}");
            assert_eq!(m.count(), m.to_vec().len());
            assert_eq!(
                NodeMask::parse(&m.to_string()).ok(),
                Some(m.clone()),
                "{s:?}"
            );
            if let Some(&first) = m.to_vec().first() {
                assert!(m.contains(first));
            }
        }
        Err(_) => assert!(ids.is_none(), "mask refused a list cpulist accepts: {s:?}"),
    }
    if let Ok(c) = CpuSet::parse(&s) {
        assert_eq!(CpuSet::parse(&c.to_string()).ok(), Some(c));
    }
});
