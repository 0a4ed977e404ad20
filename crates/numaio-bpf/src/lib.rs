//! # numaio-bpf: exact per-node file I/O, counted in the kernel
//!
//! The kernel does not account file reads and writes by NUMA node, so elsewhere numaio
//! estimates them (residency × read rate) or counts them exactly only for its own FUSE mount.
//! This crate attaches eBPF programs (C, compiled by clang at build time, loaded with CO-RE)
//! to the page cache's read and write paths and counts, per thread, file, node of the data's
//! pages and node of the CPU, the bytes copied from and to the page cache; per file and node
//! the pages inserted into, removed from and migrated within the page cache; and page faults
//! on file mappings. [`CacheReader`] reads the per-file counters from another thread, for
//! residency kept without scanning (the daemon's answers to `numaio where`).
//!
//! * [`record`]: what the collector reports ([`Snapshot`]) and how per-thread records add up
//!   per process ([`Snapshot::per_process`]), with local and remote bytes.
//! * [`collector`]: [`Collector::start`] loads and attaches the programs, or says in one line
//!   why it cannot ([`Unavailable`]); callers then fall back to estimates.

pub mod collector;
pub mod record;

pub use collector::{
    loaded_programs, Attached, CacheReader, Collector, CollectorOptions, NetPages, Unavailable,
    PROGRAM_PREFIX,
};
pub use record::{CacheRecord, FaultRecord, IoRecord, Missed, ProcessIo, Snapshot, NODE_UNKNOWN};
