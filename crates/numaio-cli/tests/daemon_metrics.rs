//! `numaio daemon --metrics`: where it binds and what it warns about.

use std::process::Command;

fn daemon_stderr(metrics: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_numaio"))
        .args(["daemon", "--once", "--metrics", metrics])
        .output()
        .expect("run numaio daemon");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "numaio daemon --metrics {metrics} failed: {err}"
    );
    err
}

#[test]
fn warns_when_metrics_listen_on_every_address() {
    let err = daemon_stderr("0.0.0.0:0");
    assert!(
        err.contains("warning: metrics endpoint listens on 0.0.0.0:")
            && err.contains("not a loopback address"),
        "{err}"
    );
}

#[test]
fn bare_port_binds_loopback_without_warning() {
    let err = daemon_stderr("0");
    assert!(err.contains("metrics on http://127.0.0.1:"), "{err}");
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn textfile_mode_writes_classic_text_atomically() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let out = Command::new(env!("CARGO_BIN_EXE_numaio"))
        .args([
            "daemon",
            "--iterations",
            "2",
            "--interval",
            "0.2",
            "--metrics-top-files",
            "3",
            "--textfile",
        ])
        .arg(dir.path())
        .output()
        .expect("run numaio daemon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "numaio daemon --textfile failed: {err}"
    );
    // The start line says where per-node counts come from (or why they are estimated).
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("; per-node I/O "), "{stdout}");
    let text = std::fs::read_to_string(dir.path().join("numaio.prom")).expect("numaio.prom");
    // Processes per source, and the counted bytes per numa_node (every node, from 0).
    assert!(
        text.contains("\nnumaio_processes{numa_io_source=\"estimate\"} "),
        "{text}"
    );
    assert!(
        text.contains("\nnumaio_io_bytes_total{numa_node=\"0\",direction=\"read\"} "),
        "{text}"
    );
    assert!(!text.contains("node=\"0\"") || text.contains("numa_node=\"0\""));
    // promtool finds nothing to complain about in the real textfile (its absence is logged
    // as a skip of this part; the rest of the test has run).
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(dir.path().join("numaio.prom")).unwrap())
        .output()
    {
        Ok(check) => assert!(
            check.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        ),
        Err(e) => numaio_testkit::skipped("promtool", &format!("cannot run promtool: {e}")),
    }
    assert!(!text.contains("# EOF"), "{text}");
    assert!(
        text.contains("# TYPE numaio_intervals_total counter\n"),
        "{text}"
    );
    assert!(text.contains("\nnumaio_intervals_total 2\n"), "{text}");
    assert!(text.contains("\nnumaio_build_info{version=\""), "{text}");
    assert!(
        text.contains("\nnumaio_daemon_cpu_seconds_total "),
        "{text}"
    );
    assert!(!text.contains("pid=\""), "{text}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["numaio.prom"], "temporary files left behind");
}

#[test]
fn textfile_in_a_missing_directory_fails_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_numaio"))
        .args([
            "daemon",
            "--once",
            "--textfile",
            "/nonexistent/numaio-textfile",
        ])
        .output()
        .expect("run numaio daemon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/nonexistent/numaio-textfile/numaio.prom") && err.contains("--textfile"),
        "{err}"
    );
}
