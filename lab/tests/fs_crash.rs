//! Power cuts of a numaio-fs volume: a 2-node guest formats a volume (one NVMe disk per node,
//! or a zone on node 1's persistent memory), runs the seeded `numaio-fs-writer` workload
//! (`ACK <n> <file> <len> <crc32c>` after each fsync) and the host kills QEMU after a random
//! number of ACK lines. The next boot on the same images runs `numaio fsck -y` (clean or
//! repaired: exit 0 or 1), then mounts the volume (journal recovery, no manual step) and
//! compares every file with the writer's replayed workload, as docs/fs.md ("Data: ordered
//! mode") promises: the volume is at one commit, the acknowledged one or a later one, for
//! all files at once; each file has exactly that commit's length; every 512-byte sector
//! holds its data at that commit or data an in-place overwrite wrote there before the next
//! commit (in a file the commit's fsync did not name, also data from the commit before on,
//! as ext4 allows); a file created or grown after the commit shows nothing of it (so never
//! zeros or another file's data). Each boot checks the previous run and then starts the next one,
//! so N cuts take N + 1 boots.
//!
//! A third test cuts the power during the atomic-replace pattern (`numaio-fs-writer
//! replace`: write `r.tmp`, fsync, rename it over `r`, mkdir, fsync the directory, print
//! `REPLACED <i>`): the volume must come back at a round's directory fsync from the last
//! acknowledged one on (or at the next round's `r.tmp` fsync), never with an older `r`.
//!
//! A fourth runs SQLite (rollback journal, `synchronous=EXTRA`) through `numaio mount` in
//! the guest, one transaction per row, and checks after each cut that the database is
//! intact with every acknowledged row.
//!
//! Seeded: the seed is printed; `NUMAIO_FS_CRASH_SEED=S` repeats a sequence of cuts,
//! `NUMAIO_FS_CRASH_CUTS=N` sets the number of cuts per variant (default 3).
//!
//! Needs release binaries: `cargo build --release -p numaio -p numaio-lab --bins`.

use numaio_lab::{blank_image, CutOutcome, LabTopology, Outcome, PowerCut, Scenario};
use numaio_testkit::Rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const FILES: usize = 4;
/// The cut comes after 1..=MAX_ACK_LINES ACK lines (a fsync prints one line per file).
const MAX_ACK_LINES: u64 = 40;
/// and, in half the cuts, up to this long after it.
const MAX_WAIT_MS: u64 = 400;

#[derive(Clone, Copy, Debug)]
enum Variant {
    /// One NVMe disk per node, the volume over both.
    NodeDisks,
    /// A persistent zone on node 1's pmem device.
    PmemZone,
}

impl Variant {
    /// Shell lines that set `$VOL` to the writer's volume arguments and `$DEVS` to the
    /// devices for `numaio fsck`.
    fn volume(self) -> &'static str {
        match self {
            Variant::NodeDisks => {
                "a=$(node-disk 0) || exit 10\nb=$(node-disk 1) || exit 11\nVOL=\"$a $b\"\nDEVS=\"$a $b\"\n"
            }
            Variant::PmemZone => {
                "p=$(node-pmem 1) || exit 10\n\
                 sz=$(( $(cat /sys/block/${p#/dev/}/size) * 512 / 4096 * 4096 ))\n\
                 VOL=\"--zone 1:$sz:$p\"\nDEVS=$p\n"
            }
        }
    }

    fn scenario(self, dir: &Path, script: String) -> Scenario {
        let s = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 256)]), script)
            .timeout(Duration::from_secs(120))
            .retry_after_guest_lockup();
        match self {
            Variant::NodeDisks => s
                .node_disk_image(0, dir.join("disk0.img"))
                .node_disk_image(1, dir.join("disk1.img")),
            Variant::PmemZone => s.node_pmem_image(1, dir.join("pmem1.img")),
        }
    }

    fn images(self, dir: &Path) {
        let imgs: &[&str] = match self {
            Variant::NodeDisks => &["disk0.img", "disk1.img"],
            Variant::PmemZone => &["pmem1.img"],
        };
        for i in imgs {
            blank_image(dir.join(i), 32 * MIB).expect("blank image");
        }
    }
}

