//! fallocate (preallocation, zero range, punch, unsupported modes), SEEK_DATA/SEEK_HOLE and
//! sparse copies through `numaio mount`, in both FUSE transports. Needs root and /dev/fuse
//! (and FUSE over io_uring for that transport); skips visibly otherwise.

mod common;

use common::mount::{can_mount, numaio_out, Unmount, Volume};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Mounts `v` in `mode`; returns the unmount guard and the server's pid.
fn mount<'a>(v: &'a Volume, mode: &str) -> (Unmount<'a>, u32) {
    let o = v.mount(&["--fuse-mode", mode, "--json"]);
    assert!(
        o.status.success(),
        "mount --fuse-mode {mode}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("mount --json");
    let pid = j["pid"].as_u64().expect("pid in mount --json") as u32;
    (Unmount(&v.mnt), pid)
}

/// The peak resident set of process `pid` (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn lseek(f: &File, off: u64, whence: i32) -> Result<u64, i32> {
    // SAFETY: lseek on an open descriptor has no memory effects.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off as libc::off_t, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(r as u64)
    }
}

fn fallocate_cmd(args: &[&str], f: &Path) -> std::process::Output {
    Command::new("fallocate")
        .args(args)
        .arg(f)
        .output()
        .expect("running fallocate (util-linux)")
}

fn unmount_and_check(v: &Volume, g: Unmount<'_>) {
    std::mem::forget(g);
    let o = v.umount();
    assert!(
        o.status.success(),
        "umount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut a: Vec<&std::ffi::OsStr> = vec!["fsck".as_ref()];
    a.extend(v.devs.iter().map(|d| d.as_os_str()));
    let o = numaio_out(a);
    assert!(
        o.status.success(),
        "fsck: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn fallocate_of_2g_is_quick_small_and_reads_zeros() {
    if !can_mount("fallocate_of_2g_is_quick_small_and_reads_zeros") {
        return;
    }
    let v = Volume::new("3G");
    let (g, pid) = mount(&v, "classic");
    let f = v.mnt.join("big");
    let t = Instant::now();
    let o = fallocate_cmd(&["-l", "2G"], &f);
    let took = t.elapsed();
    assert!(
        o.status.success(),
        "fallocate -l 2G: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        took < Duration::from_secs(1),
        "fallocate -l 2G took {took:?}"
    );
    // A create right after is served at once.
    let t = Instant::now();
    std::fs::write(v.mnt.join("small"), b"x").unwrap();
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let m = std::fs::metadata(&f).unwrap();
    assert_eq!(m.len(), 2 * GIB);
    assert_eq!(
        m.blocks() * 512,
        2 * GIB,
        "st_blocks counts preallocated blocks"
    );
    let file = File::open(&f).unwrap();
    assert_eq!(lseek(&file, 0, libc::SEEK_DATA), Err(libc::ENXIO));
    assert_eq!(lseek(&file, 0, libc::SEEK_HOLE), Ok(0));
    let mut r = &file;
    let mut buf = vec![1u8; MIB as usize];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        assert!(
            buf[..n].iter().all(|&b| b == 0),
            "non-zero byte near {total}"
        );
        total += n as u64;
    }
    assert_eq!(total, 2 * GIB);
    let peak = peak_rss(pid);
    assert!(peak < 200 * MIB, "server peak RSS {} MiB", peak / MIB);
    eprintln!(
        "fallocate -l 2G: {took:?}, server peak RSS {} MiB",
        peak / MIB
    );
    drop(file);
    unmount_and_check(&v, g);
}

fn seek_zero_range_and_sparse_copy(mode: &str) {
    let v = Volume::new("1G");
    let (g, _) = mount(&v, mode);
    // 20 GiB, data in the last MiB only.
    let p = v.mnt.join("sparse");
    let data: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8 + 1).collect();
    {
        let f = File::create(&p).unwrap();
        f.write_all_at(&data, 20 * GIB - MIB).unwrap();
        f.sync_all().unwrap();
    }
    let f = File::open(&p).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 20 * GIB);
    assert_eq!(lseek(&f, 0, libc::SEEK_DATA), Ok(20 * GIB - MIB), "{mode}");
    assert_eq!(lseek(&f, 0, libc::SEEK_HOLE), Ok(0));
    assert_eq!(lseek(&f, 20 * GIB - MIB, libc::SEEK_HOLE), Ok(20 * GIB));
    assert_eq!(lseek(&f, 20 * GIB - 1, libc::SEEK_DATA), Ok(20 * GIB - 1));
    assert_eq!(lseek(&f, 20 * GIB, libc::SEEK_DATA), Err(libc::ENXIO));
    assert_eq!(lseek(&f, 20 * GIB, libc::SEEK_HOLE), Err(libc::ENXIO));
    drop(f);
    // cp --sparse=always keeps it sparse.
    let q = v.mnt.join("copy");
    let t = Instant::now();
    let o = Command::new("cp")
        .arg("--sparse=always")
        .arg(&p)
        .arg(&q)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cp: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m = std::fs::metadata(&q).unwrap();
    assert_eq!(m.len(), 20 * GIB);
    assert!(
        m.blocks() * 512 <= 2 * MIB,
        "copy holds {} bytes",
        m.blocks() * 512
    );
    let c = File::open(&q).unwrap();
    let mut back = vec![0u8; MIB as usize];
    c.read_exact_at(&mut back, 20 * GIB - MIB).unwrap();
    assert!(back == data);
    assert_eq!(lseek(&c, 0, libc::SEEK_DATA), Ok(20 * GIB - MIB));
    eprintln!("{mode}: cp --sparse=always of 20 GiB: {:?}", t.elapsed());
    drop(c);

    // Zero range, with and without keeping the size; punch; unsupported modes.
    let z = v.mnt.join("z");
    let mut want: Vec<u8> = (0..65536u32).map(|i| (i % 253) as u8 + 1).collect();
    std::fs::write(&z, &want).unwrap();
    let o = fallocate_cmd(&["-z", "-o", "4096", "-l", "10000"], &z);
    assert!(
        o.status.success(),
        "fallocate -z: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    want[4096..14096].fill(0);
    assert!(std::fs::read(&z).unwrap() == want, "{mode}: zero range");
    let o = fallocate_cmd(&["-z", "-n", "-o", "60000", "-l", "20000"], &z);
    assert!(
        o.status.success(),
        "fallocate -z -n: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    want[60000..].fill(0);
    assert!(
        std::fs::read(&z).unwrap() == want,
        "{mode}: zero range, keep size"
    );
    let o = fallocate_cmd(&["-z", "-o", "60000", "-l", "20000"], &z);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    want.resize(80000, 0);
    assert!(
        std::fs::read(&z).unwrap() == want,
        "{mode}: zero range past the end"
    );
    let before = std::fs::metadata(&z).unwrap().blocks();
    let o = fallocate_cmd(&["-p", "-o", "16384", "-l", "16384"], &z);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    want[16384..32768].fill(0);
    assert!(std::fs::read(&z).unwrap() == want, "{mode}: punch");
    assert_eq!(std::fs::metadata(&z).unwrap().blocks(), before - 32);
    let zf = std::fs::OpenOptions::new().write(true).open(&z).unwrap();
    for (name, m) in [
        ("collapse", libc::FALLOC_FL_COLLAPSE_RANGE),
        ("insert", libc::FALLOC_FL_INSERT_RANGE),
    ] {
        // SAFETY: fallocate on an open descriptor has no memory effects.
        let r = unsafe { libc::fallocate(zf.as_raw_fd(), m, 0, 4096) };
        let e = std::io::Error::last_os_error().raw_os_error();
        assert_eq!((r, e), (-1, Some(libc::EOPNOTSUPP)), "{mode}: {name}");
    }
    let o = fallocate_cmd(&["-c", "-o", "0", "-l", "4096"], &z);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not supported"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // posix_fallocate uses mode 0.
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::posix_fallocate(zf.as_raw_fd(), 0, 200_000) },
        0
    );
    want.resize(200_000, 0);
    drop(zf);
    assert!(
        std::fs::read(&z).unwrap() == want,
        "{mode}: posix_fallocate"
    );
    unmount_and_check(&v, g);
}

