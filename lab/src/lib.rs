//! The NUMA lab: boots a QEMU guest with an emulated NUMA topology, runs a busybox `sh`
//! scenario inside it and returns the scenario's exit status and output.
//!
//! Our machines have one NUMA node; the lab gives tests 1–8 real (emulated) nodes, with
//! the guest kernel doing genuine NUMA placement of anonymous memory and page cache.
//!
//! ```no_run
//! use numaio_lab::{LabTopology, Scenario};
//! let out = Scenario::new(LabTopology::uniform(2), "numaio topo --json")
//!     .run()
//!     .expect("lab run");
//! assert_eq!(out.exit_code, 0, "{}", out.report());
//! ```
//!
//! Parts: [`topology`] (QEMU options, guest node renumbering, expected guest view),
//! [`kernel`] (Debian cloud kernel, fetched and cached), [`initramfs`] (busybox + our
//! binaries + /init), [`disk`] (ext4 image from a spec), [`qemu`] (the guest process),
//! [`console`] (escape stripping, markers), [`probe`] (the guest-side `numaio-probe`),
//! [`nodedev`] (NVMe disks and persistent memory on a node: [`Scenario::node_disk`],
//! [`Scenario::node_pmem`], the guest's `/tmp/node-disks` and `node-disk N`),
//! [`guest_script`] (output sections and shell preludes tests share), [`dm_linear`] and
//! [`filefrag`] (stock ext4 over the node disks, and where it put a file's blocks),
//! [`fs_map`] (numaio-fs block maps, disk write counters, misplaced files).
//!
//! To pin a guest process to a node, scenarios use `numactl --cpunodebind=N --membind=N
//! CMD` (numactl is in every guest) or the workspace's `numaio run --cpunodebind N -- CMD`.

pub mod console;
pub mod cpio;
pub mod disk;
pub mod dm_linear;
pub mod error;
pub mod filefrag;
pub mod fs_map;
pub mod fs_scaling;
pub mod guest_script;
pub mod initramfs;
pub mod kernel;
pub mod lockup;
pub mod nodedev;
pub mod powercut;
pub mod powerload;
pub mod probe;
pub mod qemu;
pub mod topology;
pub mod writelog;

pub use disk::{Content, DiskFile, DiskImage, DiskSpec, FsckReport, GUEST_MOUNT};
pub use error::{LabError, LabResult};
pub use initramfs::{GuestFile, GUEST_BIN_DIR};
pub use kernel::GuestKernel;
pub use nodedev::{blank_image, GuestNodeDisk, NodeDisk, NodeDiskStat, NodePmem};
pub use powercut::PowerCut;
pub use qemu::Accel;
pub use topology::{ExpectedNode, LabNode, LabTopology};

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default limit for a whole run, boot included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The lab cache (kernel, initramfs parts): `NUMAIO_LAB_CACHE`, else `lab/cache` in the
/// source tree.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("NUMAIO_LAB_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("cache"))
}

/// The directory with the workspace's release binaries: `NUMAIO_BIN_DIR`, else
/// `$CARGO_TARGET_DIR/release`, else `<workspace>/target/release`.
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("NUMAIO_BIN_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(d).join("release");
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("lab/ has a parent")
        .join("target/release")
}

/// Where the lab finds its tools. [`LabConfig::from_env`] reads the environment:
/// `NUMAIO_LAB_KERNEL`, `NUMAIO_LAB_QEMU`, `NUMAIO_LAB_CACHE`, `NUMAIO_BIN_DIR`,
/// `NUMAIO_LAB_ACCEL` (`tcg`, the default, or `kvm` = try KVM, fall back to TCG).
#[derive(Clone, Debug)]
pub struct LabConfig {
    pub kernel: Option<PathBuf>,
    pub cache: PathBuf,
    pub bin_dir: PathBuf,
    pub accel: Accel,
}

impl LabConfig {
    pub fn from_env() -> LabConfig {
        let accel = match std::env::var("NUMAIO_LAB_ACCEL").as_deref() {
            Ok("kvm") => Accel::KvmOrTcg,
            _ => Accel::Tcg,
        };
        LabConfig {
            kernel: None,
            cache: cache_dir(),
            bin_dir: bin_dir(),
            accel,
        }
    }

