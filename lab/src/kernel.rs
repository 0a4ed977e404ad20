//! The guest kernel: one of two Debian cloud kernels ([`GuestKernel`]), fetched with
//! `apt-get download` and extracted with `dpkg-deb -x` into the lab cache (once), or a
//! kernel given by path.
//!
//! - Debian 12's 6.1 kernel comes from the host's own apt sources (`boot/vmlinuz-V` and
//!   `lib/modules/V` in one package). FUSE is a module.
//! - Debian's 7.3 kernel comes from trixie-backports through a private apt state in the lab
//!   cache, so the host's apt configuration is never touched. Its files are split over
//!   `linux-binary-V` (`usr/lib/modules/V/vmlinuz`), `linux-modules-V` (modules, many
//!   `.ko.xz`) and `linux-base-V` (`config`). FUSE, with io_uring and passthrough, and the
//!   virtio core are built in.

use crate::error::{LabError, LabResult};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The metapackage whose dependency names the current cloud kernel.
pub const KERNEL_METAPACKAGE: &str = "linux-image-cloud-amd64";

/// The apt source the 7.3 kernel comes from.
pub const DEBIAN73_SOURCE: &str = "deb http://deb.debian.org/debian trixie-backports main";

/// Which of the lab's two Debian kernels a guest boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GuestKernel {
    /// Debian 12's cloud kernel (6.1), the default. FUSE is a module (`fuse.ko`).
    Debian61,
    /// Debian's 7.3 cloud kernel from trixie-backports: FUSE built in, with
    /// `CONFIG_FUSE_IO_URING` and `CONFIG_FUSE_PASSTHROUGH`.
    Debian73,
}

impl GuestKernel {
    pub const ALL: [GuestKernel; 2] = [GuestKernel::Debian61, GuestKernel::Debian73];

    /// `6.1` or `7.3` (as `NUMAIO_LAB_KERNEL` and `--kernel` take them).
    pub fn parse(s: &str) -> Option<GuestKernel> {
        match s.trim() {
            "6.1" => Some(GuestKernel::Debian61),
            "7.3" => Some(GuestKernel::Debian73),
            _ => None,
        }
    }

    /// `6.1` or `7.3`.
    pub fn label(self) -> &'static str {
        match self {
            GuestKernel::Debian61 => "6.1",
            GuestKernel::Debian73 => "7.3",
        }
    }

    /// The kernel choice `NUMAIO_LAB_KERNEL` names (`6.1` or `7.3`), if it names one.
    pub fn from_env() -> Option<GuestKernel> {
        std::env::var("NUMAIO_LAB_KERNEL")
            .ok()
            .and_then(|v| GuestKernel::parse(&v))
    }

    /// Whether a kernel version string (`7.3.4+deb13-cloud-amd64`) is this release's.
    pub fn matches_version(self, version: &str) -> bool {
        version.starts_with(&format!("{}.", self.label()))
    }
}

impl std::fmt::Display for GuestKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Debian {}", self.label())
    }
}

/// A guest kernel and, when known, its modules directory (`lib/modules/<version>`).
#[derive(Clone, Debug)]
pub struct Kernel {
    pub vmlinuz: PathBuf,
    pub modules: Option<PathBuf>,
}

/// The virtio modules a disk needs, in load order, relative to the modules directory.
pub const VIRTIO_MODULES: [&str; 6] = [
    "kernel/drivers/virtio/virtio_ring.ko",
    "kernel/drivers/virtio/virtio.ko",
    "kernel/drivers/virtio/virtio_pci_modern_dev.ko",
    "kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
    "kernel/drivers/virtio/virtio_pci.ko",
    "kernel/drivers/block/virtio_blk.ko",
];

/// The modules persistent memory (NVDIMM) needs, in load order.
pub const NVDIMM_MODULES: [&str; 4] = [
    "kernel/drivers/nvdimm/libnvdimm.ko",
    "kernel/drivers/acpi/nfit/nfit.ko",
    "kernel/drivers/nvdimm/nd_btt.ko",
    "kernel/drivers/nvdimm/nd_pmem.ko",
];

