//! Checksums that survive a restart: sums written beside the data (`<file>.numaio-sum`) are
//! checked by a later engine with a fresh integrity stage, corruption made on disk between two
//! runs is an error naming the file and offset, and a power cut at any point never turns
//! acknowledged data into a checksum error nor lets a corrupted settled block through.
//!
//! `NUMAIO_SUM_CUTS=N` sets the number of power-cut points (default 200).

mod common;
use common::pattern;
use numaio_engine::integrity::{IntegrityConfig, IntegrityStage};
use numaio_engine::power_loss::{PowerLossBackend, PowerLossOptions};
use numaio_engine::sumfile::sum_path;
use numaio_engine::{Backend, Engine, EngineError, OpenOptions, PolicyKind, PsyncBackend};
use numaio_testkit::Rng;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

const BS: usize = 4096;

fn stage() -> Arc<IntegrityStage> {
    Arc::new(IntegrityStage::new(IntegrityConfig::default()))
}

fn engine(ig: &Arc<IntegrityStage>, slots: usize, backend: Option<Arc<dyn Backend>>) -> Engine {
    engine_n(ig, 1, slots, backend)
}

fn engine_n(
    ig: &Arc<IntegrityStage>,
    slices: usize,
    slots: usize,
    backend: Option<Arc<dyn Backend>>,
) -> Engine {
    Engine::builder()
        .with_cache_bytes((slices * slots * BS) as u64)
        .with_slices(slices)
        .with_policy(PolicyKind::Clock)
        .with_queue_depth(4)
        .with_readahead(false)
        .with_bind_memory(false)
        .with_pin_threads(false)
        .with_integrity(ig.clone())
        .with_backend(backend.unwrap_or_else(|| Arc::new(PsyncBackend)))
        .build()
        .expect("engine starts")
}

fn write_file(path: &Path, data: &[u8]) {
    let ig = stage();
    let e = engine(&ig, 16, None);
    let f = e.open(path, OpenOptions::create_rw()).unwrap();
    assert_eq!(f.pwrite(data, 0).unwrap(), data.len());
    f.fsync().unwrap();
    e.close().unwrap();
}

#[test]
fn a_new_engine_verifies_what_an_earlier_one_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let data = pattern(1, 40 * BS);
    write_file(&path, &data);
    assert!(sum_path(&path).exists(), "sum file created beside the data");

    let ig = stage();
    let e = engine(&ig, 64, None);
    let f = e.open(&path, OpenOptions::read_only()).unwrap();
    let mut buf = vec![0u8; data.len()];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), data.len());
    assert!(buf == data);
    let s = ig.stats();
    assert_eq!(
        (s.verified, s.unverified, s.mismatches),
        (40, 0, 0),
        "{s:?}"
    );
    e.close().unwrap();
}

#[test]
fn read_only_files_without_sums_are_unverified_and_get_no_sum_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain");
    std::fs::write(&path, pattern(2, 4 * BS)).unwrap();
    let ig = stage();
    let e = engine(&ig, 16, None);
    let f = e.open(&path, OpenOptions::read_only()).unwrap();
    let mut buf = vec![0u8; 4 * BS];
    f.pread(&mut buf, 0).unwrap();
    assert_eq!((ig.stats().verified, ig.stats().unverified), (0, 4));
    assert!(!sum_path(&path).exists());
    e.close().unwrap();
}

#[test]
fn corruption_on_disk_is_detected_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let data = pattern(3, 16 * BS);
    write_file(&path, &data);
    let raw = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    raw.write_all_at(&[data[11 * BS + 100] ^ 1], (11 * BS + 100) as u64)
        .unwrap();
    drop(raw);

    let ig = stage();
    let e = engine(&ig, 64, None);
    let f = e.open(&path, OpenOptions::read_only()).unwrap();
    let mut one = vec![0u8; BS];
    for b in 0..16u64 {
        let r = f.pread(&mut one, b * BS as u64);
        if b == 11 {
            let err = r.unwrap_err();
            assert!(
                matches!(&err, EngineError::Checksum { offset, .. } if *offset == 11 * BS as u64),
                "{err:?}"
            );
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
        } else {
            r.unwrap();
            assert!(one == data[b as usize * BS..(b as usize + 1) * BS]);
        }
    }
    let s = ig.stats();
    assert_eq!((s.verified, s.mismatches), (15, 1), "{s:?}");
    e.close().unwrap();
}

#[test]
fn a_foreign_or_mismatched_sum_file_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, b"x").unwrap();
    let foreign = b"someone else's file".to_vec();
    std::fs::write(sum_path(&path), &foreign).unwrap();
    let ig = stage();
    let e = engine(&ig, 16, None);
    let Err(err) = e.open(&path, OpenOptions::create_rw()) else {
        panic!("a foreign sum file was accepted");
    };
    let msg = err.to_string();
    assert!(
        msg.contains(&sum_path(&path).display().to_string()),
        "{msg}"
    );
    assert_eq!(std::fs::read(sum_path(&path)).unwrap(), foreign);

    // An empty sum file (numaio crashed right after creating it) is initialized.
    std::fs::write(sum_path(&path), b"").unwrap();
    let f = e.open(&path, OpenOptions::create_rw()).unwrap();
    f.pwrite(b"y", 0).unwrap();
    f.fsync().unwrap();
    assert!(std::fs::metadata(sum_path(&path)).unwrap().len() > 4096);
    drop(f);
    drop(e);

    // Sums of another block size.
    let path2 = dir.path().join("data2");
    write_file(&path2, &pattern(4, 2 * BS));
    let before = std::fs::read(sum_path(&path2)).unwrap();
    let e = Engine::builder()
        .with_block_size(2 * BS)
        .with_cache_bytes((16 * BS) as u64)
        .with_slices(1)
        .with_integrity(ig.clone())
        .with_backend(Arc::new(PsyncBackend))
        .build()
        .unwrap();
    let Err(err) = e.open(&path2, OpenOptions::create_rw()) else {
        panic!("sums of another block size were accepted");
    };
    let msg = err.to_string();
    assert!(msg.contains("block"), "{msg}");
    assert_eq!(std::fs::read(sum_path(&path2)).unwrap(), before);
}

