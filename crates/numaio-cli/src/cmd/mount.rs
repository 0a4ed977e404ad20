//! `numaio mount`: serve a numaio-fs volume at a mount point through FUSE.
//!
//! The volume is on devices (block devices or files `numaio mkfs` formatted), on persistent
//! memory zones (`--zone NODE:SIZE:PATH`, mapped), or in RAM zones (`--zone NODE:SIZE`: memory
//! bound to each node, formatted at mount and gone at unmount, a per-node tmpfs).
//!
//! Without `-f` the command starts itself again in the foreground as a detached server and
//! exits 0 only once the mount point answers as a FUSE mount; errors found before that are
//! checked here first, so they reach the terminal.

use anyhow::{bail, Context};
use numaio_fs::store::ZoneSpec;
use numaio_fs::volume::{Volume, ZoneVolume};
use numaio_fs::{Fs, MountOptions, PlacementPolicy};
use numaio_fuse::{MountConfig, TransportChoice};
use serde::Serialize;
use std::io::BufRead;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How long a detached server may take to answer before the command gives up.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The mount source of a RAM zone volume, followed by the server's pid.
pub const RAM_SOURCE: &str = "numaio-ram:";
/// statfs f_type of a FUSE mount.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

#[derive(clap::Args)]
#[command(after_help = crate::exit::HELP)]
pub struct MountArgs {
    /// Stay in the foreground (serve until unmounted or SIGTERM/SIGINT).
    #[arg(short = 'f')]
    foreground: bool,
    /// Mount options, comma-separated: ro, rw, allow_other (users other than the one
    /// mounting may enter), default_permissions (the kernel checks the mode bits; without it
    /// the server does), noallow_other and nodefault_permissions to turn those off,
    /// threads=N (serving threads per NUMA node, 1 to 256, default 8: each serves one request
    /// at a time, so a request waiting for its device holds up none of the others while
    /// threads are free), uring_depth=N (io_uring ring entries per CPU, 1 to 64, default 8:
    /// the requests issued on one CPU that the server holds at once), and
    /// commit=SECS. Run as root, a mount has allow_other,default_permissions unless turned
    /// off (so services such as postgres can use it); otherwise neither, FUSE's default (only
    /// the mounting user). commit=SECS commits everything every SECS seconds (default 5, 0
    /// means the default, at most 86400; ext4's commit=), so a crash of the server or the
    /// machine loses at most the last SECS seconds of changes nobody synced. fsync of a file
    /// or a directory commits everything at once (`numaio fs sync MOUNTPOINT` or `sync
    /// MOUNTPOINT` do that). A plain `sync` or syncfs(2) cannot: Linux sends FUSE's SYNCFS
    /// only to virtiofs, never to a /dev/fuse server, so after `sync` everything older than
    /// SECS is durable, not more (docs/fs.md, Durability). writeback_cache keeps buffered
    /// writes in the kernel's page cache until written back (fsync, close, memory pressure
    /// or about 30 s later) instead of one request per write; it brings
    /// default_permissions, and per-node write accounting then names the serving thread's
    /// node for most writes (docs/fs.md, Writeback cache). Off by default. noseek_holes has
    /// the kernel answer SEEK_DATA/SEEK_HOLE itself, as for files without holes (all data up
    /// to the end, as lseek(2) allows): no round trip to the server per such lseek, but
    /// `cp` and `tar` then read every hole through the mount to find it. seek_holes (the
    /// default) reports the volume's holes, as ext4 does. local_wakeups (the default) has
    /// each io-uring ring thread wait under SCHED_IDLE, so the scheduler wakes the caller it
    /// answers on the ring's CPU instead of on an idle one; nolocal_wakeups turns that off
    /// (docs/fs.md, Local wakeups).
    #[arg(short = 'o', value_name = "OPTS")]
    options: Vec<String>,
    /// How the kernel hands requests over: auto (the default: io-uring where the kernel has
    /// it and /sys/module/fuse/parameters/enable_uring is Y, else classic; never flips the
    /// switch), classic (/dev/fuse), or io-uring (one ring per CPU, Linux 6.14+; as root
    /// turns on enable_uring if needed). On a 2-vCPU host io-uring's round trip was 1.4-1.8x
    /// shorter than classic's under load and equal when idle (docs/fs.md, FUSE transport).
    #[arg(long, value_enum, default_value = "auto", value_name = "MODE")]
    fuse_mode: FuseModeArg,
    /// Print JSON: {"schema_version":1,"mountpoint","devices":[...],"pid","read_only",
    /// "fuse_mode":"classic"|"io_uring","options":[...]}; "devices" are the paths given, or
    /// the zones as NODE:BYTES[:PATH]; "options" the effective mount options ("ro" or "rw",
    /// then "allow_other" and "default_permissions" where in effect).
    #[arg(long)]
    json: bool,
    /// Move a requesting thread that keeps touching data on another node to that node's
    /// CPUs (migrate-thread), or to the node of the block's first reader (first-reader),
    /// with the engine's hysteresis (4 consecutive remote requests, then a cooldown of 64).
    /// Never pid 1, kernel threads, or threads whose affinity was narrowed by someone else.
    #[arg(long, value_name = "MODE", value_parser = parse_move_work)]
    move_work: Option<numaio_engine::move_work::MoveWork>,
    /// With --move-work: also move threads whose affinity someone else narrowed.
    #[arg(long, requires = "move_work")]
    move_work_override: bool,
    /// A memory zone instead of devices; repeatable. NODE:SIZE is RAM bound to NODE: the
    /// zones are formatted as a new, empty volume at mount and their contents are gone at
    /// unmount. NODE:SIZE:PATH is a persistent zone formatted by `numaio mkfs --zone` (a
    /// /dev/pmemN or a file on a DAX file system), mapped and kept.
    #[arg(long, value_name = "NODE:SIZE[:PATH]", value_parser = super::mkfs::parse_zone)]
    zone: Vec<ZoneSpec>,
    /// Placement of a RAM zone volume: writer-local (default), directory, interleave,
    /// stripe:K[:CHUNK] or fixed:N. A formatted volume keeps what mkfs gave it.
    #[arg(long, value_name = "POLICY", requires = "zone", value_parser = super::mkfs::parse_policy)]
    placement: Option<PlacementPolicy>,
    /// The volume's devices (any order), then the mount point; with --zone only the mount
    /// point.
    #[arg(required = true, num_args = 1.., value_name = "DEV... MOUNTPOINT")]
    paths: Vec<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FuseModeArg {
    Auto,
    Classic,
    IoUring,
}

impl FuseModeArg {
    fn name(self) -> &'static str {
        match self {
            FuseModeArg::Auto => "auto",
            FuseModeArg::Classic => "classic",
            FuseModeArg::IoUring => "io-uring",
        }
    }
}

