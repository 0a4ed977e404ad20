//! The exit statuses of every `numaio` command, in one place.
//!
//! Scripts branch on these, so each value means one thing everywhere: a usage error is never
//! confused with a result that fell short, and `run` reports a command it could not start
//! the way `env(1)`, `nice(1)` and `numactl(8)` do.

use std::process::ExitCode;

/// Success: the command did all it was asked.
pub const OK: u8 = 0;
/// An error: a file, process or system call failed (other operands are still processed).
pub const ERROR: u8 = 1;
/// A usage error: bad arguments, or a node, CPU or process the machine does not have.
pub const USAGE: u8 = 2;
/// A partial result: the command ran without errors but did not reach its target
/// (`warm`: pages not on the target nodes; `move`: pages that could not be moved).
pub const PARTIAL: u8 = 3;
/// `run`: the command was found but could not be executed (permission, not a program).
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub const NOT_FOUND: u8 = 127;

/// The table as printed at the end of every command's `--help`.
#[macro_export]
macro_rules! exit_status_help {
    () => {
        "Exit status:\n  \
           0    success\n  \
           1    error (a file, process or system call failed; other operands are still done)\n  \
           2    usage error (bad arguments, a node or process that does not exist)\n  \
           3    partial result: ran without errors but did not reach the target\n       \
                (warm: pages not on the target nodes; move: pages that could not be moved)\n  \
           126  run: the command was found but cannot be executed\n  \
           127  run: the command was not found\n\
         A closed output pipe ends a command quietly with the status it had so far (0)."
    };
}

/// The table for `after_help` texts.
pub const HELP: &str = exit_status_help!();

pub fn code(c: u8) -> ExitCode {
    ExitCode::from(c)
}

/// The status `run` exits with when it cannot exec its command: 127 when there is nothing
/// to run under that name, 126 when there is but it cannot be executed (as `env(1)`).
pub fn for_exec_error(e: &std::io::Error) -> u8 {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => NOT_FOUND,
        _ => CANNOT_EXECUTE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_errors_map_like_env() {
        let e = |n| std::io::Error::from_raw_os_error(n);
        assert_eq!(for_exec_error(&e(libc::ENOENT)), 127);
        assert_eq!(for_exec_error(&e(libc::EACCES)), 126);
        assert_eq!(for_exec_error(&e(libc::ENOEXEC)), 126);
        assert_eq!(for_exec_error(&e(libc::EISDIR)), 126);
    }

    #[test]
    fn help_lists_every_code() {
        for c in [OK, ERROR, USAGE, PARTIAL, CANNOT_EXECUTE, NOT_FOUND] {
            assert!(
                HELP.contains(&format!("\n  {c} ")),
                "{c} missing from:\n{HELP}"
            );
        }
    }
}
