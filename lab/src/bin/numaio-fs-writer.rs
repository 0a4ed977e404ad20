//! Guest-side crash-test tool for numaio-fs volumes.
//!
//! * `mkfs DEV...` formats the devices (each device's node from sysfs) as one volume.
//! * `write DEV... --seed S --files N` mounts it and runs a workload that is a pure function
//!   of the seed: files `f0..fN-1` in the root are created, appended to and overwritten, with
//!   an `fsync` at seeded points. After each `fsync` returns it prints, flushed, one line
//!   `ACK <n> <file> <len> <crc32c>` per existing file: the state that must survive a crash.
//! * `check DEV...` mounts (recovering from the journal), prints `FILE <name> <len> <crc32c>`
//!   for each file and fsck's verdict. With `--seed S --files N --acked N` it also replays the
//!   workload and finds the commit the volume is at: one commit from the `N`-th fsync on, for
//!   all files at once (`COMMIT <c>`), with exactly that commit's files and lengths, and every
//!   512-byte sector holding its data at that commit or data an in-place overwrite wrote
//!   there before the next commit (in a file that commit's fsync did not name, also data
//!   from the commit before on: as on ext4, a commit orders only the synced file's
//!   overwrites in place). Per file: `acked` (the acknowledged state), `later` (a
//!   later commit's state), `sector-mix` (some sectors from overwrites after the commit);
//!   `NO-COMMIT` (and `NO-COMMIT-AT <c>: why` for each commit tried) and `MISMATCH` when no
//!   commit fits.
//!
//! * `replace DEV... --rounds N`: the atomic-replace pattern, round `i` = 1, 2, …: write
//!   `r.tmp` with round `i`'s content and fsync it, rename it over `r`, `mkdir d<i>`, fsync
//!   the root directory, then print `REPLACED <i>`.
//! * `check-replace DEV... --acked N`: after a crash, the volume must be at the directory
//!   fsync of a round `v` ≥ N (`r` round `v`'s content, `d1..d<v>`, no `r.tmp`) or at the
//!   fsync of round `v + 1`'s `r.tmp` (that file with round `v + 1`'s content besides):
//!   `REPLACE-AT <v>`, or `REPLACE-MISMATCH` with what does not fit.
//!
//! Zone volumes: `--zone NODE:SIZE:PATH` (repeatable) instead of devices.

