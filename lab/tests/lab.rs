//! Lab tests of the lab itself: status and output pass through, a hung guest is killed
//! with the console tail shown, the disk appears on /mnt, the unprivileged user works.

use numaio_lab::{disk::pattern_fill, DiskFile, DiskSpec, LabError, LabTopology, Scenario};
use std::time::{Duration, Instant};

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn status_output_and_nobody() {
    let script = "echo first line\necho to-stderr >&2\nas-nobody id -u\n\
        as-nobody touch /x 2>/dev/null && echo root-writable || echo root-protected\n\
        printf 'no newline'\nexit 7\n";
    let out = Scenario::new(LabTopology::uniform(2), script).must_run();
    assert_eq!(out.exit_code, 7, "{}", out.report());
    assert_eq!(
        out.output,
        "first line\nto-stderr\n65534\nroot-protected\nno newline",
        "{}",
        out.report()
    );
    assert!(
        out.elapsed < Duration::from_secs(20),
        "2-node run took {:?}",
        out.elapsed
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn hung_guest_is_killed_with_console_tail() {
    let start = Instant::now();
    let err = Scenario::new(LabTopology::uniform(2), "echo about-to-hang\nsleep 1000\n")
        .timeout(Duration::from_secs(15))
        .run()
        .expect_err("a sleeping guest must time out");
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "kill took {:?}",
        start.elapsed()
    );
    match &err {
        LabError::Timeout { console_tail, .. } => {
            assert!(console_tail.contains("about-to-hang"), "{err}")
        }
        other => panic!("expected a timeout, got: {other}"),
    }
    assert!(err.to_string().contains("console tail"), "{err}");
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn disk_files_and_permissions() {
    let disk = DiskSpec::new()
        .file(DiskFile::pattern("data/p.bin", 3 * 4096 + 100))
        .file(DiskFile::zeros("z.bin", 1 << 20))
        .file(DiskFile::pattern("secret.bin", 4096).with_mode(0o600));
    let script = "\
        stat -c '%s %a' /mnt/data/p.bin /mnt/z.bin /mnt/secret.bin\n\
        od -A d -t x1 -j 4096 -N 8 /mnt/data/p.bin | head -1\n\
        as-nobody cat /mnt/secret.bin >/dev/null 2>&1 && echo readable || echo denied\n";
    let out = Scenario::new(LabTopology::uniform(2), script)
        .disk(disk)
        .must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let lines: Vec<&str> = out.output.lines().collect();
    assert_eq!(lines[0], "12388 644", "{}", out.report());
    assert_eq!(lines[1], "1048576 644", "{}", out.report());
    assert_eq!(lines[2], "4096 600", "{}", out.report());
    let mut page1 = [0u8; 8];
    pattern_fill(4096, &mut page1);
    let hex: Vec<String> = page1.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        lines[3].split_whitespace().skip(1).collect::<Vec<_>>(),
        hex,
        "{}",
        out.report()
    );
    assert_eq!(lines[4], "denied", "{}", out.report());
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn unbootable_topology_is_a_clear_error() {
    // the lab's own checks accept 300 CPUs; QEMU's pc machine does not (its limit is 255)
    let topo = LabTopology::from_nodes(&[(300, 256)]);
    let err = Scenario::new(topo, "true")
        .run()
        .expect_err("QEMU must refuse 300 CPUs");
    let msg = err.to_string();
    assert!(matches!(err, LabError::QemuFailed { .. }), "{msg}");
    assert!(msg.contains("QEMU said"), "{msg}");
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn guest_dying_mid_scenario_is_reported() {
    let err = Scenario::new(
        LabTopology::uniform(2),
        "echo going-down\npoweroff -f\nsleep 30\n",
    )
    .timeout(Duration::from_secs(60))
    .run()
    .expect_err("a guest that powers off mid-scenario must not look like a success");
    assert!(matches!(err, LabError::GuestDied { .. }), "{err}");
    assert!(err.console_tail().unwrap().contains("going-down"), "{err}");
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn long_output_arrives_complete() {
    let out = Scenario::new(LabTopology::uniform(1), "seq 1 20000").must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    let nums: Vec<u32> = out.output.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(nums, (1..=20000).collect::<Vec<u32>>());
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn boot_panic_is_reported_with_the_panic() {
    // no /init to run: the kernel panics before the scenario can start
    let err = Scenario::new(LabTopology::uniform(1), "true")
        .kernel_arg("rdinit=/nonexistent")
        .timeout(Duration::from_secs(60))
        .run()
        .expect_err("a guest without init cannot succeed");
    assert!(
        matches!(err, LabError::GuestDied { started: false, .. }),
        "{err}"
    );
    assert!(
        err.console_tail().unwrap().contains("Kernel panic"),
        "{err}"
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn a_guest_lockup_is_run_once_more_from_the_images_as_they_were() {
    // The guest prints what its disk holds and whether it is the rerun, overwrites the
    // disk, prints the kernel's soft-lockup line and dies: the rerun must see the disk as
    // it was before the first boot, and its own failure is the one returned.
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk0.img");
    let mut before = vec![0u8; 1 << 20];
    before[..5].copy_from_slice(b"AAAAA");
    std::fs::write(&img, &before).unwrap();
    let script = "d=$(node-disk 0)\n\
        echo \"SAW $(head -c 5 $d) RERUN $(grep -c numaio_lab.rerun=1 /proc/cmdline)\"\n\
        printf BBBBB | dd of=$d conv=fsync 2>/dev/null\n\
        echo 'watchdog: BUG: soft lockup - CPU#1 stuck for 26s! [sh:1]'\n\
        poweroff -f\nsleep 30\n";
    let s = Scenario::new(LabTopology::uniform(2), script)
        .node_disk_image(0, &img)
        .timeout(Duration::from_secs(60));
    let err = s
        .clone()
        .run()
        .expect_err("without the rerun the first failure is returned");
    let tail = err.console_tail().unwrap();
    assert!(tail.contains("SAW AAAAA RERUN 0"), "{err}");
    assert_eq!(&std::fs::read(&img).unwrap()[..5], b"BBBBB");

    std::fs::write(&img, &before).unwrap();
    let err = s
        .retry_after_guest_lockup()
        .run()
        .expect_err("the rerun fails the same way");
    assert!(matches!(err, LabError::GuestDied { .. }), "{err}");
    let tail = err.console_tail().unwrap();
    assert!(
        tail.contains("SAW AAAAA RERUN 1"),
        "the rerun must see the disk as it was before the first boot: {err}"
    );
    assert_eq!(&std::fs::read(&img).unwrap()[..5], b"BBBBB");
}
