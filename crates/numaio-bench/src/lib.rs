//! `numaio bench`: fio-like workloads against the numaio engine, the kernel page cache, or a
//! plain memcpy loop, with the same threads, offsets and duration (see `docs/engine.md`).
//! The `numaio` command parses [`BenchArgs`] and calls [`run`]. The engine's experiments
//! (`examples/move_work_cost.rs`, `examples/checksum_rules.rs`) live here too.

mod async_reads;
mod bench;
mod bench_numa;
mod benchfile;

pub use bench::{run, Api, BenchArgs, BenchResult, Target, Workload};

use numaio_cli_support::{args, output};
use numaio_cli_support::{out, outln, usage_bail};
