//! # numaio-procfs: reading other processes' `/proc` files
//!
//! Everything numaio learns about a process comes from `/proc`: the CPU its threads last ran
//! on, its memory per node, its I/O counters, its open and mapped files. This crate is that
//! one layer, below both users — the process-locality tools and daemon (`numaio-proc`) and
//! the FUSE server (`numaio-fuse`), which maps a requesting thread to its node — so that
//! neither pulls in the other's dependencies.
//!
//! * The parsers ([`parse_stat`], [`parse_status`], [`parse_io`], [`parse_numa_maps`],
//!   [`parse_maps_files`], [`parse_fdinfo_pos`], [`parse_cgroup`], [`parse_proc_stat_cpus`])
//!   are pure functions over text, unit tested with fixtures and fuzzed (`fuzz/`), reading
//!   only the fields numaio uses. The readers around them turn "the process is gone"
//!   (`ENOENT`/`ESRCH`) into [`ProcfsError::Gone`]: a process may exit between any two reads.
//! * [`bounded`] reads with a time limit. A read of another process's `/proc` files can
//!   block in the kernel for as long as that process holds some of its locks, which no
//!   signal ends; the read runs on a reader thread that is abandoned past the deadline, so
//!   one process stuck in the kernel cannot stall a listing, the daemon or a FUSE server.

pub mod bounded;
mod error;
mod pid;

pub use error::{ProcfsError, ProcfsResult};
pub use pid::*;
