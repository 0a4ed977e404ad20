//! One module per subcommand.

pub mod advise;
pub mod daemon;
pub mod evict;
pub mod fs;
pub mod fsck;
pub mod gen;
pub mod lock;
pub mod mkfs;
pub mod model;
pub mod mount;
pub mod mount_stats;
pub mod move_;
pub mod pin;
pub mod probe;
pub mod ps;
pub mod replicate;
pub mod run;
pub mod sources;
pub mod top;
pub mod topo;
pub mod umount;
pub mod warm;
pub mod where_;
