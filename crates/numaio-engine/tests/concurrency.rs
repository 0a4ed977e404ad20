//! Many threads against a tiny cache: every thread writes and reads back its own region while
//! others read a shared region, so hits, misses, clashes, stalls, evictions and write-backs
//! all race. Each thread checks its data; the file is checked after fsync.

mod common;
use common::*;
use numaio_engine::OpenOptions;
use std::sync::Arc;

#[test]
fn threads_racing_on_a_tiny_cache_keep_data_consistent() {
    for policy in policies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let shared = pattern(1, 64 * 1024);
        let mut init = shared.clone();
        init.resize(64 * 1024 + 4 * 64 * 1024, 0);
        std::fs::write(&path, &init).unwrap();
        let engine = Arc::new(small_engine(policy, 2, 24));
        let f = engine
            .open(
                &path,
                OpenOptions {
                    write: true,
                    create: false,
                },
            )
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(800);
        let mut handles = Vec::new();
        for t in 0..4u64 {
            let f = f.clone();
            let shared = shared.clone();
            handles.push(std::thread::spawn(move || {
                let base = 64 * 1024 * (t + 1);
                let mut model = vec![0u8; 64 * 1024];
                let mut x = t + 1;
                let mut ops = 0;
                while std::time::Instant::now() < deadline || ops < 200 {
                    ops += 1;
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let off = ((x >> 20) % (60 * 1024)) as usize;
                    let len = ((x >> 40) % 4096 + 1) as usize;
                    match x % 3 {
                        0 => {
                            let d = pattern(x, len);
                            f.pwrite(&d, base + off as u64).unwrap();
                            model[off..off + len].copy_from_slice(&d);
                        }
                        1 => {
                            let mut b = vec![0; len];
                            f.pread(&mut b, base + off as u64).unwrap();
                            assert!(b == model[off..off + len], "thread {t}: own data differs");
                        }
                        _ => {
                            let p = f.get(off as u64, len.min(4096 - off % 4096)).unwrap();
                            assert!(
                                p.to_vec() == shared[off..off + p.len()],
                                "thread {t}: shared data differs"
                            );
                        }
                    }
                }
                model
            }));
        }
        let models: Vec<Vec<u8>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        f.fsync().unwrap();
        let disk = std::fs::read(&path).unwrap();
        assert!(
            disk[..64 * 1024] == shared[..],
            "{policy}: shared region changed"
        );
        for (t, m) in models.iter().enumerate() {
            let base = 64 * 1024 * (t + 1);
            assert!(
                disk[base..base + 64 * 1024] == m[..],
                "{policy}: region of thread {t} differs on disk"
            );
        }
        let st = engine.stats();
        assert!(
            st.evicted > 0 && st.misses > 0 && st.hits > 0,
            "{policy}: {st:?}"
        );
    }
}