/// One writer run and what the host saw of it.
struct Run {
    seed: u64,
    /// The last fsync the host saw acknowledged (0: none) and the states it acknowledged.
    acked: u64,
    acked_files: BTreeMap<String, (u64, String)>,
}

fn script(v: Variant, check: Option<&Run>, write: Option<u64>) -> String {
    let mut s = v.volume().to_string();
    if let Some(r) = check {
        s.push_str(&format!(
            "numaio fsck -y $DEVS; echo \"NUMAIO-FSCK-EXIT $?\"\n\
             numaio-fs-writer check $VOL --seed {} --files {FILES} --acked {}\necho \"CHECK-EXIT $?\"\n",
            r.seed, r.acked
        ));
    }
    if let Some(seed) = write {
        s.push_str(&format!(
            "numaio-fs-writer mkfs $VOL || exit 12\n\
             numaio-fs-writer write $VOL --seed {seed} --files {FILES}\necho \"WRITER-EXIT $?\"\n"
        ));
    }
    s
}

/// Complete ACK lines: `(fsync, file, len, crc)`. A last line without its newline may be cut
/// short and is left out.
fn ack_lines(output: &str) -> Vec<(u64, String, u64, String)> {
    let complete = match output.rfind('\n') {
        Some(i) => &output[..i],
        None => "",
    };
    complete
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.trim().strip_prefix("ACK ")?.split_whitespace().collect();
            match w[..] {
                [n, f, len, crc] => Some((
                    n.parse().ok()?,
                    f.to_string(),
                    len.parse().ok()?,
                    crc.to_string(),
                )),
                _ => None,
            }
        })
        .collect()
}