    /// Runs a scenario with this configuration.
    pub fn run(&self, s: &Scenario) -> LabResult<Outcome> {
        let t = self.boot_retrying(s, None)?;
        Ok(Outcome {
            exit_code: t.exit_code,
            output: t.output,
            console_tail: console::tail(&t.console, qemu::TAIL_LINES),
            boot_time: t.boot,
            elapsed: t.elapsed,
        })
    }

    /// Runs a scenario and cuts the guest's power (SIGKILL to QEMU) when `cut` says. The
    /// scenario may also end on its own first: then [`CutOutcome::cut_at`] is `None`.
    pub fn run_with_cut(&self, s: &Scenario, cut: &PowerCut) -> LabResult<CutOutcome> {
        let t = self.boot_retrying(s, Some(cut))?;
        Ok(CutOutcome {
            exit_code: t.cut_at.is_none().then_some(t.exit_code),
            cut_at: t.cut_at,
            output: t.output,
            console_tail: console::tail(&t.console, qemu::TAIL_LINES),
            boot_time: t.boot,
            elapsed: t.elapsed,
        })
    }

    /// [`LabConfig::boot`], once more from the kept images as they were before it where the
    /// scenario allows a rerun after a guest kernel lockup (see [`lockup`]).
    fn boot_retrying(&self, s: &Scenario, cut: Option<&PowerCut>) -> LabResult<qemu::Transcript> {
        if !s.retry_after_guest_lockup {
            return self.boot(s, cut);
        }
        let saved = lockup::Snapshot::take(&lockup::kept_images(s))?;
        match self.boot(s, cut) {
            Err(e) if lockup::is_guest_lockup(&e) => {
                let first = e
                    .console_tail()
                    .and_then(|t| t.lines().find(|l| l.contains("soft lockup")))
                    .unwrap_or("")
                    .trim()
                    .to_string();
                eprintln!(
                    "numaio-lab: warning: the guest kernel locked up ({first}) and the run failed: {}; \
                     running the scenario once more from its images as they were before the boot",
                    e.to_string().lines().next().unwrap_or("")
                );
                saved.restore()?;
                let again = s.clone().kernel_arg(lockup::RERUN_ARG);
                self.boot(&again, cut)
            }
            r => r,
        }
    }

