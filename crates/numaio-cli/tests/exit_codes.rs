//! The exit-status table: every code means one thing in every command, `run` reports a
//! command it cannot start as env(1) does (126/127), and every `--help` prints the table.
//! (Status 3, a partial result, needs pages that cannot move between two nodes: the lab
//! test `pagecache::page_cache_commands` checks it for `move`.)

mod common;
use common::*;
use std::time::Duration;

fn code(args: &[&str]) -> (Option<i32>, String) {
    let r = run_limited(numaio(args), Duration::from_secs(30));
    assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    (r.code, r.stderr)
}

/// A pid no process has (the largest possible ones are practically never handed out).
fn absent_pid() -> String {
    (4_000_000..4_194_304)
        .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid")
        .to_string()
}

/// This process's allowed CPUs, from /proc/self/status.
fn own_cpus() -> String {
    let st = std::fs::read_to_string("/proc/self/status").unwrap();
    st.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

fn first_cpu() -> String {
    own_cpus()
        .split([',', '-'])
        .next()
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn zero_on_success() {
    assert_eq!(code(&["topo"]).0, Some(0));
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, b"data").unwrap();
    assert_eq!(code(&["where", f.to_str().unwrap()]).0, Some(0));
}

#[test]
fn one_on_errors() {
    let (c, err) = code(&["where", "/nonexistent-numaio/x"]);
    assert_eq!(c, Some(1), "{err}");
    assert!(err.contains("/nonexistent-numaio/x"), "{err}");
    let (c, err) = code(&["evict", "/nonexistent-numaio/x"]);
    assert_eq!(c, Some(1), "{err}");
}

#[test]
fn two_on_usage_errors() {
    let pid = absent_pid();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let live = sleeper.id().to_string();
    let cases: &[&[&str]] = &[
        &["where", "--no-such-flag", "/"],
        &["frobnicate"],
        &["ps", &pid],
        &["pin", &pid, "--node", "0"],
        &["pin", "1", "--node", "0"],
        &["pin", &live, "--node", "1000"],
        &["run", "--", "true"],
        &["run", "--cpunodebind", "1000", "--", "true"],
        &["run", "--membind", "0-", "--", "true"],
        &["run", "--physcpubind", "100000", "--", "true"],
        &["run", "--warm", "--membind", "0", "--", "true"],
        &["run", "--membind", "0", "--interleave", "0", "--", "true"],
    ];
    for args in cases {
        let (c, err) = code(args);
        assert_eq!(c, Some(2), "{args:?}: {err}");
        assert!(!err.is_empty(), "{args:?}: no message");
    }
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

#[test]
fn run_reports_unstartable_commands_like_env() {
    let d = tempfile::tempdir().unwrap();
    let not_exec = d.path().join("data.txt");
    std::fs::write(&not_exec, b"not a program").unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["no-such-command-numaio"], 127, "command not found"),
        (&["/nonexistent-numaio/cmd"], 127, "command not found"),
        (&[not_exec.to_str().unwrap()], 126, "cannot execute"),
        (&["/"], 126, "cannot execute"),
    ];
    for (cmd, want, msg) in cases {
        let mut args = vec!["run", "-q", "--membind", "all", "--"];
        args.extend_from_slice(cmd);
        let (c, err) = code(&args);
        assert_eq!(c, Some(*want), "{cmd:?}: {err}");
        assert!(err.contains(msg) && err.contains(cmd[0]), "{cmd:?}: {err}");
    }
    // The command's own status passes through unchanged.
    let (c, err) = code(&["run", "-q", "-m", "all", "--", "sh", "-c", "exit 7"]);
    assert_eq!(c, Some(7), "{err}");
}

/// The bindings reach the command: its affinity and its memory policy as the kernel shows
/// them in /proc/self/status and /proc/self/numa_maps.
#[test]
fn run_applies_numactl_bindings() {
    let cpu = first_cpu();
    for (flag, nodes, shown) in [
        ("--membind", "0", "bind:0"),
        ("--interleave", "all", "interleave:"),
        ("--preferred", "0", "prefer"),
    ] {
        let r = run_limited(
            numaio(&[
                "run",
                "--physcpubind",
                &cpu,
                flag,
                nodes,
                "--json",
                "--",
                "cat",
                "/proc/self/status",
                "/proc/self/numa_maps",
            ]),
            Duration::from_secs(30),
        );
        assert_eq!(r.code, Some(0), "{flag}: {}", r.stderr);
        let out = r.out();
        let allowed = out
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim();
        assert_eq!(allowed, cpu, "{flag}: {out}");
        assert!(
            out.lines().any(|l| l.contains(shown)),
            "{flag}: numa_maps lacks {shown}: {out}"
        );
        let plan: serde_json::Value = serde_json::from_str(r.stderr.trim()).unwrap();
        assert_eq!(plan["cpus"][0].as_u64().unwrap().to_string(), cpu);
    }
    // --cpunodebind: the node's CPUs within ours.
    let r = run_limited(
        numaio(&["run", "-q", "-N", "0", "--", "cat", "/proc/self/status"]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.out().contains("Cpus_allowed_list:"), "{}", r.out());
}

#[test]
fn every_help_prints_the_table() {
    for cmd in [
        "topo", "where", "warm", "move", "evict", "ps", "pin", "run", "daemon", "bench",
    ] {
        let r = run_limited(numaio(&[cmd, "--help"]), Duration::from_secs(30));
        assert_eq!(r.code, Some(0), "{cmd}: {}", r.stderr);
        let out = r.out();
        assert!(out.contains("Exit status:"), "{cmd}: {out}");
        for c in ["  0 ", "  1 ", "  2 ", "  3 ", "  126 ", "  127 "] {
            assert!(out.contains(c), "{cmd} --help lacks {c:?}: {out}");
        }
    }
    let r = run_limited(numaio(&["--help"]), Duration::from_secs(30));
    assert!(r.out().contains("127"), "{}", r.out());
}
