//! The file-system concurrency benchmark: how much longer N threads take than one when each
//! works on its own file, on stock ext4 and on numaio-fs (`numaio mkfs` + `numaio mount`) in
//! the same 2-node guest, over the same NVMe disks put behind `dm-delay`.
//!
//! Timing inside a TCG guest means nothing by itself; with every disk I/O delayed (20 ms by
//! default) the delay dominates, and the ratio time(N threads) / time(1 thread) shows
//! whether the file system lets independent requests wait for their disk at the same time:
//! about 1.0 when it does, about N when it serves one request at a time.
//!
//! [`Config::script`] builds the guest scenario (it runs `numaio-probe fs-scaling` for each
//! workload, see `probe/fs_scaling.rs`), [`parse_results`] reads its `RESULT` lines back and
//! [`table`] prints the ratios. The entry point is `lab/examples/fs_scaling.rs`.

use crate::guest_script::node_disks_prelude;
use crate::{LabTopology, Scenario};
use std::collections::BTreeMap;
use std::time::Duration;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Threads of the parallel runs (the baseline run has one).
    pub threads: usize,
    /// Delay of every I/O of each node's disk, in ms.
    pub delay_ms: u32,
    /// O_DIRECT reads of `read_block` bytes per thread.
    pub read_ops: usize,
    pub read_block: usize,
    /// Appends of 4 KiB, each followed by fsync, per thread.
    pub append_ops: usize,
    /// Files created (each fsync'd) per thread.
    pub create_ops: usize,
    /// Repetitions of the whole set (medians are reported).
    pub rounds: usize,
    /// Size of each node's disk.
    pub disk_mib: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            threads: 8,
            delay_ms: 20,
            read_ops: 64,
            read_block: 128 << 10,
            append_ops: 32,
            create_ops: 32,
            rounds: 1,
            disk_mib: 256,
        }
    }
}

/// The workloads, in table order: the probe's name and a description.
pub const WORKLOADS: [(&str, &str); 5] = [
    (
        "read",
        "pread of each block of the thread's own file once, random order, O_DIRECT, cold \
         (numaio remounted, caches dropped): one disk I/O per read",
    ),
    (
        "read-seq",
        "the same in file order: readahead below the file system may serve reads",
    ),
    (
        "append",
        "write at the end of the thread's own file, then fsync",
    ),
    (
        "create",
        "open(O_CREAT|O_EXCL) of new files in the thread's own directory, each fsync'd",
    ),
    (
        "create-nofsync",
        "the same without fsync: no disk I/O, so CPU-bound on the guest's 2 vCPUs: it shows \
         CPU scaling, not I/O concurrency",
    ),
];