impl Kernel {
    /// A kernel at `vmlinuz`; its modules are looked for next to it (an extracted package:
    /// `<root>/boot/vmlinuz-V` with `<root>/lib/modules/V`) and then on the host
    /// (`/lib/modules/V`).
    pub fn at(vmlinuz: &Path) -> LabResult<Kernel> {
        if !vmlinuz.is_file() {
            return Err(LabError::NoKernel(format!(
                "{} does not exist or is not a file",
                vmlinuz.display()
            )));
        }
        // newer Debian packages keep the image inside the modules directory
        if vmlinuz.file_name().is_some_and(|n| n == "vmlinuz") {
            let dir = vmlinuz.parent().filter(|d| d.join("kernel").is_dir());
            return Ok(Kernel {
                vmlinuz: vmlinuz.to_path_buf(),
                modules: dir.map(Path::to_path_buf),
            });
        }
        let modules = vmlinuz
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("vmlinuz-"))
            .and_then(|ver| {
                let beside = vmlinuz
                    .parent()
                    .and_then(|boot| boot.parent())
                    .map(|root| root.join("lib/modules").join(ver));
                let host = PathBuf::from("/lib/modules").join(ver);
                [beside, Some(host)]
                    .into_iter()
                    .flatten()
                    .find(|d| d.join(VIRTIO_MODULES[0]).is_file())
            });
        Ok(Kernel {
            vmlinuz: vmlinuz.to_path_buf(),
            modules,
        })
    }

    /// The version (`6.1.0-56-cloud-amd64`): the modules directory's name, else the
    /// image's `vmlinuz-V` suffix.
    pub fn version(&self) -> Option<String> {
        self.modules
            .as_ref()
            .and_then(|d| d.file_name())
            .or_else(|| self.vmlinuz.file_name())
            .map(|n| n.to_string_lossy())
            .map(|n| n.strip_prefix("vmlinuz-").unwrap_or(&n).to_string())
    }

    /// Whether the module (name or path, as [`Kernel::module`] takes it) is built into
    /// this kernel, by the package's `modules.builtin`.
    pub fn is_builtin(&self, name: &str) -> bool {
        let Some(dir) = &self.modules else {
            return false;
        };
        let Ok(list) = std::fs::read_to_string(dir.join("modules.builtin")) else {
            return false;
        };
        let want = if name.contains('/') {
            normalize(name.rsplit('/').next().unwrap_or(name))
        } else {
            normalize(name)
        };
        list.lines()
            .filter_map(|l| l.trim().rsplit('/').next())
            .any(|f| normalize(f) == want)
    }

    /// The modules a virtio disk needs, in load order, without those built in; an error
    /// names the first one missing.
    pub fn virtio_modules(&self) -> LabResult<Vec<Module>> {
        self.modules_for("the virtio disk", &VIRTIO_MODULES)
    }

    /// The modules persistent memory needs, in load order, without those built in; an
    /// error names the first one missing.
    pub fn nvdimm_modules(&self) -> LabResult<Vec<Module>> {
        self.modules_for("persistent memory (NVDIMM)", &NVDIMM_MODULES)
    }

    /// A module of this kernel by name (`dm-mod`; `-` and `_` match each other) or by path
    /// under the modules directory, decompressed if the package compressed it.
    pub fn module(&self, name: &str) -> LabResult<Module> {
        let Some(dir) = &self.modules else {
            return Err(LabError::MissingHostFile {
                what: format!("kernel module {name}"),
                path: self.vmlinuz.clone(),
                hint: "no lib/modules/<version> found next to this kernel or on the host; use the kernel fetched by `numaio-lab fetch-kernel`".into(),
            });
        };
        let path = if name.contains('/') {
            // a path names the plain `.ko`; the package may have compressed it
            ["", ".xz", ".zst", ".gz"]
                .iter()
                .map(|ext| dir.join(format!("{name}{ext}")))
                .find(|p| p.is_file())
        } else {
            find_module(&dir.join("kernel"), &normalize(name))
        };
        let path = path.ok_or_else(|| LabError::MissingHostFile {
            what: format!("kernel module {name}"),
            path: dir.join("kernel"),
            hint: "this guest kernel has no such module (built in, named differently, or not built at all); check the kernel's config".into(),
        })?;
        let file_name = path.file_name().unwrap_or_default().to_string_lossy();
        let (stem, data) = if let Some(stem) = file_name.strip_suffix(".ko") {
            let data = std::fs::read(&path)
                .map_err(LabError::io(format!("reading {}", path.display())))?;
            (stem.to_string(), data)
        } else if let Some(stem) = file_name.strip_suffix(".ko.gz") {
            use std::io::Read;
            let f = std::fs::File::open(&path)
                .map_err(LabError::io(format!("opening {}", path.display())))?;
            let mut data = Vec::new();
            flate2::read::GzDecoder::new(f)
                .read_to_end(&mut data)
                .map_err(LabError::io(format!("decompressing {}", path.display())))?;
            (stem.to_string(), data)
        } else {
            let (stem, tool) = match (
                file_name.strip_suffix(".ko.xz"),
                file_name.strip_suffix(".ko.zst"),
            ) {
                (Some(stem), _) => (stem, "xz"),
                (_, Some(stem)) => (stem, "zstd"),
                _ => unreachable!("find_module returns modules only"),
            };
            let out = Command::new(tool)
                .arg("-dc")
                .arg(&path)
                .output()
                .map_err(|e| LabError::MissingHostFile {
                    what: tool.into(),
                    path: tool.into(),
                    hint: format!("{e}; install it to decompress {}", path.display()),
                })?;
            if !out.status.success() {
                return Err(LabError::Build {
                    what: "kernel module".into(),
                    detail: format!(
                        "{tool} -dc {} failed: {}",
                        path.display(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                });
            }
            (stem.to_string(), out.stdout)
        };
        Ok(Module {
            file: format!("{stem}.ko"),
            sysfs_name: normalize(&stem),
            data,
        })
    }

    fn modules_for(&self, what: &str, list: &[&str]) -> LabResult<Vec<Module>> {
        let Some(dir) = &self.modules else {
            return Err(LabError::MissingHostFile {
                what: format!("kernel modules for {what}"),
                path: self.vmlinuz.clone(),
                hint: "no lib/modules/<version> found next to this kernel or on the host; use the kernel fetched by `numaio-lab fetch-kernel`".into(),
            });
        };
        list.iter()
            .filter(|m| !self.is_builtin(m))
            .map(|m| {
                self.module(m).map_err(|e| match e {
                    LabError::MissingHostFile { .. } => LabError::MissingHostFile {
                        what: format!("kernel module for {what}"),
                        path: dir.join(m),
                        hint: "this guest kernel lacks it (or the modules directory does not match the kernel); use a kernel built with it as a module".into(),
                    },
                    other => other,
                })
            })
            .collect()
    }
}

/// A kernel module ready to be placed in the guest.
#[derive(Clone, Debug)]
pub struct Module {
    /// File name in the guest (`dm-mod.ko`).
    pub file: String,
    /// The name the loaded module has in `/sys/module` (`dm_mod`).
    pub sysfs_name: String,
    /// The uncompressed module.
    pub data: Vec<u8>,
}

/// Module names treat `-` and `_` alike; the kernel uses `_`.
fn normalize(name: &str) -> String {
    name.trim_end_matches(".ko").replace('-', "_")
}

/// The module file named `name` (normalized) under `dir`, compressed or not.
fn find_module(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let f = e.file_name().to_string_lossy().into_owned();
            let stem = [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
                .iter()
                .find_map(|ext| f.strip_suffix(ext));
            if stem.is_some_and(|s| normalize(s) == name) {
                return Some(p);
            }
        }
    }
    None
}

