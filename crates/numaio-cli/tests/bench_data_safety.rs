//! `numaio bench` never loses data: existing files are read-only to read workloads, write
//! workloads need --overwrite, devices and FIFOs are refused, and I/O errors end the run
//! with exit status 1 and the errno named.

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

/// 350 lines of `IMPORTANT`, as in the original report (3500 bytes).
fn important(p: &Path, lines: usize) -> Vec<u8> {
    let data = b"IMPORTANT\n".repeat(lines);
    std::fs::write(p, &data).unwrap();
    data
}

#[test]
fn read_workload_on_a_short_file_is_refused_and_the_file_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    let orig = important(&f, 350);
    let fs = f.to_str().unwrap();
    for target in ["engine", "kernel", "memcpy", "quick-cache", "foyer"] {
        let r = run(&[
            "bench",
            "--target",
            target,
            "--workload",
            "randread",
            "--file",
            fs,
            "--size",
            "1M",
            "--duration",
            "1",
        ]);
        assert_eq!(r.code, Some(1), "{target}: {r:?}");
        assert!(
            r.stderr.contains("shorter than --size"),
            "{target}: {}",
            r.stderr
        );
        assert!(r.stderr.contains("3500 bytes"), "{}", r.stderr);
        assert_eq!(
            std::fs::read(&f).unwrap(),
            orig,
            "{target} changed the file"
        );
    }
}

#[test]
fn read_workloads_on_an_existing_file_leave_it_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    let orig = important(&f, 6554); // 65540 bytes
    let fs = f.to_str().unwrap();
    for (target, extra) in [
        ("kernel", &[][..]),
        ("memcpy", &[][..]),
        ("quick-cache", &[][..]),
        ("foyer", &[][..]),
        (
            "engine",
            &["--no-direct", "--slices", "1", "--cache", "8M"][..],
        ),
    ] {
        let mut args = vec![
            "bench",
            "--target",
            target,
            "--workload",
            "randread",
            "--file",
            fs,
            "--size",
            "64K",
            "--duration",
            "0.2",
            "--json",
        ];
        args.extend_from_slice(extra);
        let r = run(&args);
        assert_eq!(r.code, Some(0), "{target}: {r:?}");
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(v["file_created"], false, "{v}");
        assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(
            std::fs::read(&f).unwrap(),
            orig,
            "{target} changed the file"
        );
    }
}

#[test]
fn write_workloads_need_overwrite_for_existing_files() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    let orig = important(&f, 6554);
    let fs = f.to_str().unwrap();
    for target in ["engine", "kernel"] {
        for wl in ["randwrite", "seqwrite"] {
            let r = run(&[
                "bench",
                "--target",
                target,
                "--workload",
                wl,
                "--file",
                fs,
                "--size",
                "64K",
                "--duration",
                "0.2",
            ]);
            assert_eq!(r.code, Some(1), "{target} {wl}: {r:?}");
            assert!(r.stderr.contains("--overwrite"), "{}", r.stderr);
            assert_eq!(
                std::fs::read(&f).unwrap(),
                orig,
                "{target} {wl} changed the file"
            );
        }
    }
    let r = run(&[
        "bench",
        "--target",
        "kernel",
        "--workload",
        "randwrite",
        "--file",
        fs,
        "--size",
        "64K",
        "--duration",
        "0.2",
        "--overwrite",
    ]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 65540, "not truncated");
}