impl Config {
    /// The guest scenario: dm-delay over each node's disk (delay 0 while files are
    /// prepared), ext4 on node 0's delayed disk, then numaio-fs over both; prints
    /// `RESULT FS ROUND {json}` per run and numaio's fsck (section `fsck`).
    pub fn script(&self) -> String {
        let p = "numaio-probe fs-scaling";
        let t = self.threads;
        let rb = self.read_block;
        let (ro, ao, co) = (self.read_ops, self.append_ops, self.create_ops);
        format!(
            r#"{prelude}
set -- $devs; D0=$1; D1=$2
sz0=$(cat /sys/block/${{D0#/dev/}}/size); sz1=$(cat /sys/block/${{D1#/dev/}}/size)
export DM_DISABLE_UDEV=1
echo "0 $sz0 delay $D0 0 0" | dmsetup create dly0 || exit 20
echo "0 $sz1 delay $D1 0 0" | dmsetup create dly1 || exit 20
V="/dev/mapper/dly0 /dev/mapper/dly1"
setdelay() {{
  echo "0 $sz0 delay $D0 0 $1" | dmsetup reload dly0 && dmsetup suspend dly0 && dmsetup resume dly0 || exit 21
  echo "0 $sz1 delay $D1 0 $1" | dmsetup reload dly1 && dmsetup suspend dly1 && dmsetup resume dly1 || exit 21
  echo "delay $(dmsetup table dly0 | awk '{{print $NF}}') ms $(dmsetup table dly1 | awk '{{print $NF}}') ms"
}}
cold() {{ # FS DIR
  sync
  if [ "$1" = numaio ]; then numaio umount /v || exit 31; numaio mount $V /v >/dev/null || exit 32; fi
  echo 3 > /proc/sys/vm/drop_caches
}}
st() {{ # the delayed disks' reads, writes and flushes completed (/sys/block/DEV/stat)
  for d in dly0 dly1; do n=$(dmsetup info -c --noheadings -o major,minor --separator : $d | tr -d ' '); awk '{{printf "%s %s %s ", $1, $5, $15}}' /sys/dev/block/$n/stat; done
}}
one() {{ # FS ROUND ARGS...: one timed run, and the disk I/O it caused
  f=$1; r=$2; shift 2
  b=$(st)
  out=$({p} "$@") || {{ echo "probe failed: $f $*"; exit 33; }}
  a=$(st)
  echo "RESULT $f $r $out"
  echo "IOSTAT $b $a"
}}
prepare() {{ # DIR
  {p} --dir $1 --workload read --threads 1 --ops {ro} --block-size {rb} --set s --prepare || exit 34
  {p} --dir $1 --workload read --threads {t} --ops {ro} --block-size {rb} --set p --prepare || exit 34
  sync
}}
measure() {{ # FS DIR
  r=1
  while [ $r -le {rounds} ]; do
    cold $1 $2; one $1 $r --dir $2 --workload read --threads 1 --ops {ro} --block-size {rb} --set s
    cold $1 $2; one $1 $r --dir $2 --workload read --threads {t} --ops {ro} --block-size {rb} --set p
    cold $1 $2; one $1 $r --dir $2 --workload read --threads 1 --ops {ro} --block-size {rb} --set s --sequential
    cold $1 $2; one $1 $r --dir $2 --workload read --threads {t} --ops {ro} --block-size {rb} --set p --sequential
    one $1 $r --dir $2 --workload append --threads 1 --ops {ao} --block-size 4K --set a1r$r
    one $1 $r --dir $2 --workload append --threads {t} --ops {ao} --block-size 4K --set a{t}r$r
    one $1 $r --dir $2 --workload create --threads 1 --ops {co} --set c1r$r
    one $1 $r --dir $2 --workload create --threads {t} --ops {co} --set c{t}r$r
    one $1 $r --dir $2 --workload create --threads 1 --ops {co} --set n1r$r --no-fsync
    one $1 $r --dir $2 --workload create --threads {t} --ops {co} --set n{t}r$r --no-fsync
    r=$((r+1))
  done
}}
echo "@@begin ext4"
setdelay 0
mkfs.ext4 -q -F -b 4096 /dev/mapper/dly0 || exit 22
mkdir -p /e && mount -t ext4 /dev/mapper/dly0 /e || exit 23
prepare /e
setdelay {delay}
measure ext4 /e
umount /e || exit 25
echo "@@begin numaio"
setdelay 0
numaio mkfs --force --node-of /dev/mapper/dly0=0 --node-of /dev/mapper/dly1=1 $V >/dev/null || exit 26
mkdir -p /v && numaio mount $V /v >/dev/null || exit 27
prepare /v
numaio umount /v || exit 28
setdelay {delay}
numaio mount $V /v >/dev/null || exit 27
measure numaio /v
numaio umount /v || exit 28
setdelay 0
echo "@@begin fsck"; numaio fsck $V; echo "rc=$?"
"#,
            prelude = node_disks_prelude(&[0, 1], 0),
            rounds = self.rounds,
            delay = self.delay_ms,
        )
    }

    /// The scenario: 2 nodes (1 CPU, 512 MiB each), one disk per node, FUSE, dm-delay and
    /// the ext4 tools.
    pub fn scenario(&self) -> Scenario {
        let mib = self.disk_mib << 20;
        let mut s = Scenario::new(
            LabTopology::from_nodes(&[(1, 512), (1, 512)]),
            self.script(),
        )
        .fuse()
        .kernel_module("dm-mod")
        .kernel_module("dm-delay")
        .node_disk(0, mib)
        .node_disk(1, mib)
        .timeout(Duration::from_secs(1800));
        for t in ["/usr/sbin/dmsetup", "/usr/sbin/mkfs.ext4"] {
            s = s.host_binary(t);
        }
        s
    }
}

/// One timed run: `secs` for `threads` threads of `workload` on file system `fs`.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub fs: String,
    pub round: u32,
    pub workload: String,
    pub threads: usize,
    pub secs: f64,
    /// The disk I/O the run caused, where the guest reported it.
    pub io: Option<DiskIo>,
}

/// Requests the two delayed disks completed during a run (each one waited the delay):
/// per disk (node 0's, node 1's), from the kernel's `/sys/block/DEV/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskIo {
    pub reads: [u64; 2],
    pub writes: [u64; 2],
    pub flushes: [u64; 2],
}

impl DiskIo {
    /// From the `IOSTAT` line's twelve counters: before, then after, each as `reads writes
    /// flushes` of disk 0 then disk 1.
    fn parse(line: &str) -> Option<DiskIo> {
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?;
        if v.len() != 12 {
            return None;
        }
        let d = |i: usize| v[6 + i].checked_sub(v[i]);
        Some(DiskIo {
            reads: [d(0)?, d(3)?],
            writes: [d(1)?, d(4)?],
            flushes: [d(2)?, d(5)?],
        })
    }