use clap::{Args, Parser, Subcommand};
use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::store::{BlockStore, FileStore, ZoneSpec, ZoneStore};
use numaio_fs::{Caller, Fs, FsError, MkfsOptions, MountOptions, PlacementPolicy};
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
    /// Mounts and runs the atomic-replace rounds, printing REPLACED lines.
    Replace {
        #[command(flatten)]
        vol: Volume,
        #[arg(long, default_value_t = 100_000)]
        rounds: u64,
    },
    /// Mounts (recovery) and checks the replace rounds against the acknowledged one.
    CheckReplace {
        #[command(flatten)]
        vol: Volume,
        /// The last REPLACED round the host saw (0: none).
        #[arg(long)]
        acked: u64,
    },
    /// Runs the seeded workload on files in DIR (a mounted file system) with buffered
    /// writes through the kernel, printing `ACK <n> <file>` after each fsync.
    WriteDir {
        dir: PathBuf,
        #[command(flatten)]
        w: Workload,
    },
    /// Checks the files in DIR against the workload: every file fsync'd by the
    /// acknowledged fsync `acked` holds what that fsync made durable, or later data.
    CheckDir {
        dir: PathBuf,
        #[command(flatten)]
        w: Workload,
        /// The last ACK the host saw (0: none).
        #[arg(long)]
        acked: u64,
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

fn write_dir(dir: &std::path::Path, w: Workload) -> Result<(), FsError> {
    use std::os::unix::fs::FileExt;
    let io = |e| FsError::io(dir, "the workload's buffered writes", e);
    let mut plan = Plan::new(w.seed, w.files);
    let mut model: Vec<Option<Vec<u8>>> = vec![None; plan.files];
    let mut files: Vec<Option<std::fs::File>> = (0..plan.files).map(|_| None).collect();
    let mut acks = 0u64;
    for _ in 0..w.steps {
        let s = plan.next();
        let len = model[s.file].as_ref().map_or(0, Vec::len) as u64;
        match &s.op {
            Op::Create => {
                files[s.file] = Some(std::fs::File::create(dir.join(name(s.file))).map_err(io)?)
            }
            Op::Append(d) => files[s.file]
                .as_ref()
                .expect("created")
                .write_all_at(d, len)
                .map_err(io)?,
            Op::Overwrite(off, d) => files[s.file]
                .as_ref()
                .expect("created")
                .write_all_at(d, *off as u64)
                .map_err(io)?,
        }
        apply(&mut model, &s);
        if s.sync {
            files[s.file]
                .as_ref()
                .expect("created")
                .sync_all()
                .map_err(io)?;
            acks += 1;
            out(format_args!("ACK {acks} {}", name(s.file)));
        }
    }
    out(format_args!("WRITER-DONE {acks}"));
    Ok(())
}

/// What a file may hold after a cut, per byte: its content at its last acknowledged
/// fsync, or any byte a later step wrote there (or zero past that fsync's length).
struct Allowed {
    /// Length and content at the file's last acknowledged fsync; `None`: never fsync'd.
    synced: Option<Vec<u8>>,
    /// Per byte, a 256-bit set of the values later steps wrote.
    later: Vec<[u64; 4]>,
    max_len: usize,
}

fn check_dir(dir: &std::path::Path, w: Workload, acked: u64) -> Result<bool, FsError> {
    let io = |e| FsError::io(dir, "reading the workload's files", e);
    let mut plan = Plan::new(w.seed, w.files);
    let mut model: Vec<Option<Vec<u8>>> = vec![None; plan.files];
    let mut allowed: Vec<Allowed> = (0..plan.files)
        .map(|_| Allowed {
            synced: None,
            later: Vec::new(),
            max_len: 0,
        })
        .collect();
    let mut acks = 0u64;
    for _ in 0..w.steps {
        let s = plan.next();
        let before = model[s.file].as_ref().map_or(0, Vec::len);
        apply(&mut model, &s);
        let a = &mut allowed[s.file];
        let (off, d): (usize, &[u8]) = match &s.op {
            Op::Create => (0, &[]),
            Op::Append(d) => (before, d),
            Op::Overwrite(off, d) => (*off, d),
        };
        if a.later.len() < off + d.len() {
            a.later.resize(off + d.len(), [0; 4]);
        }
        for (i, &b) in d.iter().enumerate() {
            a.later[off + i][b as usize / 64] |= 1 << (b % 64);
        }
        a.max_len = a.max_len.max(model[s.file].as_ref().map_or(0, Vec::len));
        // An acknowledged fsync: what the file held then is durable, and only what comes
        // after it may differ.
        if s.sync && acks < acked {
            acks += 1;
            a.synced = model[s.file].clone();
            a.later.clear();
        }
    }
    let mut ok = true;
    for (f, a) in allowed.iter().enumerate() {
        let found = match std::fs::read(dir.join(name(f))) {
            Ok(v) => Some(v),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(e)),
        };
        let verdict = match (&a.synced, &found) {
            (None, _) => Ok("not-synced"),
            (Some(_), None) => Err("missing".to_string()),
            (Some(want), Some(got)) if got.len() < want.len() || got.len() > a.max_len => {
                Err(format!(
                    "length {} outside {}..={}",
                    got.len(),
                    want.len(),
                    a.max_len
                ))
            }
            (Some(want), Some(got)) => got
                .iter()
                .enumerate()
                .find(|&(i, &b)| {
                    let later = a
                        .later
                        .get(i)
                        .is_some_and(|m| m[b as usize / 64] & (1 << (b % 64)) != 0);
                    let synced = match want.get(i) {
                        Some(&w) => w == b,
                        None => b == 0,
                    };
                    !synced && !later
                })
                .map_or(Ok("durable"), |(i, &b)| {
                    Err(format!(
                        "byte {i} is {b:#04x}, neither fsync'd nor written later"
                    ))
                }),
        };
        match verdict {
            Ok(v) => out(format_args!(
                "FILE {} {} {v}",
                name(f),
                found.as_ref().map_or(0, Vec::len)
            )),
            Err(why) => {
                ok = false;
                out(format_args!("FILE {} LOST {why}", name(f)));
            }
        }
    }
    Ok(ok)
}

