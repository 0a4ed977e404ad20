//! Guest-side crash-test tool for numaio-fs volumes.
//!
//! * `mkfs DEV...` formats the devices (each device's node from sysfs) as one volume.
//! * `write DEV... --seed S --files N` mounts it and runs a workload that is a pure function
//!   of the seed: files `f0..fN-1` in the root are created, appended to and overwritten, with
//!   an `fsync` at seeded points. After each `fsync` returns it prints, flushed, one line
//!   `ACK <n> <file> <len> <crc32c>` per existing file: the state that must survive a crash.
//! * `check DEV...` mounts (recovering from the journal), prints `FILE <name> <len> <crc32c>`
//!   for each file and fsck's verdict. With `--seed S --files N --acked N` it also replays the
//!   workload and says, per file, whether its content is the acknowledged state or one the
//!   writer produced later (`acked`, `later`), a per-block mix of such states (`block-mix`, possible
//!   only for in-place overwrites not yet synced), or neither (`TORN`, `MISSING`).
//!
//! Zone volumes: `--zone NODE:SIZE:PATH` (repeatable) instead of devices.

use clap::{Args, Parser, Subcommand};
use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::store::{BlockStore, FileStore, ZoneSpec, ZoneStore};
use numaio_fs::{Caller, Fs, FsError, MkfsOptions, MountOptions, PlacementPolicy, BLOCK_SIZE};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

const ROOT: u64 = 1;
/// Files stop growing here (overwrites only), so a long run stays inside small lab disks.
const MAX_FILE: usize = 192 * 1024;
/// Longest single append or overwrite.
const MAX_IO: usize = 12 * 1024;

#[derive(Parser)]
#[command(
    name = "numaio-fs-writer",
    about = "numaio-fs crash-test writer and checker"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct Volume {
    /// Devices of the volume, in mkfs order.
    devices: Vec<PathBuf>,
    /// A zone NODE:SIZE[:PATH] instead of devices (repeatable).
    #[arg(long = "zone")]
    zones: Vec<ZoneSpec>,
}

#[derive(Args, Clone, Copy)]
struct Workload {
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    files: usize,
    /// Steps of the workload (a step is one create, append or overwrite).
    #[arg(long, default_value_t = 100_000)]
    steps: u64,
}

#[derive(Subcommand)]
enum Cmd {
    /// Formats the volume.
    Mkfs {
        #[command(flatten)]
        vol: Volume,
    },
    /// Mounts and runs the seeded workload, printing ACK lines after each fsync.
    Write {
        #[command(flatten)]
        vol: Volume,
        #[command(flatten)]
        w: Workload,
    },
    /// Mounts (recovery), prints the files and fsck's verdict.
    Check {
        #[command(flatten)]
        vol: Volume,
        #[arg(long, requires_all = ["files", "acked"])]
        seed: Option<u64>,
        #[arg(long)]
        files: Option<usize>,
        /// The last fsync the host saw acknowledged (0: none).
        #[arg(long)]
        acked: Option<u64>,
        #[arg(long, default_value_t = 100_000)]
        steps: u64,
    },
}

fn open_store(vol: &Volume) -> Result<Arc<dyn BlockStore>, FsError> {
    match (vol.devices.is_empty(), vol.zones.is_empty()) {
        (false, true) => {
            let topo = numaio_sys::Topology::detect().map_err(|e| {
                FsError::Invalid(format!("reading the NUMA topology from sysfs: {e}"))
            })?;
            let infos = numaio_fs::device::probe_devices(&vol.devices, &[], &topo)?;
            Ok(Arc::new(FileStore::open(&infos, false)?))
        }
        (true, false) => Ok(Arc::new(ZoneStore::new(&vol.zones)?)),
        (true, true) => Err(FsError::Invalid(
            "no volume given: name its devices or give --zone NODE:SIZE:PATH".into(),
        )),
        (false, false) => Err(FsError::Invalid(
            "give either devices or --zone, not both".into(),
        )),
    }
}

