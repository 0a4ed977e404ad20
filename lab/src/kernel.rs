//! The guest kernel: Debian's cloud kernel package, fetched with `apt-get download` and
//! extracted with `dpkg-deb -x` into the lab cache (once), or a kernel given by path.

use crate::error::{LabError, LabResult};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The metapackage whose dependency names the current cloud kernel.
pub const KERNEL_METAPACKAGE: &str = "linux-image-cloud-amd64";

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

    /// The modules a virtio disk needs, or an error naming the first one missing.
    pub fn virtio_modules(&self) -> LabResult<Vec<PathBuf>> {
        self.modules_for("the virtio disk", &VIRTIO_MODULES)
    }

    /// The modules persistent memory needs, or an error naming the first one missing.
    pub fn nvdimm_modules(&self) -> LabResult<Vec<PathBuf>> {
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
            let p = dir.join(name);
            p.is_file().then_some(p)
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

    fn modules_for(&self, what: &str, list: &[&str]) -> LabResult<Vec<PathBuf>> {
        let Some(dir) = &self.modules else {
            return Err(LabError::MissingHostFile {
                what: format!("kernel modules for {what}"),
                path: self.vmlinuz.clone(),
                hint: "no lib/modules/<version> found next to this kernel or on the host; use the kernel fetched by `numaio-lab fetch-kernel`".into(),
            });
        };
        list.iter()
            .map(|m| {
                let p = dir.join(m);
                if p.is_file() {
                    Ok(p)
                } else {
                    Err(LabError::MissingHostFile {
                        what: format!("kernel module for {what}"),
                        path: p,
                        hint: "this guest kernel lacks it (or the modules directory does not match the kernel); use a kernel built with it as a module".into(),
                    })
                }
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

/// The newest kernel already extracted in the cache, if any.
pub fn cached(cache: &Path) -> Option<Kernel> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(kernels_dir(cache))
        .ok()?
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".tmp"))
        .filter_map(|e| {
            let boot = e.path().join("boot");
            std::fs::read_dir(boot).ok()?.flatten().find_map(|f| {
                f.file_name()
                    .to_string_lossy()
                    .starts_with("vmlinuz-")
                    .then(|| f.path())
            })
        })
        .collect();
    found.sort();
    found.last().and_then(|p| Kernel::at(p).ok())
}

/// Finds the kernel: an explicit path, else `NUMAIO_LAB_KERNEL`, else the cache.
pub fn find(explicit: Option<&Path>, cache: &Path) -> LabResult<Kernel> {
    if let Some(p) = explicit {
        return Kernel::at(p);
    }
    if let Some(p) = std::env::var_os("NUMAIO_LAB_KERNEL").filter(|v| !v.is_empty()) {
        return Kernel::at(Path::new(&p));
    }
    cached(cache).ok_or_else(|| {
        LabError::NoKernel(format!(
            "none extracted in {}",
            kernels_dir(cache).display()
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

/// Downloads and extracts the cloud kernel into the cache unless it is already there.
pub fn fetch(cache: &Path) -> LabResult<Kernel> {
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
    let deb = std::fs::read_dir(&debs)
        .map_err(LabError::io(format!("reading {}", debs.display())))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{pkg}_")))
        })
        .ok_or_else(|| {
            LabError::FetchKernel(format!(
                "apt-get download left no {pkg}_*.deb in {}",
                debs.display()
            ))
        })?;
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
    cached(cache).ok_or_else(|| {
        LabError::FetchKernel(format!(
            "{} holds no boot/vmlinuz-* after extraction",
            dest.display()
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
}
