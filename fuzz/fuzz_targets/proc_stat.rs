//! `/proc/PID/stat`: the command name is whatever sits between the first `(` and the last
//! `)` (a process chooses its own name, parentheses and spaces included).
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::parse_stat;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    if let Some(st) = parse_stat(&s) {
        let open = s.find('(').unwrap();
        let close = s.rfind(')').unwrap();
        assert_eq!(st.comm, s[open + 1..close], "{s:?}");
        assert_eq!(s[..open].trim().parse::<i32>().ok(), Some(st.pid));
        let _ = st.is_kernel_thread();
    }
});
