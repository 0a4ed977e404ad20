//! `/proc/PID/status`: the allowed CPU and node lists are sorted sets, RSS is whole KiB.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::parse_status;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let st = parse_status(&s);
    assert!(st.cpus_allowed.windows(2).all(|w| w[0] < w[1]));
    assert!(st.mems_allowed.windows(2).all(|w| w[0] < w[1]));
    // Whole KiB, or saturated when the kernel text claims more than u64 bytes.
    assert!(st.vm_rss_bytes % 1024 == 0 || st.vm_rss_bytes == u64::MAX);
    assert!(st.name.is_empty() || s.contains(&st.name));
});
