//! # numaio-proc: process locality, pinning and the placement daemon
//!
//! The page-cache layer (`numaio-pagecache`) knows where a *file's* pages are; this crate
//! relates *processes* to them. It answers "which nodes do this process's file reads come
//! from?" and acts on the answer, in user space, for unmodified programs:
//!
//! * `numaio-procfs` parses `/proc/PID/{stat,status,io,numa_maps,maps,fd,fdinfo,cgroup}`.
//! * [`sample`] samples processes twice and builds a [`sample::ProcessView`] per process:
//!   nodes its threads ran on, memory per node, I/O rates, open and mapped files with their
//!   cache per node, and [`locality`]'s estimate of read bytes per node (Tofalos's
//!   `numa<N>_read_bytes`, estimated because the kernel does not account reads by node).
//! * [`pin`] moves a process: affinity of every thread to a node, memory with
//!   `migrate_pages`, most-loaded source first (like numad). [`near`] picks the node for
//!   `numaio run --near`.
//! * The daemon is split into a pure decision core — [`policy`] (follow-data, pull-data,
//!   auto; Adams's I = M − P/F·R), [`tofalos`] (Tofalos's user-space placer) and [`guards`]
//!   (Tofalos's CPU-congestion and anti-oscillation rules, free memory, caps,
//!   include/exclude, pinned processes) — and
//!   [`daemon`], which samples, takes exact per-node counts from [`io_source`] where the
//!   eBPF collector runs, decides, acts and logs one JSON line per decision, with
//!   [`metrics`] for Prometheus. [`config`] reads the TOML file.
//! * [`io_source`] chooses where per-node I/O counts come from (the eBPF collector, a numaio
//!   mount, or the estimate); [`top`] is the data behind `numaio top`. [`residency`]
//!   answers `numaio where` from the collector's per-file counts (a baseline scan once per
//!   file, then counted changes) on the daemon's Unix socket.
//!
//! Every read of another process's `/proc` files in a scan goes through
//! `numaio_procfs::bounded`, which gives up after a time limit, so one process stuck in the
//! kernel cannot stall a listing or the daemon.
//!
//! Page-cache operations go through the [`cache::CacheOps`] trait so the decision code is
//! tested with a fake cache and synthetic topologies.

pub mod cache;
pub mod config;
pub mod daemon;
pub mod error;
pub mod guards;
pub mod io_source;
pub mod locality;
pub mod metrics;
pub mod near;
mod pagecache_glue;
pub mod pin;
pub mod policy;
pub mod replicas;
pub mod residency;
pub mod sample;
pub mod tofalos;
pub mod top;

pub use cache::{CacheOps, FileNodes, FileRef, MoveOutcome};
pub use error::{ProcError, ProcResult};
pub use pagecache_glue::PageCache;
pub use sample::{ProcessView, ScanOptions, Scanner};