#[derive(Serialize)]
struct Mounted<'a> {
    schema_version: u32,
    mountpoint: &'a Path,
    devices: &'a [String],
    pid: u32,
    read_only: bool,
    fuse_mode: &'a str,
    options: Vec<&'static str>,
}

/// The transport to ask for, checked before the server starts so that errors reach the
/// terminal; io-uring asked for explicitly turns on the kernel's switch (as root) if off.
fn resolve_mode(m: FuseModeArg) -> anyhow::Result<TransportChoice> {
    use numaio_fuse::uring::{self, KernelSupport};
    let choice = match m {
        FuseModeArg::Classic => TransportChoice::Classic,
        FuseModeArg::Auto => TransportChoice::Auto,
        FuseModeArg::IoUring => {
            if uring::kernel_support() == KernelSupport::Disabled {
                uring::enable_in_kernel().with_context(|| {
                    format!(
                        "turning on FUSE over io_uring by writing Y to {} (needs root; \
                         or use --fuse-mode classic or auto)",
                        uring::ENABLE_URING
                    )
                })?;
                crate::warnln!(
                    "turned on FUSE over io_uring in the kernel ({} = Y)",
                    uring::ENABLE_URING
                );
            }
            TransportChoice::IoUring
        }
    };
    choice
        .resolve()
        .map_err(|e| anyhow::anyhow!("{e} (--fuse-mode classic or auto)"))?;
    Ok(choice)
}

#[derive(Clone)]
struct Opts {
    read_only: bool,
    allow_other: bool,
    default_permissions: bool,
    writeback_cache: bool,
    seek_holes: bool,
    local_wakeups: bool,
    /// The volume's mount options, the commit interval validated.
    mount: MountOptions,
    /// How FUSE serves it: serving threads and ring depth validated.
    fuse: MountConfig,
}

