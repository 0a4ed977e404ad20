//! `/proc/PID/fdinfo/FD`: `pos:` and the access mode of the octal `flags:`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::{parse_fdinfo_pos, parse_fdinfo_writable, parse_fdinfo_write_only};

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    if parse_fdinfo_pos(&s).is_some() {
        assert!(s.contains("pos:"));
    }
    if parse_fdinfo_write_only(&s) {
        assert!(s.contains("flags:"));
        assert!(parse_fdinfo_writable(&s));
    }
    if parse_fdinfo_writable(&s) {
        assert!(s.contains("flags:"));
    }
});
