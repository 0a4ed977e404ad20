//! The guest's initramfs, built as up to three gzip'd newc cpio archives that the kernel
//! unpacks one after the other (a concatenation is a valid initramfs):
//! - base: busybox-static and its applet links, numactl (+ libnuma), vmtouch when the host
//!   has it, the virtio and NVDIMM modules, /etc/passwd and /etc/group, `/bin/as-nobody`,
//!   the node-device helpers (`/bin/node-disk`, `node-disk-stat`, `node-pmem`,
//!   `node-pmem-fsdax`, see [`crate::nodedev`]) and `/init`.
//!   Cached in the lab cache, keyed by the inputs' paths, sizes and mtimes.
//! - bins: every binary the workspace built in `<target>/release` (stripped), with the
//!   shared libraries `ldd` lists, at the paths `ldd` prints. Cached the same way.
//! - run: the scenario script and the scenario's extra files. Built per run.

use crate::cpio::Cpio;
use crate::error::{LabError, LabResult};
use crate::kernel::Kernel;
use crate::nodedev::{
    NODE_DISK_HELPER, NODE_DISK_STAT_HELPER, NODE_PMEM_FSDAX_HELPER, NODE_PMEM_HELPER,
};
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

/// Where the workspace's binaries are installed in the guest (on `PATH`).
pub const GUEST_BIN_DIR: &str = "/usr/local/bin";
/// Where the scenario script is placed.
pub const GUEST_SCENARIO: &str = "/etc/numaio-lab/scenario.sh";
/// Present when the run has a disk.
pub const GUEST_DISK_FLAG: &str = "/etc/numaio-lab/disk";
/// Where the virtio modules are placed.
pub const GUEST_MODULES_DIR: &str = "/lib/modules/numaio-lab";
/// Where a scenario's extra kernel modules are placed ([`crate::Scenario::kernel_module`]).
pub const GUEST_EXTRA_MODULES_DIR: &str = "/lib/modules/numaio-lab/extra";
/// The extra modules to load, in order: `FILE SYSFS_NAME` per line.
pub const GUEST_EXTRA_MODULES: &str = "/etc/numaio-lab/modules";
/// The modules the virtio disk needs on this kernel (those not built in), in load order:
/// `FILE SYSFS_NAME` per line, files in [`GUEST_MODULES_DIR`].
pub const GUEST_DISK_MODULES: &str = "/etc/numaio-lab/disk-modules";
/// The same for persistent memory.
pub const GUEST_PMEM_MODULES: &str = "/etc/numaio-lab/pmem-modules";

/// Bumped whenever the base archive's layout or /init changes, to invalidate caches.
const BASE_LAYOUT_VERSION: u32 = 6;

/// The guest's /init.
pub const INIT: &str = r#"#!/bin/sh
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root NUMAIO_LAB=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm
setup_rc=0
if [ -e /etc/numaio-lab/modules ]; then
  while read -r f m; do
    [ -d /sys/module/$m ] || insmod /lib/modules/numaio-lab/extra/$f || { echo "numaio-lab: insmod $f failed"; setup_rc=125; }
  done < /etc/numaio-lab/modules
fi
if [ -e /etc/numaio-lab/node-devices ]; then
  . /etc/numaio-lab/node-devices
  if [ "$want_pmem" -gt 0 ]; then
    while read -r f m; do
      [ -d /sys/module/$m ] || insmod /lib/modules/numaio-lab/$f || { echo "numaio-lab: insmod $f failed"; setup_rc=125; }
    done < /etc/numaio-lab/pmem-modules
  fi
  # NVMe and pmem devices are probed asynchronously: wait for all of them (up to 20 s)
  i=0
  while :; do
    nd=$(ls -d /sys/block/nvme*n* 2>/dev/null | wc -l)
    np=$(ls -d /sys/block/pmem* 2>/dev/null | wc -l)
    [ "$nd" -ge "$want_disks" ] && [ "$np" -ge "$want_pmem" ] && break
    [ $i -ge 400 ] && break
    usleep 50000; i=$((i+1))
  done
  [ "$nd" -eq "$want_disks" ] || { echo "numaio-lab: $want_disks node disk(s) attached, the guest shows $nd"; setup_rc=125; }
  [ "$np" -eq "$want_pmem" ] || { echo "numaio-lab: $want_pmem pmem device(s) attached, the guest shows $np"; setup_rc=125; }
  for b in /sys/block/nvme*n*; do
    [ -e "$b" ] || continue
    # the kernel pads serials with spaces; the unquoted inner echo drops them
    echo "$(cat $b/device/numa_node 2>/dev/null || echo '?') /dev/${b##*/} $(echo $(cat $b/device/serial 2>/dev/null || echo '?'))"
  done | sort -k1,1n -k3,3 > /tmp/node-disks
  for b in /sys/block/pmem*; do
    [ -e "$b" ] || continue
    echo "$(cat $b/device/numa_node 2>/dev/null || echo '?') /dev/${b##*/}"
  done | sort -k1,1n > /tmp/node-pmem
