//! What the `numaio` command's subcommands share: checked argument parsers and the usage
//! error ([`args`]), and checked, quoted output ([`output`], the `out!`/`outln!`/`warnln!`
//! macros), and the exit statuses every command uses ([`exit`]). The `numaio bench` command
//! lives in its own crate and uses the same pieces.

pub mod args;
pub mod exit;
pub mod output;
