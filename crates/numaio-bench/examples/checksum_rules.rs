//! Experiment: which rule should decide between computing write-back checksums
//! inline and dispatching them to the worker pool?
//!
//! T write-back threads each write runs of 64 × 4 KiB blocks to their own file with pwrite,
//! through `IntegrityStage::compute_while` (checksums overlap the write when dispatched).
//! For each rule — `inline`, `always`, `bang:5` (Bang's context-switch rule), `queue:2` — it
//! reports throughput, the share of requests dispatched, the process's context switches per
//! GiB and the pool's peak size. Run:
//! `cargo run --release -p numaio-bench --example checksum_rules [-- --secs 2 --dir /tmp --json]`

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use numaio_engine::checksum::ChecksumKind;
use numaio_engine::integrity::{DispatchRule, IntegrityConfig, IntegrityStage};

const BLOCK: usize = 4096;
const RUN: usize = 64;

fn ctxt_switches() -> u64 {
    // SAFETY: an all-zero rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    (ru.ru_nvcsw + ru.ru_nivcsw) as u64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let secs: f64 = get("--secs").and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let dir = get("--dir").unwrap_or_else(|| std::env::temp_dir().display().to_string());
    let json = args.iter().any(|a| a == "--json");
    let rounds: usize = get("--rounds").and_then(|s| s.parse().ok()).unwrap_or(3);
    let rules: Vec<DispatchRule> = ["inline", "always", "bang:5", "queue:2"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    // Rounds interleave the rules so background load hits them alike; medians are reported.
    let mut samples: std::collections::BTreeMap<(usize, usize), Vec<serde_json::Value>> =
        Default::default();
    for _round in 0..rounds {
        for threads in [1usize, 2, 4] {
            for (ri, &rule) in rules.iter().enumerate() {
                let st = Arc::new(IntegrityStage::new(IntegrityConfig {
                    kind: ChecksumKind::Crc32c,
                    rule,
                    ..Default::default()
                }));
                let stop = Arc::new(AtomicBool::new(false));
                let bytes = Arc::new(AtomicU64::new(0));
                let c0 = ctxt_switches();
                let t0 = Instant::now();
                let hs: Vec<_> = (0..threads)
                    .map(|t| {
                        let (st, stop, bytes) = (st.clone(), stop.clone(), bytes.clone());
                        let path = format!("{dir}/numaio-cksum-{}-{t}", std::process::id());
                        std::thread::spawn(move || {
                            let f = std::fs::OpenOptions::new()
                                .create(true)
                                .truncate(true)
                                .read(true)
                                .write(true)
                                .open(&path)
                                .expect("open scratch file");
                            let _ = std::fs::remove_file(&path);
                            let mut data = vec![0u8; BLOCK * RUN];
                            let mut run = 0u64;
                            while !stop.load(Relaxed) {
                                // Fresh content each run, as real dirty data would be.
                                for (i, b) in data.iter_mut().step_by(512).enumerate() {
                                    *b = (run as usize + i) as u8;
                                }
                                let blocks: Vec<&[u8]> = data.chunks(BLOCK).collect();
                                let off = (run % 256) * (BLOCK * RUN) as u64;
                                let first = off / BLOCK as u64;
                                let (sums, r) =
                                    st.compute_while(&blocks, || f.write_all_at(&data, off));
                                r.expect("pwrite");
                                for (i, s) in sums.into_iter().enumerate() {
                                    st.commit(t as u64, first + i as u64, s);
                                }
                                bytes.fetch_add((BLOCK * RUN) as u64, Relaxed);
                                run += 1;
                            }
                        })
                    })
                    .collect();
                std::thread::sleep(Duration::from_secs_f64(secs));
                stop.store(true, Relaxed);
                for h in hs {
                    h.join().unwrap();
                }
                let el = t0.elapsed().as_secs_f64();
                let cs = ctxt_switches() - c0;
                let b = bytes.load(Relaxed) as f64;
                let s = st.stats();
                samples
                    .entry((threads, ri))
                    .or_default()
                    .push(serde_json::json!({
                        "threads": threads,
                        "rule": rule.to_string(),
                        "mib_per_s": b / el / (1 << 20) as f64,
                        "dispatched_share": s.dispatched as f64 / s.requests.max(1) as f64,
                        "ctxt_switches_per_gib": cs as f64 / (b / (1u64 << 30) as f64),
                        "peak_workers": s.peak_workers,
                    }));
            }
        }
    }
    let median = |v: &[serde_json::Value], k: &str| -> f64 {
        let mut x: Vec<f64> = v.iter().map(|r| r[k].as_f64().unwrap()).collect();
        x.sort_by(|a, b| a.partial_cmp(b).unwrap());
        x[x.len() / 2]
    };
    let rows: Vec<serde_json::Value> = samples
        .iter()
        .map(|(&(threads, ri), v)| {
            serde_json::json!({
                "threads": threads,
                "rule": rules[ri].to_string(),
                "rounds": v.len(),
                "mib_per_s": median(v, "mib_per_s"),
                "mib_per_s_samples": v.iter().map(|r| r["mib_per_s"].clone()).collect::<Vec<_>>(),
                "dispatched_share": median(v, "dispatched_share"),
                "ctxt_switches_per_gib": median(v, "ctxt_switches_per_gib"),
                "peak_workers": v.iter().map(|r| r["peak_workers"].as_u64().unwrap()).max(),
            })
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).unwrap());
        return;
    }
    println!(
        "{:>7} {:>8} {:>10} {:>11} {:>14} {:>6}",
        "threads", "rule", "MiB/s", "dispatched", "ctxsw per GiB", "peak"
    );
    for r in &rows {
        println!(
            "{:>7} {:>8} {:>10.0} {:>10.0}% {:>14.0} {:>6}",
            r["threads"],
            r["rule"].as_str().unwrap(),
            r["mib_per_s"].as_f64().unwrap(),
            100.0 * r["dispatched_share"].as_f64().unwrap(),
            r["ctxt_switches_per_gib"].as_f64().unwrap(),
            r["peak_workers"]
        );
    }
}
