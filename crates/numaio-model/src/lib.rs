//! # numaio-model: what a machine's NUMA costs are, and what a placement will cost on it
//!
//! * [`profile`]: a machine profile (latency and bandwidth matrices, loaded latency, page-cache
//!   and `move_pages` costs, the firmware's advertised SLIT/HMAT values) in JSON.
//! * [`shipped`]: profiles of the seed publications' machines, built from their published
//!   numbers and marked as such.
//! * [`model`]: a bandwidth-sharing model: each memory controller and each interconnect link
//!   direction is a shared resource, a thread's rate is bounded by latency × memory-level
//!   parallelism and by its CPU cost, and contention splits capacity max-min fairly
//!   ([`fairshare`]). It predicts throughput and latency of a placement.
//! * [`probe`]: the measurement kernels behind `numaio probe`.
//! * [`hmat`]: the firmware's advertised values (sysfs access classes and the raw ACPI HMAT).

pub mod error;
pub mod fairshare;
pub mod hmat;
pub mod model;
pub mod probe;
pub mod profile;
pub mod shipped;

pub use error::{ModelError, ModelResult};
pub use model::{predict, Placement, Prediction, Sharing, Workload};
pub use profile::{MachineMatch, Matrix, Origin, Profile};