    fn boot(&self, s: &Scenario, cut: Option<&PowerCut>) -> LabResult<qemu::Transcript> {
        s.topology.validate()?;
        if s.icount && s.topology.total_cpus() > 1 {
            // QEMU 7.2 under -icount never finishes bringing up a second CPU
            return Err(LabError::BadTopology(format!(
                "an instruction-counting guest (icount) has one CPU, this topology has {}: \
                 use one node with one CPU (numaio-lab run --nodes 1)",
                s.topology.total_cpus()
            )));
        }
        if s.disk.is_some() && s.disk_image.is_some() {
            return Err(LabError::BadDisk(
                "a scenario takes either a disk spec or an existing disk image, not both".into(),
            ));
        }
        if let Some(img) = &s.disk_image {
            if !img.is_file() {
                return Err(LabError::BadDisk(format!(
                    "disk image {} does not exist (build it with DiskImage::build)",
                    img.display()
                )));
            }
        }
        if let Some(log) = &s.write_log {
            if s.disk_image.is_none() {
                return Err(LabError::BadDisk(
                    "a write log needs a disk image (Scenario::disk_image)".into(),
                ));
            }
            std::fs::File::create(log).map_err(LabError::io(format!(
                "creating the write log {}",
                log.display()
            )))?;
        }
        nodedev::validate(&s.topology, &s.node_disks, &s.node_pmem)?;
        let has_disk = s.disk.is_some() || s.disk_image.is_some();
        let has_node_devices = !s.node_disks.is_empty() || !s.node_pmem.is_empty();
        let qemu = qemu::find_qemu()?;
        let kernel = kernel::find(self.kernel.as_deref(), s.kernel, &self.cache)?;
        if has_disk {
            kernel.virtio_modules()?;
        }
        if !s.node_pmem.is_empty() {
            kernel.nvdimm_modules()?;
        }
        let mut modules: Vec<kernel::Module> = Vec::new();
        for name in &s.kernel_modules {
            // e.g. fuse: a module on 6.1, built into 7.3
            if kernel.is_builtin(name) {
                continue;
            }
            let m = kernel.module(name)?;
            if !modules.iter().any(|o| o.file == m.file) {
                modules.push(m);
            }
        }
        warn_if_stale(&self.bin_dir);
        let base = initramfs::base(&self.cache, &kernel)?;
        let bins = initramfs::bins(&self.cache, &self.bin_dir)?;
        let mut topology_args = match &s.hmat {
            Some((l, b)) => s.topology.qemu_args_hmat(l, b),
            None => s.topology.qemu_args(),
        };

        // a private directory per run, so guests can run side by side
        let work = tempfile::Builder::new()
            .prefix("numaio-lab-")
            .tempdir()
            .map_err(LabError::io("creating the run's temp dir"))?;
        let initrd = work.path().join("initrd.cpio.gz");
        let mut all =
            std::fs::read(&base).map_err(LabError::io(format!("reading {}", base.display())))?;
        all.extend(
            std::fs::read(&bins).map_err(LabError::io(format!("reading {}", bins.display())))?,
        );
        let mut generated = Vec::new();
        if has_node_devices {
            let (args, conf) = nodedev::qemu_args(
                &s.topology,
                &s.node_disks,
                &s.node_pmem,
                work.path(),
                &mut topology_args,
            )?;
            topology_args.extend(args);
            generated.push((nodedev::GUEST_NODE_DEVICES.to_string(), conf.into_bytes()));
        }
        if !modules.is_empty() {
            let mut list = String::new();
            for m in &modules {
                list += &format!("{} {}\n", m.file, m.sysfs_name);
                generated.push((
                    format!("{}/{}", initramfs::GUEST_EXTRA_MODULES_DIR, m.file),
                    m.data.clone(),
                ));
            }
            generated.push((
                initramfs::GUEST_EXTRA_MODULES.to_string(),
                list.into_bytes(),
            ));
        }
        all.extend(initramfs::run_archive(
            &s.script, has_disk, &generated, &s.files,
        )?);
        std::fs::write(&initrd, all)
            .map_err(LabError::io(format!("writing {}", initrd.display())))?;
        let disk = match &s.disk {
            Some(d) => Some(d.build(work.path())?),
            None => s.disk_image.clone(),
        };
        qemu::launch(
            &qemu::Launch {
                qemu: &qemu,
                vmlinuz: &kernel.vmlinuz,
                initrd: &initrd,
                disk: disk.as_deref(),
                persistent_disk: s.disk_image.is_some(),
                write_log: s.write_log.as_deref(),
                topology_args,
                kernel_args: &s.kernel_args,
                timeout: s.timeout,
                cut,
                single_thread_tcg: s.single_thread_tcg,
                icount: s.icount,
            },
            self.accel,
        )
    }
}

/// Newest modification time of the `.rs` files and manifests under `dir`.
fn newest_source(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if p.is_dir() {
                if name != "target" && name != "cache" && !name.starts_with('.') {
                    stack.push(p);
                }
            } else if name.ends_with(".rs") || name == "Cargo.toml" {
                if let Ok(t) = e.metadata().and_then(|m| m.modified()) {
                    newest = newest.max(Some(t));
                }
            }
        }
    }
    newest
}

/// Warns when the guest would run release binaries older than the workspace's sources:
/// a lab test then checks yesterday's code (run `cargo build --release`).
fn warn_if_stale(bin_dir: &Path) {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).parent();
    let Some(ws) = ws else { return };
    // numaio is built from crates/, numaio-probe from lab/ (and crates/ it uses)
    for (bin, dirs) in [
        ("numaio", &["crates"][..]),
        ("numaio-probe", &["lab/src"][..]),
        ("numaio-powerload", &["lab/src", "crates/numaio-engine"][..]),
    ] {
        let path = bin_dir.join(bin);
        let built = std::fs::metadata(&path).and_then(|m| m.modified());
        let src = dirs.iter().filter_map(|d| newest_source(&ws.join(d))).max();
        if let (Ok(built), Some(src)) = (built, src) {
            if src > built {
                eprintln!(
                    "numaio-lab: warning: {} is older than its sources; the guest runs a stale binary (run `cargo build --release`)",
                    path.display()
                );
            }
        }
    }
}

