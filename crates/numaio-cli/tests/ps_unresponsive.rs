//! `numaio ps` with a process whose /proc files do not answer: the listing finishes, the
//! process is reported (stderr warning, JSON `unresponsive`) and not listed.
//!
//! A process stuck in the kernel for real (a thread in `close` on a FUSE server that never
//! answers) cannot be produced reliably here, so the block is injected with the hidden
//! `--test-stall-pid` option: the reads of that pid then block on their reader thread the
//! way a stuck /proc read does. The facility itself is also tested against a real blocking
//! read (a FIFO nobody writes) in numaio-proc.

mod common;
use common::*;
use std::time::Duration;

struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sleeper() -> (Sleeper, String) {
    let c = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = c.id().to_string();
    (Sleeper(c), pid)
}

#[test]
fn json_lists_the_stuck_process_as_unresponsive_and_finishes() {
    let (_c, pid) = sleeper();
    let r = run_limited(
        numaio(&[
            "ps",
            "--all",
            "--interval",
            "0.2",
            "--read-timeout",
            "0.1",
            "--test-stall-pid",
            &pid,
            "--json",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let u = v["unresponsive"].as_array().expect("unresponsive array");
    assert_eq!(u.len(), 1, "{v}");
    assert_eq!(u[0]["pid"], pid.parse::<i64>().unwrap());
    assert_eq!(u[0]["file"], format!("/proc/{pid}/stat"));
    assert!(u[0]["error"].as_str().unwrap().contains(&pid), "{v}");
    let procs = v["processes"].as_array().unwrap();
    assert!(!procs.is_empty(), "the other processes are listed");
    let stuck: i64 = pid.parse().unwrap();
    assert!(procs.iter().all(|p| p["pid"] != stuck), "{v}");
    assert!(
        r.stderr.contains("warning") && r.stderr.contains(&format!("process {pid} ")),
        "{}",
        r.stderr
    );
}

#[test]
fn human_watch_warns_and_waits_for_the_stuck_process_once() {
    let (_c, pid) = sleeper();
    let r = run_limited(
        numaio(&[
            "ps",
            &pid,
            "--watch",
            "0.1",
            "--count",
            "5",
            "--read-timeout",
            "4",
            "--test-stall-pid",
            &pid,
        ]),
        Duration::from_secs(90),
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    // Six scans; once a read timed out, later scans know the process is stuck and do not
    // wait the 4 s limit again. Waiting in every scan would take at least 24 s; the bound
    // leaves a loaded machine room for the rest (a debug build, the collector's attempt).
    assert!(r.elapsed < Duration::from_secs(20), "{:?}", r.elapsed);
    let warnings = r
        .stderr
        .lines()
        .filter(|l| l.contains(&format!("process {pid} does not answer")))
        .count();
    assert_eq!(warnings, 5, "{}", r.stderr);
    assert!(!r.out().contains(&format!("{pid} ")), "{}", r.out());
}