impl Opts {
    /// The effective options as `-o` would name them.
    fn names(&self) -> Vec<&'static str> {
        let mut v = vec![if self.read_only { "ro" } else { "rw" }];
        if self.allow_other {
            v.push("allow_other");
        }
        if self.default_permissions {
            v.push("default_permissions");
        }
        if self.writeback_cache {
            v.push("writeback_cache");
        }
        if !self.seek_holes {
            v.push("noseek_holes");
        }
        if !self.local_wakeups {
            v.push("nolocal_wakeups");
        }
        v
    }
}

fn parse_move_work(s: &str) -> Result<numaio_engine::move_work::MoveWork, String> {
    use numaio_engine::move_work::MoveWork;
    match s {
        "migrate-thread" => Ok(MoveWork::MigrateThread),
        "first-reader" => Ok(MoveWork::FirstReader),
        _ => Err(format!(
            "invalid move-work mode {s:?}: use migrate-thread or first-reader"
        )),
    }
}

/// The options `list` asks for; `as_root` turns allow_other and default_permissions on
/// unless the list turns them off: a mount made by root is meant for services running as
/// other users, and the kernel's own permission checks then apply to them.
fn parse_opts(list: &[String], as_root: bool) -> anyhow::Result<Opts> {
    let mut o = Opts {
        read_only: false,
        allow_other: as_root,
        default_permissions: as_root,
        writeback_cache: false,
        seek_holes: true,
        local_wakeups: true,
        mount: MountOptions::default(),
        fuse: MountConfig::new(),
    };
    let mut commit = numaio_fs::DEFAULT_COMMIT_SECS;
    let mut permissions_named = false;
    let number = |opt: &str, v: &str, what: &str| -> anyhow::Result<usize> {
        v.parse().map_err(|_| {
            anyhow::anyhow!(
                "mount option {opt:?}: give the {what} as a whole number, e.g. {}=8",
                &opt[..opt.find('=').unwrap_or(0)]
            )
        })
    };
    for opt in list.iter().flat_map(|s| s.split(',')) {
        match opt {
            "" => {}
            "ro" => o.read_only = true,
            "rw" => o.read_only = false,
            "allow_other" => o.allow_other = true,
            "noallow_other" => o.allow_other = false,
            "default_permissions" => {
                o.default_permissions = true;
                permissions_named = true;
            }
            "nodefault_permissions" => {
                o.default_permissions = false;
                permissions_named = true;
            }
            "writeback_cache" => o.writeback_cache = true,
            "nowriteback_cache" => o.writeback_cache = false,
            "seek_holes" => o.seek_holes = true,
            "noseek_holes" => o.seek_holes = false,
            "local_wakeups" => o.local_wakeups = true,
            "nolocal_wakeups" => o.local_wakeups = false,
            _ if opt.starts_with("threads=") => {
                let n = number(opt, &opt["threads=".len()..], "serving threads per node")?;
                o.fuse = o
                    .fuse
                    .with_threads_per_node(n)
                    .map_err(|e| anyhow::anyhow!("-o {opt}: {e}"))?;
            }
            _ if opt.starts_with("uring_depth=") => {
                let n = number(opt, &opt["uring_depth=".len()..], "io_uring depth")?;
                o.fuse = o
                    .fuse
                    .with_uring_depth(n)
                    .map_err(|e| anyhow::anyhow!("-o {opt}: {e}"))?;
            }
            _ if opt.starts_with("commit=") => {
                let v = &opt["commit=".len()..];
                commit = v.parse().map_err(|_| {
                    anyhow::anyhow!(
                        "mount option {opt:?}: give the commit interval in whole seconds, \
                         e.g. commit=5"
                    )
                })?;
            }
            other => bail!(
                "unknown mount option {other:?}: use ro, rw, allow_other, noallow_other, \
                 default_permissions, nodefault_permissions, writeback_cache, nowriteback_cache, \
                 seek_holes, noseek_holes, local_wakeups, nolocal_wakeups, threads=N, \
                 uring_depth=N, commit=SECS"
            ),
        }
    }
    // The writeback cache needs the kernel to check permissions (see
    // MountConfig::with_writeback_cache): it brings default_permissions unless turned off.
    if o.writeback_cache && !o.default_permissions {
        if permissions_named {
            bail!("mount option writeback_cache needs default_permissions");
        }
        o.default_permissions = true;
    }
    o.fuse = o
        .fuse
        .with_writeback_cache(o.writeback_cache)
        .with_seek_holes(o.seek_holes)
        .with_local_wakeups(o.local_wakeups);
    o.mount = MountOptions {
        read_only: o.read_only,
        ..Default::default()
    }
    .with_commit_secs(commit)
    .map_err(|e| match e {
        numaio_fs::FsError::Invalid(m) => anyhow::anyhow!("-o {m}"),
        e => e.into(),
    })?;
    Ok(o)
}

