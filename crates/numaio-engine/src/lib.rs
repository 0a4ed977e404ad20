//! # numaio-engine: the NUMA-sliced user-space I/O engine
//!
//! Programs that do their own I/O (storage and graph engines, databases) keep data
//! node-local only if their cache is NUMA-aware. Following Jericho, this crate replaces the
//! page cache for such programs with per-node *slices*:
//!
//! * each [`slice`](slice::Slice) owns a buffer arena bound to its node (mbind, prefaulted,
//!   verified with move_pages), a hash index with per-bucket locks, a replacement policy
//!   ([`arc`], [`split_lru`] = Finer-LRU, [`clock`]) and an evictor thread;
//! * a [`Placement`] chooses the slice of each block ([`RangePlacement`] by default);
//! * hits are served inline with no slice-wide lock; misses go to the slice's I/O workers
//!   (io_uring, O_DIRECT, pinned to the node); concurrent misses on one block share one read;
//! * writes stay in the cache until the evictor or `fsync` writes them back, coalescing runs
//!   of consecutive dirty blocks; errors reach `fsync` and the data stays dirty.
//!
//! Issue 6 adds placement policies (`placement`), moving work to the data (`move_work`,
//! `hysteresis`), per-node accounting (`accounting`) and checksums (`integrity`, `checksum`).
//!
//! ```no_run
//! use numaio_engine::{Engine, EngineConfig, OpenOptions};
//! let engine = Engine::new(EngineConfig::default())?;
//! let f = engine.open("/data/file", OpenOptions { write: true, create: true })?;
//! f.pwrite(b"hello", 0)?;
//! let pinned = f.get(0, 5)?; // zero copy
//! assert_eq!(pinned.to_vec(), b"hello");
//! pinned.put(false);
//! f.fsync()?;
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod accounting;
pub mod arc;
pub mod arena;
pub mod backend;
pub mod checksum;
pub mod clock;
pub mod dlist;
pub mod engine;
pub mod hugemem;
pub mod hysteresis;
pub mod index;
pub mod integrity;
pub mod move_work;
pub mod numa;
pub mod placement;
pub mod policy;
pub mod power_loss;
pub mod range_placement;
pub mod slice;
pub mod slot;
pub mod split_lru;
pub mod stats;
mod sync;
pub mod uring;
pub mod worker;
pub mod writeback;

pub use arena::PlacementCheck;
pub use backend::{Backend, FaultBackend, FaultState, IoKind, IoQueue, IoRequest, PsyncBackend};
pub use engine::{Engine, EngineConfig, FileHandle, OpenOptions, Pinned};
pub use index::IndexKind;
pub use policy::{BlockKey, FileId, PolicyKind, ReplacementPolicy, SlotId};
pub use range_placement::{AccessCtx, AccessHook, Placement, RangePlacement};
pub use slot::Reclaim;
pub use stats::{EngineStats, SliceStats};
pub use uring::UringBackend;
pub use writeback::{os_error, WriteBackError};
