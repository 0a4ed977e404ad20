//! `numaio mkfs`, `numaio fsck` and `numaio fs` on regular files: a volume is made, files go
//! in and come out byte-identical, the block map and the checker agree, damage is found and
//! refused, and mkfs refuses what it must not format. Every device is a file on node 0, so
//! this runs on any machine; the multi-node placement is tested in the lab (lab/tests/fs.rs).

mod common;
use common::*;
use serde_json::Value;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

struct Vol {
    _dir: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
    root: PathBuf,
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn json(r: &Run) -> Value {
    serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", r.out(), r.stderr))
}

fn no_panic(r: &Run) {
    assert!(
        !r.stderr.contains("panicked"),
        "numaio panicked: {}",
        r.stderr
    );
}

/// Two 32 MiB files formatted as one volume, both on node 0.
fn volume() -> Vol {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let r = run(&[
        "mkfs",
        "--size",
        "32M",
        "--node-of",
        &format!("{}=0", s(&a)),
        "--node-of",
        &format!("{}=0", s(&b)),
        "--json",
        s(&a),
        s(&b),
    ]);
    assert_eq!(r.code, Some(0), "mkfs: {}", r.stderr);
    let v = json(&r);
    assert_eq!(v["devices"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["policy"], "writer-local");
    assert!(v["capacity_bytes"].as_u64().unwrap() > 32 << 20, "{v}");
    assert_eq!(v["devices"][0]["node"], 0);
    assert!(v["devices"][1]["groups"].as_u64().unwrap() >= 16, "{v}");
    let root = dir.path().to_path_buf();
    Vol {
        _dir: dir,
        a,
        b,
        root,
    }
}

/// `numaio fs SUB -d a -d b ARGS...` (devices in the order given).
fn fs(devs: &[&Path], sub: &str, args: &[&str]) -> Run {
    let mut v = vec!["fs", sub];
    for d in devs {
        v.push("-d");
        v.push(s(d));
    }
    v.extend_from_slice(args);
    run(&v)
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn put_get_map_fsck_and_damage() {
    let v = volume();
    let data = pattern(3 * 1024 * 1024 + 123, 7);
    let src = v.root.join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let tree = v.root.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("x"), b"hello").unwrap();
    std::fs::write(tree.join("sub/y"), pattern(10_000, 3)).unwrap();

    let r = fs(
        &[&v.a, &v.b],
        "put",
        &["--fsync", "--json", s(&src), "/file"],
    );
    assert_eq!(r.code, Some(0), "put: {}", r.stderr);
    assert_eq!(json(&r)["files"][0]["bytes"], data.len() as u64);
    let r = fs(&[&v.a, &v.b], "mkdir", &["/d"]);
    assert_eq!(r.code, Some(0), "mkdir: {}", r.stderr);
    let r = fs(&[&v.a, &v.b], "put", &[s(&tree), "/d"]);
    assert_eq!(r.code, Some(0), "put tree: {}", r.stderr);

    // devices in the other order: the labels put them right
    let out = v.root.join("out.bin");
    let r = fs(&[&v.b, &v.a], "get", &["/file", s(&out)]);
    assert_eq!(r.code, Some(0), "get: {}", r.stderr);
    assert!(
        std::fs::read(&out).unwrap() == data,
        "get is not byte-identical"
    );
    let back = v.root.join("back");
    let r = fs(&[&v.a, &v.b], "get", &["/d/tree", s(&back)]);
    assert_eq!(r.code, Some(0), "get tree: {}", r.stderr);
    assert_eq!(std::fs::read(back.join("x")).unwrap(), b"hello");
    assert_eq!(
        std::fs::read(back.join("sub/y")).unwrap(),
        pattern(10_000, 3)
    );

    let r = fs(&[&v.a, &v.b], "ls", &["-l", "--json", "/d/tree"]);
    assert_eq!(r.code, Some(0), "ls: {}", r.stderr);
    let names: Vec<String> = json(&r)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"x".into()) && names.contains(&"sub".into()));

    let r = fs(&[&v.a, &v.b], "map", &["--json", "/file"]);
    assert_eq!(r.code, Some(0), "map: {}", r.stderr);
    let m = json(&r);
    let f = &m["files"][0];
    let blocks = (data.len() as u64).div_ceil(4096);
    assert_eq!(f["blocks"], blocks, "{m}");
    let ext: u64 = f["extents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["len"].as_u64().unwrap())
        .sum();
    assert_eq!(ext, blocks);
    assert_eq!(f["nodes"][0]["node"], 0);
    assert_eq!(f["nodes"][0]["fraction"], 1.0);
    // a directory maps every file under it
    let r = fs(&[&v.a, &v.b], "map", &["--json", "/d"]);
    assert_eq!(
        json(&r)["files"].as_array().unwrap().len(),
        2,
        "{}",
        r.out()
    );

    let r = fs(&[&v.a, &v.b], "stat", &["--json"]);
    assert_eq!(r.code, Some(0), "stat: {}", r.stderr);
    let st = json(&r);
    let used: u64 = st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["used_bytes"].as_u64().unwrap())
        .sum();
    assert!(used >= blocks * 4096, "{st}");
    assert_eq!(st["nodes"][0]["files"], 3, "{st}");

