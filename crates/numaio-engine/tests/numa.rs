//! The add-ons through the engine: placement policies decide the slice, work moves to the data
//! (migrate-thread, forward), the accounting sees it, and checksums catch a corrupted block.
//! This host has one NUMA node, so two "nodes" are made from two CPUs with a synthetic
//! topology (memory binding off); the lab tests (lab/tests/engine.rs) repeat the locality
//! checks on a real 4-node guest.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use numaio_engine::integrity::{IntegrityConfig, IntegrityStage};
use numaio_engine::move_work::{migrate_current_thread, NodeCpus};
use numaio_engine::numa::{apply, NumaOptions};
use numaio_engine::{Engine, EngineConfig, OpenOptions};
use numaio_sys::Topology;

const BS: usize = 4096;

fn write_file(path: &Path, blocks: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..blocks * BS)
        .map(|i| (i / 7) as u8 ^ seed ^ (i / BS) as u8)
        .collect();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, &data).unwrap();
    data
}

fn engine_cfg(slices: usize) -> EngineConfig {
    EngineConfig {
        cache_bytes: (slices * 512 * BS) as u64,
        slices: Some(slices),
        queue_depth: 8,
        ..Default::default()
    }
}

/// Two synthetic nodes on the first two CPUs we may use.
fn two_node_topology() -> Option<Topology> {
    let cpus = numaio_sys::get_affinity(0).unwrap().to_vec();
    if cpus.len() < 2 {
        return None;
    }
    Topology::synthetic(&format!("n0={}@1G n1={}@1G", cpus[0], cpus[1])).ok()
}

/// One synthetic node on the first CPU we may use.
fn one_node_topology() -> Topology {
    let cpu = numaio_sys::get_affinity(0).unwrap().to_vec()[0];
    Topology::synthetic(&format!("n0={cpu}@1G")).unwrap()
}

fn per_slice_misses(e: &Engine) -> Vec<u64> {
    e.stats().slices.iter().map(|s| s.misses).collect()
}

#[test]
fn directory_placement_puts_each_directory_in_its_slice() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = engine_cfg(4);
    let parts = apply(
        &mut cfg,
        &NumaOptions {
            placement: "directory".parse().unwrap(),
            root: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
    )
    .unwrap();
    let e = Engine::new(cfg).unwrap();
    assert_eq!(e.placement_name(), "directory");
    // Directories first used in order d0..d3 get slices 0..3; d4 wraps to slice 0.
    for (i, blocks) in [(0usize, 3usize), (1, 5), (2, 7), (3, 11), (4, 13)] {
        let p = dir.path().join(format!("d{i}/f"));
        let data = write_file(&p, blocks, i as u8);
        let before = per_slice_misses(&e);
        let f = e.open(&p, OpenOptions::default()).unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(f.pread(&mut back, 0).unwrap(), data.len());
        assert!(back == data);
        let after = per_slice_misses(&e);
        let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let mut want = vec![0u64; 4];
        want[i % 4] = blocks as u64;
        assert_eq!(delta, want, "file in d{i}");
    }
    let snap = parts.accounting.snapshot();
    assert_eq!(snap.process.misses, vec![16, 5, 7, 11]);
    assert_eq!(
        snap.process.read_bytes.iter().sum::<u64>(),
        (39 * BS) as u64
    );
}

#[test]
fn stripe_chunks_alternate_between_two_slices() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a/f");
    write_file(&p, 32, 1);
    let mut cfg = engine_cfg(4);
    apply(
        &mut cfg,
        &NumaOptions {
            placement: "stripe:2:16K".parse().unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    let e = Engine::new(cfg).unwrap();
    let f = e.open(&p, OpenOptions::default()).unwrap();
    let mut seq = Vec::new();
    let mut buf = vec![0u8; BS];
    for b in 0..32u64 {
        let before = per_slice_misses(&e);
        f.pread(&mut buf, b * BS as u64).unwrap();
        let after = per_slice_misses(&e);
        let s = (0..4).find(|&i| after[i] > before[i]).expect("one miss");
        seq.push(s);
    }
    // 4 blocks per 16 KiB chunk; chunks alternate between two distinct slices.
    let a = seq[0];
    let b = seq[4];
    assert_ne!(a, b);
    for (i, s) in seq.iter().enumerate() {
        assert_eq!(
            *s,
            if (i / 4) % 2 == 0 { a } else { b },
            "block {i}: {seq:?}"
        );
    }
}

#[test]
fn fixed_and_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x/f");
    let data = write_file(&p, 40, 2);
    // fixed names a NUMA node: this host's four slices are all on node 0, and the file's
    // seed (its inode number) picks one of them for the whole file.
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&p).unwrap());
    let mut fixed = vec![0u64; 4];
    fixed[(ino % 4) as usize] = 40;
    for (policy, want) in [("fixed:0", fixed), ("interleave", vec![10; 4])] {
        let mut cfg = engine_cfg(4);
        cfg.topology = Some(one_node_topology());
        apply(
            &mut cfg,
            &NumaOptions {
                placement: policy.parse().unwrap(),
                ..Default::default()
            },
        )
        .unwrap();
        let e = Engine::new(cfg).unwrap();
        let f = e.open(&p, OpenOptions::default()).unwrap();
        let mut back = vec![0u8; data.len()];
        f.pread(&mut back, 0).unwrap();
        assert!(back == data);
        assert_eq!(per_slice_misses(&e), want, "{policy}");
    }
    // A node without a slice is refused, not clamped to the last slice.
    let mut cfg = engine_cfg(4);
    cfg.topology = Some(one_node_topology());
    let e = apply(
        &mut cfg,
        &NumaOptions {
            placement: "fixed:2".parse().unwrap(),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.contains("node 2 holds no data here"), "{e}");
}

