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

/// A `python3` that cannot see the advisor: isolated mode ignores the PYTHONPATH through
/// which the command offers the checkout's package. None where the host has no python3 or
/// has the package installed for it.
fn python_without_advisor(dir: &Path) -> Option<std::path::PathBuf> {
    let lacks = std::process::Command::new("python3")
        .args(["-I", "-c", "import numaio_advisor"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| !s.success());
    if !lacks {
        return None;
    }
    let py = dir.join("python3");
    std::fs::write(&py, "#!/bin/sh\nexec python3 -I \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(py)
}

#[test]
fn help_prints_without_the_advisor_and_advice_says_it_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(py) = python_without_advisor(dir.path()) else {
        skip!(
            "python3",
            "no python3 on PATH, or it has numaio_advisor installed"
        );
    };
    for args in [
        &["advise", "--help"][..],
        &["advise", "-h"],
        &["advise", "collect", "--help"],
    ] {
        let mut cmd = numaio(args);
        cmd.env("NUMAIO_PYTHON", &py);
        let r = run_limited(cmd, Duration::from_secs(20));
        assert_eq!(r.code, Some(0), "{args:?}: {r:?}");
        assert!(r.stderr.is_empty(), "{args:?}: {}", r.stderr);
        let out = r.out();
        assert!(out.contains("numaio advise"), "{out}");
        assert!(out.contains("setup-python.sh"), "{out}");
    }
    // A plain python3 sees the checkout's advisor but maybe not its dependencies (numpy,
    // pandas, scikit-learn): the advisor's own help prints all the same.
    let mut cmd = numaio(&["advise", "--help"]);
    cmd.env("NUMAIO_PYTHON", "python3");
    let r = run_limited(cmd, Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.out().starts_with("usage: numaio advise"), "{}", r.out());
    // Without any Python help prints too.
    let mut cmd = numaio(&["advise", "--help"]);
    cmd.env("NUMAIO_PYTHON", "/nonexistent/python3");
    let r = run_limited(cmd, Duration::from_secs(20));
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.out().contains("setup-python.sh"), "{}", r.out());
    // Asking for advice still reports the missing package, once.
    let mut cmd = numaio(&["advise", "run.darshan"]);
    cmd.env("NUMAIO_PYTHON", &py);
    let r = run_limited(cmd, Duration::from_secs(20));
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stdout.is_empty(), "{}", r.out());
    assert!(
        r.stderr.contains("no numaio_advisor package"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
}
