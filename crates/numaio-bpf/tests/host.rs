//! The collector on this host: exact byte and page counts for known I/O patterns. Needs root
//! and a kernel with BTF; skipped visibly elsewhere.

use numaio_bpf::{Collector, CollectorOptions, IoRecord, Snapshot};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

mod common;

fn start() -> Option<Collector> {
    if !numaio_testkit::is_root() {
        numaio_testkit::skipped(numaio_testkit::needs::ROOT, "loading BPF programs");
        return None;
    }
    let opts = CollectorOptions {
        pids: vec![std::process::id() as i32],
        ..Default::default()
    };
    match Collector::start(&opts) {
        Ok(c) => Some(c),
        Err(e) => {
            common::skip_no_bpf(&e.reason);
            None
        }
    }
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// The records of one thread on one file.
fn records(s: &Snapshot, tid: i32, path: &Path) -> Vec<IoRecord> {
    let md = std::fs::metadata(path).unwrap();
    s.io.iter()
        .filter(|r| r.tid == tid && r.dev == md.dev() && r.ino == md.ino())
        .copied()
        .collect()
}

/// Writes then reads `path` from a new thread in an uneven pattern; returns its tid and the
/// bytes it wrote and read.
fn io_pattern(path: &Path) -> (i32, u64, u64) {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let f = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let chunk = vec![0x5au8; 12_345];
        let mut written = 0u64;
        for i in 0..40u64 {
            let n = f
                .write_at(&chunk[..(1000 + i as usize * 283)], written)
                .unwrap();
            written += n as u64;
        }
        let mut buf = vec![0u8; 7000];
        let mut read = 0u64;
        for i in 0..500u64 {
            let len = 1 + (i as usize * 97) % buf.len();
            let off = (i * 1237) % written;
            read += f.read_at(&mut buf[..len], off).unwrap() as u64;
        }
        (gettid(), written, read)
    })
    .join()
    .unwrap()
}

fn check_exact(c: &Collector, dir: &Path) {
    let before = c.snapshot().unwrap();
    let path = dir.join("numaio-bpf-host-test");
    let (tid, written, read) = io_pattern(&path);
    let d = c.snapshot().unwrap().since(&before);
    let recs = records(&d, tid, &path);
    std::fs::remove_file(&path).unwrap();
    let pid = std::process::id() as i32;
    assert!(
        !recs.is_empty(),
        "no records for tid {tid} on {path:?}: {d:?}"
    );
    for r in &recs {
        assert_eq!(r.pid, pid);
        assert_eq!((r.data_node, r.cpu_node), (0, 0), "{r:?}");
    }
    let sum_r: u64 = recs.iter().map(|r| r.read_bytes).sum();
    let sum_w: u64 = recs.iter().map(|r| r.write_bytes).sum();
    assert_eq!(sum_w, written, "bytes written to {path:?}: {recs:?}");
    assert_eq!(sum_r, read, "bytes read from {path:?}: {recs:?}");
}

/// One node here: the test's exact node assertions need a one-node machine.
fn one_node() -> bool {
    numaio_sys::mask::possible_nodes() == 1
}

#[test]
fn counts_reads_and_writes_exactly_on_disk_and_tmpfs() {
    let Some(c) = start() else { return };
    if !one_node() {
        numaio_testkit::skip!("one NUMA node", "the node assertions here are for one node");
    }
    eprintln!("attached: {:?}", c.attached());
    // A disk file system (the target dir) and tmpfs take different read paths.
    let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    check_exact(&c, disk.path());
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let t = tempfile::tempdir_in(shm).unwrap();
        check_exact(&c, t.path());
    } else {
        numaio_testkit::skipped(numaio_testkit::needs::TMPFS, "/dev/shm is missing");
    }
}

#[test]
fn counts_page_cache_inserts_and_removals() {
    let Some(c) = start() else { return };
    if !one_node() {
        numaio_testkit::skip!("one NUMA node", "the node assertions here are for one node");
    }
    // A disk file system: tmpfs inserts its pages without the page-cache tracepoint.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("cache");
    let before = c.snapshot().unwrap();
    // 37 pages written through the page cache, then removed with the file.
    std::fs::write(&path, vec![1u8; 37 * 4096]).unwrap();
    let md = std::fs::metadata(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let d = c.snapshot().unwrap().since(&before);
    let mine: Vec<_> = d
        .cache
        .iter()
        .filter(|r| r.dev == md.dev() && r.ino == md.ino())
        .collect();
    let inserted: u64 = mine.iter().map(|r| r.inserted_pages).sum();
    let removed: u64 = mine.iter().map(|r| r.removed_pages).sum();
    assert!(mine.iter().all(|r| r.node == 0), "{mine:?}");
    assert_eq!((inserted, removed), (37, 37), "{mine:?}");
}

#[test]
fn counts_faults_on_file_mappings() {
    let Some(c) = start() else { return };
    if !one_node() {
        numaio_testkit::skip!("one NUMA node", "the node assertions here are for one node");
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("mapped");
    const PAGES: usize = 16;
    std::fs::write(&path, vec![3u8; PAGES * 4096]).unwrap();
    let f = File::open(&path).unwrap();
    let md = f.metadata().unwrap();
    let before = c.snapshot().unwrap();
    // SAFETY: a fresh private mapping of a file we own, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGES * 4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // A write to a private mapping copies the file's page in one fault per page (reads
    // would map neighbours by fault-around, without a fault of their own).
    let mut sum = 0u64;
    for i in 0..PAGES {
        // SAFETY: within the mapping.
        unsafe {
            let q = (p as *mut u8).add(i * 4096);
            sum += u64::from(std::ptr::read_volatile(q));
            std::ptr::write_volatile(q, 9);
        }
    }
    // SAFETY: the mapping made above.
    assert_eq!(unsafe { libc::munmap(p, PAGES * 4096) }, 0);
    assert_eq!(sum, 3 * PAGES as u64);
    let d = c.snapshot().unwrap().since(&before);
    let faults: u64 = d
        .faults
        .iter()
        .filter(|r| r.dev == md.dev() && r.ino == md.ino())
        .inspect(|r| assert_eq!((r.data_node, r.cpu_node), (0, 0)))
        .map(|r| r.faults)
        .sum();
    if c.attached()
        .hooks
        .iter()
        .any(|h| h.ends_with("@shmem_fault"))
    {
        assert_eq!(faults, PAGES as u64, "{:?}", d.faults);
    } else {
        common::skip_no_bpf("no shmem_fault hook on this kernel");
    }
}
