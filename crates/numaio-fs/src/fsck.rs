//! Offline check of a volume.
