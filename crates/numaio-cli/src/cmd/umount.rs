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
    // SAFETY: a NUL-terminated path and no flags; umount2 reads nothing else.
    let r = unsafe { libc::umount2(c.as_ptr(), 0) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "unmounting {}: {e} (is it mounted, and is it busy? close files under it)",
            mp.display()
        );
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