fn is_fuse(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()))
    else {
        return false;
    };
    // SAFETY: statfs writes into a zeroed struct of the right type; the path is NUL-terminated.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type as i64 == FUSE_SUPER_MAGIC
    }
}

/// The mount point must be an empty directory that is not itself a mount.
fn check_mountpoint(mp: &Path) -> anyhow::Result<u64> {
    let md = std::fs::metadata(mp).with_context(|| {
        format!(
            "mount point {}: cannot stat it (create the directory first)",
            mp.display()
        )
    })?;
    if !md.is_dir() {
        bail!("mount point {} is not a directory", mp.display());
    }
    let parent = mp.join("..");
    if let Ok(pm) = std::fs::metadata(&parent) {
        if pm.dev() != md.dev() || is_fuse(mp) {
            bail!(
                "mount point {} is already in use (a mount is there: `numaio umount {}` first)",
                mp.display(),
                mp.display()
            );
        }
    }
    if std::fs::read_dir(mp)
        .with_context(|| format!("mount point {}: cannot list it", mp.display()))?
        .next()
        .is_some()
    {
        bail!(
            "mount point {} is not empty: mount on an empty directory",
            mp.display()
        );
    }
    Ok(md.dev())
}

/// What the volume is on, once opened (and locked where it persists).
enum Opened {
    Devices(Volume),
    Zones(ZoneVolume),
}

impl Opened {
    fn mount(&self, opts: MountOptions) -> Result<Fs, numaio_fs::FsError> {
        match self {
            Opened::Devices(v) => v.mount(opts),
            Opened::Zones(z) => z.mount(opts),
        }
    }
}

/// Checks the arguments that say where the volume is; the RAM zones' nodes and sizes too,
/// since a detached server could not report them.
fn check_source(a: &MountArgs, devs: &[PathBuf], read_only: bool) -> anyhow::Result<()> {
    if a.zone.is_empty() {
        if devs.is_empty() {
            crate::usage_bail!(
                "give the volume's devices, then the mount point (or --zone NODE:SIZE[:PATH] \
                 and the mount point)"
            );
        }
        return Ok(());
    }
    if !devs.is_empty() {
        crate::usage_bail!("give either devices ({}) or --zone, not both", show(devs));
    }
    let ram = a.zone.iter().filter(|z| z.path.is_none()).count();
    if ram != 0 && ram != a.zone.len() {
        crate::usage_bail!(
            "--zone: RAM zones (NODE:SIZE) and persistent ones (NODE:SIZE:PATH) cannot form \
             one volume; give only one kind"
        );
    }
    if ram == 0 {
        if a.placement.is_some() {
            crate::usage_bail!(
                "--placement applies to RAM zones only: a formatted volume keeps the placement \
                 mkfs gave it"
            );
        }
        return Ok(());
    }
    if read_only {
        crate::usage_bail!("-o ro: a RAM zone volume starts empty; mount it read-write");
    }
    let topo = numaio_sys::Topology::detect().context("reading the NUMA topology from sysfs")?;
    for z in &a.zone {
        let node = super::mkfs::existing_node(&topo, &format!("--zone {z}"), z.node)?;
        let want: u64 = a
            .zone
            .iter()
            .filter(|o| o.node == z.node)
            .map(|o| o.bytes)
            .sum();
        if node.mem.mem_free_bytes > 0 && want > node.mem.mem_free_bytes {
            crate::usage_bail!(
                "--zone {z}: node {} has {} free, the zones on it want {}: give smaller zones",
                z.node,
                crate::output::human_bytes(node.mem.mem_free_bytes),
                crate::output::human_bytes(want)
            );
        }
    }
    Ok(())
}