    let r = fs(&[&v.a, &v.b], "policy", &["/d", "fixed:0"]);
    assert_eq!(r.code, Some(0), "policy set: {}", r.stderr);
    let r = fs(&[&v.a, &v.b], "policy", &["--json", "/d"]);
    assert_eq!(json(&r)["policy"], "fixed:0");
    let r = fs(&[&v.a, &v.b], "policy", &["/d", "stripe:9:64K"]);
    assert_ne!(r.code, Some(0), "a stripe over 9 nodes of a 1-node volume");
    no_panic(&r);

    let r = fs(&[&v.a, &v.b], "rm", &["-r", "/d/tree/sub"]);
    assert_eq!(r.code, Some(0), "rm: {}", r.stderr);
    let r = fs(&[&v.a, &v.b], "ls", &["/d/tree"]);
    assert_eq!(r.out().trim(), "x");

    let r = run(&["fsck", "--json", s(&v.a), s(&v.b)]);
    assert_eq!(r.code, Some(0), "fsck: {}\n{}", r.out(), r.stderr);
    let fk = json(&r);
    assert_eq!(fk["exit_code"], 0);
    assert_eq!(fk["files"], 2, "{fk}");
    let r = run(&["fsck", s(&v.b), s(&v.a)]);
    assert_eq!(r.code, Some(0), "fsck human: {}", r.stderr);
    assert!(r.out().contains("clean"), "{}", r.out());

    // one byte of the volume header (device 0, block 1)
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&v.a)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 4096 + 40).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], 4096 + 40).unwrap();
    drop(f);
    let before = std::fs::read(&v.a).unwrap();
    let r = run(&["fsck", "--json", s(&v.a), s(&v.b)]);
    assert_eq!(r.code, Some(4), "fsck of damage: {}\n{}", r.out(), r.stderr);
    no_panic(&r);
    assert!(!json(&r)["errors"].as_array().unwrap().is_empty());
    let r = fs(&[&v.a, &v.b], "ls", &["/"]);
    assert_ne!(r.code, Some(0), "mounted a damaged volume: {}", r.out());
    no_panic(&r);
    assert!(r.stderr.contains(s(&v.a)), "names the device: {}", r.stderr);
    let r = fs(&[&v.a, &v.b], "put", &[s(&src), "/again"]);
    assert_ne!(r.code, Some(0));
    assert!(
        std::fs::read(&v.a).unwrap() == before,
        "a volume that failed its checks was written"
    );
}

#[test]
fn devices_missing_foreign_or_twice_are_named() {
    let v = volume();
    let w = volume();
    // device 0 alone
    let r = fs(&[&v.a], "ls", &["/"]);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("missing") && r.stderr.contains(s(&v.b)),
        "{}",
        r.stderr
    );
    // a device of another volume
    let r = fs(&[&v.a, &w.b], "ls", &["/"]);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains(s(&w.b)) && r.stderr.contains("another"),
        "{}",
        r.stderr
    );
    // the same device twice, through a symlink
    let link = v.root.join("link");
    std::os::unix::fs::symlink(&v.a, &link).unwrap();
    let r = fs(&[&v.a, &link], "ls", &["/"]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("same device"), "{}", r.stderr);
    // fsck: 8 for a device list it cannot use, 16 for bad usage
    let r = run(&["fsck", s(&v.a)]);
    assert_eq!(r.code, Some(8), "{}", r.stderr);
    let r = run(&["fsck", "--json", s(&v.root.join("nope"))]);
    assert_eq!(r.code, Some(8), "{}", r.stderr);
    assert_eq!(json(&r)["exit_code"], 8);
    let r = run(&["fsck"]);
    assert_eq!(r.code, Some(16), "{}", r.stderr);
    let r = run(&["fsck", "-n", "-y", s(&v.a), s(&v.b)]);
    assert_eq!(r.code, Some(16), "{}", r.stderr);
    // a file that is no numaio-fs device at all: errors left
    let junk = v.root.join("junk");
    std::fs::write(&junk, vec![0u8; 1 << 20]).unwrap();
    let r = run(&["fsck", s(&junk)]);
    assert_eq!(r.code, Some(4), "{}", r.stderr);
    no_panic(&r);
}