/// Round `i`'s content for `r`: 1 to 20,000 bytes, a pure function of `i`.
fn replace_content(i: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(i);
    let mut v = vec![0u8; 1 + (i.wrapping_mul(7919) % 20_000) as usize];
    rng.fill(&mut v);
    v
}

fn replace(vol: &Volume, rounds: u64) -> Result<(), FsError> {
    let store = open_store(vol)?;
    let fs = Fs::mount(store, MountOptions::default())?;
    let c = caller();
    for i in 1..=rounds {
        let tmp = fs.create(ROOT, b"r.tmp", 0o644, &c)?.ino;
        write_all(&fs, tmp, 0, &replace_content(i), &c)?;
        fs.fsync(tmp, false)?;
        fs.rename(ROOT, b"r.tmp", ROOT, b"r", 0, &c)?;
        fs.mkdir(ROOT, format!("d{i}").as_bytes(), 0o755, &c)?;
        fs.fsync_dir(ROOT)?;
        out(format_args!("REPLACED {i}"));
    }
    out(format_args!("REPLACE-DONE {rounds}"));
    fs.unmount()
}

/// Whether the volume is at a commit of the replace rounds from `acked` on (see the
/// module docs).
fn check_replace(vol: &Volume, acked: u64) -> Result<bool, FsError> {
    let store = open_store(vol)?;
    let mut ok = print_fsck("before-mount", &*store)?;
    let fs = Fs::mount(store.clone(), MountOptions::default())?;
    let c = Caller::root_on(0);
    let file = |name: &[u8]| -> Result<Option<Vec<u8>>, FsError> {
        match fs.lookup(ROOT, name, &c) {
            Ok(a) => read_file(&fs, a.ino).map(Some),
            Err(FsError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let r = file(b"r")?;
    let tmp = file(b"r.tmp")?;
    let mut dirs = 0u64;
    while fs
        .lookup(ROOT, format!("d{}", dirs + 1).as_bytes(), &c)
        .is_ok()
    {
        dirs += 1;
    }
    // `r` holds round `dirs`'s content: the rounds' directories and renames commit together.
    let v = dirs;
    let mut why = Vec::new();
    let want_r = (v > 0).then(|| replace_content(v));
    if r != want_r {
        why.push(format!(
            "r holds {:?} bytes, not round {v}'s {:?}",
            r.as_ref().map(Vec::len),
            want_r.as_ref().map(Vec::len)
        ));
    }
    if let Some(t) = &tmp {
        if *t != replace_content(v + 1) {
            why.push(format!(
                "r.tmp holds {} bytes, not round {}'s content",
                t.len(),
                v + 1
            ));
        }
    }
    if fs
        .lookup(ROOT, format!("d{}", v + 2).as_bytes(), &c)
        .is_ok()
    {
        why.push(format!("d{} exists without d{}", v + 2, v + 1));
    }
    if v < acked {
        why.push(format!(
            "at round {v}, before the acknowledged round {acked}"
        ));
    }
    if why.is_empty() {
        out(format_args!(
            "REPLACE-AT {v} acked={acked} tmp={}",
            tmp.is_some()
        ));
    } else {
        ok = false;
        out(format_args!(
            "REPLACE-MISMATCH acked={acked}: {}",
            why.join("; ")
        ));
    }
    fs.unmount()?;
    ok &= print_fsck("after-unmount", &*store)?;
    Ok(ok)
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

/// A torn write leaves whole 512-byte sectors: the unit in which an in-place overwrite
/// not yet committed may show old and new data side by side.
const SECTOR: usize = 512;

/// A commit the crash may have left the volume at: every file's state at that commit
/// (None: not created yet), and the states each file went through after it until the next
/// commit was durable (what in-place overwrites may have put on the device meanwhile).
/// A commit orders the overwrites in place of the file its fsync names, as ext4 does, not
/// those of the others: an unacknowledged commit may show another file's sectors as they
/// were at the commit before it or after a write in between (`before`).
struct CommitPoint {
    /// The number of fsyncs done (0: the freshly made volume).
    commit: u64,
    files: Vec<Option<Vec<u8>>>,
    after: Vec<Vec<Vec<u8>>>,
    /// Each file's states from the commit before this one up to this one.
    before: Vec<Vec<Vec<u8>>>,
    /// The file this commit's fsync named (None: every file's overwrites are ordered).
    synced: Option<usize>,
}

/// Replays the workload and hands `f` each commit point from the `acked`-th fsync on, in
/// order, until `f` returns false or the workload ends. Commits happen only at fsync (the
/// writer never syncs otherwise), so these are all the states the metadata can be in.
fn for_each_commit(w: Workload, acked: u64, mut f: impl FnMut(&CommitPoint) -> bool) {
    let mut plan = Plan::new(w.seed, w.files);
    let n = plan.files;
    let mut model: Vec<Option<Vec<u8>>> = vec![None; n];
    let point = |commit, model: &[Option<Vec<u8>>], before, synced| CommitPoint {
        commit,
        files: model.to_vec(),
        after: vec![Vec::new(); n],
        before,
        synced,
    };
    let mut cur = (acked == 0).then(|| point(0, &model, vec![Vec::new(); n], None));
    let mut syncs = 0u64;
    // Each file's states since the last commit, from its state at that commit.
    let mut since: Vec<Vec<Vec<u8>>> = vec![Vec::new(); n];
    for _ in 0..w.steps {
        let s = plan.next();
        apply(&mut model, &s);
        if let Some(d) = &model[s.file] {
            if let Some(p) = &mut cur {
                p.after[s.file].push(d.clone());
            }
            since[s.file].push(d.clone());
        }
        if s.sync {
            syncs += 1;
            if let Some(p) = cur.take() {
                if !f(&p) {
                    return;
                }
            }
            let at: Vec<Vec<Vec<u8>>> = model.iter().map(|m| m.iter().cloned().collect()).collect();
            let before = std::mem::replace(&mut since, at);
            if syncs >= acked {
                cur = Some(point(syncs, &model, before, Some(s.file)));
            }
        }
    }
    // the writer's unmount commits once more
    if let Some(p) = cur {
        f(&p);
    }
}

/// How a file found on the volume matches its state at a commit point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Match {
    /// Byte for byte the state at the commit.
    Exact,
    /// The state at the commit, with some 512-byte sectors holding data an in-place
    /// overwrite after the commit wrote there.
    SectorMix,
}

/// Checks the files found (index → contents) against commit point `p`: exactly the files
/// that existed at the commit, each with its length at the commit, and every sector as it
/// was at the commit or as a later write of that file made it before the next commit.
/// Anything else (another file's data, zeros, a length from another commit) is a mismatch,
/// described in the error.
fn match_commit(p: &CommitPoint, found: &[Option<Vec<u8>>]) -> Result<Vec<Match>, String> {
    let mut out = Vec::new();
    for (f, (want, got)) in p.files.iter().zip(found).enumerate() {
        let c = p.commit;
        let (want, got) = match (want, got) {
            (None, None) => {
                out.push(Match::Exact);
                continue;
            }
            (None, Some(_)) => {
                return Err(format!("{} exists; commit {c} has no such file", name(f)))
            }
            (Some(_), None) => return Err(format!("{} is missing; commit {c} has it", name(f))),
            (Some(w), Some(g)) => (w, g),
        };
        if want.len() != got.len() {
            return Err(format!(
                "{}: {} bytes; {} bytes at commit {c}",
                name(f),
                got.len(),
                want.len()
            ));
        }
        if want == got {
            out.push(Match::Exact);
            continue;
        }
        for start in (0..got.len()).step_by(SECTOR) {
            let r = start..(start + SECTOR).min(got.len());
            let seen = |states: &[Vec<u8>]| {
                states
                    .iter()
                    .any(|s| s.get(r.clone()) == Some(&got[r.clone()]))
            };
            let ok = want[r.clone()] == got[r.clone()]
                || seen(&p.after[f])
                || (p.synced.is_some_and(|s| s != f) && seen(&p.before[f]));
            if !ok {
                return Err(format!(
                    "{}: bytes {}..{} are neither its data at commit {c} nor data written \
                     there before the next commit (nor, in a file the commit's fsync did not \
                     name, data from the commit before on)",
                    name(f),
                    r.start,
                    r.end
                ));
            }
        }
        out.push(Match::SectorMix);
    }
    Ok(out)
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
    let files = replay.map_or(0, |(w, _)| w.files.max(1));
    let mut found: Vec<Option<Vec<u8>>> = vec![None; files];
    let mut shown: Vec<(String, Vec<u8>)> = Vec::new();
    for n in &names {
        let ino = fs.lookup(ROOT, n, &c)?.ino;
        let data = read_file(&fs, ino)?;
        let text = String::from_utf8_lossy(n).into_owned();
        match text.strip_prefix('f').and_then(|i| i.parse::<usize>().ok()) {
            Some(i) if i < files && name(i) == text => found[i] = Some(data.clone()),
            _ if replay.is_some() => {
                ok = false;
                out(format_args!(
                    "UNEXPECTED {text}: the workload makes no such file"
                ));
            }
            _ => {}
        }
        shown.push((text, data));
    }
    let mut verdicts: Vec<&str> = vec!["-"; shown.len()];
    if let Some((w, acked)) = replay {
        // The volume must be at one commit from the acknowledged one on, for all files at
        // once (commits are global). Files only grow and are never removed, so once a
        // commit has a file the volume lacks, or a longer one, no later commit can match.
        // Why each commit tried does not fit, for the report.
        let mut misfits: Vec<(u64, String)> = Vec::new();
        let mut matched: Option<(u64, Vec<Match>)> = None;
        for_each_commit(w, acked, |p| {
            if p.commit == acked {
                // The replayed acknowledged state, for the host to compare with the ACK
                // lines it saw.
                for (f, d) in p.files.iter().enumerate() {
                    if let Some(d) = d {
                        out(format_args!(
                            "ACKED {} {} {:08x}",
                            name(f),
                            d.len(),
                            crc32c::crc32c(d)
                        ));
                    }
                }
            }
            match match_commit(p, &found) {
                Ok(m) => {
                    matched = Some((p.commit, m));
                    false
                }
                Err(e) => {
                    misfits.push((p.commit, e));
                    let beyond = p.files.iter().zip(&found).any(|(w, g)| match (w, g) {
                        (Some(_), None) => true,
                        (Some(w), Some(g)) => w.len() > g.len(),
                        _ => false,
                    });
                    !beyond
                }
            }
        });
        match matched {
            Some((commit, m)) => {
                out(format_args!("COMMIT {commit} acked={acked}"));
                for (i, (text, _)) in shown.iter().enumerate() {
                    let f = text
                        .strip_prefix('f')
                        .and_then(|i| i.parse::<usize>().ok())
                        .filter(|&f| f < files);
                    verdicts[i] = match f.map(|f| m[f]) {
                        Some(Match::Exact) if commit == acked => "acked",
                        Some(Match::Exact) => "later",
                        Some(Match::SectorMix) => "sector-mix",
                        None => "UNEXPECTED",
                    };
                }
            }
            None => {
                ok = false;
                out(format_args!(
                    "NO-COMMIT acked={acked}: the files match no commit from the acknowledged \
                     one on{}",
                    if misfits.is_empty() {
                        ": the workload has no such commit"
                    } else {
                        ""
                    }
                ));
                for (c, e) in &misfits {
                    out(format_args!("NO-COMMIT-AT {c}: {e}"));
                }
                verdicts.iter_mut().for_each(|v| *v = "MISMATCH");
            }
        }
    }
    for ((text, data), v) in shown.iter().zip(&verdicts) {
        out(format_args!(
            "FILE {text} {} {:08x} {v}",
            data.len(),
            crc32c::crc32c(data)
        ));
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
        Cmd::Replace { vol, rounds } => replace(&vol, rounds).map(|_| true),
        Cmd::CheckReplace { vol, acked } => check_replace(&vol, acked),
        Cmd::WriteDir { dir, w } => write_dir(&dir, w).map(|_| true),
        Cmd::CheckDir { dir, w, acked } => check_dir(&dir, w, acked),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn point(files: Vec<Option<Vec<u8>>>, after: Vec<Vec<Vec<u8>>>) -> CommitPoint {
        let n = files.len();
        CommitPoint {
            commit: 3,
            files,
            after,
            before: vec![Vec::new(); n],
            synced: None,
        }
    }

    #[test]
    fn a_commit_matches_exactly_or_by_sector() {
        let old = vec![1u8; 2048];
        let mut new = old.clone();
        new[512..1024].fill(2);
        new[1500] = 3;
        let p = point(
            vec![Some(old.clone()), None],
            vec![vec![new.clone()], vec![]],
        );
        assert_eq!(
            match_commit(&p, &[Some(old.clone()), None]),
            Ok(vec![Match::Exact; 2])
        );
        // sector 1 new, sector 2 old: a torn overwrite
        let mut mix = old.clone();
        mix[512..1024].fill(2);
        assert_eq!(
            match_commit(&p, &[Some(mix), None]).unwrap()[0],
            Match::SectorMix
        );
        // half a sector new is not a sector from any state
        let mut torn = old.clone();
        torn[512..768].fill(2);
        assert!(match_commit(&p, &[Some(torn), None])
            .unwrap_err()
            .contains("bytes 512..1024"));
        // zeros, another length, a file the commit has not, a missing file
        let mut zeros = old.clone();
        zeros[0..512].fill(0);
        assert!(match_commit(&p, &[Some(zeros), None]).is_err());
        assert!(match_commit(&p, &[Some(vec![1u8; 1024]), None])
            .unwrap_err()
            .contains("1024 bytes; 2048 bytes at commit 3"));
        assert!(match_commit(&p, &[Some(old.clone()), Some(vec![])])
            .unwrap_err()
            .contains("f1 exists"));
        assert!(match_commit(&p, &[None, None])
            .unwrap_err()
            .contains("f0 is missing"));
    }

    #[test]
    fn only_a_file_the_fsync_did_not_name_may_show_overwrites_lost() {
        let old = vec![1u8; 1024];
        let new = vec![2u8; 1024];
        // both files overwritten between the commit before and this one; f1 was synced
        let mut p = point(
            vec![Some(new.clone()), Some(new.clone())],
            vec![vec![], vec![]],
        );
        p.before = vec![
            vec![old.clone(), new.clone()],
            vec![old.clone(), new.clone()],
        ];
        p.synced = Some(1);
        let lost = Some(old.clone());
        assert_eq!(
            match_commit(&p, &[lost.clone(), Some(new.clone())]).unwrap()[0],
            Match::SectorMix
        );
        assert!(match_commit(&p, &[Some(new.clone()), lost.clone()])
            .unwrap_err()
            .contains("f1: bytes 0..512"));
        // every file's overwrites are ordered where no fsync names one
        p.synced = None;
        assert!(match_commit(&p, &[lost, Some(new)]).is_err());
    }

    #[test]
    fn another_files_data_never_matches() {
        let a = vec![1u8; 1024];
        let b = vec![2u8; 1024];
        let p = point(
            vec![Some(a.clone()), Some(b.clone())],
            vec![vec![], vec![vec![4u8; 1024]]],
        );
        // f0 showing f1's later data
        assert!(match_commit(&p, &[Some(vec![4u8; 1024]), Some(b)]).is_err());
    }

    #[test]
    fn commit_points_start_at_the_acknowledged_fsync() {
        let w = Workload {
            seed: 7,
            files: 3,
            steps: 400,
        };
        let mut seen = Vec::new();
        for_each_commit(w, 2, |p| {
            seen.push(p.commit);
            // the writes between two commits are what `after` holds
            assert!(p.after.iter().map(Vec::len).sum::<usize>() >= 1);
            seen.len() < 5
        });
        assert_eq!(seen, [2, 3, 4, 5, 6]);
        // the state at a commit equals the writer's model after that many fsyncs
        let mut plan = Plan::new(7, 3);
        let mut model = vec![None; 3];
        let mut syncs = 0;
        while syncs < 4 {
            let s = plan.next();
            apply(&mut model, &s);
            syncs += u64::from(s.sync);
        }
        let mut at4 = None;
        for_each_commit(w, 4, |p| {
            at4 = Some(p.files.clone());
            false
        });
        assert_eq!(at4, Some(model));
    }
}
