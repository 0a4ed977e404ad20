//! `numaio daemon` under systemd's notify protocol (`Type=notify`): READY=1 on
//! `$NOTIFY_SOCKET` after its first sample, watchdog pings at half `$WATCHDOG_USEC`, and
//! SIGHUP re-reading the configuration file (a bad file keeps the old settings).

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Generous: the first sample reads every process's /proc files on a busy 2-CPU machine.
const WAIT: Duration = Duration::from_secs(60);

struct Daemon {
    child: Child,
    lines: mpsc::Receiver<serde_json::Value>,
    sock: UnixDatagram,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// Waits for a datagram holding `want` (one `KEY=VALUE` line), returning all it saw.
    fn notified(&self, want: &str) -> Vec<String> {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while t0.elapsed() < WAIT {
            match self.sock.recv(&mut buf) {
                Ok(n) => {
                    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let hit = msg.lines().any(|l| l == want);
                    seen.push(msg);
                    if hit {
                        return seen;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => panic!("recv on the notify socket: {e}"),
            }
        }
        panic!("no {want} on NOTIFY_SOCKET within {WAIT:?}; got {seen:?}");
    }

    /// Waits for a JSON line with this `event`.
    fn event(&self, event: &str) -> serde_json::Value {
        let t0 = Instant::now();
        while let Some(left) = WAIT.checked_sub(t0.elapsed()) {
            match self.lines.recv_timeout(left) {
                Ok(v) if v["event"] == event => return v,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("no {event:?} line from the daemon within {WAIT:?}");
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; it has not been waited for, so the pid is
        // still its.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) },
            0
        );
    }
}

fn start(dir: &std::path::Path, config: &std::path::Path) -> Daemon {
    let sock_path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind the notify socket");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // WATCHDOG_PID must name the daemon itself: the shell's pid, which exec keeps.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("WATCHDOG_PID=$$ exec \"$0\" daemon --json --dry-run --config \"$1\"")
        .arg(env!("CARGO_BIN_EXE_numaio"))
        .arg(config)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "400000")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start numaio daemon");
    let out = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let v = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("daemon printed a non-JSON line {line:?}: {e}"));
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    Daemon { child, lines, sock }
}

#[test]
fn notifies_systemd_and_reloads_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("numaio.toml");
    std::fs::write(&config, "policy = \"follow-data\"\ninterval_secs = 0.5\n").unwrap();
    let d = start(dir.path(), &config);

    let start = d.event("start");
    assert_eq!(start["policy"], "follow-data", "{start}");
    let ready = d.notified("READY=1");
    assert!(
        ready
            .iter()
            .any(|m| m.contains("STATUS=policy follow-data")),
        "{ready:?}"
    );
    d.notified("WATCHDOG=1");
    // The loop goes on, and keeps feeding the watchdog across intervals.
    d.event("interval");
    d.notified("WATCHDOG=1");

    // A changed value shows once SIGHUP is handled.
    std::fs::write(
        &config,
        "policy = \"pull-data\"\ninterval_secs = 0.3\nmetrics = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    let reload = d.event("reload");
    assert_eq!(reload["policy"], "pull-data", "{reload}");
    assert_eq!(reload["interval_secs"], 0.3, "{reload}");
    assert_eq!(
        reload["restart_needed"],
        serde_json::json!(["metrics"]),
        "{reload}"
    );
    let msgs = d.notified("READY=1");
    assert!(
        msgs.iter().any(|m| m.lines().any(|l| l == "RELOADING=1"))
            && msgs.iter().any(|m| m.contains("MONOTONIC_USEC=")),
        "{msgs:?}"
    );

    // A configuration that does not parse is reported and the old one stays.
    std::fs::write(&config, "policy = \"sideways\"\n").unwrap();
    d.signal(libc::SIGHUP);
    let err = d.event("error");
    let text = err["error"].as_str().unwrap_or_default();
    assert!(
        text.contains("not reloaded") && text.contains("sideways"),
        "{err}"
    );
    d.notified("READY=1");
    d.event("interval");

    // SIGTERM: STOPPING=1, the stop line, exit 0.
    d.signal(libc::SIGTERM);
    d.notified("STOPPING=1");
    d.event("stop");
    let mut d = d;
    let status = d.child.wait().unwrap();
    assert!(status.success(), "daemon exited with {status}");
}

#[test]
fn runs_without_systemd() {
    // No NOTIFY_SOCKET: nothing to notify, nothing to warn about.
    let out = Command::new(env!("CARGO_BIN_EXE_numaio"))
        .args(["daemon", "--once", "--json"])
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("notify"), "{err}");
}

#[test]
fn unreachable_notify_socket_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_numaio"))
        .args(["daemon", "--once", "--json"])
        .env("NOTIFY_SOCKET", dir.path().join("nobody-listens"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("cannot notify systemd at NOTIFY_SOCKET=") && err.contains("nobody-listens"),
        "{err}"
    );
}