#[test]
fn mkfs_refuses_what_it_must_not_format() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let rule = |f: &Path| format!("{}=0", s(f));

    // an ext4 image (superblock magic 0xEF53 at 1080)
    let ext4 = p("ext4.img");
    let f = std::fs::File::create(&ext4).unwrap();
    f.set_len(32 << 20).unwrap();
    f.write_all_at(&[0x53, 0xef], 1080).unwrap();
    drop(f);
    let r = run(&["mkfs", "--node-of", &rule(&ext4), s(&ext4)]);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("ext2/ext3/ext4") && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    let r = run(&["mkfs", "--force", "--node-of", &rule(&ext4), s(&ext4)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // now it holds a numaio-fs volume
    let r = run(&["mkfs", "--node-of", &rule(&ext4), s(&ext4)]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("numaio-fs volume"), "{}", r.stderr);

    for (name, off, magic, what) in [
        ("xfs", 0u64, &b"XFSB"[..], "XFS"),
        ("btrfs", 65600, &b"_BHRfS_M"[..], "btrfs"),
        ("swap", 4086, &b"SWAPSPACE2"[..], "swap"),
    ] {
        let img = p(name);
        let f = std::fs::File::create(&img).unwrap();
        f.set_len(32 << 20).unwrap();
        f.write_all_at(magic, off).unwrap();
        drop(f);
        let r = run(&["mkfs", "--node-of", &rule(&img), s(&img)]);
        assert_ne!(r.code, Some(0), "{name}");
        assert!(r.stderr.contains(what), "{name}: {}", r.stderr);
    }

    // the same device twice
    let a = p("a.img");
    let r = run(&[
        "mkfs",
        "--size",
        "32M",
        "--node-of",
        &rule(&a),
        s(&a),
        s(&a),
    ]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("same device"), "{}", r.stderr);
    // a node the machine does not have
    let r = run(&["mkfs", "--node-of", &format!("{}=999", s(&a)), s(&a)]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("node 999"), "{}", r.stderr);
    // a file with no node and no rule
    let r = run(&["mkfs", s(&a)]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("--node-of"), "{}", r.stderr);
    // too small for one group
    let tiny = p("tiny.img");
    let r = run(&["mkfs", "--size", "64K", "--node-of", &rule(&tiny), s(&tiny)]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("too small"), "{}", r.stderr);
    // --size never truncates
    assert_eq!(std::fs::metadata(&a).unwrap().len(), 32 << 20);
    let r = run(&["mkfs", "--size", "8M", "--node-of", &rule(&a), s(&a)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(std::fs::metadata(&a).unwrap().len(), 32 << 20);
    // a RAM zone is refused; a missing path with no --size is named
    let r = run(&["mkfs", "--zone", "0:4M"]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("numaio mount --zone"), "{}", r.stderr);
    let r = run(&["mkfs", "--node-of", &rule(&p("none")), s(&p("none"))]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains(s(&p("none"))), "{}", r.stderr);
    for r in [
        run(&["mkfs", "--placement", "stripe:0:1", s(&a)]),
        run(&["mkfs"]),
    ] {
        assert_eq!(r.code, Some(2), "{}", r.stderr);
    }
}

#[test]
fn a_persistent_zone_file_is_a_volume() {
    let dir = tempfile::tempdir().unwrap();
    let z = dir.path().join("zone.img");
    let r = run(&["mkfs", "--json", "--zone", &format!("0:16M:{}", s(&z))]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(json(&r)["devices"][0]["kind"], "pmem-zone");
    let src = dir.path().join("f");
    std::fs::write(&src, pattern(100_000, 9)).unwrap();
    let r = fs(&[&z], "put", &[s(&src), "/f"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = dir.path().join("g");
    let r = fs(&[&z], "get", &["/f", s(&out)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(std::fs::read(&out).unwrap() == pattern(100_000, 9));
    let r = run(&["fsck", s(&z)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

/// Two 16 MiB files as a 2-node volume (`a` on node 0, `b` on node 1) under the `directory`
/// placement. `numaio mkfs` refuses a node the machine lacks, so on a one-node machine the
/// volume is formatted through the library with the same layout; every command after that
/// goes through the binary.
fn two_node_directory_volume() -> Vol {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    if Path::new("/sys/devices/system/node/node1").exists() {
        let r = run(&[
            "mkfs",
            "--size",
            "16M",
            "--group-size",
            "1M",
            "--placement",
            "directory",
            "--node-of",
            &format!("{}=0", s(&a)),
            "--node-of",
            &format!("{}=1", s(&b)),
            s(&a),
            s(&b),
        ]);
        assert_eq!(r.code, Some(0), "mkfs: {}", r.stderr);
    } else {
        use numaio_fs::store::{DeviceInfo, DeviceKind, FileStore};
        let mut infos = Vec::new();
        for (p, node) in [(&a, 0), (&b, 1)] {
            std::fs::File::create(p).unwrap().set_len(16 << 20).unwrap();
            infos.push(DeviceInfo {
                path: p.clone(),
                node,
                bytes: 16 << 20,
                kind: DeviceKind::File,
            });
        }
        let store = FileStore::open(&infos, false).unwrap();
        let o = numaio_fs::MkfsOptions {
            policy: numaio_fs::PlacementPolicy::Directory,
            group_blocks: 256,
            journal_blocks: 64,
            checkpoint_blocks: 256,
        };
        numaio_fs::Fs::mkfs(&store, &o).unwrap();
    }
    let root = dir.path().to_path_buf();
    Vol {
        _dir: dir,
        a,
        b,
        root,
    }
}

#[test]
fn directory_round_robin_goes_on_across_commands() {
    let v = two_node_directory_volume();
    let devs = [v.a.as_path(), v.b.as_path()];
    // Each `numaio fs mkdir` mounts, makes one directory and unmounts.
    let mut homes = Vec::new();
    for d in ["/d0", "/d1", "/d2", "/d3"] {
        let r = fs(&devs, "mkdir", &["--json", d]);
        assert_eq!(r.code, Some(0), "mkdir {d}: {}", r.stderr);
        homes.push(json(&r)["home"].as_u64().unwrap_or(99));
    }
    assert_eq!(
        homes,
        [0, 1, 0, 1],
        "top-level directories alternate over the nodes"
    );
    let r = fs(&devs, "mkdir", &["--json", "/d1/sub"]);
    assert_eq!(
        json(&r)["home"],
        1,
        "a subdirectory takes its top-level home"
    );
    // The listing agrees, and each directory's files land on its home node.
    let r = fs(&devs, "ls", &["--json", "/"]);
    assert_eq!(r.code, Some(0), "ls: {}", r.stderr);
    let listed: Vec<(String, u64)> = json(&r)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["home"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [("d0", 0), ("d1", 1), ("d2", 0), ("d3", 1)].map(|(n, h)| (n.to_string(), h))
    );
    let src = v.root.join("f.bin");
    std::fs::write(&src, pattern(100_000, 5)).unwrap();
    for (d, node) in [("/d0", 0), ("/d1/sub", 1)] {
        let r = fs(&devs, "put", &[s(&src), d]);
        assert_eq!(r.code, Some(0), "put {d}: {}", r.stderr);
        let r = fs(&devs, "map", &["--json", &format!("{d}/f.bin")]);
        let m = json(&r);
        assert_eq!(m["files"][0]["nodes"][0]["node"], node, "{d}: {m}");
        assert_eq!(m["files"][0]["nodes"][0]["fraction"], 1.0, "{d}: {m}");
    }
    // Metadata: every inode made here by a writer on this machine's node 0 (nodes of
    // other CPUs would be theirs) is held by node 0's device.
    let r = fs(&devs, "map", &["--json", "/d0/f.bin"]);
    assert_eq!(json(&r)["files"][0]["meta_node"], 0);
    let r = fs(&devs, "stat", &["--json"]);
    let st = json(&r);
    let per: Vec<u64> = st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["inodes"].as_u64().unwrap())
        .collect();
    assert_eq!(
        per.iter().sum::<u64>(),
        st["files"].as_u64().unwrap(),
        "{st}"
    );
    if !Path::new("/sys/devices/system/node/node1").exists() {
        assert_eq!(per, [st["files"].as_u64().unwrap(), 0], "{st}");
    }
    let r = run(&["fsck", "-n", s(&v.a), s(&v.b)]);
    assert_eq!(r.code, Some(0), "fsck: {}{}", r.out(), r.stderr);
}

#[test]
fn a_missing_device_is_named_once_with_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone.img");
    let want = format!(
        "numaio: {}: looking up the device (check the path): No such file or directory (os \
         error 2)\n",
        s(&gone)
    );
    let r = fs(&[&gone], "stat", &[]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.stderr, want);
    let r = run(&["mkfs", "--node-of", &format!("{}=0", s(&gone)), s(&gone)]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.stderr, want);
    assert!(!gone.exists(), "mkfs without --size creates nothing");
}

#[test]
fn fs_stat_of_a_missing_path_says_what_it_wanted() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("no-such-mount");
    let r = run(&["fs", "stat", s(&gone)]);
    no_panic(&r);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains(s(&gone)) && r.stderr.contains("no such mount point or device"),
        "{}",
        r.stderr
    );
    // --pid needs a mount point; a missing one is the same clear error, not a pid lookup.
    let r = run(&["fs", "stat", s(&gone), "--pid", "1"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("no such mount point or device"),
        "{}",
        r.stderr
    );
}
