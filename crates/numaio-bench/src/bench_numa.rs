//! `numaio bench` issue-6 options: data placement, moving work to the data, accounting and
//! checksums, and the `--files N --dir PATH` workload (N files, each read by its own thread,
//! spread over top-level directories), whose JSON result carries `local_fraction` from the
//! engine's accounting and the measured node of sampled cache buffers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use numaio_engine::accounting::Counters;
use numaio_engine::hysteresis::{HysteresisConfig, Trigger};
use numaio_engine::integrity::{DispatchRule, IntegrityConfig};
use numaio_engine::move_work::{migrate_current_thread, MoveWork, NodeCpus};
use numaio_engine::numa::{apply, NumaOptions, NumaParts};
use numaio_engine::placement::{DeviceNodeMap, PlacementPolicy};
use numaio_engine::{Engine, EngineConfig, FileHandle, OpenOptions};
use numaio_sys::{PageStatus, Topology};
use serde_json::{json, Value};

/// Issue-6 flags of `numaio bench` (flattened into its arguments).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NumaBenchArgs {
    /// Number of files, each read (or written) by its own thread (thread i uses file i mod N).
    #[arg(long, value_name = "N", value_parser = crate::args::files)]
    pub files: Option<usize>,
    /// Directory for the --files workload; files go to PATH/dJ/fileI.
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Number of top-level directories the files are spread over (default: one per slice).
    #[arg(long, value_name = "D", value_parser = crate::args::files)]
    pub dirs: Option<usize>,
    /// Data placement: range[:BLOCKS] | directory | writer-local | interleave |
    /// stripe:K[:CHUNK] | fixed:NODE (a NUMA node holding a slice).
    #[arg(long, value_name = "POLICY")]
    pub placement: Option<String>,
    /// Moving work to the data: none | migrate-thread | first-reader | forward.
    #[arg(long = "move-work", value_name = "MODE")]
    pub move_work: Option<String>,
    /// When to move a thread: immediate | consecutive:K | window:LEN:THRESHOLD.
    #[arg(long, value_name = "TRIGGER", default_value = "consecutive:4")]
    pub hysteresis: String,
    /// At least this many accesses between two moves of a thread (the bound).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = crate::args::count)]
    pub cooldown: u64,
    /// migrate-thread: also restrict the parent process.
    #[arg(long)]
    pub move_parent: bool,
    /// Start threads pinned to a node: `spread` puts thread i on node i mod (nodes with
    /// CPUs), `blocks` puts consecutive threads on the same node (8 threads on 4 nodes: 2 per
    /// node, threads 0-1 on the first). Work moving may re-pin them. Default: unpinned.
    #[arg(long, value_name = "none|spread|blocks", default_value = "none")]
    pub pin: String,
    /// Thread i alternates between file i and file i+1 every B requests.
    #[arg(long, value_name = "B", value_parser = crate::args::positive)]
    pub alternate: Option<u64>,
    /// Do not read the files into the cache before the measured run. A cold start lets the
    /// misses, completed by I/O workers pinned to each slice's node, wake the readers there
    /// (the scheduler's wake-affine pull), which hides what placement alone achieves.
    #[arg(long)]
    pub no_warm: bool,
    /// Per-block checksums in write-back, verified on read: crc32c | xxh3.
    #[arg(long, value_name = "KIND")]
    pub checksum: Option<String>,
    /// Checksum dispatch rule: inline | always | bang[:MS] | queue[:N].
    #[arg(long, value_name = "RULE")]
    pub checksum_rule: Option<String>,
    /// Files under a path prefix belong to a node's slice: PREFIX=NODE[,PREFIX=NODE...];
    /// `sysfs` uses the backing device's numa_node.
    #[arg(long, value_name = "RULES")]
    pub devices: Option<String>,
    /// Also write the engine's accounting in Prometheus text format to PATH.
    #[arg(long, value_name = "PATH")]
    pub prometheus: Option<PathBuf>,
}

impl NumaBenchArgs {
    /// Whether any issue-6 option is set (else the bench runs the core engine unchanged).
    pub fn active(&self) -> bool {
        self.files.is_some()
            || self.placement.is_some()
            || self.move_work.is_some()
            || self.checksum.is_some()
            || self.devices.is_some()
            || self.prometheus.is_some()
    }