#[test]
fn files_bench_creates_are_kept_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("new.dat");
    let fs = f.to_str().unwrap();
    let args = [
        "bench",
        "--target",
        "kernel",
        "--workload",
        "randread",
        "--file",
        fs,
        "--size",
        "256K",
        "--duration",
        "0.2",
        "--json",
    ];
    let r = run(&args);
    assert_eq!(r.code, Some(0), "{r:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["file_created"], true);
    let data = std::fs::read(&f).unwrap();
    assert_eq!(data.len(), 256 << 10);
    assert!(data.iter().all(|&b| b != 0), "filled with non-zero data");
    let r = run(&args);
    assert_eq!(r.code, Some(0), "{r:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["file_created"], false);
    // A write run creating its own file may write it.
    let w = dir.path().join("w.dat");
    let r = run(&[
        "bench",
        "--target",
        "kernel",
        "--workload",
        "seqwrite",
        "--file",
        w.to_str().unwrap(),
        "--size",
        "128K",
        "--duration",
        "0.2",
    ]);
    assert_eq!(r.code, Some(0), "{r:?}");
}

#[test]
fn fifos_devices_and_system_files_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let limit = Duration::from_secs(20);
    for (file, extra, want) in [
        (fifo.to_str().unwrap(), &[][..], "a FIFO"),
        (fifo.to_str().unwrap(), &["--allow-device"][..], "a FIFO"),
        ("/dev/null", &[][..], "character device"),
        (
            "/dev/zero",
            &["--workload", "randwrite", "--overwrite"][..],
            "--allow-device",
        ),
        ("/proc/self/status", &[][..], "under /proc"),
        ("/tmp", &[][..], "a directory"),
    ] {
        for target in ["kernel", "engine"] {
            let mut args = vec![
                "bench",
                "--target",
                target,
                "--file",
                file,
                "--size",
                "4K",
                "--duration",
                "0.1",
            ];
            args.extend_from_slice(extra);
            let r = run_limited(numaio(&args), limit);
            assert_eq!(r.code, Some(1), "{file} {target}: {r:?}");
            assert!(r.stderr.contains(want), "{file}: {}", r.stderr);
        }
    }
}

#[test]
fn block_devices_are_refused_without_allow_device() {
    let dev = std::fs::read_dir("/dev")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            use std::os::unix::fs::FileTypeExt;
            std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device())
        });
    let Some(dev) = dev else {
        skip("block-device", "no block device under /dev");
        return;
    };
    let d = dev.to_str().unwrap();
    for wl in ["randread", "randwrite"] {
        let r = run(&[
            "bench",
            "--target",
            "kernel",
            "--workload",
            wl,
            "--file",
            d,
            "--size",
            "4K",
            "--duration",
            "0.1",
        ]);
        assert_eq!(r.code, Some(1), "{r:?}");
        assert!(r.stderr.contains("block device"), "{}", r.stderr);
        assert!(r.stderr.contains("--allow-device"), "{}", r.stderr);
    }
    // With --allow-device a write still needs --overwrite (checked before any write).
    let r = run(&[
        "bench",
        "--target",
        "kernel",
        "--workload",
        "randwrite",
        "--file",
        d,
        "--size",
        "4K",
        "--duration",
        "0.1",
        "--allow-device",
    ]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("--overwrite") || r.stderr.contains("cannot"),
        "{}",
        r.stderr
    );
}

#[test]
fn kernel_target_write_errors_end_the_run_with_the_errno() {
    // /dev/full: every write fails with ENOSPC, without root.
    let r = run(&[
        "bench",
        "--target",
        "kernel",
        "--workload",
        "randwrite",
        "--file",
        "/dev/full",
        "--allow-device",
        "--overwrite",
        "--size",
        "1M",
        "--duration",
        "1",
    ]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("ENOSPC"), "{}", r.stderr);
    assert!(r.stderr.contains("/dev/full"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "no result line: {}", r.out());
}

#[test]
fn kernel_target_enospc_on_a_full_tmpfs() {
    if !is_root() {
        skip(numaio_testkit::needs::ROOT, "to mount a tmpfs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .output();
    match m {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            skip(
                numaio_testkit::needs::TMPFS,
                &format!(
                    "mount failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
            );
            return;
        }
        Err(e) => {
            skip(
                numaio_testkit::needs::TMPFS,
                &format!("cannot run mount: {e}"),
            );
            return;
        }
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _u = Unmount(&mnt);
    // A sparse 4 MiB file on a 1 MiB tmpfs: writes into its holes run out of space.
    let f = mnt.join("sparse");
    std::fs::File::create(&f).unwrap().set_len(4 << 20).unwrap();
    let r = run(&[
        "bench",
        "--target",
        "kernel",
        "--workload",
        "randwrite",
        "--file",
        f.to_str().unwrap(),
        "--overwrite",
        "--size",
        "4M",
        "--duration",
        "5",
    ]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("ENOSPC"), "{}", r.stderr);
    assert!(r.stderr.contains("sparse"), "{}", r.stderr);
    // Creating a file larger than the tmpfs fails while filling, is reported, and leaves
    // nothing behind.
    let g = mnt.join("big");
    let r = run(&[
        "bench",
        "--target",
        "kernel",
        "--file",
        g.to_str().unwrap(),
        "--size",
        "4M",
        "--duration",
        "1",
    ]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("ENOSPC"), "{}", r.stderr);
    assert!(!g.exists(), "partial file removed");
}
