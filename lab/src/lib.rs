//! The NUMA lab. Placeholder.
