//! `probe_devices`: what `numaio mkfs` accepts as devices, and the clear refusals.

mod common;

use common::{Loop, LOOP_DEVICE};
use numaio_fs::device::{probe_devices, NodeRule};
use numaio_fs::store::{BlockStore, DeviceKind, FileStore};
use numaio_sys::Topology;
use std::path::{Path, PathBuf};

fn topo() -> Topology {
    Topology::synthetic("n0=0@1G n1=1@1G n2=@0").unwrap()
}

fn file(dir: &Path, name: &str, bytes: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(bytes).unwrap();
    p
}

fn rule(p: &Path, node: u32) -> NodeRule {
    format!("{}={node}", p.display()).parse().unwrap()
}

fn probe_err<P: AsRef<Path>>(paths: &[P], rules: &[NodeRule]) -> String {
    probe_devices(paths, rules, &topo())
        .expect_err("probe must fail")
        .to_string()
}

/// What sysfs says about the device holding `p`'s file system.
fn sysfs_node_of_fs(p: &Path) -> Option<u32> {
    numaio_sys::blockdev::node_of_path(p)
}

#[test]
fn files_with_rules_are_probed_and_rules_match_any_path_to_them() {
    let dir = tempfile::tempdir().unwrap();
    let a = file(dir.path(), "a", 1 << 20);
    let b = file(dir.path(), "b", 3 << 20);
    let link = dir.path().join("link-to-b");
    std::os::unix::fs::symlink(&b, &link).unwrap();
    let devs = probe_devices(
        &[a.clone(), b.clone()],
        &[rule(&a, 0), rule(&link, 1)],
        &topo(),
    )
    .unwrap();
    assert_eq!(devs.len(), 2);
    assert_eq!((devs[0].node, devs[0].bytes), (0, 1 << 20));
    assert_eq!((devs[1].node, devs[1].bytes), (1, 3 << 20));
    assert!(devs.iter().all(|d| d.kind == DeviceKind::File));
    assert_eq!(devs[1].path, b);
}

#[test]
fn a_device_without_a_node_needs_a_rule() {
    let dir = tempfile::tempdir().unwrap();
    let a = file(dir.path(), "a", 1 << 20);
    match sysfs_node_of_fs(&a) {
        None => {
            let e = probe_err(&[&a], &[]);
            assert!(
                e.contains("reports no NUMA node")
                    && e.contains(&format!("--node-of {}=NODE", a.display())),
                "{e}"
            );
        }
        // The temporary directory is on a device that reports a node: it is used.
        Some(n) => {
            let t = Topology::detect().unwrap();
            let devs = probe_devices(&[a], &[], &t).unwrap();
            assert_eq!(devs[0].node, n);
        }
    }
}

#[test]
fn what_is_not_a_device_is_refused_by_name_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let sock = dir.path().join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    for (p, what) in [
        (sub, "is a directory"),
        (fifo, "is a FIFO"),
        (sock, "is a socket"),
        (PathBuf::from("/dev/null"), "is a character device"),
    ] {
        let e = probe_err(&[&p], &[rule(&p, 0)]);
        assert!(
            e.contains(&p.display().to_string()) && e.contains(what),
            "{e}"
        );
    }
    let missing = dir.path().join("missing");
    let e = probe_err(&[&missing], &[]);
    assert_eq!(
        e,
        format!(
            "{}: looking up the device (check the path): No such file or directory (os error 2)",
            missing.display()
        )
    );
    let e = probe_devices::<PathBuf>(&[], &[], &topo())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no device"), "{e}");
}

#[test]
fn a_device_listed_twice_is_refused_whatever_path_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = file(dir.path(), "a", 1 << 20);
    let sym = dir.path().join("sym");
    std::os::unix::fs::symlink(&a, &sym).unwrap();
    let hard = dir.path().join("hard");
    std::fs::hard_link(&a, &hard).unwrap();
    let dotted = dir.path().join(".").join("a");
    for other in [a.clone(), sym, hard, dotted] {
        let e = probe_err(&[a.clone(), other.clone()], &[rule(&a, 0)]);
        assert!(
            e.contains("is the same device as") && e.contains(&other.display().to_string()),
            "{e}"
        );
    }
}

