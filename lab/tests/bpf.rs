//! The eBPF collector through `numaio ps`, on both guest kernels (Debian 6.1 and 7.3), 2
//! nodes: files cached on node 0 and read (and written) by processes pinned to node 1 are
//! counted ≥ 99 % remote from data node 0 (of each process's own `rchar`/`wchar` delta over
//! the interval); after `numaio move --to 1` ≥ 99 % local on node 1. On ext4 (the guest disk)
//! and tmpfs. Through a numaio mount, `--source ebpf` and `--source mount` count the same
//! reads and writes. With each worker on its own CPU the kernel skipped no run of the
//! collector's programs (read from the kernel, 0); with four workers on one CPU, a worker
//! counted short is reported `numa_io_exact: false` with the skipped runs. Also the kprobe
//! fallback for reads and writes (6.1), exact page-cache insert and removal counts and exact
//! fault counts for one file, and no program left after SIGKILL of a collector.
//!
//! Needs the release binaries (`cargo build --release --bins`) and both lab kernels; see
//! lab/README.md.

use numaio_lab::guest_script::BPF_PRELUDE;
use numaio_lab::{DiskFile, DiskSpec, GuestKernel, LabTopology, Outcome, Scenario};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const MIB: u64 = 1 << 20;

const SCRIPT: &str = r#"
# The exact rounds give each measured worker a CPU of node 1 to itself and run `numaio ps`
# on CPU 0: workers sharing a CPU lose whole reads and writes from the counts on a
# preemptible kernel (7.3), where the kernel's per-CPU recursion guard skips a BPF program
# for a task while another task, preempted inside it, holds it (docs/bpf.md); the "shared"
# round checks that ps then says so.
mkdir -p /t && mount -t tmpfs t /t
numactl -m 0 cat /mnt/f.bin /mnt/w.bin > /dev/null
numactl -m 0 cp /mnt/f.bin /mnt/w.bin /t/
# Waits until process $1 has stopped itself (the workers' --stopped).
stopped() { until grep -q '^State:.T' /proc/$1/status || [ ! -e /proc/$1 ]; do sleep 0.1; done; }
# Waits (at most 60 s) for a background collector to say it is attached.
ready() { i=0; while [ ! -e /tmp/ready ] && [ $i -lt 300 ]; do sleep 0.2; i=$((i+1)); done; }
# Process $1's rchar and wchar, as one JSON line.
chars() { awk -v p=$1 '/^rchar/{r=$2} /^wchar/{w=$2} END{printf "{\"pid\": %s, \"rchar\": %s, \"wchar\": %s}\n", p, r, w}' /proc/$1/io; }
# measure NAME "SOURCE:SECS..." -- PIDS: one `numaio ps --watch SECS --count 2 --json PIDS`
# per source, started one after the other; the workers (stopped) run only once every ps has
# printed its first round, so after both of its first samples (/proc's and the collector's),
# and their fixed I/O is done long before the second round ends: each second round covers
# exactly the workers' I/O, as the rchar and wchar deltas around it do. A source started
# earlier needs a longer period, for the later ones' start. The shell waits on pipes, not by
# polling files: code that runs while the collector patches the kernel is what crashes TCG
# guests (docs/bpf.md), and a ps started while another attaches would run such code.
measure() {
  name=$1; srcs=$2; shift 3
  for p in "$@"; do stopped $p; done
  echo "@@begin $name-before"; for p in "$@"; do chars $p; done
  fd=3; pss=""
  for sp in $srcs; do
    s=${sp%:*}; rm -f /tmp/ps-$s; mkfifo /tmp/ps-$s
    taskset 1 numaio ps --source $s --watch ${sp#*:} --count 2 --json "$@" > /tmp/ps-$s & pss="$pss $!"
    eval "exec $fd< /tmp/ps-$s"; eval "read -r line <&$fd"; fd=$((fd+1))
  done
  kill -CONT "$@"
  fd=3
  for sp in $srcs; do
    s=${sp%:*}; eval "read -r line <&$fd"; eval "exec $fd<&-"; fd=$((fd+1))
    echo "@@begin $name-$s"; echo "$line"
  done
  wait $pss
  echo "@@begin $name-after"; for p in "$@"; do chars $p; done
  kill "$@"; wait "$@" 2>/dev/null
}
# Workers on ext4 and tmpfs, each pinned to the next of the CPUs given (of node 1): a reader
# (4 passes over 4 MiB) and a writer (4 passes over the first MiB, in place).
workers() {
  for d in /mnt /t; do
    numactl -C $1 numaio-probe reader --file $d/f.bin --block-size 64K --passes 4 --stopped > /dev/null & W="$W $!"
    numactl -C $2 numaio-probe bpf-io --rewrite $d/w.bin --bytes 1048576 --passes 4 --stopped & W="$W $!"
    shift 2
  done
}
echo "@@begin where0"; numaio where --json /mnt/f.bin
W=""; workers 1 2 3 4; echo "@@begin remote-pids"; echo $W
measure remote ebpf:3 -- $W
# The kprobe fallback only on 6.1: on 7.3 under TCG, patching a function's entry for a
# kprobe crashed the guest twice (a CPU ran into the half-written instruction). The reader
# runs only while the collector is attached, so both counts cover the same reads.
case "$(uname -r)" in 6.1.*)
  numactl -N 1 numaio-probe reader --file /mnt/f.bin --block-size 64K --stopped > /dev/null & R=$!
  stopped $R
  echo "@@begin disk-read-remote-kprobe"; numaio-probe bpf-io --kprobe --secs 3 --pid $R --run-while-attached
  kill $R; kill -CONT $R; wait $R
  numactl -N 1 numaio-probe bpf-io --rewrite /mnt/w.bin --bytes 1048576 --secs 100000 --stopped & R=$!
  stopped $R
  echo "@@begin disk-write-remote-kprobe"; numaio-probe bpf-io --kprobe --secs 3 --pid $R --run-while-attached
  kill $R; kill -CONT $R; wait $R ;;
