//! `/proc/PID/fdinfo/FD`: `pos:` and the write-only bit of the octal `flags:`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::{parse_fdinfo_pos, parse_fdinfo_write_only};

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    if parse_fdinfo_pos(&s).is_some() {
        assert!(s.contains("pos:"));
    }
    if parse_fdinfo_write_only(&s) {
        assert!(s.contains("flags:"));
    }
});
