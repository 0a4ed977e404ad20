//! `numaio mount` / `numaio umount` on a file-backed two-device volume (needs root and
//! /dev/fuse; skips visibly otherwise).

mod common;

use common::mount::{can_mount, numaio_out as numaio, Unmount, Volume};
use std::path::Path;

#[test]
fn mount_write_umount_remount_reads_back() {
    if !can_mount("mount_write_umount_remount_reads_back") {
        return;
    }
    let v = Volume::new("128M");
    let o = v.mount(&[]);
    assert!(
        o.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    {
        let _g = Unmount(&v.mnt);
        let f = v.mnt.join("hello");
        std::fs::write(&f, b"hello world").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"hello world");
        std::fs::create_dir(v.mnt.join("dir")).unwrap();
        for i in 0..1000 {
            std::fs::write(v.mnt.join("dir").join(format!("f{i}")), b"x").unwrap();
        }
        assert_eq!(std::fs::read_dir(v.mnt.join("dir")).unwrap().count(), 1000);
        std::fs::remove_file(v.mnt.join("dir/f7")).unwrap();
        assert_eq!(std::fs::read_dir(v.mnt.join("dir")).unwrap().count(), 999);
        // Mounting again on a live mount point is refused.
        let o = v.mount(&[]);
        assert!(!o.status.success());
    }
    let o = v.mount(&[]);
    assert!(
        o.status.success(),
        "remount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _g = Unmount(&v.mnt);
    assert_eq!(std::fs::read(v.mnt.join("hello")).unwrap(), b"hello world");
}

#[test]
fn bad_input_is_refused_with_the_path() {
    if !can_mount("bad_input_is_refused_with_the_path") {
        return;
    }
    let v = Volume::new("128M");
    // Missing mount point.
    let missing = v.mnt.join("nope");
    let mut a: Vec<&std::ffi::OsStr> = vec!["mount".as_ref()];
    a.extend(v.devs.iter().map(|d| d.as_os_str()));
    a.push(missing.as_os_str());
    let o = numaio(&a);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nope"));
    // Non-empty mount point.
    std::fs::write(v.mnt.join("x"), b"").unwrap();
    let o = v.mount(&[]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not empty"));
    std::fs::remove_file(v.mnt.join("x")).unwrap();
    // Missing device.
    let nodev = v.mnt.with_file_name("d9");
    let o = numaio(["mount".as_ref(), nodev.as_os_str(), v.mnt.as_os_str()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("d9"));
    // umount of something that is not a numaio mount.
    let o = v.umount();
    assert!(!o.status.success());
}

#[test]
fn ordinary_file_operations_work_through_the_mount() {
    if !can_mount("ordinary_file_operations_work_through_the_mount") {
        return;
    }
    use std::os::unix::ffi::OsStrExt;
    let v = Volume::new("128M");
    let o = v.mount(&[]);
    assert!(
        o.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _g = Unmount(&v.mnt);
    let m = &v.mnt;
    std::fs::write(m.join("a"), vec![7u8; 100_000]).unwrap();
    std::fs::rename(m.join("a"), m.join("b")).unwrap();
    assert!(!m.join("a").exists());
    std::fs::hard_link(m.join("b"), m.join("c")).unwrap();
    assert_eq!(std::fs::read(m.join("c")).unwrap().len(), 100_000);
    std::os::unix::fs::symlink("b", m.join("s")).unwrap();
    assert_eq!(std::fs::read_link(m.join("s")).unwrap(), Path::new("b"));
    assert_eq!(std::fs::read(m.join("s")).unwrap().len(), 100_000);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("b"))
        .unwrap();
    f.set_len(10).unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(m.join("c")).unwrap().len(), 10);
    // xattr through libc.
    let p = std::ffi::CString::new(m.join("b").as_os_str().as_bytes()).unwrap();
    let (n, val) = (c"user.k", b"v1");
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), val.as_ptr().cast(), 2, 0) };
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
    let mut buf = [0u8; 16];
    // SAFETY: as above; the buffer is 16 bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), 16) };
    assert_eq!(&buf[..r as usize], b"v1");
    // Names: 255 bytes fine, 256 too long, invalid UTF-8 fine.
    std::fs::write(m.join("n".repeat(255)), b"").unwrap();
    let e = std::fs::write(m.join("n".repeat(256)), b"").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    let bad = std::ffi::OsStr::from_bytes(b"bad\xff\xfe");
    std::fs::write(m.join(bad), b"z").unwrap();
    assert_eq!(std::fs::read(m.join(bad)).unwrap(), b"z");
    // Shared writable mmap, then read back through read(2).
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.join("mm"))
        .unwrap();
    f.set_len(8192).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: mapping 8192 bytes of a file of that length; unmapped below before f is dropped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        std::ptr::write_bytes(p.cast::<u8>(), 0x5a, 8192);
        assert_eq!(libc::msync(p, 8192, libc::MS_SYNC), 0);
        libc::munmap(p, 8192);
    }
    drop(f);
    assert!(std::fs::read(m.join("mm"))
        .unwrap()
        .iter()
        .all(|&b| b == 0x5a));
}

fn mount_pid(v: &Volume) -> i32 {
    let mut a: Vec<&std::ffi::OsStr> = vec!["mount".as_ref(), "--json".as_ref()];
    a.extend(v.devs.iter().map(|d| d.as_os_str()));
    a.push(v.mnt.as_os_str());
    let o = numaio(&a);
    assert!(
        o.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    j["pid"].as_i64().unwrap() as i32
}

fn wait_gone(pid: i32) {
    let t = std::time::Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(t.elapsed().as_secs() < 30, "server {pid} did not exit");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn sigterm_flushes_and_kill9_keeps_fsynced_data() {
    if !can_mount("sigterm_flushes_and_kill9_keeps_fsynced_data") {
        return;
    }
    let v = Volume::new("128M");
    let pid = mount_pid(&v);
    {
        let _g = Unmount(&v.mnt);
        std::fs::write(v.mnt.join("t"), b"term").unwrap();
        // SAFETY: signalling the server this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        wait_gone(pid);
    }
    let pid = mount_pid(&v);
    {
        let _g = Unmount(&v.mnt);
        assert_eq!(std::fs::read(v.mnt.join("t")).unwrap(), b"term");
        let mut f = std::fs::File::create(v.mnt.join("k")).unwrap();
        std::io::Write::write_all(&mut f, b"synced").unwrap();
        f.sync_all().unwrap();
        // SAFETY: killing the server this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        wait_gone(pid);
        drop(f);
    }
    let _pid = mount_pid(&v);
    let _g = Unmount(&v.mnt);
    assert_eq!(std::fs::read(v.mnt.join("k")).unwrap(), b"synced");
}