fi
if [ -e /etc/numaio-lab/disk ]; then
  while read -r f m; do
    [ -d /sys/module/$m ] || insmod /lib/modules/numaio-lab/$f || { echo "numaio-lab: insmod $f failed"; setup_rc=125; }
  done < /etc/numaio-lab/disk-modules
  i=0
  while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do usleep 50000; i=$((i+1)); done
  mount -t ext4 /dev/vda /mnt || { echo "numaio-lab: mounting /dev/vda on /mnt failed"; setup_rc=125; }
fi
cd /
echo
echo "@@NUMAIO-LAB-START@@"
if [ $setup_rc -eq 0 ]; then
  sh /etc/numaio-lab/scenario.sh </dev/null 2>&1
  rc=$?
else
  rc=$setup_rc
fi
if [ -e /etc/numaio-lab/disk ] || [ -e /etc/numaio-lab/node-devices ]; then sync; fi
echo
echo "@@NUMAIO-LAB-END rc=$rc@@"
poweroff -f
"#;

/// Runs a command as the unprivileged user `nobody` (uid/gid 65534, no supplementary groups).
pub const AS_NOBODY: &str = r#"#!/bin/sh
# usage: as-nobody CMD [ARGS...]  -- runs CMD as uid/gid 65534 (nobody/nogroup)
# (busybox setpriv cannot change ids; su as root needs no password and keeps the environment with -p)
# `--` ends su's options so CMD's own options (id -u) are not taken as su's
exec su -p -s /bin/sh -c 'exec "$0" "$@"' -- nobody "$@"
"#;

const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n";
const GROUP: &str = "root:x:0:\nnogroup:x:65534:\n";

fn read(path: &Path) -> LabResult<Vec<u8>> {
    std::fs::read(path).map_err(LabError::io(format!("reading {}", path.display())))
}

/// Shared libraries of a dynamic executable as `ldd` prints them (the loader included);
/// empty for static binaries.
pub fn shared_libs(bin: &Path) -> LabResult<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .map_err(|e| LabError::Build {
            what: "initramfs".into(),
            detail: format!(
                "cannot run ldd on {}: {e} (install libc-bin)",
                bin.display()
            ),
        })?;
    // "not a dynamic executable" exits 1: a static binary needs nothing
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.contains("not found") {
            return Err(LabError::Build {
                what: "initramfs".into(),
                detail: format!("{}: ldd cannot resolve `{line}`", bin.display()),
            });
        }
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

/// Adds a host executable at `guest` plus its shared libraries; libraries already added
/// (tracked in `seen`) are skipped.
pub fn add_binary(
    cpio: &mut Cpio,
    host: &Path,
    guest: &str,
    data: &[u8],
    seen: &mut BTreeSet<PathBuf>,
) -> LabResult<()> {
    cpio.file(guest, 0o755, data);
    for lib in shared_libs(host)? {
        if seen.insert(lib.clone()) {
            cpio.file(&lib.to_string_lossy(), 0o755, &read(&lib)?);
        }
    }
    Ok(())
}

fn gzip(data: &[u8]) -> LabResult<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data)
        .and_then(|_| enc.finish())
        .map_err(LabError::io("compressing the initramfs"))
}

fn stamp(h: &mut impl Hasher, p: &Path) {
    p.hash(h);
    if let Ok(m) = std::fs::metadata(p) {
        m.len().hash(h);
        m.modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .hash(h);
    }
}

/// Writes `data` to `path` atomically (temp file + rename), so concurrent guests sharing
/// the cache never read a half-written archive.
fn write_atomic(path: &Path, data: &[u8]) -> LabResult<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(LabError::io(format!("creating {}", dir.display())))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(LabError::io(format!(
        "creating a temp file in {}",
        dir.display()
    )))?;
    tmp.write_all(data)
        .map_err(LabError::io(format!("writing {}", path.display())))?;
    use std::os::unix::fs::PermissionsExt;
    let _ = tmp
        .as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644));
    tmp.persist(path)
        .map_err(|e| LabError::io(format!("renaming to {}", path.display()))(e.error))?;
    Ok(())
}