#[test]
fn seek_zero_range_and_sparse_copy_classic() {
    if !can_mount("seek_zero_range_and_sparse_copy_classic") {
        return;
    }
    seek_zero_range_and_sparse_copy("classic");
}

#[test]
fn seek_zero_range_and_sparse_copy_io_uring() {
    if !can_mount("seek_zero_range_and_sparse_copy_io_uring") {
        return;
    }
    if !Path::new("/sys/module/fuse/parameters/enable_uring").exists() {
        eprintln!(
            "SKIPPED: seek_zero_range_and_sparse_copy_io_uring: kernel without FUSE over \
             io_uring (CONFIG_FUSE_IO_URING, Linux 6.14+)"
        );
        return;
    }
    // `--fuse-mode io-uring` turns the kernel's switch on; put back what this host had.
    let switch = "/sys/module/fuse/parameters/enable_uring";
    let was = std::fs::read_to_string(switch).unwrap_or_default();
    seek_zero_range_and_sparse_copy("io-uring");
    if was.trim() == "N" {
        let _ = std::fs::write(switch, "N");
    }
}

/// `-o noseek_holes`: the kernel answers SEEK_DATA/SEEK_HOLE from the file's size (all data,
/// as lseek(2) allows), with no request to the server; the data, the holes the volume keeps
/// and everything else stay as they are.
#[test]
fn noseek_holes_has_the_kernel_answer_seeks_as_data() {
    if !can_mount("noseek_holes_has_the_kernel_answer_seeks_as_data") {
        return;
    }
    let v = Volume::new("1G");
    let o = v.mount(&["--fuse-mode", "classic", "-o", "noseek_holes"]);
    assert!(
        o.status.success(),
        "mount -o noseek_holes: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let g = Unmount(&v.mnt);
    let p = v.mnt.join("sparse");
    let data: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8 + 1).collect();
    {
        let f = File::create(&p).unwrap();
        f.write_all_at(&data, 64 * MIB).unwrap();
        f.sync_all().unwrap();
    }
    let f = File::open(&p).unwrap();
    let size = 65 * MIB;
    assert_eq!(f.metadata().unwrap().len(), size);
    // The volume still allocates only the written MiB.
    assert!(f.metadata().unwrap().blocks() * 512 <= 2 * MIB);
    for _ in 0..2 {
        assert_eq!(lseek(&f, 0, libc::SEEK_DATA), Ok(0));
        assert_eq!(lseek(&f, 4096, libc::SEEK_HOLE), Ok(size));
        assert_eq!(lseek(&f, size - 1, libc::SEEK_DATA), Ok(size - 1));
        assert_eq!(lseek(&f, size, libc::SEEK_DATA), Err(libc::ENXIO));
        assert_eq!(lseek(&f, size, libc::SEEK_HOLE), Err(libc::ENXIO));
    }
    let mut back = vec![0u8; MIB as usize];
    f.read_exact_at(&mut back, 64 * MIB).unwrap();
    assert!(back == data);
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    drop(f);
    unmount_and_check(&v, g);
}
