//! Host benchmark: what moving work to the data costs per request, against the
//! engine's hit path.
//!
//! Two "nodes" are made from two CPUs (a synthetic topology, memory binding off), so the
//! numbers are the software costs — the affinity change + yield, or the round trip through a
//! forwarding worker — not NUMA memory latency. A 64 MiB file is fully cached; each request
//! is a `pread` of BS bytes at a random aligned offset. Per request, in ns:
//! - `hit`: placement `fixed:0`, caller on node 0, no work moving (local hit);
//! - `hit+hook`: the same with the accounting / migrate-thread hook installed (steady state
//!   of migrate-thread once the thread sits on its data's node);
//! - `migrate`: before every request the thread is moved to the other node (the worst case:
//!   the price of one migration, paid per request);
//! - `forward`: placement `fixed:1`, caller on node 0, every request runs on node 1's worker
//!   (`forward+spin`: worker and caller poll 20 µs before sleeping).
//!
//! Run: `cargo run --release -p numaio-bench --example move_work_cost [-- --json]`

use std::time::{Duration, Instant};

use numaio_engine::move_work::{migrate_current_thread, NodeCpus};
use numaio_engine::numa::{apply, NumaOptions};
use numaio_engine::{Engine, EngineConfig, FileHandle, OpenOptions};
use numaio_sys::Topology;

const FILE: u64 = 64 << 20;