/// Advertised HMAT latency (ns) and bandwidth (MiB/s), indexed `[initiator][target]` by QEMU
/// node id.
pub type HmatValues = (Vec<Vec<u32>>, Vec<Vec<u64>>);

/// One lab run: a topology, a busybox `sh` script, optional disk and extra files.
///
/// In the guest: `PATH` has the workspace binaries (`numaio`, `numaio-probe`, ...) in
/// `/usr/local/bin`, busybox applets, `numactl` (and `vmtouch` if the host has it);
/// `/proc`, `/sys`, `/dev` are mounted, `/tmp` is a tmpfs, the disk (if any) is ext4 on
/// `/mnt`, node devices are listed in `/tmp/node-disks` and `/tmp/node-pmem` (see
/// [`nodedev`]). The script runs as root with stdin `/dev/null`; stderr is merged into
/// stdout. `as-nobody CMD ARGS...` runs a command as uid/gid 65534.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub topology: LabTopology,
    pub script: String,
    pub disk: Option<DiskSpec>,
    /// An existing image to attach instead of building one (kept across runs).
    pub disk_image: Option<PathBuf>,
    /// Log every write the guest sends to the disk image here (see [`writelog`]).
    pub write_log: Option<PathBuf>,
    pub files: Vec<GuestFile>,
    pub timeout: Duration,
    /// Extra kernel command-line words (e.g. `numa_balancing=disable`).
    pub kernel_args: Vec<String>,
    /// Advertised HMAT latency (ns) and bandwidth (MiB/s) per (initiator, target) QEMU node.
    pub hmat: Option<HmatValues>,
    /// NVMe disks on nodes (see [`nodedev`]).
    pub node_disks: Vec<NodeDisk>,
    /// Persistent memory on nodes (see [`nodedev`]).
    pub node_pmem: Vec<NodePmem>,
    /// Kernel modules from the guest kernel's package, loaded in this order before the
    /// scenario (see [`Scenario::kernel_module`]).
    pub kernel_modules: Vec<String>,
    /// The guest kernel this scenario needs; `None`: `NUMAIO_LAB_KERNEL`, else 6.1.
    pub kernel: Option<GuestKernel>,
    /// Emulate the vCPUs on one host thread under TCG (see [`Scenario::single_thread_tcg`]).
    pub single_thread_tcg: bool,
    /// Count guest time in instructions (see [`Scenario::icount`]).
    pub icount: bool,
    /// Run once more after a guest kernel lockup (see [`Scenario::retry_after_guest_lockup`]).
    pub retry_after_guest_lockup: bool,
}

impl Scenario {
    pub fn new(topology: LabTopology, script: impl Into<String>) -> Scenario {
        Scenario {
            topology,
            script: script.into(),
            disk: None,
            disk_image: None,
            write_log: None,
            files: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            kernel_args: Vec::new(),
            hmat: None,
            node_disks: Vec::new(),
            node_pmem: Vec::new(),
            kernel_modules: Vec::new(),
            kernel: None,
            single_thread_tcg: false,
            icount: false,
            retry_after_guest_lockup: false,
        }
    }

    /// When the guest kernel reports a soft lockup and the run then times out or the guest
    /// dies, runs the scenario once more, from copies of its kept images (disk image, node
    /// disk and pmem images) taken before the first boot, and says so on stderr. Under
    /// multi-threaded TCG a guest CPU can stay stuck in the kernel for good, which says
    /// nothing about the scenario (see [`lockup`]); a second lockup fails the run. Costs a
    /// copy of the kept images per run. The rerun's kernel command line holds
    /// [`lockup::RERUN_ARG`].
    pub fn retry_after_guest_lockup(mut self) -> Scenario {
        self.retry_after_guest_lockup = true;
        self
    }

