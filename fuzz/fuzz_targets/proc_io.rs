//! `/proc/PID/io`: every non-zero counter comes from a `key: value` line of the text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::parse_io;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let io = parse_io(&s);
    for (k, v) in [
        ("rchar", io.rchar),
        ("wchar", io.wchar),
        ("syscr", io.syscr),
        ("syscw", io.syscw),
        ("read_bytes", io.read_bytes),
        ("write_bytes", io.write_bytes),
    ] {
        assert!(v == 0 || s.contains(&format!("{k}:")), "{k}={v} from {s:?}");
    }
});
