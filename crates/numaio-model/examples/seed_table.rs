//! Prints the model's predictions for the seed publications' experiments (the reproduction
//! table of docs/model.md). `cargo run -p numaio-model --example seed_table`
use numaio_model::model::move_gain;
use numaio_model::shipped::shipped;
use numaio_model::{predict, Placement, Sharing, Workload};

fn main() {
    let z = shipped("zonfs").unwrap();
    for t in [8u32, 10, 20, 40, 80] {
        let mut row = Vec::new();
        for pl in ["single", "local", "fair", "stripe:2", "stripe:4"] {
            let w = Workload::spread(&z, t, pl.parse().unwrap()).unwrap();
            row.push(format!(
                "{pl}={:.0}",
                predict(&z, &w).unwrap().throughput_mb_s
            ));
        }
        println!("zonfs private t={t}: {}", row.join(" "));
        for sh in [Sharing::Medium, Sharing::High] {
            let mut row = Vec::new();
            for pl in ["stripe:1", "stripe:2", "stripe:4"] {
                let mut w = Workload::spread(&z, t, pl.parse().unwrap()).unwrap();
                w.sharing = sh;
                row.push(format!(
                    "{pl}={:.0}",
                    predict(&z, &w).unwrap().throughput_mb_s
                ));
            }
            println!("zonfs {sh:?} t={t}: {}", row.join(" "));
        }
    }
    let a = shipped("adams").unwrap();
    for bs in [4096u64, 131072, 1 << 20] {
        let one = |cpu: usize| {
            let mut w = Workload::spread(&a, 1, Placement::Single(Some(0))).unwrap();
            w.threads_per_node = vec![0, 0];
            w.threads_per_node[cpu] = 1;
            w.bs = bs;
            predict(&a, &w).unwrap().throughput_mb_s
        };
        println!(
            "adams bs={bs}: penalty {:.1}%",
            (one(0) / one(1) - 1.0) * 100.0
        );
    }
    for p in [0u64, 256, 512, 1024] {
        let g = move_gain(&a, 1, 0, 1 << 30, p << 20, 1 << 20).unwrap();
        println!("adams move gain P={p}MiB F=1GiB: {:.1}%", g * 100.0);
    }
    let t = shipped("tofalos").unwrap();
    for th in [1u32, 4, 8, 16] {
        let run = |cpu: usize, rf: f64| {
            let mut w = Workload::spread(&t, th, Placement::Single(Some(0))).unwrap();
            w.threads_per_node = vec![0, 0];
            w.threads_per_node[cpu] = th;
            w.read_fraction = rf;
            w.bs = 1 << 20;
            predict(&t, &w).unwrap().throughput_mb_s
        };
        println!(
            "tofalos t={th}: write local {:.0} remote {:.0} ratio {:.2}; read local {:.0} remote {:.0}; mixed remote {:.0}",
            run(0, 0.0), run(1, 0.0), run(1, 0.0) / run(0, 0.0), run(0, 1.0), run(1, 1.0), run(1, 0.5)
        );
    }
}
