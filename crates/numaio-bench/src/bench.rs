//! `numaio bench`: fio-like workloads against the numaio engine, the kernel page cache, or a
//! plain memcpy loop (the physical limit for cached reads), with the same threads, offsets
//! and duration, so results can be compared as ratios.

use crate::bench_numa;
use crate::benchfile::{self, Permissions};
use crate::output::{describe_io_error, human_bytes, print_json, quote};
use crate::usage_bail;
use anyhow::{bail, Context};
use numaio_engine::{Engine, EngineConfig, FileHandle, IndexKind, OpenOptions, PolicyKind};
use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// The numaio engine (pread/pwrite or zero-copy get, see --api).
    Engine,
    /// pread/pwrite through the kernel page cache.
    Kernel,
    /// A memcpy loop over an in-memory copy of the same bytes (reads only).
    Memcpy,
    /// quick_cache's in-memory `sync::Cache` holding each `--bs` block of the file as one
    /// value: `get` of a block (a reference-counted handle, like the engine's zero-copy
    /// get), reads only.
    QuickCache,
    /// foyer's in-memory cache (no disk tier), filled and read like `quick-cache`.
    Foyer,
}

impl Target {
    /// The in-memory caches compared against the engine's zero-copy get.
    fn is_memory_cache(self) -> bool {
        matches!(self, Target::QuickCache | Target::Foyer)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    Randread,
    Seqread,
    Randwrite,
    Seqwrite,
}

impl Workload {
    fn is_write(self) -> bool {
        matches!(self, Workload::Randwrite | Workload::Seqwrite)
    }
    fn is_random(self) -> bool {
        matches!(self, Workload::Randread | Workload::Randwrite)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// Copying pread/pwrite.
    Pread,
    /// Zero-copy get/put (reads only; see --touch).
    Get,
    /// The async API: each thread keeps --iodepth reads in flight (`get_async`, each
    /// result copied out like pread; reads only).
    Async,
    /// Zero-copy `get_batch` of --batch ranges per call (each at most one cache block; the
    /// batch's index lines are fetched together; reads only, see --touch).
    GetBatch,
}

#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = concat!(
        "Data files: a missing --file is created and filled with non-zero data, \
and kept for later runs. An existing file is never extended, truncated or rewritten by a read \
workload (it must hold --size bytes); a write workload on an existing file needs --overwrite. \
Devices (a block device's size comes from BLKGETSIZE64) and files under /dev, /proc and /sys \
need --allow-device; FIFOs, sockets and directories are refused. I/O errors end the run with \
exit status 1 and name the errno.\n\n",
        numaio_cli_support::exit_status_help!()
    )
)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(long, value_enum, default_value = "engine")]
    pub target: Target,
    #[arg(long, value_enum, default_value = "randread")]
    pub workload: Workload,
    /// Request size (e.g. 4K, 1M).
    #[arg(long, default_value = "4K", value_parser = crate::args::request_size)]
    pub bs: u64,
    /// Threads issuing requests (1 to 1024).
    #[arg(long, default_value_t = 1, value_parser = crate::args::threads)]
    pub threads: usize,
    /// Bytes of the file used by the workload. A file bench creates gets this size; an
    /// existing file must be at least this long (see below).
    #[arg(long, default_value = "256M", value_parser = crate::args::nonzero_size)]
    pub size: u64,
    /// The data file (not used with --files).
    #[arg(long, default_value = "numaio-bench.dat")]
    pub file: PathBuf,
    /// Let a write workload overwrite (and extend) an existing file's data.
    #[arg(long)]
    pub overwrite: bool,
    /// Allow block and character devices and files under /dev, /proc and /sys.
    #[arg(long)]
    pub allow_device: bool,
    /// Seconds to run (after warm-up), in (0, 86400].
    #[arg(long, default_value_t = 5.0, value_parser = crate::args::secs)]
    pub duration: f64,
    /// Engine replacement policy: arc, split-lru, split-lru:N, clock.
    #[arg(long, default_value = "arc")]
    pub policy: String,
    /// LRU_FACTOR for split-lru (overrides split-lru:N).
    #[arg(long, value_parser = crate::args::lru_factor)]
    pub lru_factor: Option<usize>,
    /// Engine slices (default one per NUMA node).
    #[arg(long, value_parser = crate::args::slices)]
    pub slices: Option<usize>,
    /// Engine cache size (default: the file size plus 1/16, so reads are all hits after
    /// warm-up); at most the machine's memory.
    #[arg(long, value_parser = crate::args::nonzero_size)]
    pub cache: Option<u64>,
    /// Engine index layout: buckets (per-bucket locks) or sharded:N (N RwLock shards).
    #[arg(long, default_value = "buckets")]
    pub index: String,
    /// Engine API for reads.
    #[arg(long, value_enum, default_value = "pread")]
    pub api: Api,
    /// With --api get: also read one byte of each returned block (costs a cache miss on
    /// cold data; zero-copy by itself does not touch the data).
    #[arg(long)]
    pub touch: bool,
    /// Engine: report every hit to the replacement policy (default: at most once per slot
    /// per eviction pass); use for lock-contention studies of split-lru.
    #[arg(long)]
    pub no_hit_gating: bool,
    /// Read the whole file once before timing (engine: through the engine; kernel: through
    /// the page cache). Default: on when the cache holds the file.
    #[arg(long)]
    pub warm: Option<bool>,
    /// Kernel target: drop the file's pages from the page cache before the run.
    #[arg(long)]
    pub cold: bool,
    /// Engine: I/O queue depth per slice worker.
    #[arg(long, default_value_t = 64, value_parser = crate::args::queue_depth)]
    pub queue_depth: u32,
    /// Engine: cache block size (power of two, >= 4K for O_DIRECT).
    #[arg(long, default_value = "4K", value_parser = crate::args::block_size)]
    pub block_size: u64,
    /// Engine reads: issue N requests per call with `pread_batch` (requests of at most one
    /// cache block), so one thread keeps N reads in flight.
    #[arg(long, default_value_t = 1, value_parser = crate::args::batch)]
    pub batch: usize,
    /// Engine with --api async: reads in flight per thread (1 to 4096).
    #[arg(long, default_value_t = 32, value_parser = crate::args::batch)]
    pub iodepth: usize,
    /// Engine: read ahead on sequential reads.
    #[arg(long)]
    pub readahead: bool,
    /// Engine: I/O worker threads per slice.
    #[arg(long, default_value_t = 4, value_parser = crate::args::io_workers)]
    pub io_workers: usize,
    /// Engine: disable O_DIRECT (buffered I/O under the engine).
    #[arg(long)]
    pub no_direct: bool,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Placement, work moving, accounting, checksums, the --files workload.
    #[command(flatten)]
    pub numa: bench_numa::NumaBenchArgs,
}

