//! Host benchmark (issue 6): what moving work to the data costs per request.
//!
//! Two "nodes" are simulated with two CPUs (a synthetic topology), so the numbers are the
//! software costs — affinity change + yield, or a round trip through a forwarding worker —
//! not NUMA memory latency. For each request size it measures, in ns per request:
//! - `hit`: the hit path's copy out of a cached buffer into the caller's buffer;
//! - `migrate`: the thread is moved to the other CPU before every copy (worst case, no
//!   hysteresis; with hysteresis a thread moves once and then pays only `hit`);
//! - `forward`: every copy runs on a worker pinned to the other CPU, the caller waits.
//!
//! Run: `cargo run --release -p numaio-engine --example move_work_cost [-- --json]`

use std::time::Instant;

use numaio_engine::hysteresis::HysteresisConfig;
use numaio_engine::move_work::{migrate_current_thread, Forwarder, MoveWork, Mover, NodeCpus};
use numaio_sys::Topology;

const ARENA: usize = 64 << 20;

fn time_per_op(iters: usize, mut f: impl FnMut(usize)) -> f64 {
    // Warm-up.
    for i in 0..iters / 10 + 1 {
        f(i);
    }
    let t = Instant::now();
    for i in 0..iters {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let cpus = numaio_sys::get_affinity(0)
        .expect("sched_getaffinity")
        .to_vec();
    if cpus.len() < 2 {
        eprintln!("move_work_cost: needs at least 2 usable CPUs, have {cpus:?}");
        std::process::exit(2);
    }
    let spec = format!("n0={}@1G n1={}@1G", cpus[0], cpus[1]);
    let topo = Topology::synthetic(&spec).expect("synthetic topology");
    let nc = NodeCpus::from_topology(&topo);
    let fwd = Forwarder::new(&nc, &[0, 1], 1, 64).expect("forwarder");
    let fwd_spin = Forwarder::with_spin(&nc, &[0, 1], 1, 64, std::time::Duration::from_micros(50))
        .expect("forwarder");
    let arena = vec![1u8; ARENA];
    let mut rows = Vec::new();
    for bs in [4096usize, 1 << 20] {
        let iters = if bs == 4096 { 200_000 } else { 2_000 };
        let slots = ARENA / bs;
        let mut dst = vec![0u8; bs];
        // A cheap LCG for block choice so the copy is not always from the same lines.
        let pick = |i: usize| (i.wrapping_mul(2_654_435_761) % slots) * bs;
        migrate_current_thread(&nc, 0, false).expect("pin to node 0");
        let hit = time_per_op(iters, |i| {
            let o = pick(i);
            dst.copy_from_slice(&arena[o..o + bs]);
            std::hint::black_box(&dst);
        });
        let migrate = time_per_op(iters, |i| {
            migrate_current_thread(&nc, (i % 2) as u32, false).expect("migrate");
            let o = pick(i);
            dst.copy_from_slice(&arena[o..o + bs]);
            std::hint::black_box(&dst);
        });
        migrate_current_thread(&nc, 0, false).expect("pin to node 0");
        let forward = time_per_op(iters, |i| {
            let o = pick(i);
            let src = &arena[o..o + bs];
            let d = &mut dst;
            fwd.run_on(1, move || {
                d.copy_from_slice(src);
            })
            .expect("forward");
            std::hint::black_box(&dst);
        });
        let forward_spin = time_per_op(iters, |i| {
            let o = pick(i);
            let src = &arena[o..o + bs];
            let d = &mut dst;
            fwd_spin
                .run_on(1, move || {
                    d.copy_from_slice(src);
                })
                .expect("forward");
            std::hint::black_box(&dst);
        });
        // The mover's decision path on a local access (what every request pays with
        // migrate-thread once the thread sits on its data's node).
        let mover = Mover::new(
            MoveWork::MigrateThread,
            nc.clone(),
            HysteresisConfig::default(),
        );
        let decide = time_per_op(iters, |_| {
            std::hint::black_box(mover.before_access(0, None));
        });
        rows.push(serde_json::json!({
            "bs": bs,
            "hit_ns": hit,
            "migrate_ns": migrate,
            "forward_ns": forward,
            "forward_spin_ns": forward_spin,
            "migrate_overhead_ns": migrate - hit,
            "forward_overhead_ns": forward - hit,
            "local_decision_ns": decide,
            "winner": if migrate < forward.min(forward_spin) { "migrate-thread" } else { "forward" },
        }));
    }
    // Restore the full mask.
    numaio_sys::set_affinity(0, &numaio_sys::CpuSet::from_ids(&cpus)).ok();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).unwrap());
    } else {
        println!(
            "{:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10}  winner",
            "bs",
            "hit ns",
            "migrate ns",
            "forward ns",
            "fwd+spin ns",
            "migr. over",
            "fwd over",
            "decide ns"
        );
        for r in &rows {
            println!(
                "{:>8} {:>10.0} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>10.1}  {}",
                r["bs"],
                r["hit_ns"].as_f64().unwrap(),
                r["migrate_ns"].as_f64().unwrap(),
                r["forward_ns"].as_f64().unwrap(),
                r["forward_spin_ns"].as_f64().unwrap(),
                r["migrate_overhead_ns"].as_f64().unwrap(),
                r["forward_overhead_ns"].as_f64().unwrap(),
                r["local_decision_ns"].as_f64().unwrap(),
                r["winner"].as_str().unwrap()
            );
        }
    }
}