fn cached_or_build(
    cache: &Path,
    kind: &str,
    key: u64,
    build: impl FnOnce() -> LabResult<Vec<u8>>,
) -> LabResult<PathBuf> {
    let path = cache
        .join("initramfs")
        .join(format!("{kind}-{key:016x}.cpio.gz"));
    if path.is_file() {
        return Ok(path);
    }
    let data = gzip(&build()?)?;
    write_atomic(&path, &data)?;
    // old versions of this kind are dead weight; spare recent ones, which a guest
    // starting right now may be about to read
    if let Ok(rd) = std::fs::read_dir(cache.join("initramfs")) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(600));
            if old
                && n.starts_with(&format!("{kind}-"))
                && e.path() != path
                && n.ends_with(".cpio.gz")
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(path)
}

fn find_host_tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The base archive (cached).
pub fn base(cache: &Path, kernel: &Kernel) -> LabResult<PathBuf> {
    let busybox = find_host_tool("busybox").ok_or_else(|| LabError::MissingHostFile {
        what: "busybox".into(),
        path: "/bin/busybox".into(),
        hint: "install it with `apt-get install busybox-static`".into(),
    })?;
    let numactl = find_host_tool("numactl").ok_or_else(|| LabError::MissingHostFile {
        what: "numactl".into(),
        path: "/usr/bin/numactl".into(),
        hint: "install it with `apt-get install numactl`".into(),
    })?;
    let optional: Vec<PathBuf> = ["vmtouch"]
        .iter()
        .filter_map(|n| find_host_tool(n))
        .collect();
    // modules a kernel lacks are left out here; a scenario that needs them fails before
    // booting, naming the missing module. Built-in ones are not listed at all.
    let disk_modules = kernel.virtio_modules().unwrap_or_default();
    let pmem_modules = kernel.nvdimm_modules().unwrap_or_default();

    let mut h = std::collections::hash_map::DefaultHasher::new();
    BASE_LAYOUT_VERSION.hash(&mut h);
    INIT.hash(&mut h);
    NODE_DISK_HELPER.hash(&mut h);
    NODE_PMEM_HELPER.hash(&mut h);
    NODE_DISK_STAT_HELPER.hash(&mut h);
    NODE_PMEM_FSDAX_HELPER.hash(&mut h);
    for p in [&busybox, &numactl].into_iter().chain(&optional) {
        stamp(&mut h, p);
    }
    for m in disk_modules.iter().chain(&pmem_modules) {
        m.file.hash(&mut h);
        m.data.hash(&mut h);
    }
    cached_or_build(cache, "base", h.finish(), || {
        let mut c = Cpio::new();
        // the rootfs root would otherwise be world-writable (1777)
        c.dir(".", 0o755);
        for d in [
            "proc",
            "sys",
            "dev",
            "tmp",
            "mnt",
            "root",
            "etc/numaio-lab",
            "usr/local/bin",
        ] {
            c.dir(d, if d == "tmp" { 0o1777 } else { 0o755 });
        }
        c.chardev("dev/console", 0o600, 5, 1);
        c.chardev("dev/null", 0o666, 1, 3);
        let bb = read(&busybox)?;
        if !shared_libs(&busybox)?.is_empty() {
            return Err(LabError::Build {
                what: "initramfs".into(),
                detail: format!(
                    "{} is dynamically linked; install busybox-static",
                    busybox.display()
                ),
            });
        }
        c.file("bin/busybox", 0o755, &bb);
        let list = Command::new(&busybox)
            .arg("--list-full")
            .output()
            .map_err(LabError::io("running busybox --list-full"))?;
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            let applet = applet.trim();
            if applet.is_empty() || applet == "bin/busybox" {
                continue;
            }
            c.symlink(applet, "/bin/busybox");
        }
        let mut seen = BTreeSet::new();
        for tool in std::iter::once(&numactl).chain(&optional) {
            add_binary(
                &mut c,
                tool,
                &format!("usr/bin/{}", tool.file_name().unwrap().to_string_lossy()),
                &read(tool)?,
                &mut seen,
            )?;
        }
        for (list, mods) in [
            (GUEST_DISK_MODULES, &disk_modules),
            (GUEST_PMEM_MODULES, &pmem_modules),
        ] {
            let mut names = String::new();
            for m in mods {
                c.file(&format!("{GUEST_MODULES_DIR}/{}", m.file), 0o644, &m.data);
                names += &format!("{} {}\n", m.file, m.sysfs_name);
            }
            c.file(list.trim_start_matches('/'), 0o644, names.as_bytes());
        }
        c.file("etc/passwd", 0o644, PASSWD.as_bytes());
        c.file("etc/group", 0o644, GROUP.as_bytes());
        c.file("bin/as-nobody", 0o755, AS_NOBODY.as_bytes());
        c.file("bin/node-disk", 0o755, NODE_DISK_HELPER.as_bytes());
        c.file("bin/node-pmem", 0o755, NODE_PMEM_HELPER.as_bytes());
        c.file(
            "bin/node-disk-stat",
            0o755,
            NODE_DISK_STAT_HELPER.as_bytes(),
        );
        c.file(
            "bin/node-pmem-fsdax",
            0o755,
            NODE_PMEM_FSDAX_HELPER.as_bytes(),
        );
        c.file("init", 0o755, INIT.as_bytes());
        Ok(c.finish())
    })
}

