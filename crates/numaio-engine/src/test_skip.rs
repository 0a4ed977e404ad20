//! Visible skips for the unit tests, under the rules of the workspace's test kit
//! (`numaio-testkit`): `SKIPPED: <test>: needs <what>` on stderr and in `NUMAIO_SKIP_LOG`,
//! and a failure instead where `NUMAIO_REQUIRE` (a comma list, or `all`) names the need. Kept
//! here so that the published crate's tests build without the unpublished kit.

use std::io::Write;

pub const TWO_CPUS: &str = "two-cpus";
pub const IO_URING: &str = "io_uring";

pub fn skipped(what: &str, why: &str) {
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("<unnamed test>")
        .to_string();
    let line = if why.is_empty() {
        format!("SKIPPED: {test}: needs {what}")
    } else {
        format!("SKIPPED: {test}: needs {what} ({why})")
    };
    let required = std::env::var("NUMAIO_REQUIRE")
        .is_ok_and(|v| v.split(',').map(str::trim).any(|r| r == "all" || r == what));
    if required {
        panic!("{line}, but NUMAIO_REQUIRE says this machine must provide {what}");
    }
    // Straight to fd 2: libtest captures `eprintln!` of passing tests.
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

/// Returns from the enclosing test after recording the skip.
macro_rules! skip {
    ($what:expr) => {{
        $crate::test_skip::skipped($what, "");
        return;
    }};
    ($what:expr, $($why:tt)+) => {{
        $crate::test_skip::skipped($what, &format!($($why)+));
        return;
    }};
}
