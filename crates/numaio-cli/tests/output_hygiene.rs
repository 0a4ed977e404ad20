//! Output that cannot be written, and names that must not drive the terminal: a closed pipe
//! ends every command quietly (exit 0, no message, no panic), any other write error (a full
//! device) is reported with exit 1, and hostile file and command names are quoted in human
//! output while JSON keeps them exact.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// A directory of `n` small files: enough human output to overflow a pipe's buffer.
fn many_files(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        std::fs::write(
            dir.path().join(format!("file-with-a-longish-name-{i:05}")),
            b"x",
        )
        .unwrap();
    }
    dir
}

/// Starts `args` with stdout on a pipe, reads `keep` bytes (or one line when `keep` is 0),
/// closes the pipe, and returns the exit code and stderr.
fn close_early(args: &[&str], keep: usize) -> (Option<i32>, String) {
    let mut child = numaio(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    if keep == 0 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "{args:?} printed nothing");
    } else {
        let mut buf = vec![0u8; keep];
        out.read_exact(&mut buf).unwrap();
    }
    drop(out);
    let mut err = child.stderr.take().unwrap();
    let code = wait_limited(&mut child, Duration::from_secs(30));
    let mut e = String::new();
    err.read_to_string(&mut e).unwrap();
    (code, e)
}

#[test]
fn a_closed_pipe_ends_commands_quietly() {
    let dir = many_files(2500);
    let d = dir.path().to_str().unwrap();
    for (args, keep) in [
        (vec!["where", "-r", d], 0),
        (vec!["where", "-r", "--json", d], 16),
        (
            vec!["evict", &format!("{d}/file-with-a-longish-name-00000")],
            0,
        ),
        (
            vec!["ps", "--all", "--watch", "0.05", "--count", "100000"],
            0,
        ),
        (
            vec![
                "ps", "--all", "--json", "--watch", "0.05", "--count", "100000",
            ],
            16,
        ),
        (
            vec![
                "daemon",
                "--dry-run",
                "--interval",
                "0.05",
                "--iterations",
                "100000",
            ],
            0,
        ),
    ] {
        let (code, stderr) = close_early(&args, keep);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

#[test]
fn other_write_errors_are_reported_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"some data").unwrap();
    let fs = f.to_str().unwrap();
    let bench_file = dir.path().join("b");
    for args in [
        vec!["--help"],
        vec!["bench", "--help"],
        vec!["--version"],
        vec!["topo"],
        vec!["topo", "--json"],
        vec!["where", fs],
        vec!["where", "--json", fs],
        vec!["evict", fs],
        vec!["ps", "--all", "--interval", "0.1"],
        vec!["daemon", "--dry-run", "--once"],
        vec![
            "bench",
            "--target",
            "kernel",
            "--file",
            bench_file.to_str().unwrap(),
            "--size",
            "64K",
            "--duration",
            "0.1",
        ],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut cmd = numaio(&args);
        cmd.stdout(full).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut err = child.stderr.take().unwrap();
        let code = wait_limited(&mut child, Duration::from_secs(30));
        let mut e = String::new();
        err.read_to_string(&mut e).unwrap();
        assert_eq!(code, Some(1), "{args:?}: {e}");
        assert!(
            e.contains("cannot write to standard output"),
            "{args:?}: {e}"
        );
        assert!(e.contains("No space left on device"), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
    }
}

/// A file whose name would clear the screen and forge an output line.
fn hostile_file(dir: &Path) -> PathBuf {
    let name = std::ffi::OsStr::from_bytes(b"evil\nFAKE: 4 KiB\x1b[2J\x1b]0;t\x07\xff");
    let p = dir.join(name);
    std::fs::write(&p, vec![7u8; 8192]).unwrap();
    p
}

fn assert_no_raw_controls(what: &str, text: &str) {
    assert!(
        !text
            .chars()
            .any(|c| c.is_control() && c != '\n' || c == '\u{fffd}'),
        "{what}: raw control characters in {text:?}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("FAKE")),
        "{what}: a forged line in {text:?}"
    );
}

#[test]
fn hostile_names_are_quoted_in_human_output_and_exact_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let p = hostile_file(dir.path());
    let ps = p.as_os_str();
    let run_os = |args: &[&std::ffi::OsStr]| {
        let mut c = std::process::Command::new(BIN);
        c.args(args);
        run_limited(c, Duration::from_secs(60))
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    for args in [
        vec![os("where"), ps],
        vec![os("where"), os("--map"), ps],
        vec![os("evict"), ps],
        vec![os("warm"), os("--node"), os("0"), ps],
        vec![os("move"), os("--to"), os("0"), ps],
    ] {
        let r = run_os(&args);
        assert!(matches!(r.code, Some(0) | Some(3)), "{args:?}: {r:?}");
        let out = r.out();
        assert_no_raw_controls(&format!("{args:?} stdout"), &out);
        assert_no_raw_controls(&format!("{args:?} stderr"), &r.stderr);
        assert!(out.contains("$'"), "{args:?}: {out}");
        assert!(out.contains("\\033[2J"), "{args:?}: {out}");
        assert!(out.contains("\\377"), "invalid UTF-8 shown as octal: {out}");
    }
    // JSON keeps the exact name (serde escapes it; invalid UTF-8 is the one lossy case).
    let r = run_os(&[os("where"), os("--json"), ps]);
    assert_eq!(r.code, Some(0), "{r:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let got = v["files"][0]["path"].as_str().unwrap();
    assert!(
        got.starts_with("/") && got.contains("evil\nFAKE: 4 KiB\u{1b}[2J"),
        "{got:?}"
    );
    // Errors naming a hostile path escape it too.
    let missing = dir.path().join("gone\u{1b}]0;pwned\u{7}\nnumaio: fake");
    let r = run_os(&[os("where"), missing.as_os_str()]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert_no_raw_controls("where error", &r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn ps_quotes_hostile_command_and_file_names() {
    let Some(tail) = ["/usr/bin/tail", "/bin/tail"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        skip("tail", "no tail binary");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = hostile_file(dir.path());
    // The command name comes from the name it was started by: a link with escapes in it.
    let link = dir.path().join("t\u{1b}[2Jx");
    std::os::unix::fs::symlink(tail, &link).unwrap();
    let mut child = std::process::Command::new(&link)
        .arg("-f")
        .arg(&p)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    let r = run(&["ps", &pid, "--interval", "0.2"]);
    let j = run(&["ps", &pid, "--interval", "0.2", "--json"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(j.code, Some(0), "{j:?}");
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(
        v["processes"][0]["comm"], "t\u{1b}[2Jx",
        "exact in JSON: {v}"
    );
    let out = r.out();
    assert_no_raw_controls("ps stdout", &out);
    assert!(out.contains(&format!("{pid} $'t\\033[2Jx'")), "{out}");
    assert!(out.contains("evil\\nFAKE"), "{out}");
}
