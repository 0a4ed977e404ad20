//! The pagemap route and the move_pages route to page nodes agree, on a file big enough to
//! be scanned by several threads, with a partial, irregular residency. (One test in its own
//! binary: it switches the route with an environment variable.)

use numaio_pagecache::*;
use std::fs::File;
use std::os::fd::AsRawFd;

#[test]
fn pagemap_and_move_pages_agree_across_threads() {
    let ps = 4096u64;
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = d.path().join("sparse");
    // 600 MiB, sparse: holes read as zero pages that are cached like any other.
    let f = File::create(&p).unwrap();
    f.set_len(600 << 20).unwrap();
    drop(f);
    evict_file(&p, false).unwrap();
    // Cache the pages by mlock on our own MADV_RANDOM mapping (exactly those pages, no
    // readahead), so that no reclaim (this host runs DAMON proactive reclaim) can drop them
    // between the two scans.
    let f = File::open(&p).unwrap();
    let len = 600usize << 20;
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    } as *mut u8;
    assert_ne!(base as *mut libc::c_void, libc::MAP_FAILED);
    assert_eq!(
        unsafe { libc::madvise(base as *mut _, len, libc::MADV_RANDOM) },
        0
    );
    let lock = |off: u64, n: u64| {
        let r = unsafe { libc::mlock(base.add(off as usize) as *const _, n as usize) };
        assert_eq!(r, 0, "mlock: {}", std::io::Error::last_os_error());
    };
    // Every 7th page of the first 2000, and a 3 MiB stretch near the end.
    let mut expect = 0u64;
    for i in (0..2000).step_by(7) {
        lock(i * ps, ps);
        expect += 1;
    }
    lock(590 << 20, 3 << 20);
    expect += 768;
    let opts = WhereOptions {
        range: None,
        map_chunk: Some(64 << 20),
        full_scan: true,
    };
    let a = file_residency(&p, &opts).unwrap();
    std::env::set_var("NUMAIO_PAGE_QUERY", "move_pages");
    let b = file_residency(&p, &opts).unwrap();
    std::env::remove_var("NUMAIO_PAGE_QUERY");
    for r in [&a, &b] {
        assert_eq!(r.pages, 153600);
        assert_eq!(r.resident_pages, expect, "{r:?}");
        assert_eq!(r.nodes.values().sum::<u64>(), expect);
        let m = r.map.as_ref().unwrap();
        assert_eq!(m.len(), 10);
        assert_eq!(m[0].resident_pages, 286);
        assert_eq!(m[9].resident_pages, 768);
        assert_eq!(m[9].len, 24 << 20);
    }
    assert_eq!(a.nodes, b.nodes);
    unsafe { libc::munmap(base as *mut _, len) };
}
