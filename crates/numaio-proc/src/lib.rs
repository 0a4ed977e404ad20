//! Process locality (issue 4). Placeholder until the crate is written.
