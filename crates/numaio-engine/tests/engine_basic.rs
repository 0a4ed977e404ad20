mod common;
use common::*;
use numaio_engine::OpenOptions;

#[test]
fn write_read_evict_fsync_roundtrip_each_policy() {
    for policy in policies() {
        for slices in [1, 2] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            let engine = small_engine(policy, slices, 32);
            let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
            // 1 MiB through a 128-256 KiB cache: forces eviction and write-back.
            let data = pattern(7, 1 << 20);
            for (i, chunk) in data.chunks(10_000).enumerate() {
                assert_eq!(f.pwrite(chunk, (i * 10_000) as u64).unwrap(), chunk.len());
            }
            assert_eq!(f.len(), data.len() as u64);
            let mut back = vec![0u8; data.len()];
            assert_eq!(f.pread(&mut back, 0).unwrap(), data.len());
            assert!(back == data, "{policy} {slices}: data read back differs");
            f.fsync().unwrap();
            let on_disk = std::fs::read(&path).unwrap();
            assert!(on_disk == data, "{policy} {slices}: file on disk differs");
            let st = engine.stats();
            assert!(st.evicted > 0 && st.written_back > 0, "{policy}: {st:?}");
            // zero copy view of an unaligned range
            let p = f.get(5000, 3000).unwrap();
            assert_eq!(p.to_vec(), &data[5000..8000]);
            p.put();
            engine.close().unwrap();
        }
    }
}

#[test]
fn sequential_reads_are_read_ahead_and_correct() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seq");
    let data = pattern(11, 2 << 20);
    std::fs::write(&path, &data).unwrap();
    let engine = numaio_engine::Engine::new(numaio_engine::EngineConfig {
        cache_bytes: 1 << 20,
        slices: Some(2),
        range_blocks: 16,
        readahead: true,
        ..Default::default()
    })
    .unwrap();
    let f = engine.open(&path, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut back = Vec::new();
    let mut off = 0;
    loop {
        let n = f.pread(&mut buf, off).unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
        off += n as u64;
    }
    assert!(back == data, "sequential read through readahead differs");
    let st = engine.stats();
    // Every block is read once: the readahead's blocks show up as hits (or clashes).
    assert!(st.hits > st.misses, "readahead did not run ahead: {st:?}");
}

#[test]
fn tmpfs_without_o_direct_falls_back_to_buffered_io() {
    // /dev/shm is tmpfs; older kernels refuse O_DIRECT there (EINVAL at open).
    let dir = match tempfile::tempdir_in("/dev/shm") {
        Ok(d) => d,
        Err(e) => numaio_testkit::skip!(numaio_testkit::needs::TMPFS, "/dev/shm: {e}"),
    };
    let path = dir.path().join("f");
    let engine = small_engine(numaio_engine::PolicyKind::Clock, 1, 64);
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    let data = pattern(4, 300_000);
    f.pwrite(&data, 0).unwrap();
    f.fsync().unwrap();
    assert!(std::fs::read(&path).unwrap() == data);
    // Either O_DIRECT works here or the fallback was recorded — never neither.
    assert!(f.direct() || f.fell_back_to_buffered());
}

#[test]
fn capacity_is_never_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    for policy in policies() {
        let engine = small_engine(policy, 2, 40);
        let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
        for i in 0..200u64 {
            f.pwrite(&pattern(i, 4096), i * 4096).unwrap();
            if i % 10 == 0 {
                for s in engine.stats().slices {
                    assert!(s.resident_blocks <= s.capacity_blocks, "{policy}: {s:?}");
                    assert!(s.dirty_blocks <= s.capacity_blocks, "{policy}: {s:?}");
                    assert!(s.free_blocks <= s.capacity_blocks, "{policy}: {s:?}");
                }
            }
        }
        let st = engine.stats();
        assert!(
            st.evicted > 0,
            "{policy}: 200 blocks through 80 slots must evict"
        );
        engine.close().unwrap();
    }
}

