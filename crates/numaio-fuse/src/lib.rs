//! Serves a mounted [`numaio_fs::Fs`] to the kernel through FUSE: [`mount`] is the one way a
//! volume is mounted, by the `numaio mount` command and by the tests alike.
//!
//! A request travels by one of two transports: classic `/dev/fuse` (the `fuser` crate) or
//! FUSE over io_uring ([`uring`]). Each only translates: it turns the kernel's request into
//! a typed [`request::Request`] (io_uring through the one decoder, [`request::decode`]),
//! and the one serving table (`serve`) maps it onto the `Fs` API, errors becoming the errno
//! `FsError::errno` names. Serving threads are bound to NUMA nodes ([`serving`]); who asked
//! and where the data lay is reported to the [`Observer`] (accounting, thread moves,
//! statistics).
//!
//! File data is cached once, in the kernel's page cache of the mount (no direct I/O, so mmap,
//! shared writable mmap included, works without kernel extensions); the volume's store drops
//! its copy of what a buffered reader read and of what was written once it is durable.

pub mod accounting;
pub mod caller;
mod classic;
mod lookups;
pub mod memory;
mod mount;
pub mod move_work;
pub mod observer;
pub mod readahead;
pub mod request;
mod serve;
pub mod serving;
pub mod stats;
pub mod uring;

pub use mount::{mount, Mount, MountConfig, MountError, TransportChoice};
pub use observer::Observer;
pub use uring::{FuseMode, RequestCounts, Transport};

/// How long the kernel may cache attributes and names (see `serve`).
pub(crate) use serve::TTL;
