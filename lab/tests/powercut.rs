//! Real power cuts: a guest writes records through the numaio engine (O_DIRECT, fsync,
//! `ACK <seq>` on the console after each fsync) to an ext4 disk image, and the host kills
//! QEMU at a random moment mid-workload. The image is checked with e2fsck on the host, and
//! the next guest, booted on the same image, verifies that every acknowledged record of
//! every earlier run is intact and that no record holds contents its checksum accepts but
//! that are not its own (`numaio-powerload verify`). Then it starts the next run's writer,
//! so N cuts take N + 1 boots.
//!
//! Seeded: the seed is printed; `NUMAIO_POWERCUT_SEED=S` repeats a sequence of cuts,
//! `NUMAIO_POWERCUT_CUTS=N` sets the number of cuts (default 4).
//!
//! Needs release binaries: `cargo build --release -p numaio -p numaio-lab --bins`.

use numaio_lab::powerload::ACK_PREFIX;
use numaio_lab::{CutOutcome, DiskImage, DiskSpec, LabTopology, Outcome, PowerCut, Scenario};
use serde_json::Value;
use std::time::{Duration, Instant};

/// One writer run: its file, layout and what the host saw acknowledged before the cut.
struct Run {
    file: String,
    seed: u64,
    records: u64,
    max_record: u32,
    acked: Option<u64>,
}

impl Run {
    fn layout_args(&self) -> String {
        format!(
            "--file {} --seed {} --records {} --max-record {}",
            self.file, self.seed, self.records, self.max_record
        )
    }
}

/// Workload settings of one test.
struct Workload {
    records: u64,
    max_record: u32,
    cache_mib: u64,
    /// The cut comes after 1..=max_acks acknowledgements, then 0..max_delay_ms.
    max_acks: usize,
    max_delay_ms: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a non-negative integer")),
    )
}

fn topology() -> LabTopology {
    LabTopology::from_nodes(&[(1, 512), (1, 512)])
}

/// Verifies every earlier run (one `VERIFY <i> <json>` line each), then optionally starts
/// a writer.
fn script(runs: &[Run], writer: Option<(&Run, u64)>) -> String {
    let mut s = String::new();
    for (i, r) in runs.iter().enumerate() {
        let acked = r.acked.map(|a| format!(" --acked {a}")).unwrap_or_default();
        s.push_str(&format!(
            "out=$(numaio-powerload verify {}{acked} 2>&1 | tr -d '\\n'); echo \"VERIFY {i} $out\"\n",
            r.layout_args()
        ));
    }
    if let Some((r, cache_mib)) = writer {
        s.push_str(&format!(
            "numaio-powerload write {} --cache-mib {cache_mib}\necho \"WRITER-EXIT $?\"\n",
            r.layout_args()
        ));
    }
    s
}

/// Checks the `VERIFY` lines of a boot's output against the runs.
fn check_verified(output: &str, runs: &[Run], seed: u64, ctx: &str) -> Vec<Value> {
    let mut reports = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let prefix = format!("VERIFY {i} ");
        let line = output
            .lines()
            .find_map(|l| l.trim().strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("seed {seed}: {ctx}: no verify line for run {i}:\n{output}"));
        let v: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| {
            panic!("seed {seed}: {ctx}: run {i}: verifier output is not JSON ({e}): {line}")
        });
        assert_eq!(
            v["failure_count"], 0,
            "seed {seed}: {ctx}: run {i} ({}, run seed {}, acked {:?}) lost acknowledged data or holds forged records: {v:#}",
            r.file, r.seed, r.acked
        );
        assert_eq!(
            v["acked_intact"].as_u64(),
            Some(r.acked.map_or(0, |a| a + 1)),
            "seed {seed}: {ctx}: run {i}: {v}"
        );
        reports.push(v);
    }
    reports
}

/// The acknowledged sequence numbers the host saw, in order.
fn acks(output: &str) -> Vec<u64> {
    output
        .lines()
        .filter_map(|l| l.trim().strip_prefix(ACK_PREFIX))
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("bad ack line {s:?}"))
        })
        .collect()
}

