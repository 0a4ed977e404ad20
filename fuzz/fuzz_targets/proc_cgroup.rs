//! `/proc/PID/cgroup`: the path comes from the text (or is `/` when there is none).
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::parse_cgroup;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let p = parse_cgroup(&s);
    assert!(p == "/" || s.contains(&p), "{p:?} from {s:?}");
    assert!(!p.contains('\n'));
});
