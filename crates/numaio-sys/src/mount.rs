//! Mount system calls: a tmpfs instance, a read-only bind mount, unmounting, and a private
//! mount namespace for the calling process.
//!
//! Per-node replicas live in a tmpfs mounted with a memory policy (`mpol=bind:N`), and a
//! command sees them in place of the originals through bind mounts made in a mount
//! namespace of its own, so nothing changes for the rest of the system.

use crate::error::{SysError, SysResult};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(p: &Path) -> SysResult<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| SysError::InvalidInput {
        what: format!("{}: a path with a NUL byte", p.display()),
    })
}

fn c_str(s: &str) -> SysResult<CString> {
    CString::new(s).map_err(|_| SysError::InvalidInput {
        what: format!("{s:?}: mount options with a NUL byte"),
    })
}

/// `mount(2)`, every pointer from a live C string or null.
fn mount(
    source: Option<&CString>,
    target: &CString,
    fstype: Option<&CString>,
    flags: libc::c_ulong,
    data: Option<&CString>,
    context: String,
) -> SysResult<()> {
    let p = |c: Option<&CString>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every non-null pointer is a NUL-terminated string alive for the call.
    let r = unsafe { libc::mount(p(source), target.as_ptr(), p(fstype), flags, p(data).cast()) };
    if r != 0 {
        return Err(SysError::last_os("mount", context));
    }
    Ok(())
}

/// Mounts a new tmpfs at `point` (an existing directory) with `options` (such as
/// `mpol=bind:1,mode=0755`), named `source` in the mount table.
pub fn mount_tmpfs(source: &str, point: &Path, options: &str) -> SysResult<()> {
    mount(
        Some(&c_str(source)?),
        &c_path(point)?,
        Some(&c_str("tmpfs")?),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&c_str(options)?),
        format!("tmpfs at {} ({options})", point.display()),
    )
}

/// Unmounts the file system at `point` (`umount2`, no flags: fails while it is busy).
pub fn unmount(point: &Path) -> SysResult<()> {
    let p = c_path(point)?;
    // SAFETY: a NUL-terminated path alive for the call.
    if unsafe { libc::umount2(p.as_ptr(), 0) } != 0 {
        return Err(SysError::last_os("umount2", point.display().to_string()));
    }
    Ok(())
}

/// Moves the calling thread into a new mount namespace whose mounts propagate nowhere:
/// what it mounts afterwards is seen by it and the processes it starts or becomes (an
/// exec keeps the namespace), not by the rest of the system. Other threads of the process
/// stay where they were.
pub fn private_mount_namespace() -> SysResult<()> {
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(SysError::last_os("unshare", "a new mount namespace"));
    }
    mount(
        None,
        &c_path(Path::new("/"))?,
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
        "making / private in the new mount namespace".into(),
    )
}

/// Binds `source` (a file or directory) over `point` (of the same kind) and makes the bind
/// read-only: writes through `point` fail with EROFS, `source` stays writable elsewhere.
pub fn bind_read_only(source: &Path, point: &Path) -> SysResult<()> {
    let (s, t) = (c_path(source)?, c_path(point)?);
    let what = format!("{} over {}", source.display(), point.display());
    mount(
        Some(&s),
        &t,
        None,
        libc::MS_BIND,
        None,
        format!("binding {what}"),
    )?;
    mount(
        None,
        &t,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
        format!("making the bind of {what} read-only"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_options_with_nul_bytes_are_refused_before_any_call() {
        use std::os::unix::ffi::OsStrExt;
        let bad = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a\0b"));
        assert!(matches!(
            mount_tmpfs("x", bad, "mode=0755"),
            Err(SysError::InvalidInput { .. })
        ));
        assert!(matches!(
            mount_tmpfs("x", Path::new("/tmp"), "mode=0755\0"),
            Err(SysError::InvalidInput { .. })
        ));
        assert!(matches!(unmount(bad), Err(SysError::InvalidInput { .. })));
    }

    #[test]
    fn unmounting_what_is_not_a_mount_names_the_path() {
        let d = tempfile::tempdir().unwrap();
        let e = unmount(d.path()).unwrap_err();
        assert!(
            e.to_string().contains(&d.path().display().to_string()),
            "{e}"
        );
        assert!(matches!(e.errno(), Some(libc::EINVAL) | Some(libc::EPERM)));
    }
}