#[test]
fn rules_must_name_a_listed_device_and_a_node_with_memory() {
    let dir = tempfile::tempdir().unwrap();
    let a = file(dir.path(), "a", 1 << 20);
    let b = file(dir.path(), "b", 1 << 20);
    let e = probe_err(&[&a], &[rule(&a, 0), rule(&b, 0)]);
    assert!(e.contains("not one of the devices being formatted"), "{e}");
    let e = probe_err(&[&a], &[rule(&a, 7)]);
    assert!(e.contains("node 7 does not exist"), "{e}");
    let e = probe_err(&[&a], &[rule(&a, 2)]);
    assert!(e.contains("node 2 has no memory"), "{e}");
    let e = probe_err(&[&a], &[rule(&a, 0), rule(&a, 1)]);
    assert!(e.contains("two different nodes"), "{e}");
    let e = probe_err(&[&a], &[rule(&dir.path().join("nope"), 0)]);
    assert!(e.contains("nope") && e.contains("node rule"), "{e}");
    // The same rule twice is harmless.
    probe_devices(&[&a], &[rule(&a, 1), rule(&a, 1)], &topo()).unwrap();
}

#[test]
fn a_mounted_block_device_is_refused() {
    let Ok(mounts) = numaio_sys::mountinfo::read_self() else {
        numaio_testkit::skip!("procfs", "no /proc/self/mountinfo");
    };
    // The source of the root file system, if it is a block device node we can see.
    let root = numaio_sys::mountinfo::topmost(&mounts, Path::new("/")).map(|m| m.source.clone());
    let Some(root) = root.filter(|p| {
        std::fs::metadata(p)
            .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()))
    }) else {
        numaio_testkit::skip!(
            LOOP_DEVICE,
            "the root file system's device node is not visible"
        );
    };
    let e = probe_err(&[&root], &[rule(&root, 0)]);
    assert!(
        e.contains("is mounted") && e.contains(&root.display().to_string()),
        "{e}"
    );
}

#[test]
fn a_loop_device_is_probed_and_refused_while_held() {
    let lo = match Loop::new(2 << 20) {
        Ok(l) => l,
        Err(why) => numaio_testkit::skip!(LOOP_DEVICE, "{why}"),
    };
    // A loop device reports no NUMA node.
    let e = probe_err(&[&lo.dev], &[]);
    assert!(e.contains("--node-of"), "{e}");
    let devs = probe_devices(&[&lo.dev], &[rule(&lo.dev, 1)], &topo()).unwrap();
    assert_eq!(devs[0].kind, DeviceKind::BlockDevice);
    assert_eq!((devs[0].bytes, devs[0].node), (2 << 20, 1));
    // Listed twice through a symlink.
    let dir = tempfile::tempdir().unwrap();
    let sym = dir.path().join("disk");
    std::os::unix::fs::symlink(&lo.dev, &sym).unwrap();
    let e = probe_err(&[lo.dev.clone(), sym], &[rule(&lo.dev, 0)]);
    assert!(e.contains("same device"), "{e}");
    // Held exclusively (an open store): busy.
    let store = FileStore::open(&devs, false).unwrap();
    let e = probe_err(&[&lo.dev], &[rule(&lo.dev, 0)]);
    assert!(
        e.contains("busy") && e.contains(&lo.dev.display().to_string()),
        "{e}"
    );
    // And a second store cannot open it either.
    let e = FileStore::open(&devs, false).err().unwrap().to_string();
    assert!(e.contains("busy"), "{e}");
    store.write_at(0, (2 << 20) - 4096, &[7u8; 4096]).unwrap();
    store.sync(0).unwrap();
    drop(store);
    probe_devices(&[&lo.dev], &[rule(&lo.dev, 0)], &topo()).unwrap();
}
