//! `numaio top`: the live view driven in tmux (screen captured, keys sent, the terminal
//! restored after `q` and after SIGTERM), `--once` text, the `--json` stream's schema, the
//! refusal without a terminal, and a closed pipe.

mod common;

use common::{numaio, run, wait_limited, BIN};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The reader's command name, as `top` shows it.
const READER: &str = "numaio-reader";

/// A process named [`READER`] reading a cached file in a loop, itself (a copy of `sh` whose
/// `read` builtin reads the file), so the estimate and eBPF both see its reads; killed on
/// drop.
struct Reader {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Reader {
    fn start() -> Reader {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::write(&data, "numaio\n".repeat(1 << 20)).unwrap();
        let sh = dir.path().join(READER);
        std::fs::copy("/bin/sh", &sh).unwrap();
        let child = Command::new(&sh)
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

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The nodes sysfs lists (node 0 on a machine without NUMA).
fn node_ids() -> Vec<u32> {
    let v: serde_json::Value =
        serde_json::from_str(&run(&["topo", "--json"]).out()).expect("topo --json");
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn once_prints_header_nodes_and_the_reader() {
    let r = Reader::start();
    let out = run(&["top", "--once", "--interval", "1"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let text = out.out();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("numaio top  interval ") && lines[0].contains(" source "),
        "{text}"
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["NODE", "PAGE", "CACHE", "READ/s", "WRITE/s", "REMOTE"],
        "{text}"
    );
    for (i, n) in node_ids().iter().enumerate() {
        let row = lines[3 + i].trim_start();
        assert!(row.starts_with(&format!("{n} ")), "node {n}: {text}");
    }
    let pid = r.pid().to_string();
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with(&format!("{pid}  {READER}"))),
        "reader {pid} not listed: {text}"
    );
    assert!(text.contains("PID  COMM"), "{text}");
}

fn check_frame(f: &serde_json::Value) {
    assert!(f["interval_secs"].as_f64().unwrap() > 0.0, "{f}");
    let src = f["numa_io_source"].as_str().unwrap();
    assert!(["ebpf", "mount", "estimate"].contains(&src), "{f}");
    assert!(
        f["numa_io_fallback_reason"].is_string() || (src == "ebpf"),
        "{f}"
    );
    assert_eq!(f["sort"], "total");
    assert_eq!(f["filter"], "");
    let nodes = f["nodes"].as_array().unwrap();
    assert_eq!(
        nodes
            .iter()
            .map(|n| n["node"].as_u64().unwrap() as u32)
            .collect::<Vec<_>>(),
        node_ids()
    );
    for n in nodes {
        assert!(n["page_cache_bytes"].is_u64(), "{n}");
        assert!(n["read_bytes_per_sec"].as_f64().unwrap() >= 0.0, "{n}");
        assert!(n["write_bytes_per_sec"].as_f64().unwrap() >= 0.0, "{n}");
        assert!(
            n["remote_share"].is_null() || n["remote_share"].is_f64(),
            "{n}"
        );
    }
    for p in f["processes"].as_array().unwrap() {
        assert!(p["pid"].as_i64().unwrap() > 0, "{p}");
        assert!(p["comm"].is_string(), "{p}");
        assert!(p["numa_io_source"].is_string(), "{p}");
        assert!(p["read_bytes_per_sec"].is_f64(), "{p}");
        assert!(p["write_bytes_per_sec"].is_f64(), "{p}");
        assert!(p["by_data_node"].is_object(), "{p}");
        assert!(
            p.get("remote_share").is_some() && p.get("main_node").is_some(),
            "{p}"
        );
    }
    for x in f["files"].as_array().unwrap() {
        assert!(
            x["path"].is_string() && x["ino"].is_u64() && x["dev"].is_u64(),
            "{x}"
        );
        assert!(x["pids"].is_array() && x["by_data_node"].is_object(), "{x}");
    }
}

#[test]
fn json_streams_one_object_per_interval() {
    let r = Reader::start();
    let out = run(&["top", "--json", "--count", "2", "--interval", "0.5"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let text = out.out();
    let frames: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(frames.len(), 2, "{text}");
    frames.iter().for_each(check_frame);
    let pid = r.pid() as i64;
    let me = frames[1]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("reader {pid} not listed: {text}"));
    assert_eq!(me["comm"], READER);
    assert!(me["read_bytes_per_sec"].as_f64().unwrap() > 0.0, "{me}");

    // With --once exactly one, and the filter applies.
    let once = run(&[
        "top",
        "--json",
        "--once",
        "--interval",
        "0.5",
        "--filter",
        READER,
    ]);
    assert_eq!(once.code, Some(0), "{once:?}");
    let lines: Vec<&str> = once
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{once:?}");
    let f: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(f["filter"], READER);
    for p in f["processes"].as_array().unwrap() {
        assert_eq!(p["comm"], READER, "{f}");
    }
}

#[test]
fn without_a_terminal_it_asks_for_once_or_json() {
    let out = run(&["top", "--interval", "0.2"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("--once") && out.stderr.contains("--json"),
        "{out:?}"
    );
    assert!(out.stdout.is_empty());
    let bad = run(&["top", "--once", "--sort", "size"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let mut c = numaio(&["top", "--json", "--interval", "0.2"]);
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with('{'), "{first}");
    // The reader is gone (dropped above): the next frame's write fails with EPIPE.
    let code = wait_limited(&mut child, Duration::from_secs(30));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "");
}

fn tmux(socket: &Path, args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .arg("-S")
        .arg(socket)
        .args(args)
        .output()
        .expect("run tmux")
}

/// A tmux server on its own socket, killed on drop.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn start(shell_cmd: &str) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let t = Tmux {
            socket: dir.path().join("sock"),
            _dir: dir,
        };
        let o = tmux(
            &t.socket,
            &[
                "new-session",
                "-d",
                "-s",
                "top",
                "-x",
                "160",
                "-y",
                "40",
                shell_cmd,
            ],
        );
        assert!(o.status.success(), "tmux new-session: {o:?}");
        t
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&tmux(&self.socket, &["capture-pane", "-p", "-t", "top"]).stdout)
            .into_owned()
    }