    /// Parses the options into engine settings; a bad option is a usage error.
    pub fn options(&self) -> anyhow::Result<NumaOptions> {
        self.parse_options()
            .map_err(|e| crate::args::UsageError(format!("{e:#}")).into())
    }

    fn parse_options(&self) -> anyhow::Result<NumaOptions> {
        let mut o = NumaOptions::default();
        if let Some(p) = &self.placement {
            o.placement = p.parse::<PlacementPolicy>()?;
        }
        if let Some(m) = &self.move_work {
            o.move_work = m.parse::<MoveWork>().map_err(anyhow::Error::msg)?;
        }
        let trigger: Trigger = self.hysteresis.parse().map_err(anyhow::Error::msg)?;
        o.hysteresis = HysteresisConfig::default()
            .with_trigger(trigger)
            .with_cooldown_accesses(self.cooldown);
        o.move_parent = self.move_parent;
        if self.checksum.is_some() || self.checksum_rule.is_some() {
            let mut c = IntegrityConfig::default();
            if let Some(k) = &self.checksum {
                c.kind = k.parse().map_err(anyhow::Error::msg)?;
            }
            if let Some(r) = &self.checksum_rule {
                c.rule = r.parse::<DispatchRule>().map_err(anyhow::Error::msg)?;
            }
            o.checksums = Some(c);
        }
        if let Some(d) = &self.devices {
            if d.trim() == "sysfs" {
                o.devices = DeviceNodeMap {
                    rules: Vec::new(),
                    use_sysfs: true,
                };
            } else {
                o.devices = DeviceNodeMap {
                    rules: DeviceNodeMap::parse_rules(d).map_err(anyhow::Error::msg)?,
                    use_sysfs: false,
                };
            }
        }
        if let Some(d) = &self.dir {
            o.root = Some(d.clone());
        }
        if !matches!(self.pin.as_str(), "none" | "spread" | "blocks") {
            bail!(
                "invalid --pin {:?} (expected none | spread | blocks)",
                self.pin
            );
        }
        Ok(o)
    }
}

/// The core bench's common parameters, as the --files workload needs them.
#[derive(Clone)]
pub struct Common {
    pub workload: String,
    pub bs: usize,
    pub threads: Option<usize>,
    /// Bytes per file.
    pub size: u64,
    pub duration: Duration,
    /// `--warm true|false` of the core bench (default: see `NumaBenchArgs::no_warm`).
    pub warm: Option<bool>,
    pub cfg: EngineConfig,
    /// `--overwrite` / `--allow-device` of the core bench (see `crate::benchfile`).
    pub overwrite: bool,
    pub allow_device: bool,
}

/// Adds the issue-6 fields to a bench JSON result.
pub fn report(parts: &NumaParts, out: &mut serde_json::Map<String, Value>) {
    let snap = parts.accounting.snapshot();
    out.insert("local_fraction".into(), json!(snap.local_fraction));
    out.insert("accounting".into(), json!(snap.process));
    out.insert("slice_nodes".into(), json!(parts.slice_nodes));
    if let Some(ig) = &parts.integrity {
        out.insert("integrity".into(), json!(ig.stats()));
    }
}

/// For a single-file engine run: installs the issue-6 options into the core bench's engine
/// config (None when no option is set, so the core bench runs unchanged).
pub fn apply_if_active(
    cfg: &mut EngineConfig,
    a: &NumaBenchArgs,
) -> anyhow::Result<Option<NumaParts>> {
    if !a.active() {
        return Ok(None);
    }
    let opts = a.options()?;
    Ok(Some(apply(cfg, &opts).map_err(anyhow::Error::msg)?))
}

/// The issue-6 fields of a single-file engine result (empty without options), after writing
/// the Prometheus export if asked for.
pub fn result_fields(
    parts: Option<&NumaParts>,
    a: &NumaBenchArgs,
) -> anyhow::Result<serde_json::Map<String, Value>> {
    let mut m = serde_json::Map::new();
    if let Some(p) = parts {
        export(p, a)?;
        report(p, &mut m);
    }
    Ok(m)
}

fn export(parts: &NumaParts, a: &NumaBenchArgs) -> anyhow::Result<()> {
    if let Some(path) = &a.prometheus {
        std::fs::write(path, parts.accounting.snapshot().to_prometheus())
            .with_context(|| format!("writing the Prometheus export to {}", path.display()))?;
    }
    Ok(())
}

