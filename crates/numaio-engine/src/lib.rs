//! The NUMA-sliced I/O engine (issues 5 and 6). Placeholder until the crate is written.