    fn show(&self, fmt: &str) -> String {
        String::from_utf8_lossy(&tmux(&self.socket, &["display", "-p", "-t", "top", fmt]).stdout)
            .trim()
            .to_string()
    }

    /// Waits until the screen satisfies `ok`, returning it; panics with the last screen.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if t.elapsed() > Duration::from_secs(30) {
                panic!("{what} not seen in 30 s; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = tmux(&self.socket, &["kill-server"]);
    }
}

#[test]
fn live_view_in_tmux() {
    if Command::new("tmux").arg("-V").output().is_err() {
        numaio_testkit::skip!("tmux", "not installed (scripts/setup.sh installs it)");
    }
    let r = Reader::start();
    let pid = r.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // The pane's shell records the terminal's settings before and after, and the exit status.
    let script = format!(
        "stty -g > {d}/before; {BIN} top --interval 1; echo \"EXIT=$?\"; stty -g > {d}/after; \
         exec sleep 600",
        d = state.display()
    );
    let t = Tmux::start(&script);
    let screen = t.wait_for("the reader's row", |s| {
        s.lines()
            .any(|l| l.trim_start().starts_with(&format!("{pid}  {READER}")))
    });
    let lines: Vec<&str> = screen.lines().collect();
    assert!(
        lines[0].starts_with("numaio top  interval 1.0 s  source "),
        "{screen}"
    );
    assert!(
        lines[1].starts_with("processes, sorted by total"),
        "{screen}"
    );
    assert!(lines[2].starts_with("NODE  PAGE CACHE"), "{screen}");
    for (i, n) in node_ids().iter().enumerate() {
        assert!(
            lines[3 + i].trim_start().starts_with(&format!("{n} ")),
            "node {n}: {screen}"
        );
    }
    assert!(screen.contains("PID  COMM"), "{screen}");
    assert!(
        screen.contains("q quit  s/</> sort  / filter  p processes  f files  space pause"),
        "{screen}"
    );
    assert_eq!(
        t.show("#{alternate_on}"),
        "1",
        "the view uses the alternate screen"
    );

    // Keys: the sort column moves, the filter narrows the list to the reader, files show.
    tmux(&t.socket, &["send-keys", "-t", "top", "s"]);
    t.wait_for("sort read", |s| s.contains("processes, sorted by read"));
    tmux(&t.socket, &["send-keys", "-t", "top", "/"]);
    tmux(&t.socket, &["send-keys", "-t", "top", "-l", READER]);
    tmux(&t.socket, &["send-keys", "-t", "top", "Enter"]);
    let filtered = t.wait_for("the filter", |s| s.contains(&format!("filter {READER}")));
    // Process rows end with their source; only the reader's is left.
    let rows: Vec<&str> = filtered
        .lines()
        .filter(|l| {
            ["estimate", "ebpf", "mount"]
                .iter()
                .any(|s| l.trim_end().ends_with(s))
        })
        .collect();
    assert!(!rows.is_empty(), "{filtered}");
    assert!(rows.iter().all(|l| l.contains(READER)), "{filtered}");
    tmux(&t.socket, &["send-keys", "-t", "top", "f"]);
    t.wait_for("the files table", |s| s.contains("files, sorted by read"));

    // q ends it and gives the terminal back as it was.
    tmux(&t.socket, &["send-keys", "-t", "top", "q"]);
    let end = t.wait_for("the exit", |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=0"), "{end}");
    assert!(
        !end.contains("numaio top  interval"),
        "the view is gone: {end}"
    );
    assert_eq!(t.show("#{alternate_on}"), "0", "alternate screen left");
    assert_eq!(t.show("#{cursor_flag}"), "1", "cursor shown again");
    let stty = |f: &str| std::fs::read_to_string(state.join(f)).unwrap_or_default();
    let t0 = Instant::now();
    while stty("after").is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!stty("before").is_empty());
    assert_eq!(stty("before"), stty("after"), "terminal modes restored");
    drop(t);

    // SIGTERM ends it cleanly too.
    let script = format!(
        "stty -g > {d}/before2; {BIN} top --interval 1; echo \"EXIT=$?\"; stty -g > {d}/after2; \
         exec sleep 600",
        d = state.display()
    );
    let t = Tmux::start(&script);
    t.wait_for("the view", |s| s.contains("NODE  PAGE CACHE"));
    // The pane's shell runs numaio as its only child.
    let shell = t.show("#{pane_pid}");
    let children =
        std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
    let top: i32 = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no child of the pane's shell {shell}"));
    assert!(std::fs::read_to_string(format!("/proc/{top}/comm"))
        .unwrap()
        .starts_with("numaio"));
    // SAFETY: kill sends a signal to the pid just read; it has no memory effects.
    assert_eq!(unsafe { libc::kill(top, libc::SIGTERM) }, 0);
    let end = t.wait_for("the exit", |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=0"), "{end}");
    assert_eq!(t.show("#{alternate_on}"), "0");
    let t0 = Instant::now();
    while stty("after2").is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(stty("before2"), stty("after2"), "terminal modes restored");
    drop(r);
}

#[test]
fn a_hung_up_terminal_ends_the_view() {
    if Command::new("tmux").arg("-V").output().is_err() {
        numaio_testkit::skip!("tmux", "not installed (scripts/setup.sh installs it)");
    }
    // In a session of its own the view gets no SIGHUP when the pane goes away (as after a
    // dropped ssh session with the view started by a wrapper): only reads at end of file.
    let t = Tmux::start(&format!("exec setsid -w {BIN} top --interval 1"));
    t.wait_for("the view", |s| s.contains("NODE  PAGE CACHE"));
    let setsid = t.show("#{pane_pid}");
    let top: i32 = std::fs::read_to_string(format!("/proc/{setsid}/task/{setsid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no child of setsid {setsid}"));
    drop(t);
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
    };
    let t0 = Instant::now();
    while !gone(top) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    if !gone(top) {
        // SAFETY: kill sends a signal to the pid read above; it has no memory effects.
        unsafe { libc::kill(top, libc::SIGKILL) };
        panic!("numaio top ({top}) still runs 10 s after its terminal hung up");
    }
}
