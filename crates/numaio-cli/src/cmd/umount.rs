//! `numaio umount`: unmount a numaio-fs FUSE mount. The server flushes and checkpoints the
//! volume (`Fs::unmount`) when the kernel tells it the mount is gone; this command waits for
//! the server to exit so that, once it returns 0, the volume is clean and its devices free.

use anyhow::{bail, Context};
use serde::Serialize;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(after_help = crate::exit::HELP)]
pub struct UmountArgs {
    /// Print JSON: {"schema_version":1,"mountpoint"}.
    #[arg(long)]
    json: bool,
    /// Where the volume is mounted.
    mountpoint: PathBuf,
}

#[derive(Serialize)]
struct Unmounted<'a> {
    schema_version: u32,
    mountpoint: &'a std::path::Path,
}

pub fn run(a: UmountArgs) -> anyhow::Result<ExitCode> {
    let mp = &a.mountpoint;
    let c = std::ffi::CString::new(mp.as_os_str().as_bytes())
        .with_context(|| format!("mount point {}: path holds a NUL byte", mp.display()))?;
    let source = mount_source(mp);
    if source.is_none() {
        bail!(
            "{} is not a numaio mount (no FUSE entry for it in /proc/self/mountinfo)",
            mp.display()
        );
    }
    // SAFETY: a NUL-terminated path and no flags; umount2 reads nothing else.
    let r = unsafe { libc::umount2(c.as_ptr(), 0) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "unmounting {}: {e} (is it mounted, and is it busy? close files under it)",
            mp.display()
        );
    }
    if let Some(src) = source {
        let pid = src
            .to_str()
            .and_then(|s| s.strip_prefix(super::mount::RAM_SOURCE))
            .and_then(|p| p.parse::<u32>().ok());
        match pid {
            // A RAM volume has nothing to flush: wait for its server to let go of the memory.
            Some(pid) => wait_exited(pid)?,
            None => wait_released(&src)?,
        }
    }
    if a.json {
        crate::output::print_json(&Unmounted {
            schema_version: 1,
            mountpoint: mp,
        })?;
    } else {
        crate::outln!("unmounted {}", mp.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The first device of the numaio mount at `mp` (the mount's source), from mountinfo.
fn mount_source(mp: &std::path::Path) -> Option<PathBuf> {
    let want = std::fs::canonicalize(mp).ok()?;
    let mounts = numaio_sys::mountinfo::read_self().ok()?;
    let m = numaio_sys::mountinfo::topmost(&mounts, &want)?;
    (m.fs_type == "fuse.numaio" || m.fs_type == "fuse").then(|| m.source.clone())
}

/// Waits until process `pid` has exited (or only its zombie is left).
fn wait_exited(pid: u32) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    loop {
        // Bounded: a server stuck in the kernel must not hang this command too.
        match numaio_procfs::bounded::global()
            .read_stat(pid as i32, std::time::Duration::from_millis(200))
        {
            Ok(st) if st.state != 'Z' => {}
            Err(e) if e.is_unresponsive() => {}
            _ => return Ok(()),
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            bail!("the mount server (pid {pid}) is still running after 60s; check its process");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits until the server has flushed the volume and let go of its devices: it holds an
/// exclusive flock on each of them while the volume is open.
fn wait_released(dev0: &std::path::Path) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    let start = std::time::Instant::now();
    loop {
        let f = std::fs::File::open(dev0)
            .with_context(|| format!("opening {} to wait for the server", dev0.display()))?;
        // SAFETY: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            bail!(
                "the mount server still holds {} after 60s: it may still be flushing; check its process",
                dev0.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