esac
# Moved while no one reads or writes: a page in use at that moment could stay behind.
sync
for f in /mnt/f.bin /mnt/w.bin /t/f.bin /t/w.bin; do numaio move --to 1 $f > /dev/null || echo "move of $f failed"; done
W=""; workers 1 2 3 4; echo "@@begin local-pids"; echo $W
measure local ebpf:3 -- $W
# The same four workers on one CPU: a task preempted inside a program holds that program on
# its CPU, and the kernel skips (and counts) runs of it by the others meanwhile.
W=""; workers 1 1 1 1; echo "@@begin shared-pids"; echo $W
measure shared ebpf:20 -- $W
# Through a numaio mount (RAM zones, one per node): files written from node 0 are on node
# 0's zone. The mount's page cache is dropped, so every byte read reaches the mount (which
# does not see reads the kernel answers from its cache). Reader A's memory policy puts the
# cached copy on node 0 too, reader B's on its own node 1; C rewrites in place.
mkdir -p /v
numaio mount --zone 0:32M --zone 1:32M /v > /dev/null || exit 12
for f in a b; do numactl -N 0 -m 0 cp /mnt/f.bin /v/$f.bin; done
numactl -N 0 -m 0 cp /mnt/w.bin /v/w.bin
sync; echo 3 > /proc/sys/vm/drop_caches
numactl -C 1 -m 0 numaio-probe reader --file /v/a.bin --block-size 64K --passes 1 --stopped > /dev/null & M="$!"
numactl -C 2 numaio-probe reader --file /v/b.bin --block-size 64K --passes 1 --stopped > /dev/null & M="$M $!"
numactl -C 3 -m 0 numaio-probe bpf-io --rewrite /v/w.bin --bytes 1048576 --passes 4 --stopped & M="$M $!"
echo "@@begin mount-pids"; echo $M
measure mount "ebpf:9 mount:3" -- $M
numaio umount /v || exit 14
# Page-cache inserts and removals of a file read once on node 1, then dropped.
echo "@@begin cache-ino"; stat -c "%d %i" /mnt/g.bin
rm -f /tmp/ready
numaio-probe bpf-io --all --secs 8 --ready /tmp/ready > /tmp/cache.json &
P=$!
ready
numactl -m 1 cat /mnt/g.bin > /dev/null
sync; echo 1 > /proc/sys/vm/drop_caches
wait $P
echo "@@begin cache"; cat /tmp/cache.json
# Faults: one per page of a 64-page file cached on node 0, from a process on node 1.
numactl -m 0 cat /mnt/h.bin > /dev/null
echo "@@begin fault-ino"; stat -c "%d %i" /mnt/h.bin
rm -f /tmp/ready
numaio-probe bpf-io --all --secs 6 --ready /tmp/ready > /tmp/faults.json &
P=$!
ready
echo "@@begin fault-run"; numactl -N 1 numaio-probe bpf-io --fault /mnt/h.bin
wait $P
echo "@@begin faults"; cat /tmp/faults.json
# SIGKILL of a collector leaves none of its programs loaded.
rm -f /tmp/ready
numaio-probe bpf-io --all --secs 600 --ready /tmp/ready > /dev/null &
P=$!
ready
echo "@@begin progs-during"; numaio-probe bpf-io --count-programs
kill -9 $P; wait $P
echo "@@begin progs-after"; no_nio_programs
echo "@@begin end"
"#;

