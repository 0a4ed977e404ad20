//! `numaio advise` hands its arguments to the Python advisor, and says once, with the install
//! command, when Python or the advisor is missing.

mod common;
use common::*;
use numaio_testkit::skip;
use std::path::Path;
use std::time::Duration;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
}

#[test]
fn missing_python_is_one_clear_message() {
    let mut cmd = numaio(&["advise", "some.darshan"]);
    cmd.env("NUMAIO_PYTHON", "/nonexistent/python3");
    let r = run_limited(cmd, Duration::from_secs(20));
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stdout.is_empty(), "{}", r.out());
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("/nonexistent/python3"), "{}", r.stderr);
    assert!(r.stderr.contains("setup-python.sh"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn python_without_the_advisor_is_one_clear_message() {
    // `false` stands for a Python whose probe for the package fails.
    let mut cmd = numaio(&["advise", "x"]);
    cmd.env("NUMAIO_PYTHON", "false");
    let r = run_limited(cmd, Duration::from_secs(20));
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("no numaio_advisor package") && r.stderr.contains("setup-python.sh"),
        "{}",
        r.stderr
    );
}

/// The checkout's venv from scripts/setup-python.sh, where it was run.
fn venv_python() -> Option<std::path::PathBuf> {
    let py = repo().join(".venv/bin/python3");
    let ok = std::process::Command::new(&py)
        .args(["-c", "import sklearn, pandas"])
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(py)
}

#[test]
fn advises_from_an_fio_json_through_python() {
    let Some(py) = venv_python() else {
        skip!(
            "python-advisor",
            "no .venv with scikit-learn; run scripts/setup-python.sh"
        );
    };
    let fixture = repo().join("python/tests/fixtures/fio-randread-4k.json");
    let cache = tempfile::tempdir().unwrap();
    let mut cmd = numaio(&["advise", fixture.to_str().unwrap(), "--json", "--top", "2"]);
    cmd.env("NUMAIO_PYTHON", &py)
        .env("XDG_CACHE_HOME", cache.path());
    let r = run_limited(cmd, Duration::from_secs(300));
    assert_eq!(r.code, Some(0), "{r:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["recommendations"].as_array().unwrap().len(), 2);
    assert_eq!(v["profile"]["source"], "fio");

    // Bad input: the advisor's message and status come through, no traceback.
    let mut cmd = numaio(&["advise", "/nonexistent/log.darshan"]);
    cmd.env("NUMAIO_PYTHON", &py)
        .env("XDG_CACHE_HOME", cache.path());
    let r = run_limited(cmd, Duration::from_secs(120));
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("no such file"), "{}", r.stderr);
    assert!(!r.stderr.contains("Traceback"), "{}", r.stderr);
}
