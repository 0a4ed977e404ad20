//! Checked parsers for every numeric, duration and size argument, shared by the
//! subcommands (clap `value_parser`s), and the usage error that makes `numaio` exit 2.
//!
//! Each parser names the accepted range in its message; clap adds the argument's name.
//! Bounds are generous for real use and small enough that no value can overflow a
//! `Duration`, exhaust memory or spawn unbounded threads.

use std::fmt;

/// A usage error found after parsing (a combination of arguments, a target that does not
/// exist on this machine): `main` prints it and exits [`crate::exit::USAGE`].
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns early with a [`UsageError`].
#[macro_export]
macro_rules! usage_bail {
    ($($t:tt)*) => { return Err($crate::args::UsageError(format!($($t)*)).into()) };
}

/// Longest duration accepted anywhere: one day.
pub const MAX_SECS: f64 = 86_400.0;

pub use numaio_sys::units::{parse_count_in, parse_secs as parse_secs_in, parse_size_in};

/// Seconds in (0, 86400]: intervals, durations.
pub fn secs(s: &str) -> Result<f64, String> {
    parse_secs_in(s, 0.0, true, MAX_SECS)
}

/// Seconds in (0, 3600]: the daemon's interval.
pub fn interval_secs(s: &str) -> Result<f64, String> {
    parse_secs_in(s, 0.0, true, 3600.0)
}

/// Seconds in [0, 86400].
pub fn secs_or_zero(s: &str) -> Result<f64, String> {
    parse_secs_in(s, 0.0, false, MAX_SECS)
}

/// A byte count up to 1 PiB (0 allowed).
pub fn size(s: &str) -> Result<u64, String> {
    parse_size_in(s, 0, 1 << 50)
}

/// A non-zero byte count up to 1 PiB.
pub fn nonzero_size(s: &str) -> Result<u64, String> {
    parse_size_in(s, 1, 1 << 50)
}

/// A request size: 1 byte to 256 MiB.
pub fn request_size(s: &str) -> Result<u64, String> {
    parse_size_in(s, 1, 256 << 20)
}

/// A power of two from 512 bytes to 64 MiB (cache blocks).
pub fn block_size(s: &str) -> Result<u64, String> {
    let v = parse_size_in(s, 512, 64 << 20)?;
    if !v.is_power_of_two() {
        return Err(format!("{s:?} is not a power of two (e.g. 4K, 64K)"));
    }
    Ok(v)
}

macro_rules! count_parser {
    ($(#[$doc:meta])* $name:ident, $t:ty, $lo:expr, $hi:expr) => {
        $(#[$doc])*
        pub fn $name(s: &str) -> Result<$t, String> {
            parse_count_in(s, $lo, $hi).map(|v| v as $t)
        }
    };
}

count_parser!(
    /// Threads of a benchmark: 1 to 1024.
    threads, usize, 1, 1024
);
count_parser!(
    /// Engine slices: 1 to 1024.
    slices, usize, 1, 1024
);
count_parser!(
    /// I/O queue depth: 1 to 4096.
    queue_depth, u32, 1, 4096
);
count_parser!(
    /// I/O worker threads per slice: 1 to 256.
    io_workers, usize, 1, 256
);
count_parser!(
    /// Requests per batch: 1 to 4096.
    batch, usize, 1, 4096
);
/// Largest LRU_FACTOR (the engine allocates that many sub-lists per slice).
pub const MAX_LRU_FACTOR: usize = 65_536;

count_parser!(
    /// LRU_FACTOR: 1 to 65536.
    lru_factor, usize, 1, MAX_LRU_FACTOR as u64
);
count_parser!(
    /// Number of files (or directories) of a benchmark: 1 to 1024 (each file gets a
    /// thread, so this bounds threads like `threads`).
    files, usize, 1, 1024
);
count_parser!(
    /// A positive count of rounds, requests or accesses (1 to 2^53).
    positive, u64, 1, 1 << 53
);
count_parser!(
    /// A non-negative count (0 to 2^53).
    count, u64, 0, 1 << 53
);
count_parser!(
    /// A process id: 1 to 2^22 (the kernel's `PID_MAX_LIMIT`).
    pid, i32, 1, 1 << 22
);
count_parser!(
    /// A NUMA node id: 0 to 1023 (the kernel's largest `MAX_NUMNODES`).
    node, u32, 0, numaio_pagecache::target::MAX_NODE_ID as u64
);

/// Parses `OFF:LEN` (sizes with optional K/M/G/T suffix; an empty LEN means to the end).
pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (o, l) = s
        .split_once(':')
        .ok_or_else(|| format!("range {s:?} is not OFF:LEN (e.g. 1G:64M)"))?;
    let off = numaio_sys::topology::parse_size(o)
        .ok_or_else(|| format!("bad offset {o:?} in range {s:?}"))?;
    let len = if l.trim().is_empty() {
        u64::MAX
    } else {
        numaio_sys::topology::parse_size(l)
            .ok_or_else(|| format!("bad length {l:?} in range {s:?}"))?
    };
    Ok((off, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("1M:4K"), Ok((1 << 20, 4096)));
        assert_eq!(parse_range("0:"), Ok((0, u64::MAX)));
        assert!(parse_range("12").is_err());
        assert!(parse_range("x:1").is_err());
        assert!(parse_range("1:y").is_err());
    }

    #[test]
    fn numbers_are_finite_and_in_range() {
        assert_eq!(secs("1.5"), Ok(1.5));
        for bad in [
            "nan", "NaN", "inf", "-inf", "1e300", "0", "-1", "", "x", "86401",
        ] {
            let e = secs(bad).unwrap_err();
            assert!(e.contains("seconds"), "{bad}: {e}");
        }
        assert_eq!(secs_or_zero("0"), Ok(0.0));
        assert!(interval_secs("3601").is_err());
        assert_eq!(threads("4"), Ok(4));
        let e = threads("100000").unwrap_err();
        assert!(e.contains("1 to 1024"), "{e}");
        assert!(threads("0").is_err());
        assert!(threads("-1").is_err());
        assert!(pid("0").is_err());
        assert_eq!(pid("1"), Ok(1));
        assert!(node("1024").is_err());
        assert_eq!(request_size("4K"), Ok(4096));
        assert!(request_size("0").is_err());
        assert!(request_size("1T").is_err());
        assert!(size("99999999999999999999").is_err());
        assert!(nonzero_size("16E").is_err());
        assert_eq!(block_size("64K"), Ok(65536));
        assert!(block_size("3K").is_err());
        assert!(block_size("256").is_err());
    }
}