#[test]
fn bad_placement_for_the_cache_is_refused() {
    let mut cfg = engine_cfg(2);
    let e = apply(
        &mut cfg,
        &NumaOptions {
            placement: "fixed:5".parse().unwrap(),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.contains("fixed:5"), "{e}");
}

#[test]
fn corrupted_block_is_an_error_never_data() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c/f");
    let stage = Arc::new(IntegrityStage::new(IntegrityConfig::default()));
    let data: Vec<u8> = (0..16 * BS).map(|i| (i * 31 / 7) as u8).collect();
    {
        let e = Engine::new(EngineConfig {
            integrity: Some(stage.clone()),
            ..engine_cfg(1)
        })
        .unwrap();
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let f = e.open(&p, OpenOptions::create_rw()).unwrap();
        f.pwrite(&data, 0).unwrap();
        f.fsync().unwrap();
        e.close().unwrap();
    }
    // The sums live in the sum file beside the data (durable across engines).
    assert!(numaio_engine::sumfile::sum_path(&p).exists(), "a sum file");
    assert_eq!(stage.stats().blocks_summed, 16);
    // Flip one byte of block 9 on the backing file, behind the engine's back.
    let raw = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    raw.write_all_at(&[data[9 * BS + 100] ^ 0xFF], (9 * BS + 100) as u64)
        .unwrap();
    drop(raw);
    // A fresh cache (nothing resident) with the same checksums.
    let e = Engine::new(EngineConfig {
        integrity: Some(stage.clone()),
        ..engine_cfg(1)
    })
    .unwrap();
    let f = e.open(&p, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; 4 * BS];
    f.pread(&mut buf, 0).unwrap();
    assert!(buf == data[..4 * BS], "clean blocks read back");
    let mut one = vec![0u8; BS];
    let err = f.pread(&mut one, 9 * BS as u64).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    assert!(err.to_string().contains("block 9"), "{err}");
    assert!(
        one.iter().all(|&b| b == 0),
        "no corrupted byte reached the caller"
    );
    // Still an error the second time (the bad block was not cached), neighbours are fine.
    assert!(f.pread(&mut one, 9 * BS as u64).is_err());
    f.pread(&mut one, 10 * BS as u64).unwrap();
    assert!(one == data[10 * BS..11 * BS]);
    let s = stage.stats();
    assert!(s.verified >= 5, "{s:?}");
    assert_eq!(s.mismatches, 2);
}

#[test]
fn corrupted_block_fails_under_readahead_too() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r/f");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let stage = Arc::new(IntegrityStage::new(IntegrityConfig::default()));
    let data: Vec<u8> = (0..64 * BS).map(|i| (i * 13 / 5) as u8).collect();
    {
        let e = Engine::new(EngineConfig {
            integrity: Some(stage.clone()),
            ..engine_cfg(1)
        })
        .unwrap();
        let f = e.open(&p, OpenOptions::create_rw()).unwrap();
        f.pwrite(&data, 0).unwrap();
        f.fsync().unwrap();
        e.close().unwrap();
    }
    let raw = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    raw.write_all_at(&[data[40 * BS] ^ 1], (40 * BS) as u64)
        .unwrap();
    drop(raw);
    let e = Engine::new(EngineConfig {
        integrity: Some(stage.clone()),
        readahead: true,
        ..engine_cfg(1)
    })
    .unwrap();
    let f = e.open(&p, OpenOptions::default()).unwrap();
    // Sequential 4 KiB reads: readahead loads block 40 before the reader asks for it.
    let mut buf = vec![0u8; BS];
    for b in 0..64u64 {
        let r = f.pread(&mut buf, b * BS as u64);
        if b == 40 {
            let e = r.unwrap_err();
            assert!(e.to_string().contains("checksum mismatch"), "{e}");
        } else {
            r.unwrap();
            assert!(
                buf[..] == data[b as usize * BS..(b as usize + 1) * BS],
                "block {b}"
            );
        }
    }
    // Two checks failed: the readahead load, then the reader's own retry.
    assert_eq!(stage.stats().mismatches, 2, "{:?}", stage.stats());
}

