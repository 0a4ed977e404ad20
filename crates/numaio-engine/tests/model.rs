//! Model-based randomized test: random sequences of pwrite, pread, get, get_mut+put, fsync and
//! sync_range against an in-memory model of the file, for every policy and 1, 2 and 4 slices,
//! on a cache small enough that eviction and write-back happen constantly.

mod common;
use common::*;
use numaio_engine::{OpenOptions, PolicyKind};
use proptest::prelude::*;

const SPAN: u64 = 96 * 1024;

#[derive(Debug, Clone)]
enum Op {
    Pwrite { off: u64, len: usize, seed: u64 },
    Pread { off: u64, len: usize },
    Get { off: u64, len: usize },
    GetMutPut { off: u64, len: usize, seed: u64 },
    Fsync,
    SyncRange { off: u64, len: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SPAN, 1usize..12_000, any::<u64>()).prop_map(|(off, len, seed)| Op::Pwrite { off, len, seed }),
        4 => (0..SPAN + 8192, 1usize..12_000).prop_map(|(off, len)| Op::Pread { off, len }),
        2 => (0..SPAN, 1usize..8192).prop_map(|(off, len)| Op::Get { off, len }),
        2 => (0..SPAN, 1usize..8192, any::<u64>()).prop_map(|(off, len, seed)| Op::GetMutPut { off, len, seed }),
        1 => Just(Op::Fsync),
        1 => (0..SPAN, 1u64..20_000).prop_map(|(off, len)| Op::SyncRange { off, len }),
    ]
}

fn run(policy: PolicyKind, slices: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model");
    // Seed the file with some existing content so reads of never-written blocks are checked.
    let initial = pattern(99, 20_000);
    std::fs::write(&path, &initial).unwrap();
    let mut model = initial;
    let engine = small_engine(policy, slices, 16 * 4 / slices.max(1) + 8);
    let f = engine
        .open(
            &path,
            OpenOptions {
                write: true,
                create: false,
            },
        )
        .unwrap();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Pwrite { off, len, seed } => {
                let data = pattern(*seed, *len);
                prop_assert_eq!(f.pwrite(&data, *off).unwrap(), *len);
                let end = *off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[*off as usize..end].copy_from_slice(&data);
            }
            Op::Pread { off, len } => {
                let mut buf = vec![0xAAu8; *len];
                let n = f.pread(&mut buf, *off).unwrap();
                let want: &[u8] = if (*off as usize) < model.len() {
                    &model[*off as usize..(*off as usize + len).min(model.len())]
                } else {
                    &[]
                };
                prop_assert_eq!(n, want.len(), "op {} {:?}", i, op);
                prop_assert!(&buf[..n] == want, "op {} {:?}: data differs", i, op);
            }
            Op::Get { off, len } => {
                let len = (*len).min(f.max_get_bytes() - (*off % 4096) as usize);
                let p = f.get(*off, len).unwrap();
                let want: &[u8] = if (*off as usize) < model.len() {
                    &model[*off as usize..(*off as usize + len).min(model.len())]
                } else {
                    &[]
                };
                prop_assert!(p.to_vec() == want, "op {} {:?}: get differs", i, op);
                p.put();
            }
            Op::GetMutPut { off, len, seed } => {
                let len = (*len).min(f.max_get_bytes() - (*off % 4096) as usize);
                let data = pattern(*seed, len);
                let mut p = f.get_mut(*off, len).unwrap();
                let mut at = 0;
                for s in p.segments_mut() {
                    s.copy_from_slice(&data[at..at + s.len()]);
                    at += s.len();
                }
                prop_assert_eq!(at, len);
                p.commit().unwrap();
                let end = *off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[*off as usize..end].copy_from_slice(&data);
            }
            Op::Fsync => {
                f.fsync().unwrap();
                let disk = std::fs::read(&path).unwrap();
                prop_assert_eq!(disk.len(), model.len(), "op {}: file length after fsync", i);
                prop_assert!(disk == model, "op {}: file content after fsync", i);
            }
            Op::SyncRange { off, len } => {
                f.sync_range(*off, *len).unwrap();
                let mut disk = std::fs::read(&path).unwrap();
                // Bytes past the device's end of file are holes (zeros in the model).
                if disk.len() < model.len() {
                    disk.resize(model.len(), 0);
                }
                let (a, b) = (*off as usize, (*off + *len) as usize);
                let b = b.min(model.len());
                if a < b {
                    prop_assert!(disk[a..b] == model[a..b], "op {}: synced range differs", i);
                }
            }
        }
        prop_assert_eq!(f.len(), model.len() as u64);
    }
    f.fsync().unwrap();
    prop_assert!(std::fs::read(&path).unwrap() == model);
    Ok(())
}

macro_rules! model_test {
    ($name:ident, $policy:expr, $slices:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 16, max_shrink_iters: 200, ..ProptestConfig::default() })]
            #[test]
            fn $name(ops in proptest::collection::vec(op(), 1..60)) {
                run($policy, $slices, &ops)?;
            }
        }
    };
}

model_test!(arc_1_slice, PolicyKind::Arc, 1);
model_test!(arc_2_slices, PolicyKind::Arc, 2);
model_test!(arc_4_slices, PolicyKind::Arc, 4);
model_test!(split_lru_1_slice, PolicyKind::SplitLru { lru_factor: 4 }, 1);
model_test!(
    split_lru_2_slices,
    PolicyKind::SplitLru { lru_factor: 4 },
    2
);
model_test!(
    split_lru_4_slices,
    PolicyKind::SplitLru { lru_factor: 1 },
    4
);
model_test!(clock_1_slice, PolicyKind::Clock, 1);
model_test!(clock_2_slices, PolicyKind::Clock, 2);
model_test!(clock_4_slices, PolicyKind::Clock, 4);
