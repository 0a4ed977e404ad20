//! One module per subcommand.

pub mod advise;
pub mod bench;
pub mod bench_numa;
pub mod daemon;
pub mod evict;
pub mod move_;
pub mod pin;
pub mod ps;
pub mod run;
pub mod topo;
pub mod warm;
pub mod where_;
