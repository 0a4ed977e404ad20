//! `numaio mount`: serve a numaio-fs volume at a mount point through FUSE.
//!
//! Without `-f` the command starts itself again in the foreground as a detached server and
//! exits 0 only once the mount point answers as a FUSE mount; errors found before that are
//! checked here first, so they reach the terminal.

use anyhow::{bail, Context};
use numaio_fs::volume::Volume;
use numaio_fs::MountOptions;
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How long a detached server may take to answer before the command gives up.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// statfs f_type of a FUSE mount.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

#[derive(clap::Args)]
#[command(after_help = crate::exit::HELP)]
pub struct MountArgs {
    /// Stay in the foreground (serve until unmounted or SIGTERM/SIGINT).
    #[arg(short = 'f')]
    foreground: bool,
    /// Mount options, comma-separated: ro, rw, allow_other, default_permissions.
    #[arg(short = 'o', value_name = "OPTS")]
    options: Vec<String>,
    /// Print JSON: {"schema_version":1,"mountpoint","devices":[...],"pid","read_only"}.
    #[arg(long)]
    json: bool,
    /// The volume's devices (any order), then the mount point.
    #[arg(required = true, num_args = 2.., value_name = "DEV... MOUNTPOINT")]
    paths: Vec<PathBuf>,
}

#[derive(Serialize)]
struct Mounted<'a> {
    schema_version: u32,
    mountpoint: &'a Path,
    devices: &'a [PathBuf],
    pid: u32,
    read_only: bool,
}

struct Opts {
    read_only: bool,
    allow_other: bool,
    default_permissions: bool,
}

fn parse_opts(list: &[String]) -> anyhow::Result<Opts> {
    let mut o = Opts {
        read_only: false,
        allow_other: false,
        default_permissions: false,
    };
    for opt in list.iter().flat_map(|s| s.split(',')) {
        match opt {
            "" => {}
            "ro" => o.read_only = true,
            "rw" => o.read_only = false,
            "allow_other" => o.allow_other = true,
            "default_permissions" => o.default_permissions = true,
            other => bail!(
                "unknown mount option {other:?}: use ro, rw, allow_other, default_permissions"
            ),
        }
    }
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

pub fn run(a: MountArgs) -> anyhow::Result<ExitCode> {
    let opts = parse_opts(&a.options)?;
    let (devs, mp) = a.paths.split_at(a.paths.len() - 1);
    let mp = &mp[0];
    let dev_before = check_mountpoint(mp)?;
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing: load the fuse module (modprobe fuse)");
    }
    // Opening takes the exclusive lock on every device: a volume mounted elsewhere fails here.
    let vol = Volume::open(devs, opts.read_only)
        .with_context(|| format!("opening the volume on {}", show(devs)))?;
    if !a.foreground {
        drop(vol);
        return detach(&a, devs, mp, dev_before, opts.read_only);
    }
    let fs = vol
        .mount(MountOptions {
            read_only: opts.read_only,
        })
        .context("mounting the volume (run `numaio fsck` on its devices)")?;
    let mut mo = vec![
        numaio_fuse::fuser::MountOption::FSName(
            std::fs::canonicalize(&devs[0])
                .unwrap_or_else(|_| devs[0].clone())
                .display()
                .to_string(),
        ),
        numaio_fuse::fuser::MountOption::Subtype("numaio".into()),
    ];
    if opts.read_only {
        mo.push(numaio_fuse::fuser::MountOption::RO);
    }
    if opts.default_permissions {
        mo.push(numaio_fuse::fuser::MountOption::DefaultPermissions);
    }
    let mut cfg = numaio_fuse::fuser::Config::default();
    cfg.mount_options = mo;
    // One serving thread per NUMA node (at least two), each on its own cloned /dev/fuse fd,
    // so requests from different nodes do not queue behind one reader.
    cfg.n_threads = Some(node_count().max(2));
    cfg.clone_fd = true;
    if opts.allow_other {
        cfg.acl = numaio_fuse::fuser::SessionACL::All;
    }
    let session = numaio_fuse::fuser::Session::new(numaio_fuse::NumaFs::new(fs), mp, &cfg)
        .with_context(|| {
            format!(
                "mounting FUSE at {} (needs root or /dev/fuse access)",
                mp.display()
            )
        })?;
    let bg = session
        .spawn()
        .with_context(|| format!("starting the FUSE server for {}", mp.display()))?;
    let term = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, term.clone()).context("installing signal handlers")?;
    }
    // Serve until a signal asks to stop or the mount goes away (`numaio umount`, umount(8)).
    loop {
        if bg.guard.is_finished() {
            break;
        }
        if term.load(std::sync::atomic::Ordering::Relaxed) {
            bg.umount_and_join()
                .with_context(|| format!("unmounting {}", mp.display()))?;
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bg.join()
        .with_context(|| format!("serving {}", mp.display()))?;
    Ok(ExitCode::SUCCESS)
}

fn show(devs: &[PathBuf]) -> String {
    devs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn detach(
    a: &MountArgs,
    devs: &[PathBuf],
    mp: &Path,
    dev_before: u64,
    read_only: bool,
) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("finding this program to start the server")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("mount").arg("-f");
    for o in &a.options {
        cmd.arg("-o").arg(o);
    }
    cmd.arg("--").args(devs).arg(mp);
    // The server outlives this command: it must not hold the caller's output pipes open.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe; it detaches the server from our session.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the mount server")?;
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
    let said = if a.json {
        crate::output::print_json(&Mounted {
            schema_version: 1,
            mountpoint: mp,
            devices: devs,
            pid,
            read_only,
        })
    } else {
        crate::outln!(
            "mounted {} at {} (server pid {pid})",
            show(devs),
            mp.display()
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

/// NUMA nodes on this machine (1 where sysfs does not say).
fn node_count() -> usize {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.strip_prefix("node")
                        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(1)
        .max(1)
}