fn file_path(dir: &Path, i: usize, dirs: usize) -> PathBuf {
    dir.join(format!("d{}", i % dirs)).join(format!("file{i}"))
}

/// Physical node of the cache buffers holding `blocks` of `f` (pinned with get, queried
/// with move_pages): the real placement, not the policy's intent.
fn buffer_nodes(f: &FileHandle, blocks: &[u64], bs: usize) -> Vec<Option<u32>> {
    let mut out = Vec::with_capacity(blocks.len());
    for &b in blocks {
        let node = match f.get(b * bs as u64, 1) {
            Ok(p) => {
                let ptr = p.segments().next().map(|s| s.as_ptr());
                let n =
                    ptr.and_then(
                        |ptr| match numaio_sys::query_pages(0, &[ptr]).ok()?.first()? {
                            PageStatus::Node(n) => Some(*n),
                            _ => None,
                        },
                    );
                p.put();
                n
            }
            Err(_) => None,
        };
        out.push(node);
    }
    out
}

struct ThreadResult {
    ops: u64,
    bytes: u64,
    start_node: Option<u32>,
    end_node: Option<u32>,
    counters: Counters,
    file: usize,
}

/// `numaio bench --files N --dir PATH ...`: returns the JSON result.
pub fn run_files(c: &Common, a: &NumaBenchArgs) -> anyhow::Result<Value> {
    let nfiles = a.files.unwrap_or(1).max(1);
    let dir = a
        .dir
        .clone()
        .context("--files needs --dir PATH (where the files are created)")?;
    let write = match c.workload.as_str() {
        "randread" | "seqread" => false,
        "randwrite" | "seqwrite" => true,
        w => bail!("unknown workload {w:?} (expected randread | seqread | randwrite | seqwrite)"),
    };
    let random = c.workload.starts_with("rand");
    let bs = c.bs;
    if bs == 0 || c.size < bs as u64 {
        bail!("--size ({}) must be at least --bs ({bs})", c.size);
    }
    let opts = a.options()?;
    let mut cfg = c.cfg.clone();
    let topo = match &cfg.topology {
        Some(t) => t.clone(),
        None => Topology::detect().context("reading the NUMA topology")?,
    };
    cfg.topology = Some(topo.clone());
    let parts = apply(&mut cfg, &opts).map_err(anyhow::Error::msg)?;
    let dirs = a.dirs.unwrap_or(parts.slice_nodes.len()).max(1);
    let paths: Vec<PathBuf> = (0..nfiles).map(|i| file_path(&dir, i, dirs)).collect();
    let perm = crate::benchfile::Permissions {
        write,
        overwrite: c.overwrite,
        allow_device: c.allow_device,
    };
    for (i, p) in paths.iter().enumerate() {
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).with_context(|| {
                format!("cannot create directory {}", crate::output::quote(parent))
            })?;
        }
        // A write workload lets the engine create missing files; existing ones are checked
        // (and refused without --overwrite) like the single-file bench's.
        if !write || std::fs::symlink_metadata(p).is_ok() {
            crate::benchfile::prepare(p, c.size, perm, i as u64)?;
        }
    }
    let engine = Engine::new(cfg).context("starting the engine")?;
    // Open in file order, so directories get slices in order d0, d1, ...
    let handles: Vec<FileHandle> = paths
        .iter()
        .map(|p| {
            engine
                .open(
                    p,
                    OpenOptions {
                        write,
                        create: write,
                    },
                )
                .with_context(|| format!("opening {}", crate::output::quote(p)))
        })
        .collect::<anyhow::Result<_>>()?;
    let nthreads = c.threads.unwrap_or(nfiles).max(1);
    let cpus = NodeCpus::from_topology(&topo);
    let cpu_nodes: Vec<u32> = topo
        .nodes
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.id)
        .collect();
    let pin = a.pin.clone();
    let blocks = c.size / bs as u64;
    // first-reader: a warming thread would become every block's first reader.
    let warm = !write
        && c.warm
            .unwrap_or(!a.no_warm && opts.move_work != MoveWork::FirstReader);
    if warm {
        // In a thread of its own: work moving may re-pin the warming thread, and threads
        // inherit their creator's affinity.
        std::thread::scope(|s| {
            s.spawn(|| -> anyhow::Result<()> {
                let mut buf = vec![0u8; 256 << 10];
                for f in &handles {
                    let mut off = 0;
                    while off < f.len() {
                        let n = f
                            .pread(&mut buf, off)
                            .with_context(|| format!("warming {}", f.path().display()))?;
                        if n == 0 {
                            break;
                        }
                        off += n as u64;
                    }
                }
                Ok(())
            })
            .join()
            .expect("warm-up thread panicked")
        })?;
    }
    let stop = AtomicBool::new(false);
    let before = parts.accounting.totals();
    let t0 = Instant::now();
    let results: Vec<ThreadResult> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..nthreads)
            .map(|t| {
                let (handles, cpus, cpu_nodes, stop, acc, pin) = (
                    &handles,
                    &cpus,
                    &cpu_nodes,
                    &stop,
                    parts.accounting.clone(),
                    &pin,
                );
                s.spawn(move || -> anyhow::Result<ThreadResult> {
                    let n = cpu_nodes.len();
                    let node = match pin.as_str() {
                        "spread" if n > 0 => Some(cpu_nodes[t % n]),
                        "blocks" if n > 0 => Some(cpu_nodes[(t * n / nthreads).min(n - 1)]),
                        _ => None,
                    };
                    if let Some(node) = node {
                        migrate_current_thread(cpus, node, false)
                            .with_context(|| format!("pinning thread {t} to node {node}"))?;
                    }
                    let start_node = cpus.current_node();
                    let mine = t % handles.len();
                    let other = (t + 1) % handles.len();
                    let mut buf = vec![(t as u8) ^ 0x5A; bs];
                    let mut x = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let (mut ops, mut bytes, mut seq) = (0u64, 0u64, 0u64);
                    let acc0 = acc.thread_counters();
                    while !stop.load(Ordering::Relaxed) {
                        let fi = match a.alternate {
                            Some(b) if (ops / b.max(1)) % 2 == 1 => other,
                            _ => mine,
                        };
                        let f = &handles[fi];
                        let blk = if random {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x % blocks
                        } else {
                            let b = seq % blocks;
                            seq += 1;
                            b
                        };
                        let off = blk * bs as u64;
                        let n = if write {
                            f.pwrite(&buf, off)
                                .with_context(|| format!("pwrite {}", f.path().display()))?
                        } else {
                            f.pread(&mut buf, off)
                                .with_context(|| format!("pread {}", f.path().display()))?
                        };
                        ops += 1;
                        bytes += n as u64;
                        // Sequential writers stop after one pass (the writer-local check
                        // needs every block written once by its thread).
                        if write && !random && seq >= blocks {
                            break;
                        }
                    }
                    if write {
                        handles[mine]
                            .fsync()
                            .with_context(|| format!("fsync {}", handles[mine].path().display()))?;
                    }
                    Ok(ThreadResult {
                        ops,
                        bytes,
                        start_node,
                        end_node: cpus.current_node(),
                        counters: acc.thread_counters().since(&acc0),
                        file: mine,
                    })
                })
            })
            .collect();
        std::thread::sleep(c.duration);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let elapsed = t0.elapsed().as_secs_f64();
    let during = parts.accounting.totals().since(&before);
    let ops: u64 = results.iter().map(|r| r.ops).sum();
    let bytes: u64 = results.iter().map(|r| r.bytes).sum();
    // Where the buffers of each file really are (sampled), and the first chunks of file 0.
    let sample: Vec<u64> = (0..blocks).step_by((blocks as usize / 32).max(1)).collect();
    let files_json: Vec<Value> = handles
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let nodes = buffer_nodes(f, &sample, bs);
            let mut counts = std::collections::BTreeMap::<String, u64>::new();
            for n in &nodes {
                *counts
                    .entry(n.map_or("unknown".into(), |n| n.to_string()))
                    .or_default() += 1;
            }
            let writer_nodes: Vec<Option<u32>> = results
                .iter()
                .filter(|r| r.file == i)
                .map(|r| r.start_node)
                .collect();
            json!({
                "file": i,
                "path": f.path(),
                "dir": format!("d{}", i % dirs),
                "buffer_nodes": counts,
                "threads_start_nodes": writer_nodes,
            })
        })
        .collect();
    let chunk_nodes: Vec<Option<u32>> = match opts.placement {
        PlacementPolicy::Stripe { chunk, .. } => {
            let per = (chunk / bs as u64).max(1);
            let firsts: Vec<u64> = (0..16).map(|k| k * per).filter(|&b| b < blocks).collect();
            buffer_nodes(&handles[0], &firsts, bs)
        }
        _ => Vec::new(),
    };
    let threads_json: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(t, r)| {
            json!({
                "thread": t,
                "file": r.file,
                "ops": r.ops,
                "start_node": r.start_node,
                "end_node": r.end_node,
                "local_fraction": r.counters.local_fraction(),
                "migrations": r.counters.migrations,
                "forwards": r.counters.forwards,
                "accesses": r.counters.local_accesses + r.counters.remote_accesses,
            })
        })
        .collect();
    let mut out = serde_json::Map::new();
    out.insert("target".into(), json!("engine"));
    out.insert("workload".into(), json!(c.workload));
    out.insert("bs".into(), json!(bs));
    out.insert("files".into(), json!(nfiles));
    out.insert("dirs".into(), json!(dirs));
    out.insert("threads".into(), json!(nthreads));
    out.insert("size_per_file".into(), json!(c.size));
    out.insert("placement".into(), json!(engine.placement_name()));
    out.insert("move_work".into(), json!(opts.move_work.to_string()));
    out.insert("hysteresis".into(), json!(opts.hysteresis));
    out.insert("warmed".into(), json!(warm));
    out.insert("duration_s".into(), json!(elapsed));
    out.insert("ops".into(), json!(ops));
    out.insert("ops_per_s".into(), json!(ops as f64 / elapsed));
    out.insert("bytes_per_s".into(), json!(bytes as f64 / elapsed));
    report(&parts, &mut out);
    // The run's own share (without the file-sampling accesses that follow it).
    out.insert("local_fraction".into(), json!(during.local_fraction()));
    out.insert("run_accounting".into(), json!(during));
    out.insert("per_thread".into(), json!(threads_json));
    out.insert("per_file".into(), json!(files_json));
    if !chunk_nodes.is_empty() {
        out.insert("chunk_nodes".into(), json!(chunk_nodes));
    }
    out.insert("placement_checks".into(), json!(engine.placement_checks()));
    out.insert("stats".into(), json!(engine.stats()));
    out.insert(
        "numa_io".into(),
        json!(parts.accounting.snapshot().to_numa_io_text()),
    );
    drop(handles);
    engine.close().context("closing the engine")?;
    export(&parts, a)?;
    Ok(Value::Object(out))
}

