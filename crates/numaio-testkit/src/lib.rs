//! Test support shared by the numaio test suites.
//!
//! Some tests need what a machine may lack (two CPUs, root, a tmpfs, io_uring). Such a test
//! must never return early and count as passed: it calls [`skip!`], which prints
//! `SKIPPED: <test>: needs <what>` to stderr and appends the same line to the file named by
//! `NUMAIO_SKIP_LOG` (so a test runner can count skips in its summary). Where the machine is
//! known to have everything, `NUMAIO_REQUIRE` turns a skip into a failure: it holds a comma
//! list of requirement names, or `all`. `scripts/test.sh` sets `NUMAIO_REQUIRE=all` in CI.
//!
//! [`power_cut`] is the one model of what a disk holds after a power cut, for every crash
//! test (the engine's power-loss backend, the file system's in-memory store).

use std::io::Write;

pub mod power_cut;

/// Requirement names used across the workspace, so `NUMAIO_REQUIRE` lists are stable.
pub mod needs {
    /// At least two CPUs in the test's affinity mask.
    pub const TWO_CPUS: &str = "two-cpus";
    /// Effective uid 0.
    pub const ROOT: &str = "root";
    /// A writable tmpfs at `/dev/shm`.
    pub const TMPFS: &str = "tmpfs";
    /// io_uring usable by this process.
    pub const IO_URING: &str = "io_uring";
}

/// Whether `NUMAIO_REQUIRE` (a comma list, or `all`) names `what`.
pub fn required(what: &str) -> bool {
    std::env::var("NUMAIO_REQUIRE")
        .is_ok_and(|v| v.split(',').map(str::trim).any(|r| r == "all" || r == what))
}

/// The name of the running test: libtest names each test's thread after the test.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("<unnamed test>")
        .to_string()
}

/// Records that the running test cannot run here because it needs `what`, or panics when
/// `NUMAIO_REQUIRE` says this machine must provide it. Use through [`skip!`].
pub fn skipped(what: &str, why: &str) {
    let test = current_test();
    let line = if why.is_empty() {
        format!("SKIPPED: {test}: needs {what}")
    } else {
        format!("SKIPPED: {test}: needs {what} ({why})")
    };
    if required(what) {
        panic!("{line}, but NUMAIO_REQUIRE says this machine must provide {what}");
    }
    // Straight to fd 2: libtest captures `eprintln!` of passing tests, which would hide the skip.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    if let Some(log) = std::env::var_os("NUMAIO_SKIP_LOG") {
        // A failure to log must not fail the test; the stderr line remains.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Skips the running test visibly (see the crate docs): `skip!(needs::ROOT)` or
/// `skip!(needs::IO_URING, "probe failed: {e}")`. Returns from the enclosing test function.
#[macro_export]
macro_rules! skip {
    ($what:expr) => {{
        $crate::skipped($what, "");
        return;
    }};
    ($what:expr, $($why:tt)+) => {{
        $crate::skipped($what, &format!($($why)+));
        return;
    }};
}

/// Skips the running test visibly unless `cond` holds.
#[macro_export]
macro_rules! require {
    ($what:expr, $cond:expr) => {
        if !$cond {
            $crate::skip!($what);
        }
    };
}

/// splitmix64: a seeded generator whose sequence never changes with crate versions, so a
/// seed printed by a failing randomized test reproduces the same workload later.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `p`; draws nothing for `p <= 0`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// A whole number from the environment variable `name`, or `default` when it is unset;
/// panics naming the variable when it is set but not a whole number.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipping() {
        skip!(needs::ROOT, "demo {}", 1);
    }

    #[test]
    fn requirement_lists() {
        // The variable is process-wide; this is the only test in the crate that reads it.
        std::env::set_var("NUMAIO_REQUIRE", "root, tmpfs");
        assert!(required("tmpfs") && required("root") && !required("io_uring"));
        std::env::set_var("NUMAIO_REQUIRE", "all");
        assert!(required("io_uring"));
        assert!(std::panic::catch_unwind(skipping).is_err());
        std::env::remove_var("NUMAIO_REQUIRE");
        assert!(!required("root"));
        let log = std::env::temp_dir().join(format!("numaio-skip-{}", std::process::id()));
        std::env::set_var("NUMAIO_SKIP_LOG", &log);
        skipping();
        std::env::remove_var("NUMAIO_SKIP_LOG");
        let text = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        assert!(
            text.contains("SKIPPED: tests::requirement_lists: needs root (demo 1)"),
            "{text}"
        );
    }
}
