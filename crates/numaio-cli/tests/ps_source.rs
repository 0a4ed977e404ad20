//! `numaio ps --source`: which source fills `numa_io`, as the JSON and the human output say.

mod common;

use common::run;
use std::process::{Child, Command, Stdio};

/// A process reading a cached file in a loop, itself (sh's `read` builtin); killed on drop.
struct Reader {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Reader {
    fn start() -> Reader {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::write(&data, "numaio\n".repeat(1 << 20)).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while :; do while read -r l; do :; done < '{}'; done",
                data.display()
            ))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Reader { child, _dir: dir }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ps_json(args: &[&str]) -> Result<serde_json::Value, common::Run> {
    let mut a = vec!["ps", "--json", "--interval", "0.5"];
    a.extend(args);
    let r = run(&a);
    if r.code != Some(0) {
        return Err(r);
    }
    Ok(serde_json::from_str(&r.out()).expect("ps --json"))
}

#[test]
fn estimate_is_marked_as_such() {
    let r = Reader::start();
    let pid = r.child.id().to_string();
    let j = ps_json(&["--source", "estimate", &pid]).unwrap();
    assert_eq!(j["numa_io_source"], "estimate", "{j}");
    assert_eq!(
        j["numa_io_fallback_reason"], "--source estimate was asked for",
        "{j}"
    );
    let p = &j["processes"][0];
    assert_eq!(p["pid"].as_u64().unwrap().to_string(), pid);
    assert_eq!(p["numa_io_source"], "estimate", "{p}");
    assert_eq!(p["numa_io_exact"], false, "{p}");
    assert!(p.get("local_bytes").is_none(), "{p}");
    // The estimate knows reads only: one key per node.
    let keys: Vec<&String> = p["numa_io"].as_object().unwrap().keys().collect();
    assert!(keys.iter().all(|k| k.ends_with("_read_bytes")), "{p}");

    let human = run(&["ps", "--source", "estimate", "--interval", "0.3", &pid]);
    assert_eq!(human.code, Some(0), "{human:?}");
    let text = human.out();
    assert_eq!(
        text.lines().next(),
        Some("per-node I/O: estimated (eBPF not used: --source estimate was asked for)"),
        "{text}"
    );
    assert!(text.contains("(estimate)"), "{text}");
}

#[test]
fn auto_names_its_source_and_reason() {
    let r = Reader::start();
    let pid = r.child.id().to_string();
    let j = ps_json(&[&pid]).unwrap();
    let src = j["numa_io_source"].as_str().unwrap();
    let p = &j["processes"][0];
    if src == "ebpf" {
        assert!(j["numa_io_fallback_reason"].is_null(), "{j}");
        assert_eq!(p["numa_io_exact"], true, "{p}");
    } else {
        // No numaio mount is used by the reader: the estimate, and why not eBPF.
        assert_eq!(src, "estimate", "{j}");
        assert!(
            !j["numa_io_fallback_reason"].as_str().unwrap().is_empty(),
            "{j}"
        );
        assert_eq!(p["numa_io_source"], "estimate", "{p}");
    }
    let human = run(&["ps", "--interval", "0.3", &pid]);
    let first = human.out().lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("per-node I/O: "), "{first}");
}

#[test]
fn ebpf_counts_or_says_why_not() {
    let r = Reader::start();
    let pid = r.child.id().to_string();
    match ps_json(&["--source", "ebpf", &pid]) {
        Ok(j) => {
            assert_eq!(j["numa_io_source"], "ebpf", "{j}");
            let p = &j["processes"][0];
            assert_eq!(p["numa_io_source"], "ebpf", "{p}");
            assert_eq!(p["numa_io_exact"], true, "{p}");
            // Every counted byte is local or remote.
            let read: u64 = p["numa_io"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.ends_with("_read_bytes"))
                .map(|(_, v)| v.as_u64().unwrap())
                .sum();
            assert!(read > 0, "the reader's reads were counted: {p}");
            let lr = p["local_bytes"]["read_bytes"].as_u64().unwrap()
                + p["remote_bytes"]["read_bytes"].as_u64().unwrap();
            assert_eq!(lr, read, "{p}");
        }
        Err(r) => {
            assert_eq!(r.code, Some(1), "{r:?}");
            assert!(
                r.stderr
                    .contains("--source ebpf: the eBPF collector cannot run here: "),
                "{r:?}"
            );
            assert!(r.stdout.is_empty(), "{r:?}");
        }
    }
}

#[test]
fn an_unknown_source_is_a_usage_error() {
    let r = run(&["ps", "--source", "bpf"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("ebpf"), "{r:?}");
}