fn run(k: GuestKernel) -> Outcome {
    let disk = DiskSpec::new()
        .file(DiskFile::pattern("f.bin", 4 * MIB))
        .file(DiskFile::pattern("w.bin", MIB))
        .file(DiskFile::pattern("g.bin", 2 * MIB))
        .file(DiskFile::pattern("h.bin", 64 * 4096));
    let script = format!("{BPF_PRELUDE}{SCRIPT}");
    let out = Scenario::new(LabTopology::from_nodes(&[(1, 512), (4, 512)]), script)
        .kernel(k)
        .disk(disk)
        .fuse()
        .timeout(Duration::from_secs(420))
        .must_run();
    assert_eq!(out.exit_code, 0, "{}", out.report());
    out
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Bytes (read or write) counted with the given data and CPU nodes.
fn counted(j: &Value, field: &str, data: u64, cpu: u64) -> u64 {
    j["io"]
        .as_array()
        .expect("io records")
        .iter()
        .filter(|r| u(&r["data_node"]) == data && u(&r["cpu_node"]) == cpu)
        .map(|r| u(&r[field]))
        .sum()
}

fn total(j: &Value, field: &str) -> u64 {
    j["io"]
        .as_array()
        .expect("io records")
        .iter()
        .map(|r| u(&r[field]))
        .sum()
}

/// ≥ 99 % of the process's own byte count is counted on (data, cpu), and the collector's
/// total is within 1 % of it.
fn check(out: &Outcome, k: GuestKernel, section: &str, data: u64, cpu: u64) {
    let j = out.section_json(section);
    if section.ends_with("-kprobe") {
        assert_eq!(j["attached"]["mode"], "kprobe", "{k} {section}: {j}");
    }
    let (field, chars) = if section.contains("-read-") {
        ("read_bytes", u(&j["rchar"]))
    } else {
        ("write_bytes", u(&j["wchar"]))
    };
    let on = counted(&j, field, data, cpu);
    let all = total(&j, field);
    eprintln!(
        "{k} {section}: {chars} bytes by the process, {on} counted on data node {data} from \
         cpu node {cpu}, {all} in all ({})",
        j["attached"]["mode"]
    );
    assert!(chars > 0, "{k} {section}: the process did no I/O\n{j}");
    assert!(
        on as f64 >= 0.99 * chars as f64,
        "{k} {section}: {on} of {chars} bytes counted on data node {data} from cpu node {cpu}\n{j}"
    );
    assert!(
        (all as f64) <= 1.01 * chars as f64,
        "{k} {section}: {all} bytes counted, the process did {chars}\n{j}"
    );
}

fn file_records<'a>(j: &'a Value, list: &str, (dev, ino): (u64, u64)) -> Vec<&'a Value> {
    j[list]
        .as_array()
        .expect("records")
        .iter()
        .filter(|r| u(&r["dev"]) == dev && u(&r["ino"]) == ino)
        .collect()
}

