//! Measurement, not a test (issue 4): the placement daemon's CPU per interval next to
//! numad's, in the same 4-node lab guest, with the same 200 processes (150 sleepers, 50
//! light readers), over the same 20 one-second intervals. Emulated CPUs inflate both; the
//! comparison is what counts. Needs `numad` on the host (`apt-get install numad`) and
//! `cargo build --release`:
//!
//! `cargo run --release -p numaio-lab --example daemon_vs_numad`

use numaio_lab::{DiskFile, DiskSpec, LabTopology, Scenario};
use serde_json::Value;
use std::time::Duration;

const SCRIPT: &str = r#"
mkdir -p /var/log /var/run
numactl --membind=1 cat /mnt/f > /dev/null
for i in $(seq 150); do sleep 900 & done
for i in $(seq 50); do numaio-probe reader --file /mnt/f --block-size 64K --pause-us 20000 --interval-ms 1000000 > /dev/null & done
sleep 2
numad -i 1:1
sleep 1
NP=$(pidof numad)
S0=$(awk '{print $14+$15}' /proc/$NP/stat)
numaio daemon --policy auto --dry-run --interval 1 --iterations 20 --json > /tmp/m.log
S1=$(awk '{print $14+$15}' /proc/$NP/stat)
echo "NUMAD_TICKS $((S1-S0))"
grep '"event":"interval"' /tmp/m.log | sed 's/^/MI /'
echo DONE
"#;

fn main() {
    let numad = std::path::Path::new("/usr/bin/numad");
    if !numad.exists() {
        eprintln!("numad not found at /usr/bin/numad: install it with `apt-get install numad`");
        std::process::exit(2);
    }
    let s = Scenario::new(LabTopology::uniform(4), SCRIPT)
        .disk(DiskSpec::new().file(DiskFile::pattern("f", 16 << 20)))
        .host_binary(numad)
        .timeout(Duration::from_secs(400));
    let out = match s.run() {
        Ok(o) if o.output.contains("DONE") => o,
        Ok(o) => {
            eprintln!("{}", o.report());
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("lab run failed: {e}");
            std::process::exit(1);
        }
    };
    let iv: Vec<Value> = out
        .output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("MI "))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let ticks: f64 = out
        .output
        .lines()
        .find_map(|l| l.trim().strip_prefix("NUMAD_TICKS "))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(f64::NAN);
    if iv.len() < 2 {
        eprintln!("no interval lines:\n{}", out.report());
        std::process::exit(1);
    }
    let mut cpu: Vec<f64> = iv[1..]
        .iter()
        .map(|l| l["cpu_secs"].as_f64().unwrap_or(0.0) * 1000.0)
        .collect();
    cpu.sort_by(|a, b| a.total_cmp(b));
    println!(
        "numaio daemon: {} intervals, {} processes scanned, {} I/O-active; CPU per interval median {:.1} ms, mean {:.1} ms",
        iv.len(),
        iv[1]["scanned"],
        iv[1]["io_active"],
        cpu[cpu.len() / 2],
        cpu.iter().sum::<f64>() / cpu.len() as f64
    );
    // CLK_TCK is 100 on the lab kernel: one tick is 10 ms.
    println!(
        "numad over the same intervals: {:.1} ms CPU per interval",
        ticks * 10.0 / iv.len() as f64
    );
}