fn power_cut_cycles(w: &Workload, default_cuts: u64) {
    let seed = env_u64("NUMAIO_POWERCUT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let cuts = env_u64("NUMAIO_POWERCUT_CUTS")
        .unwrap_or(default_cuts)
        .max(1);
    eprintln!("power-cut test: seed {seed} (NUMAIO_POWERCUT_SEED={seed} repeats it), {cuts} cuts");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let img = DiskImage::build(&DiskSpec::new().size_mib(1024)).expect("building the disk image");
    let mut runs: Vec<Run> = Vec::new();
    let mut journal_replays = 0;
    for cut in 0..cuts {
        let run = Run {
            file: format!("/mnt/run-{cut}.dat"),
            seed: rng.u64(..),
            records: w.records,
            max_record: w.max_record,
            acked: None,
        };
        let after = rng.usize(1..=w.max_acks);
        let delay = Duration::from_millis(rng.u64(0..=w.max_delay_ms));
        let ctx = format!("cut {cut} (after {after} acks + {} ms)", delay.as_millis());
        let out: CutOutcome = Scenario::new(topology(), script(&runs, Some((&run, w.cache_mib))))
            .disk_image(&img)
            .timeout(Duration::from_secs(180))
            .run_with_cut(&PowerCut::after_lines(ACK_PREFIX, after).then_wait(delay))
            .unwrap_or_else(|e| panic!("seed {seed}: {ctx}: the lab could not run: {e}"));
        check_verified(&out.output, &runs, seed, &ctx);
        assert!(
            out.output.contains("direct=true"),
            "seed {seed}: {ctx}: the writer did not report O_DIRECT I/O:\n{}",
            out.report()
        );
        let cut_at = out.cut_at.unwrap_or_else(|| {
            panic!(
                "seed {seed}: {ctx}: the writer ended before the power cut (make the workload longer):\n{}",
                out.report()
            )
        });
        let seen = acks(&out.output);
        assert!(
            seen.len() >= after && seen.windows(2).all(|p| p[0] < p[1]),
            "seed {seed}: {ctx}: acks {seen:?}"
        );
        let acked = seen.last().copied();
        let fsck = img.fsck().expect("running e2fsck");
        assert!(
            fsck.clean(),
            "seed {seed}: {ctx}: the file system needed repairs after the cut:\n{}",
            fsck.report()
        );
        journal_replays += usize::from(fsck.recovered_journal());
        eprintln!(
            "seed {seed}: {ctx}: cut {:.1} s after QEMU started ({:.1} s boot), {} fsyncs acknowledged, last acked record {:?}; e2fsck clean{}",
            cut_at.as_secs_f64(),
            out.boot_time.as_secs_f64(),
            seen.len(),
            acked,
            if fsck.recovered_journal() { " after journal replay" } else { "" }
        );
        runs.push(Run { acked, ..run });
    }
    // the last boot only verifies
    let out: Outcome = Scenario::new(topology(), script(&runs, None))
        .disk_image(&img)
        .timeout(Duration::from_secs(180))
        .must_run();
    assert!(
        out.success(),
        "seed {seed}: final verification:\n{}",
        out.report()
    );
    let reports = check_verified(&out.output, &runs, seed, "final verification");
    let sum = |k: &str| -> u64 { reports.iter().map(|v| v[k].as_u64().unwrap_or(0)).sum() };
    eprintln!(
        "seed {seed}: {cuts} power cuts survived in {:.0} s: {} acknowledged records intact; unacknowledged: {} intact, {} absent, {} torn; {journal_replays} journal replays",
        started.elapsed().as_secs_f64(),
        sum("acked_intact"),
        sum("unacked_intact"),
        sum("unacked_absent"),
        sum("unacked_torn"),
    );
    let fsck = img.fsck().expect("running e2fsck");
    assert!(
        fsck.clean(),
        "seed {seed}: after the last boot:\n{}",
        fsck.report()
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn acknowledged_records_survive_power_cuts() {
    power_cut_cycles(
        &Workload {
            records: 2000,
            max_record: 256 << 10,
            cache_mib: 4,
            max_acks: 40,
            max_delay_ms: 1500,
        },
        4,
    );
}