/// `(st_dev, st_ino)` printed by `stat -c "%d %i"`.
fn file_id(out: &Outcome, section: &str) -> (u64, u64) {
    let text = out.section(section);
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match v[..] {
        [dev, ino] => (dev, ino),
        _ => panic!("device and inode in {section}\n{}", out.report()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

impl Dir {
    /// The field of `/proc/PID/io` (and of `numaio ps`'s process) that counts it.
    fn chars(self) -> &'static str {
        match self {
            Dir::Read => "rchar",
            Dir::Write => "wchar",
        }
    }

    fn bytes_field(self) -> &'static str {
        match self {
            Dir::Read => "read_bytes",
            Dir::Write => "write_bytes",
        }
    }
}

/// The pids a section lists on one line.
fn pids(out: &Outcome, section: &str) -> Vec<u64> {
    out.section(section)
        .split_whitespace()
        .map(|w| {
            w.parse()
                .unwrap_or_else(|_| panic!("pid {w:?} in {section}\n{}", out.report()))
        })
        .collect()
}

/// `pid → {"rchar", "wchar"}` from a section of `chars` lines.
fn chars_of(out: &Outcome, section: &str) -> BTreeMap<u64, Value> {
    out.section(section)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .map(|j| (u(&j["pid"]), j))
        .collect()
}

/// One `measure` in the guest: the workers' own byte counts around it and the second round
/// of each `numaio ps` source.
struct Round<'a> {
    k: GuestKernel,
    name: &'a str,
    before: BTreeMap<u64, Value>,
    after: BTreeMap<u64, Value>,
    ps: BTreeMap<&'a str, Value>,
    report: String,
}

/// What one source counted for one process in the round.
struct Counted {
    /// `numa<N>_{read,write}_bytes` of the direction, by node.
    by_node: BTreeMap<u64, u64>,
    local: u64,
    remote: u64,
    /// `numa_io_exact`: counted, and nothing missed during the interval.
    exact: bool,
    json: Value,
}

impl<'a> Round<'a> {
    fn new(out: &Outcome, k: GuestKernel, name: &'a str, sources: &[&'a str]) -> Round<'a> {
        Round {
            k,
            name,
            before: chars_of(out, &format!("{name}-before")),
            after: chars_of(out, &format!("{name}-after")),
            ps: sources
                .iter()
                .map(|&s| (s, out.section_json(&format!("{name}-{s}"))))
                .collect(),
            report: out.report(),
        }
    }

    /// The worker's own count of the round (its rchar or wchar delta), checked to be its
    /// whole fixed amount: then no byte of it fell outside the interval.
    fn worker_bytes(&self, pid: u64, dir: Dir, expected: u64, what: &str) -> u64 {
        let f = dir.chars();
        let (Some(b), Some(a)) = (self.before.get(&pid), self.after.get(&pid)) else {
            panic!(
                "{} {}: no {f} of {what} ({pid})\n{}",
                self.k, self.name, self.report
            );
        };
        let done = u(&a[f]) - u(&b[f]);
        assert_eq!(
            done, expected,
            "{} {}: {what} ({pid}) did {done} bytes ({f} delta), not its {expected}: it did not \
             finish inside the interval, or did other I/O\n{}",
            self.k, self.name, self.report
        );
        done
    }

    /// What the collector missed in the round (`numa_io_missed` of `numaio ps --source
    /// ebpf`): skipped program runs in all, and I/O events dropped for a full map. Checks
    /// that the kernel counts skipped runs (both lab kernels are ≥ 5.12).
    fn missed(&self) -> (u64, u64) {
        let m = &self.ps["ebpf"]["numa_io_missed"];
        assert_eq!(
            m["counted_runs"], true,
            "{} {}: skipped runs not read: {m}",
            self.k, self.name
        );
        let runs = m["program_runs"]
            .as_object()
            .unwrap_or_else(|| panic!("{} {}: no program_runs: {m}", self.k, self.name))
            .values()
            .map(u)
            .sum();
        (runs, u(&m["io_events"]))
    }

    /// What `source` counted for `pid` in the round, counted (exact) and complete; see
    /// [`Round::counted_any`].
    fn counted(&self, pid: u64, source: &str, dir: Dir, what: &str, done: u64) -> Counted {
        let c = self.counted_any(pid, source, dir, what, done);
        assert!(
            c.exact,
            "{} {} {what} ({pid}), --source {source}: not exact: {}",
            self.k, self.name, c.json
        );
        c
    }

    /// What `source` counted for `pid` in the round; checks that it was counted (not
    /// estimated) and that `numaio ps`'s own /proc delta of the round is the worker's.
    fn counted_any(&self, pid: u64, source: &str, dir: Dir, what: &str, done: u64) -> Counted {
        let ps = &self.ps[source];
        let ctx = format!("{} {} {what} ({pid}), --source {source}", self.k, self.name);
        let p = ps["processes"]
            .as_array()
            .and_then(|a| a.iter().find(|p| u(&p["pid"]) == pid))
            .unwrap_or_else(|| panic!("{ctx}: not in numaio ps's output\n{ps}"))
            .clone();
        assert_eq!(p["numa_io_source"], source, "{ctx}: {p}");
        // ps's interval is the worker's: its own rchar/wchar delta is the whole I/O.
        assert_eq!(u(&p[dir.bytes_field()]), done, "{ctx}: {p}");
        let suffix = format!("_{}", dir.bytes_field());
        let by_node: BTreeMap<u64, u64> = p["numa_io"]
            .as_object()
            .unwrap_or_else(|| panic!("{ctx}: no numa_io: {p}"))
            .iter()
            .filter_map(|(key, v)| {
                let n = key.strip_prefix("numa")?.strip_suffix(&suffix)?;
                Some((n.parse().ok()?, u(v)))
            })
            .collect();
        let local = u(&p["local_bytes"][dir.bytes_field()]);
        let remote = u(&p["remote_bytes"][dir.bytes_field()]);
        eprintln!(
            "{ctx}: {done} bytes by the process; by data node {by_node:?}, local {local}, \
             remote {remote}"
        );
        Counted {
            by_node,
            local,
            remote,
            exact: p["numa_io_exact"] == true,
            json: p,
        }
    }
}

