//! A tour of the engine API: open a file through NUMA-bound cache slices, write with pwrite
//! and with zero-copy get_mut/commit, read with pread and zero-copy get, fsync, and print where
//! the slices' buffers are and what the cache did.
//!
//! Run: `cargo run --release -p numaio-engine --example engine_basics -- /tmp/numaio-demo`

use numaio_engine::{Engine, EngineConfig, OpenOptions, PolicyKind};

fn main() -> std::io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/numaio-engine-demo".into());
    let engine = Engine::new(EngineConfig {
        cache_bytes: 64 << 20,
        policy: PolicyKind::Arc,
        // Two slices even on a one-node machine, to show blocks spreading over slices.
        slices: Some(2),
        range_blocks: 64,
        ..Default::default()
    })?;
    println!(
        "engine: {} slices on nodes {:?}, policy {}, placement {}, backend {}",
        engine.slices(),
        engine.slice_nodes(),
        engine.policy_name(),
        engine.placement_name(),
        engine.backend_name()
    );
    for (i, c) in engine.placement_checks().iter().enumerate() {
        println!(
            "  slice {i}: buffers bound to node {} (mbind ok: {}), sampled pages per node {:?}, huge pages requested: {}",
            c.node, c.bound, c.pages_per_node, c.huge_pages_requested
        );
    }

    let f = engine.open(&path, OpenOptions::create_rw())?;
    println!("{}: O_DIRECT {}", f.path().display(), f.direct());

    // Copying API.
    let record = b"numaio keeps file data and its threads on the same node\n";
    for i in 0..1000u64 {
        f.pwrite(record, i * record.len() as u64)?;
    }
    let mut buf = vec![0u8; record.len()];
    f.pread(&mut buf, 500 * record.len() as u64)?;
    assert_eq!(&buf, record);

    // Zero-copy write: pin the blocks, modify them in place, commit.
    {
        let mut p = f.get_mut(0, 6)?;
        for seg in p.segments_mut() {
            seg.copy_from_slice(b"NUMAIO");
        }
        p.commit()?;
    }
    // Zero-copy read: views of the cache buffers, released by put (or drop).
    let p = f.get(0, 64)?;
    let first: Vec<u8> = p.segments().flat_map(|s| s.iter().copied()).collect();
    println!("first bytes: {:?}", String::from_utf8_lossy(&first[..32]));
    p.put();

    f.fsync()?;
    let st = engine.stats();
    println!(
        "hits {} misses {} (hit ratio {:.3}), written back {} blocks in {} writes, file length {}",
        st.hits,
        st.misses,
        st.hit_ratio,
        st.written_back,
        st.write_ios,
        f.len()
    );
    Ok(engine.close()?)
}
