//! Index layouts on the hit path: per-bucket locks (Jericho) vs sharded RwLock<HashMap>s,
//! lookup + pin of random resident keys, from 1 and 2 threads.
//! Run: `cargo bench -p numaio-engine --bench index`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use numaio_engine::index::{BucketIndex, Index, ShardedIndex};
use numaio_engine::{BlockKey, FileId};
use std::sync::atomic::{AtomicU64, Ordering};

const SLOTS: usize = 1 << 18; // a 1 GiB cache of 4 KiB blocks

fn fill(ix: &dyn Index) {
    for b in 0..SLOTS as u64 {
        ix.insert(
            BlockKey {
                file: FileId(0),
                block: b,
            },
            b as u32,
            &mut |_| (),
        )
        .unwrap();
    }
}

fn lookups(ix: &dyn Index, pins: &[AtomicU64], n: u64, seed: u64) {
    let mut x = seed | 1;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = BlockKey {
            file: FileId(0),
            block: x % SLOTS as u64,
        };
        ix.lookup(&k, &mut |s| {
            pins[s as usize % pins.len()].fetch_add(1, Ordering::Relaxed);
        });
    }
}

fn bench(c: &mut Criterion) {
    let pins: Vec<AtomicU64> = (0..SLOTS).map(|_| AtomicU64::new(0)).collect();
    let layouts: Vec<(&str, Box<dyn Index>)> = vec![
        ("buckets", Box::new(BucketIndex::new(SLOTS, None).unwrap())),
        ("sharded64", Box::new(ShardedIndex::new(64, SLOTS).unwrap())),
    ];
    let mut g = c.benchmark_group("index_lookup_pin");
    const BATCH: u64 = 100_000;
    g.throughput(Throughput::Elements(BATCH));
    for (name, ix) in &layouts {
        fill(ix.as_ref());
        for threads in [1u64, 2] {
            g.bench_function(format!("{name}/threads={threads}"), |b| {
                b.iter(|| {
                    std::thread::scope(|s| {
                        for t in 0..threads {
                            let (ix, pins) = (ix.as_ref(), &pins);
                            s.spawn(move || lookups(ix, pins, BATCH / threads, t + 7));
                        }
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
