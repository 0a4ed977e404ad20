//! # numaio-sys: the NUMA system layer
//!
//! Everything else in numaio stands on this crate. It answers two questions and wraps one
//! family of system calls:
//!
//! * **What does the machine look like?** [`Topology`] reads `/sys/devices/system/node`
//!   (online nodes, CPUs per node, per-node meminfo including the file-cache fields, the
//!   distance matrix) and copes with gaps in node ids, CPU-less and memory-less nodes, and
//!   kernels without NUMA (reported as one node). [`Topology::synthetic`] builds one from a
//!   small spec or JSON for tests and the cost model.
//! * **Where am I running?** [`getcpu`] returns the calling thread's CPU and node.
//! * **Safe wrappers** with typed errors ([`SysError`]) for `get_mempolicy`, `set_mempolicy`,
//!   `mbind`, `move_pages` (batched query and move, each page's status decoded as
//!   [`PageStatus`]), `migrate_pages`, `sched_{get,set}affinity` for any task id, and the
//!   calling thread's scheduling policy ([`sched`]).
//!
//! * **Where is a device?** [`blockdev`] reads a block device's NUMA node and queue limits
//!   from sysfs (a partition's are its disk's); [`mountinfo`] parses the mount table;
//!   [`mount`] mounts a tmpfs, binds read-only and makes a private mount namespace.
//! * **What to read ahead?** [`readahead::Readahead`] detects a sequential reader and keeps
//!   a window requested ahead of it, for every cache above; [`readahead::Streams`] follows
//!   several such readers of one device.
//!
//! Node masks ([`NodeMask`]) are sized from the kernel's *possible* nodes, not fixed at 64,
//! because the kernel rejects masks shorter than `nr_node_ids` with `EINVAL`.

pub mod affinity;
pub mod blockdev;
pub mod buffer;
pub mod cpulist;
pub mod error;
pub mod getcpu;
pub mod mask;
pub mod mempolicy;
pub mod migrate;
pub mod mount;
pub mod mountinfo;
pub mod move_pages;
pub mod readahead;
pub mod sched;
pub mod topology;
pub mod units;

pub use affinity::{get_affinity, set_affinity};
pub use buffer::NodeBuffer;
pub use error::{SysError, SysResult};
pub use getcpu::{getcpu, CpuNode};
pub use mask::{CpuSet, NodeMask};
pub use mempolicy::{get_mempolicy, mbind, set_mempolicy, MbindFlags, Mode, Policy};
pub use migrate::migrate_pages;
pub use move_pages::{move_pages_to, query_pages, PageStatus, MOVE_PAGES_BATCH};
pub use topology::{MemInfo, Node, Topology};

/// The system page size in bytes.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let sz = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if sz <= 0 {
        4096
    } else {
        sz as usize
    }
}