/// The directory where fetched kernels are extracted.
pub fn kernels_dir(cache: &Path) -> PathBuf {
    cache.join("kernel")
}

/// Every kernel image extracted in the cache, in either package layout
/// (`<pkg>/boot/vmlinuz-V` or `<pkg>/usr/lib/modules/V/vmlinuz`).
fn extracted(cache: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(kernels_dir(cache)) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().ends_with(".tmp") {
            continue;
        }
        if let Ok(boot) = std::fs::read_dir(e.path().join("boot")) {
            found.extend(
                boot.flatten()
                    .filter(|f| f.file_name().to_string_lossy().starts_with("vmlinuz-"))
                    .map(|f| f.path()),
            );
        }
        if let Ok(mods) = std::fs::read_dir(e.path().join("usr/lib/modules")) {
            found.extend(
                mods.flatten()
                    .map(|d| d.path().join("vmlinuz"))
                    .filter(|p| p.is_file()),
            );
        }
    }
    found.sort();
    found
}

/// The newest kernel of release `which` already extracted in the cache, if any.
pub fn cached(cache: &Path, which: GuestKernel) -> Option<Kernel> {
    extracted(cache)
        .iter()
        .rev()
        .filter_map(|p| Kernel::at(p).ok())
        .find(|k| k.version().is_some_and(|v| which.matches_version(&v)))
}