const SPAN_BLOCKS: u64 = 32;

/// One cut point; returns (blocks verified after the cut, whether a corrupted block was
/// planted and caught).
fn one_cut(seed: u64) -> Result<(u64, bool), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("f");
    let mut rng = Rng(seed);
    let (keep, torn) = match rng.below(3) {
        0 => (0.0, false),
        1 => (0.5, false),
        _ => (0.7, true),
    };
    let (backend, power) = PowerLossBackend::new(
        Arc::new(PsyncBackend) as Arc<dyn Backend>,
        PowerLossOptions {
            keep_unsynced: keep,
            torn,
            seed,
            ..Default::default()
        },
    );
    let ig = stage();
    // A cache smaller than the file, so the evictor writes back between fsyncs.
    let slices = 1 + rng.below(2) as usize;
    let e = engine_n(
        &ig,
        slices,
        8 + rng.below(8) as usize,
        Some(Arc::new(backend)),
    );
    let f = e
        .open(&path, OpenOptions::create_rw())
        .map_err(|e| e.to_string())?;
    let ops = rng.below(60) as usize;
    // Per block: the op index of its last write, and the op index of the last fsync.
    let mut last_write = vec![None::<usize>; SPAN_BLOCKS as usize];
    let mut last_sync = None::<usize>;
    for i in 0..ops {
        if rng.below(6) == 0 {
            f.fsync()
                .map_err(|e| format!("seed {seed} op {i} fsync: {e}"))?;
            last_sync = Some(i);
        } else {
            let off = rng.below(SPAN_BLOCKS * BS as u64 - 1);
            let len = (1 + rng.below(3 * BS as u64)).min(SPAN_BLOCKS * BS as u64 - off);
            let data = pattern(rng.next_u64(), len as usize);
            f.pwrite(&data, off)
                .map_err(|e| format!("seed {seed} op {i} pwrite: {e}"))?;
            for b in off / BS as u64..=(off + len - 1) / BS as u64 {
                last_write[b as usize] = Some(i);
            }
        }
    }
    power.power_cut().map_err(|e| e.to_string())?;
    drop(f);
    drop(e);

    // A block written and fsynced, and not written since, holds acknowledged data with a
    // settled sum: corrupting it must be caught.
    let len = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
    let settled: Vec<u64> = (0..SPAN_BLOCKS)
        .filter(|&b| {
            matches!((last_write[b as usize], last_sync), (Some(w), Some(s)) if w < s)
                && (b + 1) * BS as u64 <= len
        })
        .collect();
    let planted = (!settled.is_empty()).then(|| settled[rng.below(settled.len() as u64) as usize]);
    if let Some(b) = planted {
        let raw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| e.to_string())?;
        let at = b * BS as u64 + rng.below(BS as u64);
        let mut x = [0u8];
        raw.read_exact_at(&mut x, at).map_err(|e| e.to_string())?;
        raw.write_all_at(&[x[0] ^ 0x10], at)
            .map_err(|e| e.to_string())?;
    }

    let ig2 = stage();
    let e2 = engine(&ig2, 8, None);
    let f2 = e2
        .open(&path, OpenOptions::read_only())
        .map_err(|e| format!("seed {seed}: reopen: {e}"))?;
    let mut buf = vec![0u8; BS];
    let mut caught = false;
    for b in 0..len.div_ceil(BS as u64) {
        match f2.pread(&mut buf, b * BS as u64) {
            Ok(_) => {
                if planted == Some(b) {
                    return Err(format!(
                        "seed {seed}: corruption of settled block {b} was not detected"
                    ));
                }
            }
            Err(EngineError::Checksum { offset, .. }) if planted == Some(b) => {
                if offset != b * BS as u64 {
                    return Err(format!("seed {seed}: error at {offset}, corrupted block {b}"));
                }
                caught = true;
            }
            Err(err) => {
                return Err(format!(
                    "seed {seed} (keep {keep}, torn {torn}): false error on block {b} after the cut: {err}"
                ))
            }
        }
    }
    let verified = ig2.stats().verified;
    drop(f2);
    e2.close().map_err(|e| e.to_string())?;
    Ok((verified, caught))
}

#[test]
fn power_cuts_never_give_false_checksum_errors_nor_miss_corruption() {
    let n: u64 = std::env::var("NUMAIO_SUM_CUTS")
        .ok()
        .map(|v| v.parse().expect("NUMAIO_SUM_CUTS is a whole number"))
        .unwrap_or(200);
    let (mut verified, mut caught) = (0, 0);
    let mut failures = Vec::new();
    for seed in 1..=n {
        match one_cut(seed) {
            Ok((v, c)) => {
                verified += v;
                caught += c as u64;
            }
            Err(e) => failures.push(e),
        }
    }
    eprintln!("{n} power cuts: {verified} blocks verified after the cuts, {caught} planted corruptions caught");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(verified > 0 && caught > 0, "the cuts exercised nothing");
}