/// The executables cargo built in `bin_dir` (no extension, executable bit), without the
/// lab's own host tool.
pub fn workspace_binaries(bin_dir: &Path) -> LabResult<Vec<PathBuf>> {
    use std::os::unix::fs::PermissionsExt;
    let rd = std::fs::read_dir(bin_dir).map_err(|e| LabError::MissingHostFile {
        what: "release binaries directory".into(),
        path: bin_dir.to_path_buf(),
        hint: format!("{e}; run `cargo build --release` first (or set NUMAIO_BIN_DIR)"),
    })?;
    let mut bins: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            p.extension().is_none()
                && name != "numaio-lab"
                && std::fs::metadata(p)
                    .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false)
        })
        .collect();
    bins.sort();
    for required in ["numaio", "numaio-probe"] {
        if !bins
            .iter()
            .any(|b| b.file_name().is_some_and(|n| n == required))
        {
            return Err(LabError::MissingHostFile {
                what: format!("the `{required}` binary"),
                path: bin_dir.join(required),
                hint: "run `cargo build --release` first (or set NUMAIO_BIN_DIR to where it is)"
                    .into(),
            });
        }
    }
    Ok(bins)
}

fn stripped(bin: &Path, work: &Path) -> LabResult<Vec<u8>> {
    // debug info makes the initramfs several times larger and slower to unpack under TCG
    let out = work.join("stripped");
    let ok = Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(bin)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let data = if ok { read(&out)? } else { read(bin)? };
    let _ = std::fs::remove_file(&out);
    Ok(data)
}

/// The workspace binaries archive (cached).
pub fn bins(cache: &Path, bin_dir: &Path) -> LabResult<PathBuf> {
    let list = workspace_binaries(bin_dir)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for b in &list {
        stamp(&mut h, b);
    }
    cached_or_build(cache, "bins", h.finish(), || {
        let work = tempfile::tempdir().map_err(LabError::io("creating a temp dir"))?;
        let mut c = Cpio::new();
        let mut seen = BTreeSet::new();
        for b in &list {
            let name = b.file_name().unwrap().to_string_lossy();
            add_binary(
                &mut c,
                b,
                &format!("{GUEST_BIN_DIR}/{name}"),
                &stripped(b, work.path())?,
                &mut seen,
            )?;
        }
        Ok(c.finish())
    })
}

/// A host file to place in the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestFile {
    pub host: PathBuf,
    /// Absolute path in the guest.
    pub guest: String,
    pub mode: u32,
    /// Also copy the shared libraries `ldd` lists (for executables).
    pub with_libs: bool,
}

/// The per-run archive: scenario script, disk flag, generated files (`(guest path,
/// contents)`, mode 0644: the node-device settings, kernel modules), extra host files.
pub fn run_archive(
    script: &str,
    disk: bool,
    generated: &[(String, Vec<u8>)],
    files: &[GuestFile],
) -> LabResult<Vec<u8>> {
    let mut c = Cpio::new();
    c.file(GUEST_SCENARIO, 0o755, script.as_bytes());
    if disk {
        c.file(GUEST_DISK_FLAG, 0o644, b"");
    }
    for (path, data) in generated {
        c.file(path, 0o644, data);
    }
    let mut seen = BTreeSet::new();
    for f in files {
        let data = read(&f.host).map_err(|_| LabError::MissingHostFile {
            what: "scenario file".into(),
            path: f.host.clone(),
            hint: "check the path given to Scenario::file / host_binary".into(),
        })?;
        if f.with_libs {
            add_binary(&mut c, &f.host, &f.guest, &data, &mut seen)?;
        } else {
            c.file(&f.guest, f.mode, &data);
        }
    }
    gzip(&c.finish())
}
