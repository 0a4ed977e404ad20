//! `/proc/stat`: per-CPU busy ticks never exceed total ticks.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::parse_proc_stat_cpus;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    for (cpu, (busy, total)) in parse_proc_stat_cpus(&s) {
        assert!(
            busy <= total,
            "cpu{cpu}: busy {busy} > total {total} from {s:?}"
        );
        assert!(
            s.contains(&format!("cpu{cpu}")) || s.contains("cpu"),
            "{s:?}"
        );
    }
});