    /// Every delayed request of both disks.
    pub fn total(&self) -> u64 {
        self.reads
            .iter()
            .chain(&self.writes)
            .chain(&self.flushes)
            .sum()
    }
}

/// The `RESULT FS ROUND {json}` lines of the scenario's output, each with the `IOSTAT`
/// line that follows it.
pub fn parse_results(output: &str) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for l in output.lines().map(str::trim) {
        if let Some(rest) = l.strip_prefix("IOSTAT ") {
            if let Some(last) = runs.last_mut().filter(|r| r.io.is_none()) {
                last.io = DiskIo::parse(rest);
            }
            continue;
        }
        let Some(rest) = l.strip_prefix("RESULT ") else {
            continue;
        };
        let mut it = rest.splitn(3, ' ');
        let run = (|| {
            let fs = it.next()?.to_string();
            let round = it.next()?.parse().ok()?;
            let j: serde_json::Value = serde_json::from_str(it.next()?).ok()?;
            Some(Run {
                fs,
                round,
                workload: j["workload"].as_str()?.to_string(),
                threads: j["threads"].as_u64()? as usize,
                secs: j["secs"].as_f64()?,
                io: None,
            })
        })();
        runs.extend(run);
    }
    runs
}

/// Operations per thread of `workload`.
fn ops_of(w: &str, c: &Config) -> usize {
    match w {
        "read" | "read-seq" => c.read_ops,
        "append" => c.append_ops,
        _ => c.create_ops,
    }
}