/// The number after `prefix` on the first line that starts with it.
fn number_after(out: &str, prefix: &str) -> Option<u64> {
    out.lines().find_map(|l| {
        l.trim()
            .strip_prefix(prefix)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// Checks a boot's fsck and `check` output against the run it checks; returns the verdict
/// counts (per file, plus `fsck-clean` or `fsck-repaired` once per check).
fn check_run(out: &str, run: &Run, ctx: &str) -> BTreeMap<String, usize> {
    let mut verdicts = BTreeMap::new();
    match number_after(out, "NUMAIO-FSCK-EXIT ") {
        Some(0) => *verdicts.entry("fsck-clean".into()).or_insert(0) += 1,
        Some(1) => *verdicts.entry("fsck-repaired".into()).or_insert(0) += 1,
        other => {
            panic!("{ctx}: numaio fsck -y exited {other:?}, not 0 (clean) or 1 (repaired):\n{out}")
        }
    }
    assert!(
        out.contains("CHECK-EXIT 0"),
        "{ctx}: the check failed (mount, fsck or file contents):\n{out}"
    );
    for when in ["before-mount", "after-unmount"] {
        assert!(
            out.contains(&format!("FSCK {when} clean")),
            "{ctx}: fsck {when} not clean:\n{out}"
        );
    }
    assert!(out.contains("MOUNT "), "{ctx}: no mount line:\n{out}");
    let commit = number_after(out, "COMMIT ")
        .unwrap_or_else(|| panic!("{ctx}: the checker found no commit the volume is at:\n{out}"));
    assert!(
        commit >= run.acked,
        "{ctx}: the volume is at commit {commit}, before the acknowledged fsync {}:\n{out}",
        run.acked
    );
    // the checker's replay of the acknowledged state equals what the writer acknowledged
    let replayed: BTreeMap<String, (u64, String)> = out
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l
                .trim()
                .strip_prefix("ACKED ")?
                .split_whitespace()
                .collect();
            Some((w[0].to_string(), (w[1].parse().ok()?, w[2].to_string())))
        })
        .collect();
    // (the host may have seen only some of the last fsync's lines when it cut the power)
    for (f, st) in &run.acked_files {
        assert_eq!(
            replayed.get(f),
            Some(st),
            "{ctx}: {f}: the writer acknowledged {st:?}, the checker's replay says {:?}:\n{out}",
            replayed.get(f)
        );
    }
    let mut files = 0;
    for l in out.lines() {
        let Some(rest) = l.trim().strip_prefix("FILE ") else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        assert_eq!(w.len(), 4, "{ctx}: bad FILE line {l:?}");
        files += 1;
        match w[3] {
            // at the acknowledged commit the content is what the host saw acknowledged
            "acked" => {
                assert_eq!(commit, run.acked, "{ctx}: {l}");
                let (len, crc) = replayed.get(w[0]).unwrap_or_else(|| {
                    panic!("{ctx}: {} is not in the acknowledged state: {l}\n{out}", w[0])
                });
                assert_eq!(
                    (w[1], w[2]),
                    (len.to_string().as_str(), crc.as_str()),
                    "{ctx}: {l}"
                );
            }
            "later" => assert!(commit > run.acked, "{ctx}: {l}"),
            "sector-mix" => {}
            other => panic!(
                "{ctx}: {} holds {} bytes (crc {}) that match no commit from the acknowledged one on: {other}\n{out}",
                w[0], w[1], w[2]
            ),
        }
        *verdicts.entry(w[3].to_string()).or_insert(0) += 1;
    }
    for f in run.acked_files.keys() {
        assert!(
            out.lines()
                .any(|l| l.trim().starts_with(&format!("FILE {f} "))),
            "{ctx}: {f} was acknowledged but is gone:\n{out}"
        );
    }
    assert!(files >= run.acked_files.len(), "{ctx}:\n{out}");
    let at = if commit == run.acked {
        "at-acked-commit"
    } else {
        "at-later-commit"
    };
    *verdicts.entry(at.into()).or_insert(0) += 1;
    verdicts
}

/// The seed (`NUMAIO_FS_CRASH_SEED`, else the clock) and the number of cuts
/// (`NUMAIO_FS_CRASH_CUTS`, default 3) of a crash test.
fn seed_and_cuts() -> (u64, u64) {
    let seed = numaio_testkit::env_u64("NUMAIO_FS_CRASH_SEED", {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    (
        seed,
        numaio_testkit::env_u64("NUMAIO_FS_CRASH_CUTS", 3).max(1),
    )
}

fn crash_cycles(v: Variant) {
    let (seed, cuts) = seed_and_cuts();
    eprintln!(
        "fs crash test ({v:?}): seed {seed} (NUMAIO_FS_CRASH_SEED={seed} repeats it), {cuts} cuts"
    );
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    v.images(dir.path());
    let started = Instant::now();
    let mut prev: Option<Run> = None;
    let mut totals: BTreeMap<String, usize> = BTreeMap::new();
    for cut in 0..cuts {
        let run_seed = rng.next_u64();
        let after = 1 + rng.below(MAX_ACK_LINES) as usize;
        // half the cuts wait a little after the line, so the writer may commit again or
        // be overwriting in place when the power goes
        let wait = Duration::from_millis(if rng.below(2) == 0 {
            0
        } else {
            rng.below(MAX_WAIT_MS)
        });
        let ctx = format!(
            "seed {seed}: {v:?} cut {cut} (writer seed {run_seed}, after {after} ACK lines + {} ms)",
            wait.as_millis()
        );
        let t = Instant::now();
        let out: CutOutcome = v
            .scenario(dir.path(), script(v, prev.as_ref(), Some(run_seed)))
            .run_with_cut(&PowerCut::after_lines("ACK ", after).then_wait(wait))
            .unwrap_or_else(|e| panic!("{ctx}: the lab run failed: {e}"));
        if let Some(p) = &prev {
            for (k, n) in check_run(&out.output, p, &format!("{ctx}: check of the previous run")) {
                *totals.entry(k).or_insert(0) += n;
            }
        }
        assert!(
            out.cut_at.is_some(),
            "{ctx}: the writer ended before the power cut:\n{}",
            out.report()
        );
        let acks = ack_lines(&out.output);
        let acked = acks.iter().map(|a| a.0).max().unwrap_or(0);
        assert!(acked > 0, "{ctx}: no ACK line seen:\n{}", out.report());
        let acked_files = acks
            .iter()
            .filter(|a| a.0 == acked)
            .map(|a| (a.1.clone(), (a.2, a.3.clone())))
            .collect();
        eprintln!(
            "{ctx}: cut {:.1} s after QEMU started ({:.1} s boot), last acknowledged fsync {acked}; boot took {:.1} s",
            out.cut_at.unwrap_or_default().as_secs_f64(),
            out.boot_time.as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
        prev = Some(Run {
            seed: run_seed,
            acked,
            acked_files,
        });
    }
    let last = prev.expect("at least one cut");
    let t = Instant::now();
    let out: Outcome = v
        .scenario(dir.path(), script(v, Some(&last), None))
        .must_run();
    let ctx = format!("seed {seed}: {v:?} final check");
    assert_eq!(out.exit_code, 0, "{ctx}:\n{}", out.report());
    for (k, n) in check_run(&out.output, &last, &ctx) {
        *totals.entry(k).or_insert(0) += n;
    }
    eprintln!(
        "seed {seed}: {v:?}: {cuts} power cuts, every acknowledged state recovered (file verdicts {totals:?}); final boot {:.1} s, all {:.1} s",
        t.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn fs_on_node_disks_recovers_acknowledged_files_after_power_cuts() {
    crash_cycles(Variant::NodeDisks);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn fs_on_pmem_zone_recovers_acknowledged_files_after_power_cuts() {
    crash_cycles(Variant::PmemZone);
}

/// The atomic-replace pattern across power cuts: round `i` writes `r.tmp`, fsyncs it,
/// renames it over `r`, makes `d<i>` and fsyncs the directory, then prints `REPLACED <i>`.
/// After each cut the volume must be at a round's directory fsync from the last
/// acknowledged round on (or at the next round's `r.tmp` fsync), never back at an earlier
/// `r` with `r.tmp` beside it.
fn replace_cycles(v: Variant) {
    let (seed, cuts) = seed_and_cuts();
    eprintln!(
        "fs replace test ({v:?}): seed {seed} (NUMAIO_FS_CRASH_SEED={seed} repeats it), {cuts} cuts"
    );
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    v.images(dir.path());
    let script = |check: Option<u64>, write: bool| {
        let mut s = v.volume().to_string();
        if let Some(acked) = check {
            s.push_str(&format!(
                "numaio fsck -y $DEVS; echo \"NUMAIO-FSCK-EXIT $?\"\n\
                 numaio-fs-writer check-replace $VOL --acked {acked}\necho \"CHECK-EXIT $?\"\n"
            ));
        }
        if write {
            s.push_str(
                "numaio-fs-writer mkfs $VOL || exit 12\n\
                 numaio-fs-writer replace $VOL\necho \"WRITER-EXIT $?\"\n",
            );
        }
        s
    };
    let check = |out: &str, acked: u64, ctx: &str| {
        assert!(
            matches!(number_after(out, "NUMAIO-FSCK-EXIT "), Some(0 | 1)),
            "{ctx}: numaio fsck -y failed:\n{out}"
        );
        assert!(
            out.contains("CHECK-EXIT 0"),
            "{ctx}: the check failed:\n{out}"
        );
        for when in ["before-mount", "after-unmount"] {
            assert!(
                out.contains(&format!("FSCK {when} clean")),
                "{ctx}: fsck {when} not clean:\n{out}"
            );
        }
        let at = number_after(out, "REPLACE-AT ")
            .unwrap_or_else(|| panic!("{ctx}: no REPLACE-AT line:\n{out}"));
        assert!(
            at >= acked,
            "{ctx}: at round {at}, acknowledged {acked}:\n{out}"
        );
        at
    };
    let mut prev: Option<u64> = None;
    for cut in 0..cuts {
        let after = 1 + rng.below(MAX_ACK_LINES) as usize;
        let wait = Duration::from_millis(if rng.below(2) == 0 {
            0
        } else {
            rng.below(MAX_WAIT_MS)
        });
        let ctx = format!(
            "seed {seed}: {v:?} replace cut {cut} (after {after} REPLACED lines + {} ms)",
            wait.as_millis()
        );
        let out: CutOutcome = v
            .scenario(dir.path(), script(prev, true))
            .run_with_cut(&PowerCut::after_lines("REPLACED ", after).then_wait(wait))
            .unwrap_or_else(|e| panic!("{ctx}: the lab run failed: {e}"));
        if let Some(acked) = prev {
            let at = check(
                &out.output,
                acked,
                &format!("{ctx}: check of the previous run"),
            );
            eprintln!("{ctx}: previous run acknowledged round {acked}, recovered at round {at}");
        }
        assert!(
            out.cut_at.is_some(),
            "{ctx}: the writer ended before the power cut:\n{}",
            out.report()
        );
        let complete = match out.output.rfind('\n') {
            Some(i) => &out.output[..i],
            None => "",
        };
        let acked = complete
            .lines()
            .filter_map(|l| {
                l.trim()
                    .strip_prefix("REPLACED ")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .max()
            .unwrap_or_else(|| panic!("{ctx}: no REPLACED line seen:\n{}", out.report()));
        prev = Some(acked);
    }
    let acked = prev.expect("at least one cut");
    let out: Outcome = v
        .scenario(dir.path(), script(Some(acked), false))
        .must_run();
    let ctx = format!("seed {seed}: {v:?} replace final check");
    assert_eq!(out.exit_code, 0, "{ctx}:\n{}", out.report());
    let at = check(&out.output, acked, &ctx);
    eprintln!("{ctx}: acknowledged round {acked}, recovered at round {at}");
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn fs_rename_over_with_directory_fsync_survives_power_cuts() {
    replace_cycles(Variant::NodeDisks);
}

/// SQLite in rollback-journal mode on `numaio mount` across power cuts: the guest mounts
/// the volume (`-o commit=3600`, so only fsyncs make anything durable), inserts rows one
/// transaction each with `synchronous=EXTRA` (SQLite fsyncs the directory after deleting
/// its journal) and prints `COMMITTED <i>` after each; after the cut the next boot runs
/// `numaio fsck -y`, mounts, and the database must pass `PRAGMA integrity_check` with rows
/// 1..n, n ≥ the last acknowledged row (a transaction the cut interrupted may leave a hot
/// journal, which SQLite rolls back when it opens the database).
fn sqlite_cycles(opts: &str) {
    let v = Variant::NodeDisks;
    let (seed, cuts) = seed_and_cuts();
    eprintln!(
        "fs sqlite test (mount -o commit=3600{opts}): seed {seed} (NUMAIO_FS_CRASH_SEED={seed} repeats it), {cuts} cuts"
    );
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    v.images(dir.path());
    let script = |check: bool, write: bool| {
        let mut s = v.volume().to_string();
        s.push_str("mkdir -p /v\n");
        if check {
            s.push_str(&format!(
                "numaio fsck -y $DEVS; echo \"NUMAIO-FSCK-EXIT $?\"\n\
                 numaio mount -o rw{opts} $DEVS /v >/dev/null || exit 13\n\
                 echo \"INTEGRITY $(sqlite3 /v/t.db 'PRAGMA integrity_check;')\"\n\
                 echo \"ROWS $(sqlite3 /v/t.db 'SELECT count(*), coalesce(min(id), 0), coalesce(max(id), 0) FROM t;' | tr '|' ' ')\"\n\
                 numaio umount /v; echo \"UMOUNT-EXIT $?\"\n",
            ));
        }
        if write {
            s.push_str(&format!(
                "numaio mkfs --force $DEVS >/dev/null || exit 12\n\
                 numaio mount -o commit=3600{opts} $DEVS /v >/dev/null || exit 13\n\
                 sqlite3 /v/t.db 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);' || exit 14\n\
                 i=1; while [ $i -le 100000 ]; do \
                 sqlite3 /v/t.db \"PRAGMA journal_mode=DELETE; PRAGMA synchronous=EXTRA; INSERT INTO t VALUES($i, 'row $i');\" >/dev/null || break; \
                 echo \"COMMITTED $i\"; i=$((i+1)); done\n\
                 echo \"WRITER-EXIT $?\"\n",
            ));
        }
        s
    };
    let scenario = |s: String| {
        v.scenario(dir.path(), s)
            .fuse()
            .host_binary("/usr/bin/sqlite3")
    };
    let check = |out: &str, acked: u64, ctx: &str| {
        assert!(
            matches!(number_after(out, "NUMAIO-FSCK-EXIT "), Some(0 | 1)),
            "{ctx}: numaio fsck -y failed:\n{out}"
        );
        assert!(
            out.contains("INTEGRITY ok"),
            "{ctx}: integrity_check:\n{out}"
        );
        assert!(
            out.contains("UMOUNT-EXIT 0"),
            "{ctx}: umount failed:\n{out}"
        );
        let rows: Vec<u64> = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("ROWS "))
            .unwrap_or_else(|| panic!("{ctx}: no ROWS line:\n{out}"))
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let (count, min, max) = match rows[..] {
            [c, lo, hi] => (c, lo, hi),
            _ => panic!("{ctx}: bad ROWS line:\n{out}"),
        };
        assert!(
            count == max && (count == 0 || min == 1),
            "{ctx}: rows {count} from {min} to {max}, not 1..n:\n{out}"
        );
        assert!(
            max >= acked,
            "{ctx}: {max} rows, {acked} acknowledged:\n{out}"
        );
        max
    };
    let mut prev: Option<u64> = None;
    for cut in 0..cuts {
        let after = 1 + rng.below(MAX_ACK_LINES) as usize;
        let wait = Duration::from_millis(if rng.below(2) == 0 {
            0
        } else {
            rng.below(MAX_WAIT_MS)
        });
        let ctx = format!(
            "seed {seed}: sqlite cut {cut} (after {after} COMMITTED lines + {} ms)",
            wait.as_millis()
        );
        let out: CutOutcome = scenario(script(prev.is_some(), true))
            .run_with_cut(&PowerCut::after_lines("COMMITTED ", after).then_wait(wait))
            .unwrap_or_else(|e| panic!("{ctx}: the lab run failed: {e}"));
        if let Some(acked) = prev {
            let n = check(
                &out.output,
                acked,
                &format!("{ctx}: check of the previous run"),
            );
            eprintln!("{ctx}: previous run acknowledged row {acked}, {n} rows recovered");
        }
        assert!(
            out.cut_at.is_some(),
            "{ctx}: the writer ended before the power cut:\n{}",
            out.report()
        );
        let complete = match out.output.rfind('\n') {
            Some(i) => &out.output[..i],
            None => "",
        };
        let acked = complete
            .lines()
            .filter_map(|l| {
                l.trim()
                    .strip_prefix("COMMITTED ")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .max()
            .unwrap_or_else(|| panic!("{ctx}: no COMMITTED line seen:\n{}", out.report()));
        prev = Some(acked);
    }
    let acked = prev.expect("at least one cut");
    let out: Outcome = scenario(script(true, false)).must_run();
    let ctx = format!("seed {seed}: sqlite final check");
    assert_eq!(out.exit_code, 0, "{ctx}:\n{}", out.report());
    let n = check(&out.output, acked, &ctx);
    eprintln!("{ctx}: acknowledged row {acked}, {n} rows recovered");
}

#[test]
#[ignore = "lab: needs QEMU, the lab kernel and sqlite3 on the host; run by scripts/test.sh"]
fn fs_sqlite_rollback_journal_through_the_mount_survives_power_cuts() {
    sqlite_cycles("");
}
#[test]
#[ignore = "lab: needs QEMU, the lab kernel and sqlite3 on the host; run by scripts/test.sh"]
fn fs_sqlite_through_a_writeback_cache_mount_survives_power_cuts() {
    sqlite_cycles(",writeback_cache");
}

/// Buffered writes through a mount with the kernel's writeback cache (`-o
/// commit=3600,writeback_cache`) across power cuts: the guest runs the seeded workload on
/// files in the mount (`numaio-fs-writer write-dir`: creates, appends and partial-page
/// overwrites with pwrite, `ACK <n> <file>` after each fsync of a file). After the cut the
/// next boot runs `numaio fsck -y`, mounts, and `numaio-fs-writer check-dir` replays the
/// workload: every file holds, byte for byte, what its last acknowledged fsync made
/// durable or what a later step wrote there, at least that fsync's length and at most
/// what was ever written (a page the kernel had not written back may be old or new).
fn writeback_cycles() {
    let v = Variant::NodeDisks;
    let (seed, cuts) = seed_and_cuts();
    eprintln!(
        "fs writeback-cache test: seed {seed} (NUMAIO_FS_CRASH_SEED={seed} repeats it), {cuts} cuts"
    );
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    v.images(dir.path());
    let script = |check: Option<(u64, u64)>, write: Option<u64>| {
        let mut s = v.volume().to_string();
        s.push_str("mkdir -p /v\n");
        if let Some((run_seed, acked)) = check {
            s.push_str(&format!(
                "numaio fsck -y $DEVS; echo \"NUMAIO-FSCK-EXIT $?\"\n\
                 numaio mount -o writeback_cache $DEVS /v >/dev/null || exit 13\n\
                 numaio-fs-writer check-dir /v --seed {run_seed} --files {FILES} --acked {acked}\n\
                 echo \"CHECK-EXIT $?\"\n\
                 numaio umount /v; echo \"UMOUNT-EXIT $?\"\n"
            ));
        }
        if let Some(run_seed) = write {
            s.push_str(&format!(
                "numaio mkfs --force $DEVS >/dev/null || exit 12\n\
                 numaio mount -o commit=3600,writeback_cache $DEVS /v >/dev/null || exit 13\n\
                 numaio-fs-writer write-dir /v --seed {run_seed} --files {FILES}\n\
                 echo \"WRITER-EXIT $?\"\n"
            ));
        }
        s
    };
    let check = |out: &str, ctx: &str| {
        assert!(
            matches!(number_after(out, "NUMAIO-FSCK-EXIT "), Some(0 | 1)),
            "{ctx}: numaio fsck -y failed:\n{out}"
        );
        assert!(
            out.contains("CHECK-EXIT 0") && !out.contains(" LOST "),
            "{ctx}: an fsync'd byte was lost:\n{out}"
        );
        assert!(
            out.contains("UMOUNT-EXIT 0"),
            "{ctx}: umount failed:\n{out}"
        );
        out.lines().filter(|l| l.ends_with(" durable")).count()
    };
    let mut prev: Option<(u64, u64)> = None;
    for cut in 0..cuts {
        let run_seed = rng.next_u64();
        let after = 1 + rng.below(MAX_ACK_LINES) as usize;
        let wait = Duration::from_millis(if rng.below(2) == 0 {
            0
        } else {
            rng.below(MAX_WAIT_MS)
        });
        let ctx = format!(
            "seed {seed}: writeback cut {cut} (writer seed {run_seed}, after {after} ACK lines + {} ms)",
            wait.as_millis()
        );
        let out: CutOutcome = v
            .scenario(dir.path(), script(prev, Some(run_seed)))
            .fuse()
            .run_with_cut(&PowerCut::after_lines("ACK ", after).then_wait(wait))
            .unwrap_or_else(|e| panic!("{ctx}: the lab run failed: {e}"));
        if let Some((_, acked)) = prev {
            let n = check(&out.output, &format!("{ctx}: check of the previous run"));
            eprintln!("{ctx}: previous run acknowledged fsync {acked}, {n} fsync'd files intact");
        }
        assert!(
            out.cut_at.is_some(),
            "{ctx}: the writer ended before the power cut:\n{}",
            out.report()
        );
        let acked = last_ack(&out.output);
        assert!(acked > 0, "{ctx}: no ACK line seen:\n{}", out.report());
        prev = Some((run_seed, acked));
    }
    let last = prev.expect("at least one cut");
    let out: Outcome = v
        .scenario(dir.path(), script(Some(last), None))
        .fuse()
        .must_run();
    let ctx = format!("seed {seed}: writeback final check");
    assert_eq!(out.exit_code, 0, "{ctx}:\n{}", out.report());
    let n = check(&out.output, &ctx);
    eprintln!(
        "{ctx}: acknowledged fsync {}, {n} fsync'd files intact after {cuts} power cuts",
        last.1
    );
}

/// The last complete `ACK <n> ...` line's `n` (0: none); a last line without its newline
/// may be cut short and is left out.
fn last_ack(output: &str) -> u64 {
    let complete = match output.rfind('\n') {
        Some(i) => &output[..i],
        None => "",
    };
    complete
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("ACK ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn fs_buffered_writes_through_a_writeback_cache_mount_survive_power_cuts() {
    writeback_cycles();
}
