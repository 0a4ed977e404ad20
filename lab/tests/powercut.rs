//! Real power cuts: a guest writes records through the numaio engine (O_DIRECT, fsync,
//! `ACK <seq>` on the console after each fsync) to an ext4 disk image, and the host kills
//! QEMU at a random moment mid-workload. The image is checked with e2fsck on the host, and
//! the next guest, booted on the same image, verifies that every acknowledged record of
//! the run cut last is intact and that no record holds contents its checksum accepts but
//! that are not its own (`numaio-powerload verify`). Then it starts the next run's writer,
//! so N cuts take N + 1 boots; the last boot checks every run again.
//!
//! Seeded: the seed is printed; `NUMAIO_POWERCUT_SEED=S` repeats a sequence of cuts,
//! `NUMAIO_POWERCUT_CUTS=N` sets the number of cuts (default 4).
//!
//! Needs release binaries: `cargo build --release -p numaio -p numaio-lab --bins`.

use numaio_lab::powerload::{self, ACK_PREFIX};
use numaio_lab::{CutOutcome, DiskImage, DiskSpec, LabTopology, Outcome, PowerCut, Scenario};
use serde_json::Value;
use std::time::{Duration, Instant};

/// One writer run: its file, layout and what the host saw acknowledged before the cut.
struct Run {
    file: String,
    seed: u64,
    records: u64,
    max_record: u32,
    threads: usize,
    /// Highest acknowledged record of each writer thread.
    acked: Vec<Option<u64>>,
}

impl Run {
    fn layout_args(&self) -> String {
        format!(
            "--file {} --seed {} --records {} --max-record {} --threads {}",
            self.file, self.seed, self.records, self.max_record, self.threads
        )
    }
}

/// Workload settings of one test.
struct Workload {
    records: u64,
    max_record: u32,
    cache_mib: u64,
    /// Writer threads of each cut, in turn (starting at a seeded position).
    threads: &'static [usize],
    /// Extra writer options (`--buffered`, `--skip-fsync`).
    writer_flags: &'static str,
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

/// Verifies the given runs (one `VERIFY <i> <json>` line each, `i` counting from 0 in
/// `runs`), then optionally starts a writer.
fn script(runs: &[Run], writer: Option<(&Run, &Workload)>) -> String {
    let mut s = String::new();
    for (i, r) in runs.iter().enumerate() {
        let acked = r
            .acked
            .iter()
            .map(|a| a.map_or("-".to_string(), |a| a.to_string()))
            .collect::<Vec<_>>()
            .join(",");
        s.push_str(&format!(
            "out=$(numaio-powerload verify {} --acked {acked} 2>&1 | tr -d '\\n'); echo \"VERIFY {i} $out\"\n",
            r.layout_args()
        ));
    }
    if let Some((r, w)) = writer {
        s.push_str(&format!(
            "numaio-powerload write {} --cache-mib {} {}\necho \"WRITER-EXIT $?\"\n",
            r.layout_args(),
            w.cache_mib,
            w.writer_flags
        ));
    }
    s
}

/// Checks the `VERIFY` lines of a boot's output against the runs.
fn verify_reports(output: &str, runs: &[Run], seed: u64, ctx: &str) -> Vec<Value> {
    let mut reports = Vec::new();
    for i in 0..runs.len() {
        let prefix = format!("VERIFY {i} ");
        let line = output
            .lines()
            .find_map(|l| l.trim().strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("seed {seed}: {ctx}: no verify line for run {i}:\n{output}"));
        let v: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| {
            panic!("seed {seed}: {ctx}: run {i}: verifier output is not JSON ({e}): {line}")
        });
        reports.push(v);
    }
    reports
}

