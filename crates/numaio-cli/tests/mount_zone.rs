//! `numaio mount --zone`: a RAM zone volume (memory bound to its node, formatted at mount,
//! gone at unmount) and a persistent zone volume formatted by `numaio mkfs --zone` (mapped,
//! kept across mounts), plus the arguments a zone mount refuses (needs root and /dev/fuse
//! for the mounts; skips visibly).

mod common;

use common::mount::{can_mount, numaio_out, ok, Unmount};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

fn json(o: &Output, what: &str) -> serde_json::Value {
    serde_json::from_str(&ok(o, what)).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"))
}

fn mount(zones: &[String], mnt: &Path) -> Output {
    let mut a: Vec<&OsStr> = vec!["mount".as_ref(), "--json".as_ref()];
    for z in zones {
        a.push("--zone".as_ref());
        a.push(z.as_ref());
    }
    a.push(mnt.as_os_str());
    numaio_out(a)
}

fn fs_stat(mnt: &Path) -> serde_json::Value {
    json(
        &numaio_out([
            "fs".as_ref(),
            "stat".as_ref(),
            "--json".as_ref(),
            mnt.as_os_str(),
        ]),
        "fs stat",
    )
}

fn umount(mnt: &Path) {
    ok(&numaio_out(["umount".as_ref(), mnt.as_os_str()]), "umount");
}

#[test]
fn a_ram_zone_volume_serves_files_and_is_gone_after_unmount() {
    if !can_mount("a_ram_zone_volume_serves_files_and_is_gone_after_unmount") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let zone = vec!["0:32M".to_string()];
    let m = json(&mount(&zone, &mnt), "mount --zone 0:32M");
    assert_eq!(m["devices"][0], "0:33554432", "{m}");
    let _guard = Unmount(&mnt);
    let data: Vec<u8> = (0..3 << 20)
        .map(|i: u32| (i * 7 + i / 4096) as u8)
        .collect();
    std::fs::write(mnt.join("f"), &data).unwrap();
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);

    // One node, 32 MiB, the 3 MiB written on it.
    let st = fs_stat(&mnt);
    let nodes = st["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{st}");
    assert_eq!(nodes[0]["node"], 0, "{st}");
    let cap = nodes[0]["capacity_bytes"].as_u64().unwrap();
    assert!(cap > 24 << 20 && cap <= 32 << 20, "capacity {cap}: {st}");
    assert_eq!(nodes[0]["write_bytes"], 3u64 << 20, "{st}");

    // The mount source names the server, and unmount waits for it to exit.
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let pid = m["pid"].as_u64().unwrap();
    assert!(
        info.contains(&format!("numaio-ram:{pid}")),
        "no numaio-ram:{pid} in mountinfo"
    );
    umount(&mnt);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')),
        "server {pid} still running after umount: {stat}"
    );
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);

    // A new RAM volume starts empty.
    json(&mount(&zone, &mnt), "second mount");
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);
    umount(&mnt);
}

#[test]
fn a_persistent_zone_volume_keeps_its_files_across_mounts() {
    if !can_mount("a_persistent_zone_volume_keeps_its_files_across_mounts") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let z0 = format!("0:16M:{}", dir.path().join("z0").display());
    let z1 = format!("0:16M:{}", dir.path().join("z1").display());
    ok(
        &numaio_out(["mkfs", "--zone", &z0, "--zone", &z1]),
        "mkfs --zone",
    );
    // Zones in any order: their labels put them in volume order.
    let m = json(&mount(&[z1.clone(), z0.clone()], &mnt), "mount");
    assert_eq!(m["devices"].as_array().unwrap().len(), 2, "{m}");
    {
        let _guard = Unmount(&mnt);
        std::fs::write(mnt.join("kept"), b"survives").unwrap();
        // The volume is in use: a second mount of it is refused.
        let mnt2 = dir.path().join("mnt2");
        std::fs::create_dir(&mnt2).unwrap();
        let o = mount(&[z0.clone(), z1.clone()], &mnt2);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("another numaio command has the volume open"),
            "{err}"
        );
        umount(&mnt);
    }
    json(&mount(&[z0.clone(), z1.clone()], &mnt), "remount");
    let _guard = Unmount(&mnt);
    assert_eq!(std::fs::read(mnt.join("kept")).unwrap(), b"survives");
    umount(&mnt);

    // A size other than the one formatted is named.
    let wrong = format!("0:8M:{}", dir.path().join("z0").display());
    let o = mount(&[wrong, z1], &mnt);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("was formatted as zone 0:16777216"), "{err}");
}

#[test]
fn zone_arguments_that_cannot_work_are_refused_before_mounting() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let p = dir.path().join("z").display().to_string();
    let cases: [(&[&str], &str); 6] = [
        (
            &["--zone", "0:8M", "--zone", &format!("0:8M:{p}")],
            "only one kind",
        ),
        (&["--zone", "4000:8M"], "node 4000 does not exist"),
        (&["-o", "ro", "--zone", "0:8M"], "starts empty"),
        (
            &["--zone", &format!("0:8M:{p}"), "--placement", "interleave"],
            "RAM zones only",
        ),
        (&["--zone", "0:1000000G"], "give smaller zones"),
        (&["--zone", "0:8M", &p], "not both"),
    ];
    for (args, want) in cases {
        let mut a: Vec<&OsStr> = vec!["mount".as_ref()];
        a.extend(args.iter().map(OsStr::new));
        a.push(mnt.as_os_str());
        let o = numaio_out(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // Nothing was mounted or created.
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);
    assert!(!dir.path().join("z").exists());
    // Neither devices nor zones.
    let o = numaio_out(["mount".as_ref(), mnt.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
}