#[derive(Serialize, Debug, Default)]
pub struct BenchResult {
    pub target: String,
    pub workload: String,
    pub api: String,
    pub bs: u64,
    pub threads: usize,
    pub size: u64,
    pub duration_s: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub bytes_per_s: f64,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f64,
    pub policy: Option<String>,
    pub slices: Option<usize>,
    pub cache_bytes: Option<u64>,
    pub backend: Option<String>,
    pub direct_io: Option<bool>,
    pub clashed: u64,
    pub stalled: u64,
    pub written_back: u64,
    /// Seconds of the final fsync after a write workload (not included in ops_per_s).
    pub fsync_s: Option<f64>,
    /// Fraction of the engine's buffer pages found on their slice's node at start-up.
    pub buffer_local_fraction: Option<f64>,
    pub warm_s: f64,
    /// Whether this run created the data file (else it existed and kept its data).
    pub file_created: Option<bool>,
    /// Usable bytes of the data file (a block device's size).
    pub file_bytes: Option<u64>,
    /// With --placement, --move-work, ...: `local_fraction` and the accounting.
    #[serde(flatten)]
    pub numa: serde_json::Map<String, serde_json::Value>,
}

/// A per-thread xorshift generator.
struct Rng(u64);
impl Rng {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Offsets a thread visits: random over the whole file, or sequential over its own share.
struct Offsets {
    rng: Rng,
    random: bool,
    blocks: u64,
    bs: u64,
    next: u64,
    start: u64,
    end: u64,
}

impl Offsets {
    fn new(a: &BenchArgs, t: usize) -> Offsets {
        let blocks = (a.size / a.bs).max(1);
        let per = (blocks / a.threads as u64).max(1);
        let start = (per * t as u64).min(blocks - 1);
        let end = if t + 1 == a.threads {
            blocks
        } else {
            (start + per).min(blocks)
        };
        Offsets {
            rng: Rng(0x9E37_79B9_7F4A_7C15 ^ ((t as u64 + 1) * 0x1234_5678_9ABC)),
            random: a.workload.is_random(),
            blocks,
            bs: a.bs,
            next: start,
            start,
            end,
        }
    }
    #[inline]
    fn next(&mut self) -> u64 {
        if self.random {
            (self.rng.next() % self.blocks) * self.bs
        } else {
            let b = self.next;
            self.next += 1;
            if self.next >= self.end {
                self.next = self.start;
            }
            b * self.bs
        }
    }
}

pub fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    if a.size < a.bs {
        usage_bail!("--size ({}) must be at least --bs ({})", a.size, a.bs);
    }
    if a.target == Target::Memcpy && a.workload.is_write() {
        usage_bail!("--target memcpy measures reads only");
    }
    if a.target.is_memory_cache() && a.workload.is_write() {
        usage_bail!("--target quick-cache and --target foyer measure reads only");
    }
    if matches!(a.api, Api::Get | Api::Async | Api::GetBatch) && a.workload.is_write() {
        usage_bail!(
            "--api get, get-batch and async measure reads only (use pread for write workloads)"
        );
    }
    if a.api == Api::GetBatch && a.bs > a.block_size {
        usage_bail!(
            "--api get-batch reads ranges within one cache block: --bs {} is larger than --block-size {}",
            a.bs,
            a.block_size
        );
    }
    if a.numa.files.is_some() {
        if a.target != Target::Engine {
            usage_bail!("--files runs the engine only (--target engine)");
        }
        return run_files_bench(&a);
    }
    let perm = Permissions {
        write: a.workload.is_write(),
        overwrite: a.overwrite,
        allow_device: a.allow_device,
    };
    // Every engine option is checked before the data file is touched.
    if a.target == Target::Engine {
        engine_cache(&a)?;
        parse_policy(&a.policy, a.lru_factor)?;
        parse_index(&a.index)?;
        if a.numa.active() {
            a.numa.options()?;
        }
    }
    let bf = benchfile::prepare(&a.file, a.size, perm, 0)?;
    if bf.kind == benchfile::Kind::CharDevice && a.target == Target::Engine {
        usage_bail!(
            "{} is a character device; the engine needs a regular file or a block device",
            quote(&a.file)
        );
    }
    let mut r = match a.target {
        Target::Engine => run_engine(&a)?,
        Target::Kernel => run_kernel(&a)?,
        Target::Memcpy => run_memcpy(&a)?,
        Target::QuickCache | Target::Foyer => run_memory_cache(&a)?,
    };
    r.file_created = Some(bf.created);
    r.file_bytes = Some(bf.len);
    if a.json {
        print_json(&r)?;
    } else {
        crate::outln!(
            "{} {} bs={} threads={}: {:.0} ops/s, {}/s{}",
            r.target,
            r.workload,
            human_bytes(r.bs),
            r.threads,
            r.ops_per_s,
            human_bytes(r.bytes_per_s as u64),
            if r.target == "engine" {
                format!(
                    ", hit ratio {:.3} ({} hits, {} misses), policy {}, {} slices, backend {}",
                    r.hit_ratio,
                    r.hits,
                    r.misses,
                    r.policy.clone().unwrap_or_default(),
                    r.slices.unwrap_or(0),
                    r.backend.clone().unwrap_or_default()
                )
            } else {
                String::new()
            }
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `body` on `a.threads` threads until the deadline; returns the summed operations and
/// the elapsed seconds. A thread that cannot be started is an error, not a panic.
fn run_threads<F>(a: &BenchArgs, body: F) -> anyhow::Result<(u64, f64)>
where
    F: Fn(usize, Instant) -> u64 + Sync,
{
    let deadline = Instant::now() + Duration::from_secs_f64(a.duration);
    let t0 = Instant::now();
    let ops: anyhow::Result<u64> = std::thread::scope(|s| {
        let body = &body;
        let mut hs = Vec::with_capacity(a.threads);
        let mut spawn_err = None;
        for t in 0..a.threads {
            match std::thread::Builder::new()
                .name(format!("bench-{t}"))
                .spawn_scoped(s, move || body(t, deadline))
            {
                Ok(h) => hs.push(h),
                Err(e) => {
                    spawn_err = Some(e);
                    break;
                }
            }
        }
        // Threads already started run to the deadline; they are joined either way.
        let mut sum = 0u64;
        let mut panicked = false;
        for h in hs {
            match h.join() {
                Ok(n) => sum += n,
                Err(_) => panicked = true,
            }
        }
        if let Some(e) = spawn_err {
            bail!(
                "cannot start {} bench threads: {e}; use fewer --threads",
                a.threads
            );
        }
        if panicked {
            bail!("a bench thread panicked");
        }
        Ok(sum)
    });
    Ok((ops?, t0.elapsed().as_secs_f64()))
}

/// `numaio bench --files N --dir PATH ...` from the core bench's arguments.
fn run_files_bench(b: &BenchArgs) -> anyhow::Result<std::process::ExitCode> {
    let a = &b.numa;
    let files = a.files.unwrap_or(1).max(1) as u64;
    let policy = parse_policy(&b.policy, b.lru_factor)?;
    let total = b.size.saturating_mul(files);
    let cfg = EngineConfig {
        // Default: every file fits, in whichever slices the placement puts it.
        cache_bytes: b
            .cache
            .unwrap_or(total.saturating_add(total / 16 + (16 << 20))),
        slices: b.slices,
        policy,
        queue_depth: b.queue_depth,
        direct_io: !b.no_direct,
        hit_gating: !b.no_hit_gating,
        io_workers_per_slice: b.io_workers.max(1),
        readahead: b.readahead,
        block_size: b.block_size as usize,
        ..Default::default()
    };
    check_cache_fits(cfg.cache_bytes)?;
    a.options()?;
    let c = bench_numa::Common {
        workload: format!("{:?}", b.workload).to_lowercase(),
        bs: b.bs as usize,
        // Each file has its own thread; more threads share files round robin.
        threads: Some(b.threads.max(files as usize)),
        size: b.size,
        duration: Duration::from_secs_f64(b.duration),
        warm: b.warm,
        cfg,
        overwrite: b.overwrite,
        allow_device: b.allow_device,
    };
    let v = bench_numa::run_files(&c, a)?;
    if b.json {
        crate::output::print_json(&v)?;
    } else {
        bench_numa::print_human(&v)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The replacement policy from `--policy` and `--lru-factor`, with LRU_FACTOR bounded
/// (the engine allocates that many sub-lists).
fn parse_policy(policy: &str, lru_factor: Option<usize>) -> anyhow::Result<PolicyKind> {
    let mut p: PolicyKind = policy
        .parse()
        .map_err(|e: String| crate::args::UsageError(format!("--policy: {e}")))?;
    if let (PolicyKind::SplitLru { .. }, Some(f)) = (p, lru_factor) {
        p = PolicyKind::SplitLru { lru_factor: f };
    }
    if let PolicyKind::SplitLru { lru_factor } = p {
        if !(1..=crate::args::MAX_LRU_FACTOR).contains(&lru_factor) {
            usage_bail!(
                "--policy split-lru:{lru_factor}: LRU_FACTOR must be 1 to {}",
                crate::args::MAX_LRU_FACTOR
            );
        }
    }
    Ok(p)
}

/// `buckets`, `sharded` or `sharded:N` with N from 1 to 65536.
fn parse_index(s: &str) -> anyhow::Result<IndexKind> {
    if s == "buckets" {
        return Ok(IndexKind::Buckets);
    }
    if s == "sharded" {
        return Ok(IndexKind::Sharded { shards: 64 });
    }
    if let Some(n) = s
        .strip_prefix("sharded:")
        .and_then(|n| crate::args::parse_count_in(n, 1, 65_536).ok())
    {
        return Ok(IndexKind::Sharded { shards: n as usize });
    }
    usage_bail!("bad --index {s:?}: use buckets, sharded or sharded:N with N from 1 to 65536")
}

/// Total memory of the machine (bytes), if known.
fn total_memory() -> Option<u64> {
    // SAFETY: sysinfo fills the zeroed struct we own.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is to our local struct.
    if unsafe { libc::sysinfo(&mut si) } != 0 {
        return None;
    }
    Some((si.totalram as u64).saturating_mul(si.mem_unit.max(1) as u64))
}

/// The engine's cache size, checked against the machine's memory: the engine allocates
/// the whole cache up front, so more than the machine has cannot work.
fn engine_cache(a: &BenchArgs) -> anyhow::Result<u64> {
    let cache = a
        .cache
        .unwrap_or(a.size.saturating_add(a.size / 16 + (16 << 20)));
    check_cache_fits(cache)?;
    Ok(cache)
}

/// Refuses an engine cache larger than the machine's memory (a usage error).
fn check_cache_fits(cache: u64) -> anyhow::Result<()> {
    if let Some(mem) = total_memory().filter(|&m| cache > m) {
        usage_bail!(
            "the engine cache would be {} but this machine has {} of memory; give a smaller --cache (or --size)",
            human_bytes(cache),
            human_bytes(mem)
        );
    }
    Ok(())
}

fn run_engine(a: &BenchArgs) -> anyhow::Result<BenchResult> {
    let cache = engine_cache(a)?;
    let mut cfg = EngineConfig {
        cache_bytes: cache,
        slices: a.slices,
        policy: parse_policy(&a.policy, a.lru_factor)?,
        index: parse_index(&a.index)?,
        queue_depth: a.queue_depth,
        direct_io: !a.no_direct,
        hit_gating: !a.no_hit_gating,
        io_workers_per_slice: a.io_workers.max(1),
        readahead: a.readahead,
        block_size: a.block_size as usize,
        max_io_blocks: ((1usize << 20) / a.block_size.max(512) as usize)
            .max((a.bs / a.block_size.max(512)) as usize)
            .max(1),
        ..Default::default()
    };
    let numa = bench_numa::apply_if_active(&mut cfg, &a.numa)?;
    let engine = Engine::new(cfg).context("cannot start the engine")?;
    let f = engine
        .open(
            &a.file,
            OpenOptions {
                write: a.workload.is_write(),
                create: false,
            },
        )
        .with_context(|| format!("cannot open {}", quote(&a.file)))?;
    let f: Arc<FileHandle> = Arc::new(f);
    let bs = a.bs as usize;
    let warm = a.warm.unwrap_or(cache >= a.size);
    let tw = Instant::now();
    if warm {
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0;
        while off < a.size {
            let n = f.pread(&mut buf, off).context("warm-up read failed")?;
            if n == 0 {
                break;
            }
            off += n as u64;
        }
    }
    let warm_s = tw.elapsed().as_secs_f64();
    let before = engine.stats();
    if matches!(a.api, Api::Get | Api::Async | Api::GetBatch) && bs > f.max_get_bytes() {
        bail!(
            "--bs {} is larger than one get may pin ({} bytes) with this cache",
            bs,
            f.max_get_bytes()
        );
    }
    let err = std::sync::Mutex::new(None::<String>);
    let (ops, secs) = run_threads(a, |t, deadline| {
        let mut offs = Offsets::new(a, t);
        let mut buf = vec![0x5Au8; bs];
        let mut n = 0u64;
        let mut sink = 0u8;
        if a.api == Api::Async {
            return match crate::async_reads::run(
                &f,
                a.iodepth,
                bs,
                || offs.next(),
                deadline,
                &mut buf,
            ) {
                Ok(n) => n,
                Err(e) => {
                    *err.lock().unwrap() = Some(format!("{e}"));
                    0
                }
            };
        }
        if a.api == Api::GetBatch {
            let mut reqs: Vec<(u64, usize)> = Vec::with_capacity(a.batch);
            loop {
                reqs.clear();
                reqs.extend((0..a.batch).map(|_| (offs.next(), bs)));
                match f.get_batch(&reqs) {
                    Ok(p) => {
                        if a.touch {
                            for v in p.iter() {
                                sink ^= v.first().copied().unwrap_or(0);
                            }
                        }
                    }
                    Err(e) => {
                        *err.lock().unwrap() = Some(format!("{e}"));
                        return n;
                    }
                }
                n += a.batch as u64;
                if n % 64 < a.batch as u64 && Instant::now() >= deadline {
                    std::hint::black_box(sink);
                    return n;
                }
            }
        }
        if a.batch > 1 && !a.workload.is_write() {
            let mut bufs: Vec<Vec<u8>> = (0..a.batch).map(|_| vec![0u8; bs]).collect();
            loop {
                let mut reqs: Vec<(u64, &mut [u8])> = bufs
                    .iter_mut()
                    .map(|b| (offs.next(), b.as_mut_slice()))
                    .collect();
                if let Err(e) = f.pread_batch(&mut reqs) {
                    *err.lock().unwrap() = Some(format!("{e}"));
                    return n;
                }
                n += a.batch as u64;
                if Instant::now() >= deadline {
                    return n;
                }
            }
        }
        loop {
            for _ in 0..64 {
                let off = offs.next();
                let r = match (a.workload.is_write(), a.api) {
                    (true, _) => f.pwrite(&buf, off).map(|_| ()),
                    (false, Api::Pread) => f.pread(&mut buf, off).map(|_| ()),
                    (false, Api::Get | Api::Async | Api::GetBatch) => f.get(off, bs).map(|p| {
                        if a.touch {
                            sink ^= p.segments().next().map_or(0, |s| s[0]);
                        }
                        p.put();
                    }),
                };
                if let Err(e) = r {
                    *err.lock().unwrap() = Some(format!("{e}"));
                    return n;
                }
                n += 1;
            }
            if Instant::now() >= deadline {
                std::hint::black_box(sink);
                return n;
            }
        }
    })?;
    if let Some(e) = err.into_inner().unwrap() {
        bail!("engine I/O failed during the run: {e}");
    }
    let fsync_s = if a.workload.is_write() {
        let t = Instant::now();
        f.fsync().context("final fsync failed")?;
        Some(t.elapsed().as_secs_f64())
    } else {
        None
    };
    let st = engine.stats();
    let checks = engine.placement_checks();
    let local = checks.iter().map(|c| c.local_fraction()).sum::<f64>() / checks.len().max(1) as f64;
    let (hits, misses) = (st.hits - before.hits, st.misses - before.misses);
    let r = BenchResult {
        target: "engine".into(),
        workload: format!("{:?}", a.workload).to_lowercase(),
        // The name the command line takes (`get-batch`), as serde writes it.
        api: serde_json::to_value(a.api)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        bs: a.bs,
        threads: a.threads,
        size: a.size,
        duration_s: secs,
        ops,
        ops_per_s: ops as f64 / secs,
        bytes_per_s: (ops * a.bs) as f64 / secs,
        hits,
        misses,
        hit_ratio: if hits + misses == 0 {
            0.0
        } else {
            hits as f64 / (hits + misses) as f64
        },
        policy: Some(engine.policy_name()),
        slices: Some(engine.slices()),
        cache_bytes: Some(cache),
        backend: Some(engine.backend_name()),
        direct_io: Some(f.direct()),
        clashed: st.clashed - before.clashed,
        stalled: st.stalled - before.stalled,
        written_back: st.written_back - before.written_back,
        fsync_s,
        buffer_local_fraction: Some(local),
        warm_s,
        file_created: None,
        file_bytes: None,
        numa: bench_numa::result_fields(numa.as_ref(), &a.numa)?,
    };
    drop(f);
    engine.close().context("closing the engine")?;
    Ok(r)
}

fn run_kernel(a: &BenchArgs) -> anyhow::Result<BenchResult> {
    let shown = quote(&a.file);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(a.workload.is_write())
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(&a.file)
        .with_context(|| format!("cannot open {shown}"))?;
    use std::os::fd::AsRawFd;
    if a.cold {
        // SAFETY: advisory call on our descriptor.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    let tw = Instant::now();
    if a.warm.unwrap_or(!a.cold) {
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0;
        while off < a.size {
            let n = file.read_at(&mut buf, off).map_err(|e| {
                anyhow::anyhow!(
                    "warm-up read of {shown} at offset {off} failed: {}",
                    describe_io_error(&e)
                )
            })?;
            if n == 0 {
                break;
            }
            off += n as u64;
        }
    }
    let warm_s = tw.elapsed().as_secs_f64();
    let bs = a.bs as usize;
    let file = &file;
    let write = a.workload.is_write();
    // The first failure of any thread: it ends every thread's run.
    let failed = std::sync::atomic::AtomicBool::new(false);
    let first_err = std::sync::Mutex::new(None::<(u64, std::io::Error)>);
    let (ops, secs) = run_threads(a, |t, deadline| {
        let mut offs = Offsets::new(a, t);
        let mut buf = vec![0x5Au8; bs];
        let mut n = 0;
        loop {
            for _ in 0..64 {
                let off = offs.next();
                let r = if write {
                    file.write_all_at(&buf, off)
                } else {
                    file.read_exact_at(&mut buf, off)
                };
                if let Err(e) = r {
                    let mut slot = first_err.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert((off, e));
                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                    return n;
                }
                n += 1;
            }
            if Instant::now() >= deadline || failed.load(std::sync::atomic::Ordering::Relaxed) {
                return n;
            }
        }
    })?;
    let err = first_err.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some((off, e)) = err {
        bail!(
            "kernel {} of {bs} bytes at offset {off} of {shown} failed after {ops} operations: {}",
            if write { "write" } else { "read" },
            describe_io_error(&e)
        );
    }
    let fsync_s = if write {
        let t = Instant::now();
        file.sync_data().map_err(|e| {
            anyhow::anyhow!(
                "final fdatasync of {shown} failed: {}",
                describe_io_error(&e)
            )
        })?;
        Some(t.elapsed().as_secs_f64())
    } else {
        None
    };
    Ok(BenchResult {
        target: "kernel".into(),
        workload: format!("{:?}", a.workload).to_lowercase(),
        api: "pread".into(),
        bs: a.bs,
        threads: a.threads,
        size: a.size,
        duration_s: secs,
        ops,
        ops_per_s: ops as f64 / secs,
        bytes_per_s: (ops * a.bs) as f64 / secs,
        fsync_s,
        warm_s,
        ..Default::default()
    })
}

/// Reads the whole data file into memory (the memcpy and in-memory cache targets).
fn file_in_memory(a: &BenchArgs, target: &str) -> anyhow::Result<Vec<u8>> {
    let shown = quote(&a.file);
    let mut data = Vec::new();
    let len = usize::try_from(a.size).unwrap_or(usize::MAX);
    data.try_reserve_exact(len).map_err(|_| {
        crate::args::UsageError(format!(
            "cannot allocate {} for --target {target}; give a smaller --size",
            human_bytes(a.size)
        ))
    })?;
    data.resize(len, 0);
    File::open(&a.file)
        .with_context(|| format!("cannot open {shown}"))?
        .read_exact_at(&mut data, 0)
        .map_err(|e| {
            anyhow::anyhow!(
                "reading {shown} into memory failed: {}",
                describe_io_error(&e)
            )
        })?;
    Ok(data)
}

/// quick_cache or foyer holding every block of the file, each thread getting blocks at the
/// same offsets the engine target uses; `--touch` reads the first byte of each value.
fn run_memory_cache(a: &BenchArgs) -> anyhow::Result<BenchResult> {
    let name = match a.target {
        Target::Foyer => "foyer",
        _ => "quick-cache",
    };
    let data = file_in_memory(a, name)?;
    let bs = a.bs as usize;
    let blocks = data.len() / bs;
    // Room for every block twice over: both caches split their capacity over hashed shards,
    // and a shard that overflows would evict, so the measured gets would not all be hits.
    let cap = 2 * blocks + 64;
    let block = |b: usize| -> Arc<[u8]> { Arc::from(&data[b * bs..(b + 1) * bs]) };
    let touch = a.touch;
    let missed = std::sync::atomic::AtomicBool::new(false);
    let (ops, secs) = match a.target {
        Target::Foyer => {
            let c: foyer_memory::Cache<u64, Arc<[u8]>> =
                foyer_memory::CacheBuilder::new(cap).with_shards(64).build();
            for b in 0..blocks {
                c.insert(b as u64, block(b));
            }
            drop(data);
            run_threads(a, |t, deadline| {
                get_loop(a, t, deadline, &missed, |k| {
                    c.get(&k).map(|e| if touch { e.value()[0] } else { 1 })
                })
            })?
        }
        _ => {
            let c: quick_cache::sync::Cache<u64, Arc<[u8]>> = quick_cache::sync::Cache::new(cap);
            for b in 0..blocks {
                c.insert(b as u64, block(b));
            }
            drop(data);
            run_threads(a, |t, deadline| {
                get_loop(a, t, deadline, &missed, |k| {
                    c.get(&k).map(|v| if touch { v[0] } else { 1 })
                })
            })?
        }
    };
    if ops == 0 || missed.load(std::sync::atomic::Ordering::Relaxed) {
        bail!("--target {name}: a block was missing from the cache (it evicted while filling), so the rate would not be of hits");
    }
    Ok(BenchResult {
        target: name.into(),
        workload: format!("{:?}", a.workload).to_lowercase(),
        api: "get".into(),
        bs: a.bs,
        threads: a.threads,
        size: a.size,
        duration_s: secs,
        ops,
        ops_per_s: ops as f64 / secs,
        bytes_per_s: (ops * a.bs) as f64 / secs,
        ..Default::default()
    })
}

/// One thread's loop of gets by block number until `deadline`; a miss ends it and sets
/// `missed` (the caches hold every block, so a miss means one evicted and the run is not
/// comparable). Returns the number of hits.
fn get_loop(
    a: &BenchArgs,
    t: usize,
    deadline: Instant,
    missed: &std::sync::atomic::AtomicBool,
    mut get: impl FnMut(u64) -> Option<u8>,
) -> u64 {
    let mut offs = Offsets::new(a, t);
    let mut n = 0u64;
    let mut sink = 0u8;
    loop {
        for _ in 0..64 {
            let Some(v) = get(offs.next() / a.bs) else {
                missed.store(true, std::sync::atomic::Ordering::Relaxed);
                return n;
            };
            sink ^= v;
            n += 1;
        }
        if Instant::now() >= deadline {
            std::hint::black_box(sink);
            return n;
        }
    }
}

fn run_memcpy(a: &BenchArgs) -> anyhow::Result<BenchResult> {
    let data = file_in_memory(a, "memcpy")?;
    let bs = a.bs as usize;
    let data = &data;
    let (ops, secs) = run_threads(a, |t, deadline| {
        let mut offs = Offsets::new(a, t);
        let mut buf = vec![0u8; bs];
        let mut n = 0;
        loop {
            for _ in 0..64 {
                let off = offs.next() as usize;
                buf.copy_from_slice(&data[off..off + bs]);
                std::hint::black_box(&mut buf);
                n += 1;
            }
            if Instant::now() >= deadline {
                return n;
            }
        }
    })?;
    Ok(BenchResult {
        target: "memcpy".into(),
        workload: format!("{:?}", a.workload).to_lowercase(),
        api: "memcpy".into(),
        bs: a.bs,
        threads: a.threads,
        size: a.size,
        duration_s: secs,
        ops,
        ops_per_s: ops as f64 / secs,
        bytes_per_s: (ops * a.bs) as f64 / secs,
        ..Default::default()
    })
}