/// Checks that every run verified: no acknowledged record lost, nothing forged.
fn check_verified(output: &str, runs: &[Run], seed: u64, ctx: &str) -> Vec<Value> {
    let reports = verify_reports(output, runs, seed, ctx);
    for (i, (r, v)) in runs.iter().zip(&reports).enumerate() {
        assert_eq!(
            v["failure_count"], 0,
            "seed {seed}: {ctx}: run {i} ({}, run seed {}, {} writer threads, acked {:?}) lost acknowledged data or holds forged records: {v:#}",
            r.file, r.seed, r.threads, r.acked
        );
        let acked: u64 = r
            .acked
            .iter()
            .enumerate()
            .map(|(t, a)| a.map_or(0, |a| (a - t as u64) / r.threads as u64 + 1))
            .sum();
        assert_eq!(
            v["acked_intact"].as_u64(),
            Some(acked),
            "seed {seed}: {ctx}: run {i}: {v}"
        );
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

fn seed() -> u64 {
    env_u64("NUMAIO_POWERCUT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    })
}

/// Boots a writer on the image and cuts its power at a random moment; checks the earlier
/// runs' verification on the way and e2fsck afterwards. Returns the run with what the host
/// saw acknowledged.
fn cut_one(
    img: &DiskImage,
    runs: &[Run],
    w: &Workload,
    index: usize,
    threads: usize,
    rng: &mut fastrand::Rng,
    seed: u64,
) -> Run {
    let run = Run {
        file: format!("/mnt/run-{index}.dat"),
        seed: rng.u64(..),
        records: w.records,
        max_record: w.max_record,
        threads,
        acked: Vec::new(),
    };
    let after = rng.usize(1..=w.max_acks);
    let delay = Duration::from_millis(rng.u64(0..=w.max_delay_ms));
    let ctx = format!(
        "cut {index} ({threads} writer threads, after {after} acks + {} ms)",
        delay.as_millis()
    );
    // the run cut last is verified here; all of them again in the last boot
    let last = &runs[runs.len().saturating_sub(1)..];
    let out: CutOutcome = Scenario::new(topology(), script(last, Some((&run, w))))
        .disk_image(img)
        .timeout(Duration::from_secs(120))
        .run_with_cut(&PowerCut::after_lines(ACK_PREFIX, after).then_wait(delay))
        .unwrap_or_else(|e| {
            panic!("seed {seed}: {ctx}: the lab run failed (a writer that hangs shows here as a timeout): {e}")
        });
    check_verified(&out.output, last, seed, &ctx);
    let direct = !w.writer_flags.contains("--buffered");
    assert!(
        out.output.contains(&format!("direct={direct}")),
        "seed {seed}: {ctx}: the writer did not report direct={direct}:\n{}",
        out.report()
    );
    let cut_at = out.cut_at.unwrap_or_else(|| {
        panic!(
            "seed {seed}: {ctx}: the writer ended before the power cut (make the workload longer):\n{}",
            out.report()
        )
    });
    let seen = acks(&out.output);
    assert!(seen.len() >= after, "seed {seed}: {ctx}: acks {seen:?}");
    let acked = powerload::acked_per_thread(&seen, threads);
    let fsck = img.fsck().expect("running e2fsck");
    assert!(
        fsck.clean(),
        "seed {seed}: {ctx}: the file system needed repairs after the cut:\n{}",
        fsck.report()
    );
    eprintln!(
        "seed {seed}: {ctx}: cut {:.1} s after QEMU started ({:.1} s boot), {} fsyncs acknowledged, last acked per thread {:?}; e2fsck clean{}",
        cut_at.as_secs_f64(),
        out.boot_time.as_secs_f64(),
        seen.len(),
        acked,
        if fsck.recovered_journal() { " after journal replay" } else { "" }
    );
    Run { acked, ..run }
}

/// Boots a guest that only verifies the runs; returns the reports.
fn verify_all(img: &DiskImage, runs: &[Run], seed: u64) -> Vec<Value> {
    let out: Outcome = Scenario::new(topology(), script(runs, None))
        .disk_image(img)
        .timeout(Duration::from_secs(120))
        .must_run();
    assert!(
        out.success(),
        "seed {seed}: verification boot:\n{}",
        out.report()
    );
    verify_reports(&out.output, runs, seed, "verification boot")
}

fn power_cut_cycles(w: &Workload, default_cuts: u64) {
    let seed = seed();
    let cuts = env_u64("NUMAIO_POWERCUT_CUTS")
        .unwrap_or(default_cuts)
        .max(1) as usize;
    eprintln!("power-cut test: seed {seed} (NUMAIO_POWERCUT_SEED={seed} repeats it), {cuts} cuts");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let img = DiskImage::build(&DiskSpec::new().size_mib(1024)).expect("building the disk image");
    let mut runs: Vec<Run> = Vec::new();
    let first = rng.usize(..w.threads.len());
    for cut in 0..cuts {
        let threads = w.threads[(first + cut) % w.threads.len()];
        let run = cut_one(&img, &runs, w, cut, threads, &mut rng, seed);
        runs.push(run);
    }
    let out = verify_all(&img, &runs, seed);
    let reports = {
        // re-check through the same assertions as the cut boots
        let text: String = out
            .iter()
            .enumerate()
            .map(|(i, v)| format!("VERIFY {i} {v}\n"))
            .collect();
        check_verified(&text, &runs, seed, "final verification")
    };
    let sum = |k: &str| -> u64 { reports.iter().map(|v| v[k].as_u64().unwrap_or(0)).sum() };
    eprintln!(
        "seed {seed}: {cuts} power cuts survived in {:.0} s: {} acknowledged records intact; unacknowledged: {} intact, {} absent, {} torn",
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

/// The main test: O_DIRECT writes through the engine by 1, 2 or 4 threads (in turn) on one
/// file, a small engine cache so the evictor writes back between fsyncs, 4 random cuts.
#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn acknowledged_records_survive_power_cuts() {
    power_cut_cycles(
        &Workload {
            records: 2000,
            max_record: 256 << 10,
            cache_mib: 1,
            threads: &[1, 2, 4],
            writer_flags: "",
            max_acks: 40,
            max_delay_ms: 1500,
        },
        4,
    );
}

/// The harness catches a writer that acknowledges without fsync: its records, held in the
/// engine's cache and the guest's page cache, die with the power. (Killing only the process
/// would not show it: the kernel's page cache survives a process kill.)
#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn power_cut_exposes_acknowledgements_without_fsync() {
    let seed = seed();
    eprintln!("power-cut control: seed {seed} (NUMAIO_POWERCUT_SEED={seed} repeats it)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let w = Workload {
        records: 2000,
        max_record: 256 << 10,
        cache_mib: 1,
        threads: &[1],
        writer_flags: "--buffered --skip-fsync",
        // early enough that the kernel's write-back (30 s expiry) has not saved the data
        max_acks: 20,
        max_delay_ms: 500,
    };
    let img = DiskImage::build(&DiskSpec::new().size_mib(256)).expect("building the disk image");
    let run = cut_one(&img, &[], &w, 0, 1, &mut rng, seed);
    let reports = verify_all(&img, std::slice::from_ref(&run), seed);
    let lost = reports[0]["failure_count"].as_u64().unwrap_or(0);
    eprintln!(
        "seed {seed}: acknowledged without fsync and cut: {lost} of {} acknowledged records lost (file missing: {})",
        run.acked[0].map_or(0, |a| a + 1),
        reports[0]["file_missing"]
    );
    assert!(
        lost > 0,
        "seed {seed}: a writer that never syncs lost nothing at a power cut: the cut does not drop unsynced data ({})",
        reports[0]
    );
    assert!(
        reports[0]["failures"][0]
            .as_str()
            .is_some_and(|f| f.contains("acknowledged record")),
        "{}",
        reports[0]
    );
}

/// Every crash state of one run, from its write log: QEMU records every write and flush the
/// guest sends (`blklogwrites`); the host replays the log onto a copy of the image as it
/// was before the boot and, at each flush (or an even sample of them:
/// `NUMAIO_POWERCUT_PREFIXES`, default 40; `all` for every flush, `entries` for every
/// prefix of the log), checks the disk as a
/// power cut right there would have left it: e2fsck clean, every record acknowledged by
/// then intact. The writer records each acknowledgement as a block in an ack file
/// (O_DIRECT | O_DSYNC) after its fsync returned, so the log shows which acknowledgements
/// a prefix holds.
#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn every_flush_point_of_a_write_log_verifies() {
    replay_write_log("", false);
}

/// The replay catches a writer that acknowledges without fsync (buffered I/O): a prefix
/// holds an acknowledgement whose records never reached the disk.
#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn write_log_replay_exposes_acknowledgements_without_fsync() {
    replay_write_log("--buffered --skip-fsync", true);
}

/// Runs the writer with a write log, replays the log and checks flush points. With
/// `expect_loss`, stops at the first prefix that lost acknowledged records and fails if
/// none did.
fn replay_write_log(writer_flags: &str, expect_loss: bool) {
    use numaio_lab::writelog::WriteLog;
    let seed = seed();
    let prefixes = std::env::var("NUMAIO_POWERCUT_PREFIXES").ok();
    let every_entry = prefixes.as_deref() == Some("entries");
    let limit = match prefixes.as_deref() {
        Some("all") | Some("entries") => usize::MAX,
        _ => env_u64("NUMAIO_POWERCUT_PREFIXES").unwrap_or(40).max(1) as usize,
    };
    eprintln!("write-log replay: seed {seed} (NUMAIO_POWERCUT_SEED={seed} repeats it)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let threads = [1, 2][rng.usize(..2)];
    let run = Run {
        file: "/mnt/logged.dat".into(),
        seed: rng.u64(..),
        records: 300,
        max_record: 128 << 10,
        threads,
        acked: Vec::new(),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let img = DiskImage::build(&DiskSpec::new().size_mib(64)).expect("building the disk image");
    let before = img
        .copy_to(dir.path().join("before.img"))
        .expect("copying the image");
    let log_path = dir.path().join("write.log");
    let out = Scenario::new(
        topology(),
        format!(
            "numaio-powerload write {} --cache-mib 1 {writer_flags} --ack-file /mnt/acks.dat\necho \"WRITER-EXIT $?\"\n",
            run.layout_args()
        ),
    )
    .disk_image(&img)
    .write_log(&log_path)
    .timeout(Duration::from_secs(300))
    .must_run();
    assert!(
        out.success()
            && out.output.contains("WRITER-EXIT 0")
            && out
                .output
                .contains(&format!("direct={}", !writer_flags.contains("--buffered"))),
        "seed {seed}: the logged run failed:\n{}",
        out.report()
    );
    let printed = acks(&out.output);

    let log = WriteLog::open(&log_path).expect("reading the write log");
    // with `entries`, every prefix: writes after the last flush reaching the disk in order
    let flushes: Vec<u64> = log
        .entries()
        .iter()
        .filter(|e| every_entry || e.is_flush())
        .map(|e| e.index)
        .collect();
    // an even sample of the flush points, always including the last
    let step = flushes.len().div_ceil(limit).max(1);
    let checkpoints: std::collections::BTreeSet<u64> = flushes
        .iter()
        .copied()
        .enumerate()
        .filter(|(i, _)| i % step == step - 1 || *i + 1 == flushes.len())
        .map(|(_, e)| e)
        .collect();
    let work_path = dir.path().join("work.img");
    let work_img = before.copy_to(&work_path).expect("copying the image");
    let work = std::fs::OpenOptions::new()
        .write(true)
        .open(work_img.path())
        .expect("opening the replay image");
    let layout = powerload::Layout {
        seed: run.seed,
        records: run.records,
        max_record: run.max_record,
    };
    let mut on_disk: Vec<u64> = Vec::new();
    let mut checked = 0;
    let mut acked_checked = 0u64;
    for e in log.entries() {
        let data = log.data(e).expect("reading the log");
        log.apply(e, &data, &work).expect("replaying the log");
        on_disk.extend(powerload::find_acks(&data));
        if !checkpoints.contains(&e.index) {
            continue;
        }
        let ctx = format!(
            "seed {seed}: prefix of {} of {} log entries ({threads} writer threads)",
            e.index + 1,
            log.entries().len()
        );
        let check = work_img
            .copy_to(dir.path().join("check.img"))
            .expect("copying the replayed image");
        let fsck = check.fsck().expect("running e2fsck");
        assert!(fsck.clean(), "{ctx}: e2fsck:\n{}", fsck.report());
        let dumped = dir.path().join("logged.dat");
        check
            .dump_file("logged.dat", &dumped)
            .expect("copying the file out of the image");
        let acked = powerload::acked_per_thread(&on_disk, threads);
        let rep = powerload::verify(&dumped, &layout, &acked).expect("verifying");
        if expect_loss && !rep.ok() {
            eprintln!(
                "{ctx}: acknowledged without fsync: {} acknowledged records lost, as expected: {}",
                rep.failure_count, rep.failures[0]
            );
            return;
        }
        assert!(rep.ok(), "{ctx}: acknowledged {acked:?}: {rep:?}");
        checked += 1;
        acked_checked += rep.acked_intact;
    }
    on_disk.sort_unstable();
    let mut printed_sorted = printed.clone();
    printed_sorted.sort_unstable();
    assert_eq!(
        on_disk, printed_sorted,
        "seed {seed}: the acknowledgements in the write log differ from those printed"
    );
    eprintln!(
        "seed {seed}: write log of {} entries ({} flushes, {} acknowledgements, {threads} writer threads): {checked} prefixes replayed and verified, {acked_checked} acknowledged records checked in all",
        log.entries().len(),
        log.entries().iter().filter(|e| e.is_flush()).count(),
        printed.len()
    );
    assert!(checked > 0, "seed {seed}: the log has no flush");
    assert!(
        !expect_loss,
        "seed {seed}: a writer that never syncs lost nothing at any replayed flush point"
    );
}