    /// Under TCG, runs all vCPUs on one host thread (`-accel tcg,thread=single`) instead of
    /// one thread each (multi-threaded TCG, QEMU's default). For guests that patch kernel
    /// code while other CPUs run it (attaching BPF programs while readers run): under
    /// multi-threaded TCG a vCPU can run into an instruction another vCPU is rewriting
    /// (`text_poke`), which crashed 7.3 guests; single-threaded, no crash was seen, but such
    /// an attach took 1-1.5 minutes (docs/bpf.md, lab notes). The guest's CPUs take turns,
    /// so CPU-bound scenarios run up to as many times slower as they have vCPUs. No effect
    /// under KVM.
    pub fn single_thread_tcg(mut self) -> Scenario {
        self.single_thread_tcg = true;
        self
    }

    /// Under TCG, makes the guest's clock count instructions (`-icount shift=0,sleep=off`:
    /// one instruction is 1 ns, an idle guest skips ahead to its next timer), on one host
    /// thread as [`Scenario::single_thread_tcg`]. Times the guest measures then count the
    /// instructions it ran, whatever the host's speed or load: a model of cost that leaves out
    /// caches, branch prediction and memory latency, to be reported as modelled. One CPU
    /// only: QEMU 7.2 hangs bringing up a second CPU under icount. No effect under KVM.
    pub fn icount(mut self) -> Scenario {
        self.icount = true;
        self.single_thread_tcg = true;
        self
    }

    /// Boots this Debian kernel (6.1 or 7.3; see [`GuestKernel`]) whatever
    /// `NUMAIO_LAB_KERNEL` says. Without it the scenario boots the kernel
    /// `NUMAIO_LAB_KERNEL` names (`6.1`, `7.3` or a path), else 6.1.
    pub fn kernel(mut self, k: GuestKernel) -> Scenario {
        self.kernel = Some(k);
        self
    }

    /// Makes `/dev/fuse` available: loads `fuse.ko` on kernels that build FUSE as a
    /// module (6.1); a no-op where it is built in (7.3).
    pub fn fuse(self) -> Scenario {
        self.kernel_module("fuse")
    }

    /// Loads a module of the guest kernel's package before the scenario starts, after the
    /// ones added before it (give dependencies first): a name (`dm-mod`, `fuse`; `-` and
    /// `_` are the same) or a path under `lib/modules/<version>`
    /// (`kernel/drivers/md/dm-mod.ko`). Compressed modules (`.ko.xz`, `.ko.zst`, `.ko.gz`)
    /// are decompressed on the host. A module built into the kernel (its `modules.builtin`)
    /// is skipped. A module the kernel lacks fails the run before booting.
    pub fn kernel_module(mut self, name: &str) -> Scenario {
        self.kernel_modules.push(name.to_string());
        self
    }

    /// Adds a blank NVMe disk of `bytes` (a multiple of 1 MiB) on QEMU node `node`, behind a
    /// PCI expander bridge on that node. Repeatable. The guest lists it in
    /// `/tmp/node-disks` and `node-disk GUEST_NODE [K]` prints its device (see [`nodedev`]).
    pub fn node_disk(mut self, node: usize, bytes: u64) -> Scenario {
        self.node_disks.push(NodeDisk {
            node,
            backing: nodedev::Backing::Blank(bytes),
        });
        self
    }

    /// Like [`Scenario::node_disk`], on an existing image that is kept (make one with
    /// [`blank_image`]): boot again on it to see what an earlier run wrote.
    pub fn node_disk_image(mut self, node: usize, path: impl Into<PathBuf>) -> Scenario {
        self.node_disks.push(NodeDisk {
            node,
            backing: nodedev::Backing::Image(path.into()),
        });
        self
    }

    /// Adds persistent memory (an NVDIMM) of `bytes` (a multiple of 2 MiB) on QEMU node
    /// `node`, at most one per node. The guest lists it in `/tmp/node-pmem` and
    /// `node-pmem GUEST_NODE` prints its device (see [`nodedev`]).
    pub fn node_pmem(mut self, node: usize, bytes: u64) -> Scenario {
        self.node_pmem.push(NodePmem {
            node,
            backing: nodedev::Backing::Blank(bytes),
        });
        self
    }

