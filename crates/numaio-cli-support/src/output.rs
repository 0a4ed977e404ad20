//! Shared output helpers: checked writes to stdout, JSON, byte sizes for humans, and
//! quoting of untrusted names (file names, command names) for a terminal.
//!
//! Command output goes through [`write_out`] (the `out!`/`outln!` macros), never
//! `println!`, so a closed pipe or a full disk is an error the caller sees instead of a
//! panic: `main` ends quietly on a closed pipe and reports any other write error.

use serde::Serialize;
use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;

/// A failed write to standard output.
#[derive(Debug)]
pub struct StdoutError(pub std::io::Error);

impl fmt::Display for StdoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write to standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutError {}

/// Writes formatted text to stdout; a failure becomes a [`StdoutError`].
pub fn write_out(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(|e| StdoutError(e).into())
}

/// Flushes stdout (buffered text is written at the latest here, so its errors show).
pub fn flush_out() -> anyhow::Result<()> {
    std::io::stdout()
        .lock()
        .flush()
        .map_err(|e| StdoutError(e).into())
}

/// Whether `e` is a write to a closed pipe (the reader went away: not worth a message).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<StdoutError>()
            .map(|s| &s.0)
            .or_else(|| c.downcast_ref::<std::io::Error>())
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `print!` through [`write_out`]: evaluates to `anyhow::Result<()>`.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::output::write_out(format_args!($($t)*)) };
}

/// `println!` through [`write_out`]: evaluates to `anyhow::Result<()>`.
#[macro_export]
macro_rules! outln {
    () => { $crate::output::write_out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::output::write_out(format_args!("{}\n", format_args!($($t)*))) };
}

/// One line on stderr, prefixed `numaio: `, with control characters escaped (messages may
/// hold file and command names). Errors writing stderr are ignored: there is nowhere left
/// to report them.
pub fn warn(args: fmt::Arguments<'_>) {
    let msg = escape_message(&args.to_string()).into_owned();
    let _ = writeln!(std::io::stderr().lock(), "numaio: {msg}");
}

/// [`warn`] with `format!` arguments.
#[macro_export]
macro_rules! warnln {
    ($($t:tt)*) => { $crate::output::warn(format_args!($($t)*)) };
}

/// Prints `value` as one line of JSON on stdout (serde escapes every string, so names are
/// exact there).
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let s = serde_json::to_string(value)?;
    write_out(format_args!("{s}\n"))
}

/// Whether `c` must not reach a terminal raw: control characters (C0, DEL, C1) and the
/// Unicode format characters that reorder or hide text (bidi overrides, zero-width).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Appends the escape of one character, in bash `$'...'` syntax.
fn push_escaped_char(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{b}' => out.push_str("\\v"),
        '\u{c}' => out.push_str("\\f"),
        c if (c as u32) < 0x80 => out.push_str(&format!("\\{:03o}", c as u32)),
        c => out.push_str(&format!("\\u{:04X}", c as u32)),
    }
}

/// Quotes an untrusted name (a path, a command name) for human output, like GNU `ls` on a
/// terminal: a name without control or invisible formatting characters and valid UTF-8 is
/// shown unchanged; any other is shown whole in bash `$'...'` form (`$'a\nb'`, `$'\033[2J'`,
/// invalid bytes as `\ooo`), so it can neither forge lines nor drive the terminal, and can
/// be pasted back into a shell. JSON output does not use this: serde escapes exactly.
pub fn quote<S: AsRef<OsStr> + ?Sized>(name: &S) -> Cow<'_, str> {
    let bytes = name.as_ref().as_bytes();
    if let Ok(s) = std::str::from_utf8(bytes) {
        if !s.chars().any(needs_escape) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::from("$'");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                c if needs_escape(c) => push_escaped_char(&mut out, c),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\{b:03o}"));
        }
    }
    out.push('\'');
    Cow::Owned(out)
}

/// Escapes control and invisible formatting characters inside a whole message (which may
/// embed names whose boundaries are unknown), each as in [`quote`], leaving the rest as is.
pub fn escape_message(msg: &str) -> Cow<'_, str> {
    if !msg.chars().any(needs_escape) {
        return Cow::Borrowed(msg);
    }
    let mut out = String::with_capacity(msg.len() + 8);
    for c in msg.chars() {
        if needs_escape(c) {
            push_escaped_char(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The symbolic name of an errno (`ENOSPC`), for error messages.
pub fn errno_name(code: i32) -> &'static str {
    match code {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EROFS => "EROFS",
        libc::EPIPE => "EPIPE",
        libc::EDQUOT => "EDQUOT",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::ESTALE => "ESTALE",
        libc::ENODEV => "ENODEV",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => "errno",
    }
}

/// `ENOSPC (No space left on device)`, or the error's own text without an errno.
pub fn describe_io_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let text = std::io::Error::from_raw_os_error(code).to_string();
            let text = text.split(" (os error").next().unwrap_or(&text).to_string();
            format!("{} ({text}, errno {code})", errno_name(code))
        }
        None => e.to_string(),
    }
}

/// Formats a byte count with a binary unit (`1.5 GiB`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn human() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn quoting_like_ls() {
        assert!(matches!(quote("/data/plain file.txt"), Cow::Borrowed(_)));
        assert_eq!(quote("/d/é"), "/d/é");
        assert_eq!(quote("a\nb"), "$'a\\nb'");
        assert_eq!(quote("\u{1b}[2J"), "$'\\033[2J'");
        assert_eq!(quote("it's\t\\"), "$'it\\'s\\t\\\\'");
        assert_eq!(quote("x\u{202e}y"), "$'x\\u202Ey'");
        assert_eq!(quote("\u{9b}31m"), "$'\\u009B31m'");
        assert_eq!(quote(OsStr::from_bytes(b"a\xffb")), "$'a\\377b'");
        assert_eq!(quote("del\u{7f}"), "$'del\\177'");
        assert!(!quote("a\nb\u{1b}c").contains(['\n', '\u{1b}']));
    }

    #[test]
    fn messages_escape_in_place() {
        assert_eq!(
            escape_message("cannot open /x: gone"),
            "cannot open /x: gone"
        );
        assert_eq!(
            escape_message("cannot open /a\nfake line\u{1b}]0;t\u{7}"),
            "cannot open /a\\nfake line\\033]0;t\\a"
        );
    }

    #[test]
    fn broken_pipe_is_recognised_through_context() {
        let e: anyhow::Error =
            StdoutError(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).into();
        assert!(is_broken_pipe(&e.context("printing")));
        let e: anyhow::Error = StdoutError(std::io::Error::from_raw_os_error(libc::ENOSPC)).into();
        assert!(!is_broken_pipe(&e));
    }
}