/// Human summary of a --files result.
pub fn print_human(v: &Value) -> anyhow::Result<()> {
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    crate::outln!(
        "engine {} bs={} files={} threads={} placement={} move-work={}",
        v["workload"].as_str().unwrap_or(""),
        v["bs"],
        v["files"],
        v["threads"],
        v["placement"].as_str().unwrap_or(""),
        v["move_work"].as_str().unwrap_or("")
    )?;
    crate::outln!(
        "  {:.0} ops/s, {:.1} MiB/s, local accesses {}, migrations {}, forwards {}",
        f("ops_per_s"),
        f("bytes_per_s") / (1 << 20) as f64,
        v["local_fraction"]
            .as_f64()
            .map_or("n/a".to_string(), |x| format!("{:.1} %", 100.0 * x)),
        v["run_accounting"]["migrations"],
        v["run_accounting"]["forwards"]
    )?;
    crate::out!("{}", v["numa_io"].as_str().unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(workload: &str) -> Common {
        Common {
            workload: workload.into(),
            bs: 4096,
            threads: None,
            size: 256 << 10,
            duration: Duration::from_millis(200),
            warm: None,
            cfg: EngineConfig {
                cache_bytes: 8 << 20,
                slices: Some(2),
                queue_depth: 8,
                ..Default::default()
            },
            overwrite: false,
            allow_device: false,
        }
    }

    #[test]
    fn files_workload_reports_locality() {
        let dir = tempfile::tempdir().unwrap();
        let a = NumaBenchArgs {
            files: Some(4),
            dir: Some(dir.path().to_path_buf()),
            placement: Some("directory".into()),
            move_work: Some("migrate-thread".into()),
            hysteresis: "consecutive:4".into(),
            cooldown: 64,
            pin: "none".into(),
            ..Default::default()
        };
        let v = run_files(&common("randread"), &a).unwrap();
        // A second run reuses the files it created.
        run_files(&common("randread"), &a).unwrap();
        assert_eq!(v["files"], 4);
        assert_eq!(v["dirs"], 2);
        assert!(v["ops"].as_u64().unwrap() > 0);
        // One node here: every access is local.
        assert_eq!(v["local_fraction"], 1.0);
        assert!(dir.path().join("d1/file3").exists());
        assert_eq!(v["per_thread"].as_array().unwrap().len(), 4);
        assert!(v["numa_io"]
            .as_str()
            .unwrap()
            .contains("numa0_read_bytes: "));
    }

    #[test]
    fn writes_with_checksums_and_stripe() {
        let dir = tempfile::tempdir().unwrap();
        let a = NumaBenchArgs {
            files: Some(2),
            dir: Some(dir.path().to_path_buf()),
            placement: Some("stripe:2:16K".into()),
            checksum: Some("xxh3".into()),
            hysteresis: "consecutive:4".into(),
            cooldown: 64,
            pin: "spread".into(),
            prometheus: Some(dir.path().join("metrics.prom")),
            ..Default::default()
        };
        let v = run_files(&common("seqwrite"), &a).unwrap();
        let prom = std::fs::read_to_string(dir.path().join("metrics.prom")).unwrap();
        assert!(
            prom.contains("numaio_engine_bytes_total{numa_node=\"0\",op=\"write\"} 524288"),
            "{prom}"
        );
        assert_eq!(v["ops"], 128, "one pass over 2 files of 64 blocks");
        assert_eq!(v["integrity"]["blocks_summed"], 128);
        assert_eq!(v["chunk_nodes"].as_array().unwrap().len(), 16);
        assert_eq!(
            std::fs::metadata(dir.path().join("d1/file1"))
                .unwrap()
                .len(),
            256 << 10
        );
        // The files exist now: writing them again needs --overwrite.
        let e = run_files(&common("seqwrite"), &a).unwrap_err();
        assert!(e.to_string().contains("--overwrite"), "{e}");
        let mut c = common("seqwrite");
        c.overwrite = true;
        run_files(&c, &a).unwrap();
    }

    #[test]
    fn a_read_back_run_verifies_the_sums_an_earlier_run_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let a = NumaBenchArgs {
            files: Some(2),
            dir: Some(dir.path().to_path_buf()),
            checksum: Some("crc32c".into()),
            hysteresis: "consecutive:4".into(),
            cooldown: 64,
            pin: "none".into(),
            ..Default::default()
        };
        let w = run_files(&common("seqwrite"), &a).unwrap();
        assert_eq!(w["integrity"]["blocks_summed"], 128);
        // A new engine (and integrity stage) reads the files back.
        let r = run_files(&common("seqread"), &a).unwrap();
        let verified = r["integrity"]["verified"].as_u64().unwrap();
        assert!(verified > 0, "{r}");
        assert_eq!(r["integrity"]["mismatches"], 0, "{r}");
    }

    #[test]
    fn existing_files_are_never_truncated() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("d0")).unwrap();
        let f = dir.path().join("d0/file0");
        std::fs::write(&f, b"IMPORTANT\n").unwrap();
        let a = NumaBenchArgs {
            files: Some(1),
            dirs: Some(1),
            dir: Some(dir.path().to_path_buf()),
            placement: Some("directory".into()),
            hysteresis: "consecutive:4".into(),
            cooldown: 64,
            pin: "none".into(),
            ..Default::default()
        };
        let e = run_files(&common("randread"), &a).unwrap_err();
        assert!(e.to_string().contains("shorter than --size"), "{e}");
        assert_eq!(std::fs::read(&f).unwrap(), b"IMPORTANT\n");
    }

    #[test]
    fn bad_options_are_errors() {
        let mut a = NumaBenchArgs {
            placement: Some("bogus".into()),
            hysteresis: "consecutive:4".into(),
            pin: "none".into(),
            ..Default::default()
        };
        assert!(a.options().is_err());
        a.placement = None;
        a.move_work = Some("teleport".into());
        assert!(a.options().unwrap_err().to_string().contains("teleport"));
        a.move_work = None;
        a.hysteresis = "window:0:2".into();
        assert!(a.options().is_err());
        a.hysteresis = "consecutive:4".into();
        a.pin = "everywhere".into();
        assert!(a.options().is_err());
        let b = NumaBenchArgs {
            files: Some(2),
            hysteresis: "consecutive:4".into(),
            pin: "none".into(),
            ..Default::default()
        };
        let e = run_files(&common("randread"), &b).unwrap_err();
        assert!(e.to_string().contains("--dir"), "{e}");
    }
}
