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
