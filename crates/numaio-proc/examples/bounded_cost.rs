//! What the time-limited /proc reads cost: one light scan of every process (the daemon's
//! per-interval path) and, in the same run, the reader-thread hop alone and a direct read
//! of each process's stat and io on the calling thread.
//!
//! `cargo run --release -p numaio-proc --example bounded_cost [ROUNDS]`

use numaio_proc::{sample, ScanOptions, Scanner};
use numaio_procfs::bounded::{Readers, DEFAULT_LIMIT};
use std::time::Instant;

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let topo = numaio_sys::Topology::detect().expect("topology");
    let pids = numaio_procfs::list_pids().expect("list /proc");
    let n = pids.len() as f64;
    let opts = ScanOptions {
        memory: false,
        ..Default::default()
    };
    let cache = numaio_proc::cache::FakeCache::default();
    let mut sc = Scanner::new();
    sc.scan(&opts, &topo, &cache);
    let readers = Readers::new(1, 16);
    // The light path without the reader thread: held descriptors re-read with pread.
    let held: Vec<(std::fs::File, Option<std::fs::File>)> = pids
        .iter()
        .filter_map(|p| {
            let st = std::fs::File::open(format!("/proc/{p}/stat")).ok()?;
            Some((st, std::fs::File::open(format!("/proc/{p}/io")).ok()))
        })
        .collect();
    let mut buf = vec![0u8; 4096];
    for r in 0..3 {
        let t = Instant::now();
        for _ in 0..rounds {
            for (st, io) in &held {
                use std::os::unix::fs::FileExt;
                if let Ok(k) = st.read_at(&mut buf, 0) {
                    let _ = numaio_procfs::parse_stat(&String::from_utf8_lossy(&buf[..k]));
                }
                if let Some(Ok(k)) = io.as_ref().map(|f| f.read_at(&mut buf, 0)) {
                    let _ = numaio_procfs::parse_io(&String::from_utf8_lossy(&buf[..k]));
                }
            }
        }
        let inline = t.elapsed().as_secs_f64() / rounds as f64;
        let t = Instant::now();
        for _ in 0..rounds {
            for &p in &pids {
                let _ = sample::light(p);
            }
        }
        let direct = t.elapsed().as_secs_f64() / rounds as f64;
        let t = Instant::now();
        for _ in 0..rounds {
            for &p in &pids {
                let _ = readers.run(p, "stat", DEFAULT_LIMIT, || ());
            }
        }
        let hop = t.elapsed().as_secs_f64() / rounds as f64;
        let t = Instant::now();
        for _ in 0..rounds {
            sc.scan(&opts, &topo, &cache);
        }
        let scan = t.elapsed().as_secs_f64() / rounds as f64;
        println!(
            "run {r}: {n} processes: light scan (bounded, held fds) {:.2} ms = {:.1} us/process; \
             reader hop alone {:.1} us/process; held fds read inline {:.1} us/process; \
             open+read of stat+io {:.1} us/process",
            scan * 1e3,
            scan / n * 1e6,
            hop / n * 1e6,
            inline / n * 1e6,
            direct / n * 1e6
        );
    }
}
