//! Page-cache locality (issue 3). Placeholder until the crate is written.
