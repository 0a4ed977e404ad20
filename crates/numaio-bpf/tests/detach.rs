//! SIGKILL of a process holding the collector leaves none of its programs loaded: every link
//! is owned by the process's file descriptors. Its own test binary, so no other test's
//! collector is loaded meanwhile. Needs root and BPF; skipped visibly elsewhere.

mod common;

use numaio_bpf::{Collector, CollectorOptions};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOLDER: &str = "NUMAIO_BPF_TEST_HOLDER";

/// Our programs loaded in the kernel now.
fn ours() -> usize {
    numaio_bpf::loaded_programs().unwrap()
}

/// Not a test of its own: the process that `sigkill_leaves_no_program_attached` starts and
/// kills (it returns at once unless started so). In the child: start the collector, say so, and wait to be killed.
#[test]
fn holder() {
    if std::env::var_os(HOLDER).is_none() {
        return;
    }
    match Collector::start(&CollectorOptions::default()) {
        Ok(_c) => {
            println!("ready");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        Err(e) => println!("unavailable: {e}"),
    }
}

#[test]
fn sigkill_leaves_no_program_attached() {
    if !numaio_testkit::is_root() {
        numaio_testkit::skip!(numaio_testkit::needs::ROOT, "loading BPF programs");
    }
    let before = ours();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "holder", "--nocapture", "--test-threads=1"])
        .env(HOLDER, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // libtest prints `test holder ... ` on the same line before the holder's word.
    let first = loop {
        match lines.next() {
            Some(Ok(l)) if l.ends_with("ready") || l.contains("unavailable: ") => break l,
            Some(Ok(_)) => continue,
            other => panic!("the holder ended without a word: {other:?}"),
        }
    };
    if let Some((_, why)) = first.split_once("unavailable: ") {
        child.wait().unwrap();
        common::skip_no_bpf(why);
        return;
    }
    let during = ours();
    assert!(
        during > before,
        "no program of ours loaded while the holder runs"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel frees programs once their last reference (link, fd) is gone, after an
    // RCU grace period.
    let t = Instant::now();
    while ours() > before {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} programs of ours still loaded 10 s after SIGKILL",
            ours() - before
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