    /// Like [`Scenario::node_pmem`], backed by an existing file that is kept (its length is
    /// the size): what a guest wrote survives a killed QEMU and shows in the next boot.
    pub fn node_pmem_image(mut self, node: usize, path: impl Into<PathBuf>) -> Scenario {
        self.node_pmem.push(NodePmem {
            node,
            backing: nodedev::Backing::Image(path.into()),
        });
        self
    }

    /// Gives the guest an ACPI HMAT with these values (see [`LabTopology::qemu_args_hmat`]).
    pub fn hmat(mut self, latency_ns: Vec<Vec<u32>>, bandwidth_mib_s: Vec<Vec<u64>>) -> Scenario {
        self.hmat = Some((latency_ns, bandwidth_mib_s));
        self
    }

    pub fn disk(mut self, d: DiskSpec) -> Scenario {
        self.disk = Some(d);
        self
    }

    /// Attaches an existing image (e.g. one a previous run wrote to and whose power was cut)
    /// instead of building a disk; the guest mounts it on `/mnt` as usual. QEMU opens it
    /// with `cache=none`, so writes the guest did not flush are not kept by a host cache
    /// layer of QEMU's own.
    pub fn disk_image(mut self, img: &DiskImage) -> Scenario {
        self.disk_image = Some(img.path().to_path_buf());
        self
    }

    /// Records every write, discard and flush the guest sends to its disk image in `log`
    /// (created or emptied; QEMU's `blklogwrites`, read it with [`writelog::WriteLog`]).
    /// Needs [`Scenario::disk_image`].
    pub fn write_log(mut self, log: impl Into<PathBuf>) -> Scenario {
        self.write_log = Some(log.into());
        self
    }

    /// Copies a host file to `guest` (absolute path) with mode 0644.
    pub fn file(mut self, host: impl Into<PathBuf>, guest: &str) -> Scenario {
        self.files.push(GuestFile {
            host: host.into(),
            guest: guest.into(),
            mode: 0o644,
            with_libs: false,
        });
        self
    }

    /// Copies a host executable to the same path in the guest, with its shared libraries
    /// (e.g. `/usr/bin/fio`).
    pub fn host_binary(mut self, host: impl Into<PathBuf>) -> Scenario {
        let host = host.into();
        let guest = host.to_string_lossy().into_owned();
        self.files.push(GuestFile {
            host,
            guest,
            mode: 0o755,
            with_libs: true,
        });
        self
    }

    /// Adds a word to the guest kernel's command line.
    pub fn kernel_arg(mut self, arg: &str) -> Scenario {
        self.kernel_args.push(arg.to_string());
        self
    }

    pub fn timeout(mut self, t: Duration) -> Scenario {
        self.timeout = t;
        self
    }

    /// Runs with [`LabConfig::from_env`].
    pub fn run(&self) -> LabResult<Outcome> {
        LabConfig::from_env().run(self)
    }

    /// Runs, panicking with the lab error (which names what is missing and how to get it)
    /// if the guest could not run the scenario to its end. For tests: a lab that cannot
    /// run must fail the test, never skip it.
    pub fn must_run(&self) -> Outcome {
        self.run()
            .unwrap_or_else(|e| panic!("numaio lab could not run the scenario: {e}"))
    }

    /// Runs with [`LabConfig::from_env`] and cuts the power as `cut` says.
    pub fn run_with_cut(&self, cut: &PowerCut) -> LabResult<CutOutcome> {
        LabConfig::from_env().run_with_cut(self, cut)
    }
}

/// The result of [`Scenario::run_with_cut`].
#[derive(Clone, Debug)]
pub struct CutOutcome {
    /// When the power was cut (from QEMU's start); `None` if the scenario ended first.
    pub cut_at: Option<Duration>,
    /// The scenario's exit status when it ended before the cut.
    pub exit_code: Option<i32>,
    /// The scenario's output up to the cut (everything QEMU had sent by then).
    pub output: String,
    pub console_tail: String,
    pub boot_time: Duration,
    pub elapsed: Duration,
}