/// The disk-request profile of the fsync'd workloads: per file system and thread count,
/// the delayed requests per operation (reads, writes and flushes, each disk), medians over
/// the rounds, and the delay chain they imply against the time measured. Where requests
/// of different threads share a delay, time per operation is below requests x delay.
pub fn io_profile(runs: &[Run], c: &Config) -> String {
    let mut s = format!(
        "disk requests per operation (medians; disk 0 / disk 1; every request waits {} ms):\n\
         {:<16}{:<8}{:>4}{:>10}{:>14}{:>14}{:>10}{:>12}{:>10}\n",
        c.delay_ms,
        "workload",
        "fs",
        "T",
        "reads",
        "writes",
        "flushes",
        "req/op",
        "ms/op",
        "req-ms/op"
    );
    for w in ["append", "create"] {
        for fs in ["ext4", "numaio"] {
            for t in [1, c.threads] {
                let sel: Vec<&Run> = runs
                    .iter()
                    .filter(|r| r.fs == fs && r.workload == w && r.threads == t && r.io.is_some())
                    .collect();
                if sel.is_empty() {
                    continue;
                }
                let ops = (ops_of(w, c) * t) as f64;
                let per = |f: &dyn Fn(&DiskIo) -> u64| {
                    median(sel.iter().map(|r| f(&r.io.unwrap()) as f64 / ops).collect())
                        .unwrap_or(0.0)
                };
                let pair = |f: &dyn Fn(&DiskIo) -> [u64; 2]| {
                    format!("{:.1} / {:.1}", per(&|d| f(d)[0]), per(&|d| f(d)[1]))
                };
                let req = per(&|d| d.total());
                let ms = median(sel.iter().map(|r| r.secs * 1000.0 / ops).collect()).unwrap_or(0.0);
                s += &format!(
                    "{:<16}{:<8}{:>4}{:>10}{:>14}{:>14}{:>10.2}{:>12.1}{:>10.1}\n",
                    w,
                    fs,
                    t,
                    pair(&|d| d.reads),
                    pair(&|d| d.writes),
                    pair(&|d| d.flushes),
                    req,
                    ms,
                    req * c.delay_ms as f64
                );
            }
        }
    }
    s
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Median seconds per (fs, workload, threads).
pub fn medians(runs: &[Run]) -> BTreeMap<(String, String, usize), f64> {
    let mut all: BTreeMap<(String, String, usize), Vec<f64>> = BTreeMap::new();
    for r in runs {
        all.entry((r.fs.clone(), r.workload.clone(), r.threads))
            .or_default()
            .push(r.secs);
    }
    all.into_iter()
        .filter_map(|(k, v)| Some((k, median(v)?)))
        .collect()
}

/// time(`threads`) / time(1) of `fs` for `workload`, from [`medians`].
pub fn ratio(
    m: &BTreeMap<(String, String, usize), f64>,
    fs: &str,
    workload: &str,
    threads: usize,
) -> Option<f64> {
    let one = m.get(&(fs.to_string(), workload.to_string(), 1))?;
    let many = m.get(&(fs.to_string(), workload.to_string(), threads))?;
    (*one > 0.0).then(|| many / one)
}

/// A workload's row label, with its operations per thread.
fn label(w: &str, c: &Config) -> String {
    match w {
        "read" => format!("read {} x {}K O_DIRECT", c.read_ops, c.read_block >> 10),
        "read-seq" => format!("read {} x {}K O_DIRECT seq", c.read_ops, c.read_block >> 10),
        "append" => format!("append+fsync {} x 4K", c.append_ops),
        "create" => format!("create+fsync {}", c.create_ops),
        _ => format!("create {} (no fsync)", c.create_ops),
    }
}

/// The table: per workload and file system, the 1-thread and N-thread seconds (medians)
/// and their ratio (1.0: fully concurrent, N: fully serial).
pub fn table(runs: &[Run], c: &Config) -> String {
    let m = medians(runs);
    let t = c.threads;
    let mut s = format!(
        "{:<28}{:>9}{:>9}{:>8}{:>11}{:>11}{:>8}\n",
        "workload, per thread",
        "ext4 1T",
        format!("ext4 {t}T"),
        "ratio",
        "numaio 1T",
        format!("numaio {t}T"),
        "ratio"
    );
    for (w, _) in WORKLOADS {
        let mut line = format!("{:<28}", label(w, c));
        for (fs, wide) in [("ext4", 9), ("numaio", 11)] {
            let cell = |n: usize| {
                m.get(&(fs.to_string(), w.to_string(), n))
                    .map_or("-".to_string(), |v| format!("{v:.2} s"))
            };
            let r = ratio(&m, fs, w, t).map_or("-".to_string(), |r| format!("{r:.2}x"));
            line += &format!("{:>wide$}{:>wide$}{:>8}", cell(1), cell(t), r);
        }
        s += &line;
        s.push('\n');
    }
    for (w, what) in WORKLOADS {
        s += &format!("  {}: {what}\n", label(w, c));
    }
    s
}

/// Warnings about runs the delay cannot explain: a 1-thread read faster than its reads'
/// delay means the delay was not in effect (or the reads were served from a cache).
pub fn sanity(runs: &[Run], c: &Config) -> Vec<String> {
    let floor = c.read_ops as f64 * c.delay_ms as f64 / 1000.0;
    runs.iter()
        .filter(|r| r.workload == "read" && r.threads == 1 && r.secs < floor * 0.9)
        .map(|r| {
            format!(
                "{} round {}: 1-thread read took {:.2} s, less than {} reads x {} ms = {floor:.2} s: \
                 the delay was not in effect or the reads were cached",
                r.fs, r.round, r.secs, c.read_ops, c.delay_ms
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_parse_and_ratios_divide_n_by_one() {
        let out = "noise\nRESULT ext4 1 {\"workload\":\"read\",\"threads\":1,\"secs\":1.5}\n\
                   RESULT ext4 1 {\"workload\":\"read\",\"threads\":8,\"secs\":1.8}\n\
                   RESULT numaio 1 {\"workload\":\"read\",\"threads\":1,\"secs\":2.0}\n\
                   RESULT numaio 1 {\"workload\":\"read\",\"threads\":8,\"secs\":12.0}\n\
                   RESULT numaio 2 {\"workload\":\"read\",\"threads\":8,\"secs\":16.0}\n\
                   RESULT numaio 3 {\"workload\":\"read\",\"threads\":8,\"secs\":10.0}\n\
                   RESULT bad\n";
        let runs = parse_results(out);
        assert_eq!(runs.len(), 6);
        assert!(runs.iter().all(|r| r.io.is_none()));
        let m = medians(&runs);
        assert!((ratio(&m, "ext4", "read", 8).unwrap() - 1.2).abs() < 1e-9);
        assert!((ratio(&m, "numaio", "read", 8).unwrap() - 6.0).abs() < 1e-9);
        assert_eq!(ratio(&m, "numaio", "append", 8), None);
        let c = Config::default();
        let t = table(&runs, &c);
        assert!(t.contains("1.20x") && t.contains("6.00x"), "{t}");
        // 64 reads x 20 ms = 1.28 s: neither 1-thread run is below it
        assert!(sanity(&runs, &c).is_empty());
        let fast =
            parse_results("RESULT ext4 1 {\"workload\":\"read\",\"threads\":1,\"secs\":0.1}");
        assert_eq!(sanity(&fast, &c).len(), 1);
    }

    #[test]
    fn disk_requests_attach_to_their_run_and_profile_per_operation() {
        let out = "RESULT numaio 1 {\"workload\":\"append\",\"threads\":1,\"secs\":3.2}\n\
                   IOSTAT 5 100 10 0 7 3 5 164 74 0 7 3\n\
                   RESULT numaio 1 {\"workload\":\"append\",\"threads\":8,\"secs\":6.4}\n\
                   IOSTAT 5 164 74 0 7 3 6 420 202 0 263 131\n\
                   IOSTAT 1 2 3\n";
        let runs = parse_results(out);
        assert_eq!(runs.len(), 2);
        let io = runs[0].io.unwrap();
        assert_eq!(
            (io.reads, io.writes, io.flushes),
            ([0, 0], [64, 0], [64, 0])
        );
        let io = runs[1].io.unwrap();
        assert_eq!((io.writes, io.flushes), ([256, 256], [128, 128]));
        assert_eq!(io.total(), 1 + 256 + 256 + 128 + 128);
        assert_eq!(
            DiskIo::parse("1 2 3 4 5 6 0 0 0 0 0 0"),
            None,
            "counters only grow"
        );
        let p = io_profile(&runs, &Config::default());
        // 32 appends: 4 requests each at 1 thread, 100 ms per append.
        assert!(p.contains("2.0 / 0.0") && p.contains("100.0"), "{p}");
    }

    #[test]
    fn the_script_sets_the_delay_and_runs_every_workload() {
        let s = Config::default().script();
        assert!(s.contains("setdelay 20"));
        for (w, _) in WORKLOADS {
            let probe = w.trim_end_matches("-nofsync").trim_end_matches("-seq");
            assert!(s.contains(&format!("--workload {probe}")), "{w}");
        }
    }
}