fn time_per_op(iters: usize, mut f: impl FnMut(usize)) -> f64 {
    for i in 0..iters / 10 + 1 {
        f(i);
    }
    let t = Instant::now();
    for i in 0..iters {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn engine(
    topo: &Topology,
    placement: &str,
    move_work: &str,
    spin: Duration,
    hook: bool,
) -> (Engine, Option<numaio_engine::numa::NumaParts>) {
    let mut cfg = EngineConfig {
        topology: Some(topo.clone()),
        bind_memory: false,
        slices: Some(2),
        // fixed:N puts the whole file in one slice: each slice must hold it.
        cache_bytes: 2 * (FILE + (16 << 20)),
        ..Default::default()
    };
    let parts = if hook {
        Some(
            apply(
                &mut cfg,
                &NumaOptions {
                    placement: placement.parse().unwrap(),
                    move_work: move_work.parse().unwrap(),
                    forward_spin: spin,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    } else {
        // Same placement without any issue-6 hook: the core's bare hit path.
        let p =
            numaio_engine::placement::Placer::new(placement.parse().unwrap(), vec![0, 1]).unwrap();
        cfg.slice_nodes = Some(vec![0, 1]);
        cfg.placement = Some(std::sync::Arc::new(
            numaio_engine::placement::PolicyPlacement::new(p, 4096),
        ));
        None
    };
    (Engine::new(cfg).expect("engine"), parts)
}

fn warm(f: &FileHandle) {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < f.len() {
        off += f.pread(&mut buf, off).unwrap() as u64;
    }
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
    let topo = Topology::synthetic(&format!("n0={}@1G n1={}@1G", cpus[0], cpus[1]))
        .expect("synthetic topology");
    let nc = NodeCpus::from_topology(&topo);
    let dir = std::env::temp_dir().join(format!("numaio-mwc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    std::fs::write(&path, vec![0xA5u8; FILE as usize]).unwrap();

    let mut rows = Vec::new();
    // Each measurement runs in a thread of its own, starting on node 0.
    let on_node0 = |f: &mut (dyn FnMut() + Send)| {
        std::thread::scope(|s| {
            s.spawn(|| {
                migrate_current_thread(&nc, 0, false).unwrap();
                f()
            });
        })
    };
    for bs in [4096usize, 1 << 20] {
        let iters = if bs == 4096 { 100_000 } else { 1_000 };
        let blocks = FILE / bs as u64;
        let pick = move |i: usize| ((i as u64).wrapping_mul(2_654_435_761) % blocks) * bs as u64;
        let mut buf = vec![0u8; bs];
        let mut res = serde_json::Map::new();
        res.insert("bs".into(), bs.into());
        let cases: [(&str, &str, &str, Duration, bool); 7] = [
            ("hit", "fixed:0", "none", Duration::ZERO, false),
            ("hit+acct", "fixed:0", "none", Duration::ZERO, true),
            ("hit2", "fixed:0", "none", Duration::ZERO, false),
            (
                "hit+hook",
                "fixed:0",
                "migrate-thread",
                Duration::ZERO,
                true,
            ),
            ("migrate", "fixed:0", "none", Duration::ZERO, false),
            ("forward", "fixed:1", "forward", Duration::ZERO, true),
            (
                "forward+spin",
                "fixed:1",
                "forward",
                Duration::from_micros(20),
                true,
            ),
        ];
        for (name, placement, mw, spin, hook) in cases {
            let (e, _parts) = engine(&topo, placement, mw, spin, hook);
            let f = e.open(&path, OpenOptions::default()).unwrap();
            warm(&f);
            let mut ns = 0.0;
            on_node0(&mut || {
                ns = if name == "migrate" {
                    time_per_op(iters, |i| {
                        migrate_current_thread(&nc, (i % 2) as u32, false).unwrap();
                        f.pread(&mut buf, pick(i)).unwrap();
                    })
                } else {
                    time_per_op(iters, |i| {
                        f.pread(&mut buf, pick(i)).unwrap();
                    })
                };
            });
            res.insert(format!("{name}_ns"), ns.into());
            drop(f);
            e.close().unwrap();
        }
        let g = |k: &str| res[k].as_f64().unwrap();
        let (hit, mig, fwd, fwds) = (
            g("hit_ns"),
            g("migrate_ns"),
            g("forward_ns"),
            g("forward+spin_ns"),
        );
        res.insert("migrate_overhead_ns".into(), (mig - hit).into());
        res.insert("forward_overhead_ns".into(), (fwd - hit).into());
        res.insert("forward_spin_overhead_ns".into(), (fwds - hit).into());
        res.insert(
            "winner_per_request".into(),
            if mig < fwd.min(fwds) {
                "migrate-thread"
            } else {
                "forward"
            }
            .into(),
        );
        rows.push(serde_json::Value::Object(res));
    }
    // The issue-6 hook alone (accounting + migrate-thread decision on a local access).
    let mut cfg = EngineConfig {
        topology: Some(topo.clone()),
        slices: Some(2),
        ..Default::default()
    };
    apply(
        &mut cfg,
        &NumaOptions {
            move_work: "migrate-thread".parse().unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    let hook = cfg.hooks[0].clone();
    let mut hook_ns = 0.0;
    on_node0(&mut || {
        let ctx = numaio_engine::AccessCtx::new(false);
        hook_ns = time_per_op(1_000_000, |i| {
            hook.on_access(numaio_engine::FileId(1), i as u64, 0, true, &ctx)
        });
    });
    let _ = std::fs::remove_dir_all(&dir);
    if json {
        let v = serde_json::json!({"requests": rows, "hook_ns_per_block": hook_ns});
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
        return;
    }
    println!("issue-6 hook per block access: {hook_ns:.0} ns");
    println!(
        "{:>8} {:>9} {:>9} {:>10} {:>10} {:>12}  winner (per request)",
        "bs", "hit", "hit+hook", "migrate", "forward", "forward+spin"
    );
    for r in &rows {
        let g = |k: &str| r[k].as_f64().unwrap();
        println!(
            "{:>8} {:>9.0} {:>9.0} {:>10.0} {:>10.0} {:>12.0}  {}",
            r["bs"],
            g("hit_ns"),
            g("hit+hook_ns"),
            g("migrate_ns"),
            g("forward_ns"),
            g("forward+spin_ns"),
            r["winner_per_request"].as_str().unwrap()
        );
    }
}