impl Counted {
    /// ≥ 99 % of the process's `done` bytes counted on data node `node`, and no more than
    /// 101 % in all.
    fn assert_on(&self, node: u64, done: u64, ctx: &str) {
        let on = self.by_node.get(&node).copied().unwrap_or(0);
        let all: u64 = self.by_node.values().sum();
        assert!(
            on as f64 >= 0.99 * done as f64,
            "{ctx}: {on} of {done} bytes counted on data node {node}\n{}",
            self.json
        );
        assert!(
            all as f64 <= 1.01 * done as f64,
            "{ctx}: {all} bytes counted, the process did {done}\n{}",
            self.json
        );
    }

    /// ≥ 99 % of `done` counted local (data on the CPU's node) or remote.
    fn assert_from_cpu_node(&self, local: bool, done: u64, ctx: &str) {
        let (got, name) = if local {
            (self.local, "local")
        } else {
            (self.remote, "remote")
        };
        assert!(
            got as f64 >= 0.99 * done as f64,
            "{ctx}: {got} of {done} bytes counted {name}\n{}",
            self.json
        );
    }
}

/// `a` and `b` within 1 % of `of`.
fn agree(a: u64, b: u64, of: u64) -> bool {
    a.abs_diff(b) as f64 <= 0.01 * of as f64
}