#[test]
fn forward_runs_remote_reads_on_the_data_node() {
    let Some(topo) = two_node_topology() else {
        numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f/f");
    let data = write_file(&p, 64, 3);
    let mut cfg = EngineConfig {
        topology: Some(topo.clone()),
        bind_memory: false,
        ..engine_cfg(2)
    };
    let parts = apply(
        &mut cfg,
        &NumaOptions {
            placement: "fixed:1".parse().unwrap(),
            move_work: "forward".parse().unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(parts.slice_nodes, vec![0, 1]);
    let e = Engine::new(cfg).unwrap();
    let nc = NodeCpus::from_topology(&topo);
    let f = e.open(&p, OpenOptions::create_rw()).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            migrate_current_thread(&nc, 0, false).unwrap();
            let mut back = vec![0u8; data.len()];
            for _ in 0..3 {
                assert_eq!(f.pread(&mut back, 0).unwrap(), data.len());
                assert!(back == data);
            }
            // Writes are forwarded too.
            f.pwrite(&[7u8; 100], 10).unwrap();
            let mut b = [0u8; 100];
            f.pread(&mut b, 10).unwrap();
            assert_eq!(b, [7u8; 100]);
            assert_eq!(nc.current_node(), Some(0), "the caller never moved");
        });
    });
    let snap = parts.accounting.snapshot();
    assert!(snap.process.forwards >= 5, "{:?}", snap.process);
    assert_eq!(snap.local_fraction, Some(1.0), "{:?}", snap.process);
    assert_eq!(snap.process.misses, vec![0, 64]);
}

#[test]
fn migrate_thread_moves_the_reader_to_its_data() {
    let Some(topo) = two_node_topology() else {
        numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m/f");
    let data = write_file(&p, 256, 4);
    for mode in ["none", "migrate-thread"] {
        let mut cfg = EngineConfig {
            topology: Some(topo.clone()),
            bind_memory: false,
            ..engine_cfg(2)
        };
        let parts = apply(
            &mut cfg,
            &NumaOptions {
                placement: "fixed:1".parse().unwrap(),
                move_work: mode.parse().unwrap(),
                ..Default::default()
            },
        )
        .unwrap();
        let e = Engine::new(cfg).unwrap();
        let nc = NodeCpus::from_topology(&topo);
        let f = e.open(&p, OpenOptions::default()).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                migrate_current_thread(&nc, 0, false).unwrap();
                let mut back = vec![0u8; BS];
                for b in 0..256u64 {
                    f.pread(&mut back, b * BS as u64).unwrap();
                    assert!(back[..] == data[b as usize * BS..(b as usize + 1) * BS]);
                }
                let want = if mode == "none" { 0 } else { 1 };
                assert_eq!(nc.current_node(), Some(want), "{mode}");
            });
        });
        let snap = parts.accounting.snapshot();
        let lf = snap.local_fraction.unwrap();
        if mode == "none" {
            assert_eq!(lf, 0.0);
            assert_eq!(snap.process.migrations, 0);
        } else {
            // K = 4 remote accesses, then local.
            assert!(lf >= 0.95, "{lf}");
            assert_eq!(snap.process.migrations, 1);
        }
    }
}

#[test]
fn writer_local_places_blocks_on_the_writers_node() {
    let Some(topo) = two_node_topology() else {
        numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig {
        topology: Some(topo.clone()),
        bind_memory: false,
        ..engine_cfg(2)
    };
    let parts = apply(
        &mut cfg,
        &NumaOptions {
            placement: "writer-local".parse().unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    let e = Engine::new(cfg).unwrap();
    let nc = NodeCpus::from_topology(&topo);
    std::thread::scope(|s| {
        for node in [0u32, 1] {
            let (e, nc, dir) = (&e, &nc, dir.path());
            s.spawn(move || {
                migrate_current_thread(nc, node, false).unwrap();
                let f = e
                    .open(dir.join(format!("w{node}")), OpenOptions::create_rw())
                    .unwrap();
                for b in 0..(10 + 10 * node as u64) {
                    f.pwrite(&[node as u8; BS], b * BS as u64).unwrap();
                }
                f.fsync().unwrap();
            });
        }
    });
    let snap = parts.accounting.snapshot();
    assert_eq!(
        snap.process.misses,
        vec![10, 20],
        "slice k holds node k's blocks"
    );
    assert_eq!(
        snap.process.write_bytes,
        vec![10 * BS as u64, 20 * BS as u64]
    );
    assert_eq!(snap.local_fraction, Some(1.0));
    // A reader on node 0 finds node 1's blocks where they were written.
    let f = e
        .open(dir.path().join("w1"), OpenOptions::default())
        .unwrap();
    let mut b = vec![0u8; BS];
    f.pread(&mut b, 0).unwrap();
    assert_eq!(b, vec![1u8; BS]);
    assert_eq!(e.stats().slices[1].hits, 1);
}
