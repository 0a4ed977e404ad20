//! # numaio-pagecache: page-cache locality for any file
//!
//! The kernel caches file data in pages allocated on some NUMA node, and no standard tool
//! says which. This crate answers *where* a file's cached pages sit, per node, without
//! reading anything in, and changes it: *warm* a file onto chosen nodes (one node,
//! page interleave, ZonFS-style stripes, weighted interleave) and verify the result, *move*
//! resident pages (including page cache that no process maps), and *evict* them.
//!
//! Components:
//! * [`scan`](crate::scan) (internal): the side-effect-free residency scan — windowed
//!   `mmap`, `mincore`, faulting in only resident pages, batched `move_pages` queries.
//! * [`residency`]: `where` ([`file_residency`], [`FileResidency`], `--map` cells, totals).
//! * [`migrate`]: `move` ([`move_file`], [`MoveReport`]).
//! * [`warm`]: `warm` ([`warm_file`], [`WarmReport`]).
//! * [`evict`]: `evict` ([`evict_file`], [`EvictReport`]).
//! * [`replica`]: `replicate` ([`ReplicaStore`], [`Replica`]): a copy per node of a
//!   read-mostly file, in a tmpfs bound to that node.
//! * [`target`]: placement targets ([`Target`]) and the node each page should be on.
//! * [`file`]: read-only opening with clear errors.
//! * [`walk`]: streaming expansion of operands (directories, globs, hard links once).
//!
//! ```no_run
//! use numaio_pagecache::{file_residency, move_file, warm_file, MoveOptions, Target,
//!                        WarmOptions, WhereOptions};
//! use std::path::Path;
//!
//! let f = Path::new("/data/table.bin");
//! let r = file_residency(f, &WhereOptions::default())?;
//! println!("{} of {} pages cached, per node {:?}", r.resident_pages, r.pages, r.nodes);
//! // Put every page on node 1 (read what is missing, migrate what sits elsewhere), verified:
//! let w = warm_file(f, &Target::Node(1), WarmOptions::default())?;
//! assert!(w.target_reached);
//! // Or only migrate what is cached, 1 MiB stripes over nodes 0 and 2:
//! let stripe = Target::Stripe { nodes: vec![0, 2], chunk: 1 << 20 };
//! let m = move_file(f, &stripe, &MoveOptions::default())?;
//! println!("moved {}, mapped by others {}", m.moved, m.mapped_by_others);
//! # Ok::<(), numaio_pagecache::PagecacheError>(())
//! ```
//!
//! No function here opens a file for writing or changes file contents. `mincore` tells the
//! truth only for files the caller owns or can write, or for root
//! ([`FileResidency::mincore_truthful`]).

pub mod error;
pub mod evict;
pub mod file;
pub mod migrate;
mod pfn;
mod readplan;
pub mod replica;
pub mod residency;
mod scan;
pub mod target;
pub mod walk;
pub mod warm;

pub use error::PagecacheError;
pub use evict::{evict_file, evict_open, EvictReport};
pub use file::{collect_files, mincore_is_truthful, open_regular, OpenFile};
pub use migrate::{move_file, move_opened, MoveOptions, MoveReport};
pub use replica::{Replica, ReplicaOptions, ReplicaStore, Version};
pub use residency::{
    file_residency, page_span, residency_of, resident_in_range, resident_pages_mincore,
    single_memory_node, ByteRange, FileResidency, MapCell, Totals, WhereOptions,
};
pub use target::Target;
pub use walk::{glob_set, open_entry, walk, FileFilter, Skip, WalkEntry, WalkOptions, Walker};
pub use warm::{warm_file, warm_needs, warm_opened, Progress, WarmOptions, WarmReport};

/// Serializes a path as a JSON string: exact for UTF-8 names; bytes that are not UTF-8
/// (which JSON cannot hold) become U+FFFD, rather than failing the whole output.
pub fn serialize_path<S: serde::Serializer>(p: &std::path::Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}
