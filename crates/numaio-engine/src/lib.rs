//! # numaio-engine: the NUMA-sliced user-space I/O engine
//!
//! Programs that do their own I/O (storage and graph engines, databases) keep data
//! node-local only if their cache is NUMA-aware. Following Jericho, this crate replaces the
//! page cache for such programs with per-node *slices*:
//!
//! * each slice owns a buffer arena bound to its node (mbind, prefaulted, verified with
//!   move_pages), a hash index with per-bucket locks, a replacement policy
//!   ([`policy::ArcPolicy`], [`policy::SplitLru`] = Finer-LRU, [`policy::Clock`]) and an
//!   evictor thread;
//! * a [`Placement`] chooses the slice of each block ([`RangePlacement`] by default);
//! * hits are served inline with no slice-wide lock; misses go to the slice's I/O workers
//!   (io_uring, O_DIRECT, pinned to the node); concurrent misses on one block share one read;
//! * writes stay in the cache until the evictor or `fsync` writes them back, coalescing runs
//!   of consecutive dirty blocks; errors reach `fsync` and the data stays dirty.
//!
//! The core calls its add-ons only through the traits in one place ([`Placement`],
//! [`AccessHook`], [`Router`], [`BlockIntegrity`]); the add-ons are placement policies
//! ([`placement`]), moving work to the data ([`move_work`], [`hysteresis`]), per-node
//! accounting ([`accounting`]) and checksums ([`integrity`], [`checksum`]), wired from options
//! by [`numa`].
//!
//! ```no_run
//! use numaio_engine::{Engine, OpenOptions, PolicyKind};
//! let engine = Engine::builder()
//!     .with_cache_bytes(64 << 20)
//!     .with_policy(PolicyKind::Clock)
//!     .build()?;
//! let f = engine.open("/data/file", OpenOptions::create_rw())?;
//! f.pwrite(b"hello", 0)?;
//! let pinned = f.get(0, 5)?; // zero copy
//! assert_eq!(pinned.to_vec(), b"hello");
//! pinned.put();
//! f.fsync()?;
//! # Ok::<(), numaio_engine::EngineError>(())
//! ```

pub mod accounting;
mod aio;
mod arena;
mod blockio;
pub mod checksum;
mod config;
mod engine;
mod error;
mod ext;
mod file;
mod flush;
mod gate;
mod handle;
mod hugemem;
pub use numaio_numa::hysteresis;
// The index and the slot word are public only for the loom models and the index benchmark
// (feature `internals`): they are no API. Some of their parts serve only those.
#[cfg(any(feature = "internals", numaio_loom))]
#[doc(hidden)]
pub mod index;
#[cfg(not(any(feature = "internals", numaio_loom)))]
#[allow(dead_code)]
mod index;
mod inner;
pub mod integrity;
mod io;
mod key;
pub mod move_work;
pub mod numa;
mod per_thread;
pub mod placement;
pub mod policy;
mod run_lookup;
mod slice;
#[cfg(any(feature = "internals", numaio_loom))]
#[doc(hidden)]
pub mod slot;
#[cfg(not(any(feature = "internals", numaio_loom)))]
#[allow(dead_code)]
mod slot;
mod stats;
pub mod sumfile;
mod sync;
mod types;

pub use aio::{GetFuture, ReadFuture, ReadIntoFuture, WriteFuture};
pub use arena::PlacementCheck;
pub use config::{EngineConfig, DEFAULT_MAX_FILE_BYTES};
pub use engine::{Engine, EngineBuilder};
pub use error::{os_error, EngineError, WriteBackError};
pub use ext::{AccessCtx, AccessHook, BlockIntegrity, IntegrityFailure, Placement, Router};
pub use file::OpenOptions;
pub use handle::{FileHandle, Pinned, PinnedBatch, PinnedMut};
pub use index::IndexKind;
#[cfg(feature = "test-backends")]
pub use io::power_loss;
pub use io::uring::UringBackend;
pub use io::{Backend, IoKind, IoQueue, IoRequest, PsyncBackend};
#[cfg(feature = "test-backends")]
pub use io::{FaultBackend, FaultState};
pub use key::{BlockKey, FileId, SlotId};
pub use placement::RangePlacement;
pub use policy::{PolicyKind, ReplacementPolicy};
pub use slot::Reclaim;
pub use stats::{EngineStats, SliceStats};
pub use types::NodeCpus;
