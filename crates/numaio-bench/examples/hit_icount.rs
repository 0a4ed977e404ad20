//! A fixed number of engine hits, for counting instructions per hit with callgrind where the
//! host has no hardware counters: the count does not depend on the host's load, so builds can
//! be compared on a busy machine. The I/O goes through `PsyncBackend` workers (valgrind does
//! not run io_uring completions); the hit path does not touch the backend.
//!
//! Run (per-op count = Ir of `run_ops` / OPS):
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='hit_icount::run_ops*'
//!  target/profiling/examples/hit_icount FILE SIZE_MIB BS_KIB OPS pread|get`

use numaio_engine::{Engine, EngineConfig, FileHandle, OpenOptions, PsyncBackend};
use std::sync::Arc;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        eprintln!("usage: hit_icount FILE SIZE_MIB BS_KIB OPS pread|get");
        std::process::exit(2);
    }
    let path = &a[1];
    let size: u64 = a[2].parse::<u64>().expect("SIZE_MIB: a number") << 20;
    let bs: usize = a[3].parse::<usize>().expect("BS_KIB: a number") << 10;
    let ops: u64 = a[4].parse().expect("OPS: a number");
    let get = match a[5].as_str() {
        "get" => true,
        "pread" => false,
        other => {
            eprintln!("hit_icount: unknown API {other:?}: give pread or get");
            std::process::exit(2);
        }
    };
    if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) < size {
        std::fs::write(path, vec![0x5Au8; size as usize]).expect("cannot create the file");
    }
    let engine = Engine::new(EngineConfig {
        cache_bytes: size + size / 16 + (16 << 20),
        direct_io: false,
        backend: Some(Arc::new(PsyncBackend)),
        slices: Some(1),
        ..Default::default()
    })
    .expect("cannot start the engine");
    let f = engine
        .open(
            path,
            OpenOptions {
                write: false,
                create: false,
            },
        )
        .expect("cannot open the file");
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < size {
        off += f.pread(&mut buf, off).expect("warm-up read failed") as u64;
    }
    let before = engine.stats();
    let sink = run_ops(&f, size, bs, ops, get, &mut buf[..bs]);
    let st = engine.stats();
    println!(
        "ops {ops} hits {} misses {} sink {sink}",
        st.hits - before.hits,
        st.misses - before.misses
    );
}

/// The measured loop: `ops` reads of `bs` bytes at pseudo-random aligned offsets.
#[inline(never)]
fn run_ops(f: &FileHandle, size: u64, bs: usize, ops: u64, get: bool, buf: &mut [u8]) -> u8 {
    let nblocks = size / bs as u64;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut sink = 0u8;
    for _ in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % nblocks) * bs as u64;
        if get {
            let p = f.get(off, bs).expect("get failed");
            sink ^= p.segments().next().map_or(0, |s| s[0]);
            p.put();
        } else {
            f.pread(buf, off).expect("pread failed");
            sink ^= buf[0];
        }
    }
    sink
}