impl CutOutcome {
    /// Cut time or exit status, output and console tail, for assertion messages.
    pub fn report(&self) -> String {
        let how = match (self.cut_at, self.exit_code) {
            (Some(t), _) => format!("power cut after {:.1} s", t.as_secs_f64()),
            (None, c) => format!("ended before the cut with status {c:?}"),
        };
        format!(
            "{how}\n--- scenario output ---\n{}\n--- console tail ---\n{}",
            self.output, self.console_tail
        )
    }
}

/// The result of a run that reached the end of its scenario.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The scenario's exit status (125: /init could not set up the disk).
    pub exit_code: i32,
    /// The scenario's stdout and stderr, escape sequences and `\r` removed.
    pub output: String,
    /// The last lines of the whole console.
    pub console_tail: String,
    /// From QEMU start to the scenario's start marker.
    pub boot_time: Duration,
    /// From QEMU start to the end marker.
    pub elapsed: Duration,
}

impl Outcome {
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }

    /// Exit status, output and console tail, for assertion messages.
    pub fn report(&self) -> String {
        format!(
            "exit status {}\n--- scenario output ---\n{}\n--- console tail ---\n{}",
            self.exit_code, self.output, self.console_tail
        )
    }

    /// The output between `@@begin NAME` and the next `@@begin` line (see [`guest_script`]).
    /// Panics with the run's report when the scenario printed no such section.
    pub fn section(&self, name: &str) -> &str {
        guest_script::section(&self.output, name)
            .unwrap_or_else(|| panic!("section {name} missing\n{}", self.report()))
    }

    /// The first JSON line of section `name`; panics with the run's report when there is
    /// none.
    pub fn section_json(&self, name: &str) -> serde_json::Value {
        guest_script::first_json(self.section(name))
            .unwrap_or_else(|| panic!("no JSON in section {name}\n{}", self.report()))
    }

    /// The output's first line that parses as JSON (tools print one JSON document per
    /// line with `--json`), or the whole output parsed as one document.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_str(&self.output).ok().or_else(|| {
            self.output
                .lines()
                .find_map(|l| serde_json::from_str(l.trim()).ok())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with_kernel(k: &str) -> LabConfig {
        LabConfig {
            kernel: Some(PathBuf::from(k)),
            ..LabConfig::from_env()
        }
    }

    #[test]
    fn missing_kernel_or_qemu_names_the_fix() {
        let s = Scenario::new(LabTopology::uniform(2), "true");
        let err = config_with_kernel("/nonexistent/vmlinuz")
            .run(&s)
            .expect_err("no kernel, no run");
        let msg = err.to_string();
        match err {
            LabError::NoKernel(_) => {
                assert!(msg.contains("/nonexistent/vmlinuz"), "{msg}");
                assert!(msg.contains("scripts/setup.sh"), "{msg}");
            }
            // a machine without QEMU fails earlier, with its own hint
            LabError::NoQemu(_) => {
                assert!(msg.contains("apt-get install qemu-system-x86"), "{msg}")
            }
            other => panic!("unexpected error: {other}"),
        }
    }

    #[test]
    fn bad_topology_fails_before_booting() {
        let s = Scenario::new(LabTopology::from_nodes(&[(0, 256)]), "true");
        let err = config_with_kernel("/nonexistent").run(&s).unwrap_err();
        assert!(matches!(err, LabError::BadTopology(_)), "{err}");
    }

    #[test]
    fn icount_takes_one_cpu_and_says_so_before_booting() {
        let s = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 256)]), "true").icount();
        assert!(s.single_thread_tcg);
        let err = config_with_kernel("/nonexistent").run(&s).unwrap_err();
        assert!(
            matches!(&err, LabError::BadTopology(m) if m.contains("--nodes 1")),
            "{err}"
        );
    }

    #[test]
    fn outcome_json_finds_the_document() {
        let o = Outcome {
            exit_code: 0,
            output: "note: hello\n{\"a\":1}\n".into(),
            console_tail: String::new(),
            boot_time: Duration::ZERO,
            elapsed: Duration::ZERO,
        };
        assert_eq!(o.json().unwrap()["a"], 1);
        assert!(o.report().contains("exit status 0"));
    }
}