/// Through the numaio mount, over the same interval: the collector (`--source ebpf`) and
/// the mount's counters (`--source mount`) both count every byte. Where the kernel's cached
/// copy lies on the data's node (reader A), they agree node by node; reader B's copy is on
/// its own node: the collector counts where the copy was (node 1, local), the mount where
/// the volume holds the data (node 0, remote), each for every byte.
///
/// The server's threads fault the RAM zones' pages themselves, in the collector's shmem
/// program and on the readers' CPUs; where two meet in it on one CPU, the kernel's
/// recursion guard skips a run, and the collector then reports its counts as not exact (as
/// in [`shared_cpu`]). So exactness is asserted where nothing was skipped; the counts are
/// checked to 1 % either way.
fn mount_agrees(out: &Outcome, k: GuestKernel) {
    let round = Round::new(out, k, "mount", &["ebpf", "mount"]);
    let [a, b, c] = pids(out, "mount-pids")[..] else {
        panic!("three pids in mount-pids\n{}", out.report())
    };
    let (skipped, dropped) = round.missed();
    assert_eq!(dropped, 0, "{k} mount: I/O events dropped for a full map");
    if skipped > 0 {
        eprintln!(
            "{k} mount: {skipped} program run(s) skipped by the kernel's recursion guard: \
             collector counts checked to 1 %, not for exactness"
        );
    }
    let ebpf = |pid, dir, what: &str, done| {
        if skipped == 0 {
            round.counted(pid, "ebpf", dir, what, done)
        } else {
            round.counted_any(pid, "ebpf", dir, what, done)
        }
    };
    let done = round.worker_bytes(a, Dir::Read, 4 * MIB, "mount reader A");
    let e = ebpf(a, Dir::Read, "mount reader A", done);
    let m = round.counted(a, "mount", Dir::Read, "mount reader A", done);
    for (src, x) in [("ebpf", &e), ("mount", &m)] {
        let ctx = format!("{k} mount reader A, --source {src}");
        x.assert_on(0, done, &ctx);
        x.assert_from_cpu_node(false, done, &ctx);
    }
    for n in e.by_node.keys().chain(m.by_node.keys()) {
        let (x, y) = (e.by_node.get(n), m.by_node.get(n));
        let (x, y) = (x.copied().unwrap_or(0), y.copied().unwrap_or(0));
        assert!(
            agree(x, y, done),
            "{k} mount reader A: node {n}: ebpf {x}, mount {y}\n{}\n{}",
            e.json,
            m.json
        );
    }
    assert!(
        agree(e.remote, m.remote, done),
        "{k} mount reader A remote: {} vs {}",
        e.remote,
        m.remote
    );

    let done = round.worker_bytes(b, Dir::Read, 4 * MIB, "mount reader B");
    let e = ebpf(b, Dir::Read, "mount reader B", done);
    let m = round.counted(b, "mount", Dir::Read, "mount reader B", done);
    e.assert_on(1, done, &format!("{k} mount reader B, --source ebpf"));
    e.assert_from_cpu_node(true, done, &format!("{k} mount reader B, --source ebpf"));
    m.assert_on(0, done, &format!("{k} mount reader B, --source mount"));
    m.assert_from_cpu_node(false, done, &format!("{k} mount reader B, --source mount"));

    // Writes through the mount (no writeback cache: FUSE's own copy loop, counted at
    // fuse_file_write_iter): C's cached copy is on node 0 (`-m 0`), where the volume holds
    // the data, so both count every byte on node 0, remote, node by node alike.
    let done = round.worker_bytes(c, Dir::Write, 4 * MIB, "mount writer C");
    let e = ebpf(c, Dir::Write, "mount writer C", done);
    let m = round.counted(c, "mount", Dir::Write, "mount writer C", done);
    for (src, x) in [("ebpf", &e), ("mount", &m)] {
        let ctx = format!("{k} mount writer C, --source {src}");
        x.assert_on(0, done, &ctx);
        x.assert_from_cpu_node(false, done, &ctx);
    }
    for n in e.by_node.keys().chain(m.by_node.keys()) {
        let x = e.by_node.get(n).copied().unwrap_or(0);
        let y = m.by_node.get(n).copied().unwrap_or(0);
        assert!(
            agree(x, y, done),
            "{k} mount writer C: node {n}: ebpf {x}, mount {y}\n{}\n{}",
            e.json,
            m.json
        );
    }
}

/// Four workers on one CPU: whatever the collector missed, `numaio ps` must say so. A
/// worker counted short must be reported not exact, with skipped runs counted (the kernel's
/// per-CPU recursion guard: docs/bpf.md); one reported exact must be counted in full.
/// Returns (bytes done, bytes counted, runs skipped).
fn shared_cpu(out: &Outcome, k: GuestKernel, work: &[(&str, Dir, u64)]) -> (u64, u64, u64) {
    let round = Round::new(out, k, "shared", &["ebpf"]);
    let (runs, dropped) = round.missed();
    assert_eq!(dropped, 0, "{k} shared: I/O events dropped for a full map");
    let (mut done_all, mut counted_all) = (0, 0);
    for (pid, &(what, dir, bytes)) in pids(out, "shared-pids").into_iter().zip(work) {
        let done = round.worker_bytes(pid, dir, bytes, what);
        let c = round.counted_any(pid, "ebpf", dir, what, done);
        let ctx = format!("{k} shared {what}");
        let all: u64 = c.by_node.values().sum();
        done_all += done;
        counted_all += all;
        assert!(
            all as f64 <= 1.01 * done as f64,
            "{ctx}: {all} bytes counted, the process did {done}\n{}",
            c.json
        );
        if c.exact {
            c.assert_on(1, done, &ctx);
            c.assert_from_cpu_node(true, done, &ctx);
        } else {
            let why = c.json["numa_io_incomplete"].as_str().unwrap_or("");
            assert!(
                why.contains("skipped"),
                "{ctx}: not exact, but why? {}",
                c.json
            );
        }
        if (all as f64) < 0.99 * done as f64 {
            assert!(
                !c.exact && runs > 0,
                "{ctx}: {all} of {done} bytes counted, yet {runs} skipped runs and exact {}\n{}",
                c.exact,
                c.json
            );
        }
    }
    (done_all, counted_all, runs)
}