/// Small metadata areas: lab disks are tens of MiB and the workload has a handful of files.
fn mkfs_options() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 1024,
        journal_blocks: 256,
        checkpoint_blocks: 128,
    }
}

fn caller() -> Caller {
    // Writer-local placement follows the CPU the writer happens to run on.
    Caller::root_on(numaio_sys::getcpu().map(|c| c.node).unwrap_or(0))
}

fn name(f: usize) -> String {
    format!("f{f}")
}

/// What one step does to a file.
#[derive(Debug, Clone)]
enum Op {
    Create,
    Append(Vec<u8>),
    Overwrite(usize, Vec<u8>),
}

#[derive(Debug, Clone)]
struct Step {
    file: usize,
    op: Op,
    /// An fsync follows this step.
    sync: bool,
}

/// The seeded workload: a pure function of (seed, files), so the checker replays it.
struct Plan {
    rng: fastrand::Rng,
    files: usize,
    sizes: Vec<Option<usize>>,
}

impl Plan {
    fn new(seed: u64, files: usize) -> Plan {
        Plan {
            rng: fastrand::Rng::with_seed(seed),
            files: files.max(1),
            sizes: vec![None; files.max(1)],
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.rng.fill(&mut v);
        v
    }

    fn next(&mut self) -> Step {
        let file = self.rng.usize(..self.files);
        let op = match self.sizes[file] {
            None => Op::Create,
            Some(len) => {
                let n = self.rng.usize(1..=MAX_IO);
                if len == 0 || (len + n <= MAX_FILE && self.rng.u8(..10) < 5) {
                    Op::Append(self.bytes(n))
                } else {
                    let off = self.rng.usize(..len);
                    let n = n.min(MAX_FILE - off);
                    Op::Overwrite(off, self.bytes(n))
                }
            }
        };
        let new_len = match &op {
            Op::Create => 0,
            Op::Append(d) => self.sizes[file].unwrap_or(0) + d.len(),
            Op::Overwrite(off, d) => self.sizes[file].unwrap_or(0).max(off + d.len()),
        };
        self.sizes[file] = Some(new_len);
        Step {
            file,
            op,
            sync: self.rng.u8(..4) == 0,
        }
    }
}

/// Applies a step to the in-memory model of the files.
fn apply(model: &mut [Option<Vec<u8>>], s: &Step) {
    let f = &mut model[s.file];
    match &s.op {
        Op::Create => *f = Some(Vec::new()),
        Op::Append(d) => f.get_or_insert_with(Vec::new).extend_from_slice(d),
        Op::Overwrite(off, d) => {
            let v = f.get_or_insert_with(Vec::new);
            if v.len() < off + d.len() {
                v.resize(off + d.len(), 0);
            }
            v[*off..off + d.len()].copy_from_slice(d);
        }
    }
}

fn out(line: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    // The host counts these lines to pick the moment of the power cut: flush each one.
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn write(vol: &Volume, w: Workload) -> Result<(), FsError> {
    let store = open_store(vol)?;
    let fs = Fs::mount(store, MountOptions::default())?;
    let c = caller();
    let mut plan = Plan::new(w.seed, w.files);
    let mut model: Vec<Option<Vec<u8>>> = vec![None; plan.files];
    let mut inos: Vec<u64> = vec![0; plan.files];
    let mut acks = 0u64;
    for _ in 0..w.steps {
        let s = plan.next();
        let ino = inos[s.file];
        match &s.op {
            Op::Create => inos[s.file] = fs.create(ROOT, name(s.file).as_bytes(), 0o644, &c)?.ino,
            Op::Append(d) => {
                let len = model[s.file].as_ref().map_or(0, Vec::len);
                write_all(&fs, ino, len as u64, d, &c)?;
            }
            Op::Overwrite(off, d) => write_all(&fs, ino, *off as u64, d, &c)?,
        }
        apply(&mut model, &s);
        if s.sync {
            fs.fsync(inos[s.file], false)?;
            acks += 1;
            for (f, m) in model.iter().enumerate() {
                if let Some(m) = m {
                    out(format_args!(
                        "ACK {acks} {} {} {:08x}",
                        name(f),
                        m.len(),
                        crc32c::crc32c(m)
                    ));
                }
            }
        }
    }
    out(format_args!("WRITER-DONE {acks}"));
    fs.unmount()
}

fn write_all(fs: &Fs, ino: u64, off: u64, data: &[u8], c: &Caller) -> Result<(), FsError> {
    let mut done = 0;
    while done < data.len() {
        let n = fs.write(ino, off + done as u64, &data[done..], c)?;
        if n == 0 {
            return Err(FsError::Invalid(format!(
                "inode {ino}: write at {} wrote nothing",
                off + done as u64
            )));
        }
        done += n;
    }
    Ok(())
}

/// A file's possible contents (None: absent), per file.
type States = Vec<Vec<Option<Vec<u8>>>>;

/// Every state a file can be in after a crash once fsync `acked` returned: its state at that
/// fsync (None: not created yet) and every state the workload gave it later.
fn allowed_states(w: Workload, acked: u64) -> (States, Vec<bool>) {
    let mut plan = Plan::new(w.seed, w.files);
    let mut model: Vec<Option<Vec<u8>>> = vec![None; plan.files];
    let mut states: States = vec![Vec::new(); plan.files];
    let mut overwritten = vec![false; plan.files];
    let mut syncs = 0u64;
    if acked == 0 {
        for (f, m) in model.iter().enumerate() {
            states[f].push(m.clone());
        }
    }
    for _ in 0..w.steps {
        let s = plan.next();
        apply(&mut model, &s);
        if syncs >= acked {
            states[s.file].push(model[s.file].clone());
            if matches!(s.op, Op::Overwrite(..)) {
                overwritten[s.file] = true;
            }
        }
        if s.sync {
            syncs += 1;
            if syncs == acked {
                for (f, m) in model.iter().enumerate() {
                    states[f].push(m.clone());
                }
            }
        }
    }
    (states, overwritten)
}

fn block(v: &[u8], i: usize, len: usize) -> Vec<u8> {
    let bs = BLOCK_SIZE as usize;
    let end = ((i + 1) * bs).min(len);
    (i * bs..end)
        .map(|k| v.get(k).copied().unwrap_or(0))
        .collect()
}

/// `acked` (the state at the acknowledged fsync, always the first of `states`), `later` (a
/// state the workload produced after it), `block-mix` (each block from one allowed state of
/// that length), or `TORN`.
fn verdict(data: &[u8], states: &[Option<Vec<u8>>], overwritten: bool) -> &'static str {
    if states.first().is_some_and(|s| s.as_deref() == Some(data)) {
        return "acked";
    }
    if states.iter().flatten().any(|s| s == data) {
        return "later";
    }
    let blocks = data.len().div_ceil(BLOCK_SIZE as usize);
    let mixed = overwritten
        && states.iter().flatten().any(|s| s.len() == data.len())
        && (0..blocks).all(|i| {
            let b = block(data, i, data.len());
            states
                .iter()
                .flatten()
                .any(|s| block(s, i, data.len()) == b)
        });
    if mixed {
        "block-mix"
    } else {
        "TORN"
    }
}

fn read_file(fs: &Fs, ino: u64) -> Result<Vec<u8>, FsError> {
    let size = fs.getattr(ino)?.size as usize;
    let mut buf = vec![0u8; size];
    let mut done = 0;
    while done < size {
        let n = fs.read(ino, done as u64, &mut buf[done..])?;
        if n == 0 {
            return Err(FsError::Invalid(format!(
                "inode {ino}: read at {done} of a {size}-byte file returned nothing"
            )));
        }
        done += n;
    }
    Ok(buf)
}

fn print_fsck(when: &str, store: &dyn BlockStore) -> Result<bool, FsError> {
    let r = fsck(store, &FsckOptions::default())?;
    let clean = r.errors.is_empty();
    out(format_args!(
        "FSCK {when} {} errors={} files={} orphans={} used_blocks={} checkpoint={} replayed={}",
        if clean { "clean" } else { "ERRORS" },
        r.errors.len(),
        r.files,
        r.orphans,
        r.used_blocks,
        r.checkpoint_seq,
        r.journal_records_replayed
    ));
    for e in &r.errors {
        out(format_args!("FSCK-ERROR {e}"));
    }
    Ok(clean)
}

fn check(vol: &Volume, replay: Option<(Workload, u64)>) -> Result<bool, FsError> {
    let store = open_store(vol)?;
    let mut ok = print_fsck("before-mount", &*store)?;
    let fs = Fs::mount(store.clone(), MountOptions::default())?;
    let mi = fs.mount_info();
    out(format_args!(
        "MOUNT checkpoint={} replayed={} orphans_freed={}",
        mi.checkpoint_seq, mi.replayed, mi.orphans_freed
    ));
    let expected = replay.map(|(w, acked)| allowed_states(w, acked));
    if let Some((states, _)) = &expected {
        // The replayed acknowledged state, for the host to compare with the ACK lines it saw.
        for (f, s) in states.iter().enumerate() {
            if let Some(Some(d)) = s.first() {
                out(format_args!(
                    "ACKED {} {} {:08x}",
                    name(f),
                    d.len(),
                    crc32c::crc32c(d)
                ));
            }
        }
    }
    let c = Caller::root_on(0);
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut cookie = 0;
    loop {
        let batch = fs.readdir(ROOT, cookie)?;
        let Some(last) = batch.last() else { break };
        cookie = last.cookie;
        names.extend(
            batch
                .into_iter()
                .map(|e| e.name)
                .filter(|n| n != b"." && n != b".."),
        );
    }
    for n in &names {
        let ino = fs.lookup(ROOT, n, &c)?.ino;
        let data = read_file(&fs, ino)?;
        let shown = String::from_utf8_lossy(n);
        let v = match (
            &expected,
            shown
                .strip_prefix('f')
                .and_then(|i| i.parse::<usize>().ok()),
        ) {
            (Some((states, ow)), Some(i)) if i < states.len() => verdict(&data, &states[i], ow[i]),
            (Some(_), _) => "UNEXPECTED",
            (None, _) => "-",
        };
        ok &= matches!(v, "acked" | "later" | "block-mix" | "-");
        out(format_args!(
            "FILE {shown} {} {:08x} {v}",
            data.len(),
            crc32c::crc32c(&data)
        ));
    }
    if let Some((states, _)) = &expected {
        for (f, s) in states.iter().enumerate() {
            let present = names.iter().any(|n| n == name(f).as_bytes());
            if !present && !s.iter().any(Option::is_none) {
                ok = false;
                out(format_args!("FILE {} - - MISSING", name(f)));
            }
        }
    }
    fs.unmount()?;
    ok &= print_fsck("after-unmount", &*store)?;
    Ok(ok)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Mkfs { vol } => open_store(&vol).and_then(|s| {
            let h = Fs::mkfs(&*s, &mkfs_options())?;
            out(format_args!(
                "MKFS devices={} groups={}",
                h.devices.len(),
                h.group_count()
            ));
            Ok(true)
        }),
        Cmd::Write { vol, w } => write(&vol, w).map(|_| true),
        Cmd::Check {
            vol,
            seed,
            files,
            acked,
            steps,
        } => {
            let replay = match (seed, files, acked) {
                (Some(seed), Some(files), Some(acked)) => {
                    Some((Workload { seed, files, steps }, acked))
                }
                _ => None,
            };
            check(&vol, replay)
        }
    };
    match r {
        Ok(true) => {
            out(format_args!("RESULT ok"));
            ExitCode::SUCCESS
        }
        Ok(false) => {
            out(format_args!("RESULT FAILED"));
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("numaio-fs-writer: {e}");
            out(format_args!("RESULT ERROR {e}"));
            ExitCode::from(2)
        }
    }
}