#[test]
fn pread_batch_reads_scattered_blocks_in_one_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("batch");
    let data = pattern(21, 1_000_000);
    std::fs::write(&path, &data).unwrap();
    for policy in policies() {
        let engine = small_engine(policy, 2, 64);
        let f = engine.open(&path, OpenOptions::default()).unwrap();
        let offs: Vec<u64> = vec![
            4096 * 200,
            17,
            4096 * 3 + 100,
            4096 * 200,
            999_990,
            2_000_000,
            4096 * 50,
        ];
        let mut bufs: Vec<Vec<u8>> = offs.iter().map(|_| vec![0u8; 96]).collect();
        let mut reqs: Vec<(u64, &mut [u8])> = offs
            .iter()
            .copied()
            .zip(bufs.iter_mut().map(|b| b.as_mut_slice()))
            .collect();
        let got = f.pread_batch(&mut reqs).unwrap();
        for (i, &off) in offs.iter().enumerate() {
            let end = (off as usize + 96).min(data.len());
            let want: &[u8] = if (off as usize) < data.len() {
                &data[off as usize..end]
            } else {
                &[]
            };
            assert_eq!(got[i], want.len(), "{policy}: range {i}");
            assert!(bufs[i][..got[i]] == *want, "{policy}: range {i} differs");
        }
        // 5 distinct blocks were missing; they were read as separate concurrent requests.
        assert_eq!(engine.stats().misses, 5, "{policy}");
        // A range crossing a block boundary is refused.
        let mut b = vec![0u8; 200];
        assert!(f.pread_batch(&mut [(4000, b.as_mut_slice())]).is_err());
    }
}

#[test]
fn absurd_cache_sizes_are_errors_naming_the_size() {
    for (cache_bytes, slices) in [(u64::MAX, 1), (1u64 << 62, 1), (1u64 << 60, 3)] {
        let r = numaio_engine::Engine::new(numaio_engine::EngineConfig {
            cache_bytes,
            slices: Some(slices),
            ..Default::default()
        });
        let e = r.expect_err("no machine has this much memory");
        assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{e}");
        assert!(e.to_string().contains(&cache_bytes.to_string()), "{e}");
    }
}

const RLIMIT_CHILD: &str = "NUMAIO_TEST_RLIMIT_CHILD";

/// Under an address-space limit every allocation of `Engine::new` may fail: it must return
/// an error, never panic or abort. The limit applies to the whole process, so the sweep runs
/// in a child (this test binary again).
#[test]
fn engine_new_under_an_address_space_limit_fails_cleanly() {
    if std::env::var_os(RLIMIT_CHILD).is_some() {
        return rlimit_sweep();
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "engine_new_under_an_address_space_limit_fails_cleanly",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(RLIMIT_CHILD, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the sweep child failed ({:?}):\n{text}",
        out.status
    );
    assert!(text.contains("sweep done"), "{text}");
}

fn vm_size() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn set_soft_as_limit(bytes: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit with a valid struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut r), 0);
        r.rlim_cur = bytes.min(r.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &r), 0);
    }
}

fn rlimit_sweep() {
    let cache = 8u64 << 20;
    let (mut ok, mut failed) = (0, 0);
    let base = vm_size();
    // From far too little to enough, in steps that land in every allocation of the start-up.
    let mut extra = 0u64;
    let mut seen = std::collections::BTreeSet::new();
    while extra <= cache + (200 << 20) {
        set_soft_as_limit(base + extra);
        let r = std::panic::catch_unwind(|| {
            numaio_engine::Engine::new(numaio_engine::EngineConfig {
                cache_bytes: cache,
                slices: Some(1),
                io_workers_per_slice: 1,
                ..Default::default()
            })
        });
        set_soft_as_limit(libc::RLIM_INFINITY);
        match r {
            Ok(Ok(engine)) => {
                ok += 1;
                drop(engine);
            }
            Ok(Err(e)) => {
                failed += 1;
                let msg = e.to_string();
                assert!(!msg.is_empty());
                if seen.insert(msg.clone()) {
                    eprintln!("refused with {extra} bytes to spare: {msg}");
                }
            }
            Err(_) => panic!("Engine::new panicked with {extra} bytes of address space to spare"),
        }
        // Fine steps where the slot table and the index are mapped, after the arena.
        extra += if (cache..cache + (1 << 20)).contains(&extra) {
            16 << 10
        } else {
            1 << 20
        };
    }
    eprintln!("sweep done: {ok} started, {failed} refused");
    assert!(failed > 0, "the smallest limits must be refused");
}
