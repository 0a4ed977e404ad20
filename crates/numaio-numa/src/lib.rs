//! # numaio-numa: the NUMA vocabulary
//!
//! The words every numaio component uses for NUMA, each defined, parsed and tested here
//! once, so that the engine, the file system, the FUSE server, the page-cache tools and the
//! daemon mean the same thing by them:
//!
//! * [`placement`]: the placement policies (`writer-local`, `directory`, `interleave`,
//!   `stripe:K[:CHUNK]`, `fixed:NODE`, `range[:BLOCKS]`), one parser and one rule for where a
//!   block goes;
//! * [`hysteresis`] and [`moves`]: when a thread is moved to its data (per-thread
//!   hysteresis) and how (`migrate-thread`, `first-reader`, `forward`);
//! * [`counters`]: per-node byte counters and Tofalos's `numa_io` text;
//! * [`prometheus`]: the Prometheus / OpenMetrics exposition every metric goes through.
//!
//! It sits right above numaio-sys (which it uses for sizes) and below every other crate; it
//! does no I/O and reads nothing from the system.

pub mod counters;
pub mod hysteresis;
pub mod moves;
pub mod placement;
pub mod prometheus;

pub use counters::{IoBytes, NodeIo};
pub use placement::PlacementPolicy;
