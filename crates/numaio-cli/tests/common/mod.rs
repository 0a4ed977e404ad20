//! Helpers for running the `numaio` binary in integration tests.
#![allow(dead_code)]

pub mod mount;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_numaio");

/// What a finished run left.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

pub fn numaio(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).stdin(Stdio::null());
    c
}

/// Runs `cmd` with stdout and stderr captured, killing it after `limit` (a hang is a test
/// failure, never a stuck suite).
pub fn run_limited(mut cmd: Command, limit: Duration) -> Run {
    let t = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn numaio");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let code = wait_limited(&mut child, limit);
    Run {
        code,
        stdout: out.join().unwrap(),
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
        elapsed: t.elapsed(),
    }
}

pub fn run(args: &[&str]) -> Run {
    run_limited(numaio(args), Duration::from_secs(60))
}

fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

/// Waits up to `limit`; panics (after killing the child) if it is still running.
pub fn wait_limited(child: &mut Child, limit: Duration) -> Option<i32> {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st.code();
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("numaio still running after {limit:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[allow(unused_imports)] // not every test binary needs it
pub use numaio_testkit::is_root;

/// Records a visible skip of the running test (`needs`: what this machine lacks); fails
/// instead where `NUMAIO_REQUIRE` says the machine must have it.
pub fn skip(needs: &str, reason: &str) {
    numaio_testkit::skipped(needs, reason);
}

pub fn mkfifo(p: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo reads a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}