pub fn run(a: MountArgs) -> anyhow::Result<ExitCode> {
    // SAFETY: geteuid has no preconditions.
    let opts = parse_opts(&a.options, unsafe { libc::geteuid() } == 0)?;
    let (devs, mp) = a.paths.split_at(a.paths.len() - 1);
    let mp = &mp[0];
    check_source(&a, devs, opts.read_only)?;
    let dev_before = check_mountpoint(mp)?;
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing: load the fuse module (modprobe fuse)");
    }
    let want = resolve_mode(a.fuse_mode)?;
    let names: Vec<String> = if a.zone.is_empty() {
        devs.iter().map(|d| d.display().to_string()).collect()
    } else {
        a.zone.iter().map(ToString::to_string).collect()
    };
    let ram = a.zone.first().is_some_and(|z| z.path.is_none());
    let shown = shown(&a.zone, devs);
    if ram && !a.foreground {
        // The zones are the server's memory: only the server maps them.
        return detach(&a, mp, &names, dev_before, opts);
    }
    // Opening takes the exclusive lock on every device: a volume mounted elsewhere fails here.
    let vol = if a.zone.is_empty() {
        Opened::Devices(
            Volume::open(devs, opts.read_only)
                .with_context(|| format!("opening the volume on {}", show(devs)))?,
        )
    } else if ram {
        let policy = a.placement.clone().unwrap_or(PlacementPolicy::WriterLocal);
        Opened::Zones(
            ZoneVolume::create_ram(&a.zone, policy).context("making a volume in RAM zones")?,
        )
    } else {
        Opened::Zones(
            ZoneVolume::open_persistent(&a.zone)
                .with_context(|| format!("opening the zone volume on {}", names.join(", ")))?,
        )
    };
    if !a.foreground {
        drop(vol);
        return detach(&a, mp, &names, dev_before, opts);
    }
    if let Opened::Devices(v) = &vol {
        // The kernel's page cache of the mount keeps file data: the devices' page cache
        // drops its copy (docs/fs.md, Mount: caching).
        v.store
            .cache_once(true)
            .context("setting up the devices' page cache")?;
    }
    let fs = vol
        .mount(opts.mount)
        .context("mounting the volume (run `numaio fsck` on its devices)")?;
    let fs_name = match (&vol, devs.first()) {
        // `numaio umount` waits for this process to exit when the source names no device.
        (Opened::Zones(_), _) if ram => format!("{RAM_SOURCE}{}", std::process::id()),
        (Opened::Zones(z), _) => z.devices[0].path.display().to_string(),
        (Opened::Devices(_), Some(d)) => std::fs::canonicalize(d)
            .unwrap_or_else(|_| d.clone())
            .display()
            .to_string(),
        (Opened::Devices(_), None) => "numaio".to_string(),
    };
    let mut cfg = opts
        .fuse
        .clone()
        .with_transport(want)
        .with_read_only(opts.read_only)
        .with_allow_other(opts.allow_other)
        .with_default_permissions(opts.default_permissions)
        .with_fs_name(&fs_name)
        .and_then(|c| c.with_subtype("numaio"))
        .with_context(|| format!("mounting {}", mp.display()))?;
    if let Some(mode) = a.move_work {
        cfg = cfg.with_move_work(mode, a.move_work_override);
    }
    // Handlers before the mount: whoever started us may signal as soon as the readiness
    // line is out, and the default action would leave the mount behind without a server.
    let term = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, term.clone()).context("installing signal handlers")?;
    }
    let m = numaio_fuse::mount(fs, mp, &cfg).map_err(|e| match e {
        numaio_fuse::MountError::UringRefused { .. }
        | numaio_fuse::MountError::UringStart { .. }
        | numaio_fuse::MountError::UringUnavailable(_) => {
            anyhow::anyhow!("{e} (--fuse-mode classic or auto)")
        }
        e => anyhow::Error::new(e),
    })?;
    for w in m.warnings() {
        crate::warnln!("{}: {w}", mp.display());
    }
    let mode = m.mode();
    // The readiness line: the detaching parent reads the mode from it.
    let pid = std::process::id();
    if a.json {
        crate::output::print_json(&Mounted {
            schema_version: 1,
            mountpoint: mp,
            devices: &names,
            pid,
            read_only: opts.read_only,
            fuse_mode: mode.as_str(),
            options: opts.names(),
        })?;
    } else {
        crate::outln!(
            "serving {shown} at {} (fuse mode {}, options {}, pid {pid})",
            mp.display(),
            mode.as_str(),
            opts.names().join(",")
        )?;
    }
    crate::output::flush_out()?;
    // Serve until a signal asks to stop or the mount goes away (`numaio umount`, umount(8)).
    while !m.is_finished() {
        if term.load(std::sync::atomic::Ordering::Relaxed) {
            m.unmount()
                .with_context(|| format!("unmounting {}", mp.display()))?;
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    m.wait()?;
    Ok(ExitCode::SUCCESS)
}

/// The volume's devices or zones for people.
fn shown(zones: &[ZoneSpec], devs: &[PathBuf]) -> String {
    if zones.is_empty() {
        return show(devs);
    }
    zones
        .iter()
        .map(|z| {
            let size = crate::output::human_bytes(z.bytes);
            match &z.path {
                None => format!("RAM zone {size} on node {}", z.node),
                Some(p) => format!("zone {} ({size} on node {})", p.display(), z.node),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn show(devs: &[PathBuf]) -> String {
    devs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn detach(
    a: &MountArgs,
    mp: &Path,
    names: &[String],
    dev_before: u64,
    opts: Opts,
) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("finding this program to start the server")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("mount")
        .arg("-f")
        .arg("--json")
        .arg("--fuse-mode")
        .arg(a.fuse_mode.name());
    for o in &a.options {
        cmd.arg("-o").arg(o);
    }
    if let Some(m) = a.move_work {
        cmd.arg("--move-work").arg(m.to_string());
        if a.move_work_override {
            cmd.arg("--move-work-override");
        }
    }
    for z in &a.zone {
        cmd.arg("--zone").arg(z.to_string());
    }
    if let Some(p) = &a.placement {
        cmd.arg("--placement").arg(p.to_string());
    }
    let (devs, _) = a.paths.split_at(a.paths.len() - 1);
    cmd.arg("--").args(devs).arg(mp);
    // The server outlives this command: it must not hold the caller's output pipes open.
    // Its stdout is a pipe to us only, for the readiness line.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe; it detaches the server from our session.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the mount server")?;
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
    }
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            bail!(
                "the mount server for {} exited ({st}) before the mount answered: \
                 run `numaio mount -f ...` to see why",
                mp.display()
            );
        }
        if let Ok(md) = std::fs::metadata(mp) {
            if md.dev() != dev_before && is_fuse(mp) {
                break;
            }
        }
        if start.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            bail!(
                "the mount server for {} did not answer within {}s",
                mp.display(),
                START_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id();
    // The server prints its line right after the mount is up; a missing line means it
    // exited, which the next check of the mount would show.
    let line = rx
        .recv_timeout(START_TIMEOUT.saturating_sub(start.elapsed()))
        .unwrap_or_default();
    let fuse_mode = serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| v.get("fuse_mode")?.as_str().map(str::to_owned))
        .with_context(|| {
            format!(
                "the mount server for {} did not report its FUSE mode: run `numaio mount -f ...` to see why",
                mp.display()
            )
        })?;
    let said = if a.json {
        crate::output::print_json(&Mounted {
            schema_version: 1,
            mountpoint: mp,
            devices: names,
            pid,
            read_only: opts.read_only,
            fuse_mode: &fuse_mode,
            options: opts.names(),
        })
    } else {
        crate::outln!(
            "mounted {} at {} (fuse mode {fuse_mode}, options {}, server pid {pid})",
            shown(&a.zone, &a.paths[..a.paths.len() - 1]),
            mp.display(),
            opts.names().join(",")
        )
    }
    .and_then(|()| crate::output::flush_out());
    if let Err(e) = said {
        // Whoever started us cannot learn of the mount (a closed pipe included): take it
        // down again rather than leave a server nobody knows about. SIGTERM flushes and
        // unmounts.
        // SAFETY: signalling the server this command started and still owns.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        let _ = child.wait();
        bail!(
            "cannot report the mount of {} ({e:#}); the mount was undone",
            mp.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str], as_root: bool) -> Vec<&'static str> {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        parse_opts(&list, as_root).unwrap().names()
    }

    #[test]
    fn root_mounts_default_to_allow_other_and_default_permissions() {
        assert_eq!(
            names(&[], true),
            ["rw", "allow_other", "default_permissions"]
        );
        assert_eq!(names(&[], false), ["rw"]);
        assert_eq!(
            names(&["noallow_other"], true),
            ["rw", "default_permissions"]
        );
        assert_eq!(
            names(&["nodefault_permissions"], true),
            ["rw", "allow_other"]
        );
        assert_eq!(
            names(&["ro,allow_other", "nodefault_permissions"], true),
            ["ro", "allow_other"]
        );
        assert_eq!(
            names(&["allow_other,default_permissions"], false),
            ["rw", "allow_other", "default_permissions"]
        );
        // The last word wins.
        assert_eq!(
            names(&["noallow_other,allow_other"], false),
            ["rw", "allow_other"]
        );
        let e = parse_opts(&["acl".to_string()], true).err().unwrap();
        assert!(e.to_string().contains("nodefault_permissions"), "{e}");
    }

    #[test]
    fn serving_threads_and_ring_depth_are_mount_options() {
        let parse = |o: &str| parse_opts(&[o.to_string()], true);
        let d = parse("").unwrap().fuse;
        assert_eq!(
            (d.threads_per_node(), d.uring_depth()),
            (
                MountConfig::DEFAULT_THREADS_PER_NODE,
                numaio_fuse::uring::DEFAULT_DEPTH
            )
        );
        let o = parse("threads=3,uring_depth=16").unwrap().fuse;
        assert_eq!((o.threads_per_node(), o.uring_depth()), (3, 16));
        for (bad, says) in [
            ("threads=0", "1 to 256"),
            ("threads=257", "1 to 256"),
            ("uring_depth=0", "1 to 64"),
            ("uring_depth=65", "1 to 64"),
            ("threads=x", "whole number"),
            ("uring_depth=", "whole number"),
        ] {
            let e = parse(bad).err().unwrap().to_string();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
        // Not among the reported options, which name access and permissions only.
        assert_eq!(
            parse("threads=2").unwrap().names(),
            ["rw", "allow_other", "default_permissions"]
        );
    }

    #[test]
    fn writeback_cache_is_asked_for_and_brings_default_permissions() {
        let parse = |o: &str, root| parse_opts(&[o.to_string()], root);
        assert!(!parse("", true).unwrap().fuse.writeback_cache());
        let o = parse("writeback_cache", false).unwrap();
        assert!(o.fuse.writeback_cache());
        assert_eq!(o.names(), ["rw", "default_permissions", "writeback_cache"]);
        assert!(!parse("writeback_cache,nowriteback_cache", true)
            .unwrap()
            .fuse
            .writeback_cache());
        let e = parse("writeback_cache,nodefault_permissions", true)
            .err()
            .unwrap();
        assert!(e.to_string().contains("default_permissions"), "{e}");
    }

    #[test]
    fn seek_holes_is_on_unless_turned_off() {
        let parse = |o: &str| parse_opts(&[o.to_string()], false).unwrap();
        assert!(parse("").fuse.seek_holes());
        assert!(parse("seek_holes").fuse.seek_holes());
        let o = parse("noseek_holes");
        assert!(!o.fuse.seek_holes());
        assert_eq!(o.names(), ["rw", "noseek_holes"]);
        assert!(parse("noseek_holes,seek_holes").fuse.seek_holes());
    }

    #[test]
    fn local_wakeups_are_on_unless_turned_off() {
        let parse = |o: &str| parse_opts(&[o.to_string()], false).unwrap();
        assert!(parse("").fuse.local_wakeups());
        let o = parse("nolocal_wakeups");
        assert!(!o.fuse.local_wakeups());
        assert_eq!(o.names(), ["rw", "nolocal_wakeups"]);
        assert!(parse("nolocal_wakeups,local_wakeups").fuse.local_wakeups());
    }
}