/// Finds the kernel: an explicit path (`--kernel PATH`), else the release the scenario
/// asked for, else `NUMAIO_LAB_KERNEL` (`6.1`, `7.3` or a path), else the cached 6.1.
pub fn find(
    explicit: Option<&Path>,
    choice: Option<GuestKernel>,
    cache: &Path,
) -> LabResult<Kernel> {
    if let Some(p) = explicit {
        return Kernel::at(p);
    }
    let env = std::env::var("NUMAIO_LAB_KERNEL")
        .ok()
        .filter(|v| !v.is_empty());
    let which = match (choice, env) {
        (Some(k), _) => k,
        (None, Some(v)) => match GuestKernel::parse(&v) {
            Some(k) => k,
            None => return Kernel::at(Path::new(&v)),
        },
        (None, None) => GuestKernel::Debian61,
    };
    cached(cache, which).ok_or_else(|| {
        LabError::NoKernel(format!(
            "the {which} kernel is not extracted in {} (`numaio-lab fetch-kernel --release {}`)",
            kernels_dir(cache).display(),
            which.label()
        ))
    })
}

fn run_tool(cmd: &mut Command, what: &str, hint: &str) -> LabResult<String> {
    let out = cmd
        .output()
        .map_err(|e| LabError::FetchKernel(format!("cannot run {what}: {e} ({hint})")))?;
    if !out.status.success() {
        return Err(LabError::FetchKernel(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The versioned kernel package the cloud metapackage depends on.
pub fn current_package() -> LabResult<String> {
    let deps = run_tool(
        Command::new("apt-cache").args(["depends", KERNEL_METAPACKAGE]),
        "apt-cache depends",
        "this needs a Debian/Ubuntu host with apt",
    )?;
    deps.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(str::trim)
        .find(|d| d.starts_with("linux-image-"))
        .map(str::to_string)
        .ok_or_else(|| {
            LabError::FetchKernel(format!(
                "`apt-cache depends {KERNEL_METAPACKAGE}` names no linux-image package (run `apt-get update` first):\n{deps}"
            ))
        })
}

/// Downloads and extracts kernel `which` into the cache unless it is already there.
pub fn fetch(cache: &Path, which: GuestKernel) -> LabResult<Kernel> {
    match which {
        GuestKernel::Debian61 => fetch_debian61(cache),
        GuestKernel::Debian73 => fetch_debian73(cache),
    }
}

/// Debian 12's cloud kernel, from the host's own apt sources.
fn fetch_debian61(cache: &Path) -> LabResult<Kernel> {
    let pkg = current_package()?;
    let dest = kernels_dir(cache).join(&pkg);
    if let Some(k) = std::fs::read_dir(dest.join("boot")).ok().and_then(|rd| {
        rd.flatten()
            .find(|f| f.file_name().to_string_lossy().starts_with("vmlinuz-"))
            .and_then(|f| Kernel::at(&f.path()).ok())
    }) {
        return Ok(k);
    }
    let debs = cache.join("debs");
    std::fs::create_dir_all(&debs).map_err(LabError::io(format!("creating {}", debs.display())))?;
    run_tool(
        Command::new("apt-get")
            .args(["download", &pkg])
            .current_dir(&debs),
        "apt-get download",
        "install apt",
    )?;
    let deb = downloaded_deb(&debs, &pkg)?;
    // extract into a private temp dir, then rename, so concurrent fetches never see half a tree
    let tmp = kernels_dir(cache).join(format!("{pkg}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(LabError::io(format!("creating {}", tmp.display())))?;
    run_tool(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp),
        "dpkg-deb -x",
        "install dpkg",
    )?;
    if std::fs::rename(&tmp, &dest).is_err() {
        // someone else finished first
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let _ = std::fs::remove_file(&deb);
    cached(cache, GuestKernel::Debian61).ok_or_else(|| {
        LabError::FetchKernel(format!(
            "{} holds no boot/vmlinuz-* after extraction",
            dest.display()
        ))
    })
}

/// apt options that use a private sources list, package lists and cache under `dir`, so
/// the host's apt configuration and state stay as they are.
fn private_apt(dir: &Path) -> Vec<String> {
    vec![
        "-o".into(),
        format!(
            "Dir::Etc::sourcelist={}",
            dir.join("sources.list").display()
        ),
        "-o".into(),
        format!(
            "Dir::Etc::sourceparts={}",
            dir.join("sources.list.d").display()
        ),
        "-o".into(),
        format!("Dir::State::Lists={}", dir.join("lists").display()),
        "-o".into(),
        format!("Dir::Cache={}", dir.join("cache").display()),
        "-q".into(),
    ]
}

/// Debian's 7.3 cloud kernel from trixie-backports: the image, modules and config
/// packages extracted into one tree, `<cache>/kernel/linux-image-V/usr/lib/modules/V`.
fn fetch_debian73(cache: &Path) -> LabResult<Kernel> {
    if let Some(k) = cached(cache, GuestKernel::Debian73) {
        return Ok(k);
    }
    let apt = cache.join("apt-trixie-backports");
    for d in ["lists/partial", "cache/archives/partial", "sources.list.d"] {
        let d = apt.join(d);
        std::fs::create_dir_all(&d).map_err(LabError::io(format!("creating {}", d.display())))?;
    }
    // apt takes relative Dir:: paths as relative to /etc/apt
    let apt = apt
        .canonicalize()
        .map_err(LabError::io(format!("resolving {}", apt.display())))?;
    std::fs::write(apt.join("sources.list"), format!("{DEBIAN73_SOURCE}\n")).map_err(
        LabError::io(format!("writing {}", apt.join("sources.list").display())),
    )?;
    let opts = private_apt(&apt);
    run_tool(
        Command::new("apt-get").args(&opts).arg("update"),
        "apt-get update (trixie-backports, private lists)",
        "install apt",
    )?;
    let deps = run_tool(
        Command::new("apt-cache")
            .args(&opts)
            .args(["depends", KERNEL_METAPACKAGE]),
        "apt-cache depends (trixie-backports)",
        "install apt",
    )?;
    let version = deps
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .filter_map(|d| d.trim().strip_prefix("linux-image-"))
        .find(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .ok_or_else(|| {
            LabError::FetchKernel(format!(
                "trixie-backports' {KERNEL_METAPACKAGE} names no linux-image-<version> package:\n{deps}"
            ))
        })?;
    if !GuestKernel::Debian73.matches_version(&version) {
        return Err(LabError::FetchKernel(format!(
            "trixie-backports now carries kernel {version}, not 7.3: update GuestKernel::Debian73 and the lab notes"
        )));
    }
    let debs = cache.join("debs");
    std::fs::create_dir_all(&debs).map_err(LabError::io(format!("creating {}", debs.display())))?;
    let pkgs: Vec<String> = ["binary", "modules", "base"]
        .iter()
        .map(|p| format!("linux-{p}-{version}"))
        .collect();
    run_tool(
        Command::new("apt-get")
            .args(&opts)
            .arg("download")
            .args(&pkgs)
            .current_dir(&debs),
        "apt-get download (trixie-backports)",
        "install apt",
    )?;
    let dest = kernels_dir(cache).join(format!("linux-image-{version}"));
    let tmp = kernels_dir(cache).join(format!("linux-image-{version}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(LabError::io(format!("creating {}", tmp.display())))?;
    let mut downloaded = Vec::new();
    for pkg in &pkgs {
        let deb = downloaded_deb(&debs, pkg)?;
        run_tool(
            Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp),
            "dpkg-deb -x",
            "install dpkg",
        )?;
        downloaded.push(deb);
    }
    if std::fs::rename(&tmp, &dest).is_err() {
        // someone else finished first
        let _ = std::fs::remove_dir_all(&tmp);
    }
    for deb in downloaded {
        let _ = std::fs::remove_file(deb);
    }
    cached(cache, GuestKernel::Debian73).ok_or_else(|| {
        LabError::FetchKernel(format!(
            "{} holds no usr/lib/modules/*/vmlinuz after extraction",
            dest.display()
        ))
    })
}

/// The `.deb` that `apt-get download PKG` left in `debs` (`PKG_<version>_<arch>.deb`).
fn downloaded_deb(debs: &Path, pkg: &str) -> Result<PathBuf, LabError> {
    let prefix = format!("{pkg}_");
    std::fs::read_dir(debs)
        .map_err(LabError::io(format!("reading {}", debs.display())))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .ok_or_else(|| {
            LabError::FetchKernel(format!(
                "apt-get download left no {pkg}_*.deb in {}",
                debs.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An extracted package with the virtio modules only.
    fn kernel_without_nvdimm(root: &Path) -> Kernel {
        let ver = "6.1.0-test";
        std::fs::create_dir_all(root.join("boot")).unwrap();
        let vmlinuz = root.join(format!("boot/vmlinuz-{ver}"));
        std::fs::write(&vmlinuz, b"").unwrap();
        for m in VIRTIO_MODULES {
            let p = root.join("lib/modules").join(ver).join(m);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        }
        Kernel::at(&vmlinuz).unwrap()
    }

    #[test]
    fn modules_by_name_or_path_compressed_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let k = kernel_without_nvdimm(dir.path());
        let mods = k.modules.clone().unwrap();
        let md = mods.join("kernel/drivers/md");
        std::fs::create_dir_all(&md).unwrap();
        std::fs::write(md.join("dm-mod.ko"), b"plain").unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"zipped").unwrap();
        std::fs::write(md.join("dm_flakey.ko.gz"), gz.finish().unwrap()).unwrap();
        let m = k.module("dm_mod").unwrap();
        assert_eq!(
            (m.file.as_str(), m.sysfs_name.as_str()),
            ("dm-mod.ko", "dm_mod")
        );
        assert_eq!(m.data, b"plain");
        let m = k.module("dm-flakey").unwrap();
        assert_eq!(
            (m.file.as_str(), m.data.as_slice()),
            ("dm_flakey.ko", &b"zipped"[..])
        );
        assert_eq!(
            k.module("kernel/drivers/md/dm-mod.ko").unwrap().data,
            b"plain"
        );
        let msg = k.module("no-such-thing").unwrap_err().to_string();
        assert!(
            msg.contains("no-such-thing") && msg.contains("no such module"),
            "{msg}"
        );
    }

    #[test]
    fn a_missing_module_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let k = kernel_without_nvdimm(dir.path());
        assert_eq!(k.virtio_modules().unwrap().len(), VIRTIO_MODULES.len());
        let msg = k.nvdimm_modules().unwrap_err().to_string();
        assert!(msg.contains("libnvdimm.ko"), "{msg}");
        assert!(msg.contains("persistent memory"), "{msg}");
    }

    /// A 7.3-style tree: the image inside the modules directory, the virtio core and FUSE
    /// built in, virtio_blk a compressed module.
    #[test]
    fn newer_layout_skips_built_in_modules() {
        let cache = tempfile::tempdir().unwrap();
        let ver = "7.3.0-test";
        let dir = kernels_dir(cache.path())
            .join(format!("linux-image-{ver}"))
            .join("usr/lib/modules")
            .join(ver);
        std::fs::create_dir_all(dir.join("kernel/drivers/block")).unwrap();
        std::fs::write(dir.join("vmlinuz"), b"").unwrap();
        let builtin: String = VIRTIO_MODULES[..5]
            .iter()
            .map(|m| format!("{m}\n"))
            .chain(["kernel/fs/fuse/fuse.ko\n".to_string()])
            .collect();
        std::fs::write(dir.join("modules.builtin"), builtin).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"blk").unwrap();
        std::fs::write(
            dir.join("kernel/drivers/block/virtio_blk.ko.gz"),
            gz.finish().unwrap(),
        )
        .unwrap();

        assert!(cached(cache.path(), GuestKernel::Debian61).is_none());
        let k = cached(cache.path(), GuestKernel::Debian73).expect("7.3 found");
        assert_eq!(k.version().as_deref(), Some(ver));
        assert_eq!(k.modules.as_deref(), Some(dir.as_path()));
        assert!(k.is_builtin("fuse") && k.is_builtin("virtio-pci"));
        assert!(!k.is_builtin("dm-mod"));
        let v = k.virtio_modules().unwrap();
        assert_eq!(v.len(), 1, "only virtio_blk is a module");
        assert_eq!(
            (v[0].file.as_str(), v[0].data.as_slice()),
            ("virtio_blk.ko", &b"blk"[..])
        );
        let msg = k.nvdimm_modules().unwrap_err().to_string();
        assert!(msg.contains("libnvdimm.ko"), "{msg}");
        let e = find(None, Some(GuestKernel::Debian61), cache.path()).unwrap_err();
        assert!(e.to_string().contains("--release 6.1"), "{e}");
    }
}
