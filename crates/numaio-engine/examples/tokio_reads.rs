//! Reading through the engine from tokio without `spawn_blocking`: one runtime thread keeps
//! many misses in flight, each future woken by its I/O completion.
//!
//! `cargo run --release -p numaio-engine --example tokio_reads -- FILE [READS] [IN_FLIGHT]`
//! reads READS (default 20000) random 4 KiB blocks of FILE, IN_FLIGHT (default 32) at a
//! time, and prints the rate and what the cache did.

use numaio_engine::{Engine, FileHandle, OpenOptions};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: tokio_reads FILE [READS] [IN_FLIGHT]");
        return ExitCode::from(2);
    };
    let num = |i: usize, default: usize| -> Result<usize, String> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{s:?} is not a positive number"))
        })
    };
    let (reads, in_flight) = match (num(2, 20_000), num(3, 32)) {
        (Ok(r), Ok(q)) => (r, q),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("tokio_reads: {e}");
            return ExitCode::from(2);
        }
    };
    match run(path, reads, in_flight) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokio_reads: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: &str, reads: usize, in_flight: usize) -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::builder().with_cache_bytes(64 << 20).build()?;
    let f = engine.open(path, OpenOptions::read_only())?;
    let blocks = f.len() / 4096;
    if blocks == 0 {
        return Err(format!("{path} is shorter than one 4 KiB block").into());
    }
    // A runtime built by hand: one thread drives every read.
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let t = Instant::now();
    let bytes = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut issued = 0;
        let mut bytes = 0u64;
        loop {
            while issued < reads && set.len() < in_flight {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let f: FileHandle = f.clone();
                let off = (x % blocks) * 4096;
                set.spawn(async move {
                    let mut buf = [0u8; 4096];
                    f.read_into_async(&mut buf, off).await
                });
                issued += 1;
            }
            match set.join_next().await {
                Some(r) => bytes += r?? as u64,
                None => return Ok::<u64, Box<dyn std::error::Error>>(bytes),
            }
        }
    })?;
    let secs = t.elapsed().as_secs_f64();
    let st = engine.stats();
    println!(
        "{reads} reads of 4 KiB, {in_flight} in flight on one thread: {:.0} reads/s, {:.1} MB/s \
         ({} hits, {} misses, backend {})",
        reads as f64 / secs,
        bytes as f64 / secs / 1e6,
        st.hits,
        st.misses,
        engine.backend_name()
    );
    drop(f);
    engine.close()?;
    Ok(())
}