fn lab(k: GuestKernel) {
    let out = run(k);
    eprintln!("{k}: f.bin before: {}", out.section("where0").trim());
    // ext4 reader, ext4 writer, tmpfs reader, tmpfs writer: 4 × 4 MiB read, 4 × 1 MiB written.
    let work = [
        ("disk read", Dir::Read, 16 * MIB),
        ("disk write", Dir::Write, 4 * MIB),
        ("tmpfs read", Dir::Read, 16 * MIB),
        ("tmpfs write", Dir::Write, 4 * MIB),
    ];
    for (phase, data) in [("remote", 0), ("local", 1)] {
        let round = Round::new(&out, k, phase, &["ebpf"]);
        // Each worker on a CPU of its own: the kernel skipped no run of ours.
        assert_eq!(
            round.missed(),
            (0, 0),
            "{k} {phase}: the collector missed events"
        );
        for (pid, (what, dir, bytes)) in pids(&out, &format!("{phase}-pids")).into_iter().zip(work)
        {
            let done = round.worker_bytes(pid, dir, bytes, what);
            let c = round.counted(pid, "ebpf", dir, what, done);
            c.assert_on(data, done, &format!("{k} {phase} {what}"));
            c.assert_from_cpu_node(data == 1, done, &format!("{k} {phase} {what}"));
        }
    }
    let (done, counted, runs) = shared_cpu(&out, k, &work);
    eprintln!(
        "{k} shared CPU: {counted} of {done} bytes counted ({:.2} %), {runs} program runs \
         skipped by the kernel",
        100.0 * counted as f64 / done as f64
    );
    if k == GuestKernel::Debian61 {
        check(&out, k, "disk-read-remote-kprobe", 0, 1);
        check(&out, k, "disk-write-remote-kprobe", 0, 1);
    }
    mount_agrees(&out, k);
    // 2 MiB read on node 1 = 512 pages inserted there, and the same removed by drop_caches.
    let g = file_id(&out, "cache-ino");
    let cache = out.section_json("cache");
    let recs = file_records(&cache, "cache", g);
    let on1: Vec<_> = recs.iter().filter(|r| u(&r["node"]) == 1).collect();
    let inserted: u64 = on1.iter().map(|r| u(&r["inserted_pages"])).sum();
    let removed: u64 = on1.iter().map(|r| u(&r["removed_pages"])).sum();
    eprintln!("{k} cache: {recs:?}");
    assert_eq!(
        recs.len(),
        on1.len(),
        "{k}: pages of g.bin off node 1: {recs:?}"
    );
    assert_eq!((inserted, removed), (512, 512), "{k}: {cache}");
    // 64 faults, data on node 0, from a CPU of node 1.
    let h = file_id(&out, "fault-ino");
    let faults = out.section_json("faults");
    let recs = file_records(&faults, "faults", h);
    eprintln!("{k} faults: {recs:?}");
    let n: u64 = recs
        .iter()
        .filter(|r| u(&r["data_node"]) == 0 && u(&r["cpu_node"]) == 1)
        .map(|r| u(&r["faults"]))
        .sum();
    let all: u64 = recs.iter().map(|r| u(&r["faults"])).sum();
    assert_eq!((n, all), (64, 64), "{k}: {faults}");
    let during = u(&out.section_json("progs-during")["programs"]);
    let after = u(&out.section_json("progs-after")["programs"]);
    assert!(
        during > 0,
        "{k}: no program of ours loaded while a collector ran"
    );
    assert_eq!(
        after, 0,
        "{k}: programs left loaded after SIGKILL of the collector"
    );
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn collector_counts_exactly_on_debian_6_1() {
    lab(GuestKernel::Debian61);
}

#[test]
#[ignore = "lab: needs QEMU and the lab kernel; run by scripts/test.sh"]
fn collector_counts_exactly_on_debian_7_3() {
    lab(GuestKernel::Debian73);
}
