//! What the collector's host tests share.

use std::io::Write;

/// The requirement name for `NUMAIO_REQUIRE`.
pub const EBPF: &str = "ebpf";

/// Records that the collector is unavailable here, visibly. Unlike root or tmpfs, BPF
/// tracing is a property of the kernel a machine boots (some refuse fentry and have no
/// kprobes), so `NUMAIO_REQUIRE=all` does not turn this into a failure; naming `ebpf` in
/// `NUMAIO_REQUIRE` does.
pub fn skip_no_bpf(why: &str) {
    let named = std::env::var("NUMAIO_REQUIRE")
        .is_ok_and(|v| v.split(',').map(str::trim).any(|r| r == EBPF));
    if named {
        numaio_testkit::skipped(EBPF, why);
        return;
    }
    let line = format!(
        "SKIPPED: {}: needs {EBPF} ({why})",
        numaio_testkit::current_test()
    );
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    if let Some(log) = std::env::var_os("NUMAIO_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}
