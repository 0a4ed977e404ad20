//! Loading and attaching the programs, and reading their maps.
//!
//! Each group of hooks counts one kind of I/O; a group attaches only if every kernel function
//! it names exists (probed in `/proc/kallsyms` at load). Hooks attach as fentry/fexit where
//! the kernel has BPF trampolines, else as kprobe/kretprobe. The reads group is required;
//! any other group that cannot attach is listed in [`Attached::not_covered`].

use crate::record::Snapshot;
use serde::Serialize;

/// Why the collector cannot run here, in one line (no BPF privilege, no BTF, a locked-down
/// kernel, built without clang); callers fall back to estimates and show it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Unavailable {
    pub reason: String,
}

fn unavailable(reason: impl Into<String>) -> Unavailable {
    Unavailable {
        reason: reason.into(),
    }
}

/// What to count; validated once by [`Collector::start`].
#[derive(Debug, Clone, Default)]
pub struct CollectorOptions {
    /// Count only these processes (all when empty).
    pub pids: Vec<i32>,
    /// Attach kprobes even where fentry works (to test the fallback).
    pub kprobe_only: bool,
}

/// How the programs are attached on this kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Attached {
    /// `fentry` (BPF trampolines) or `kprobe`.
    pub mode: String,
    /// `program@kernel_function` for every attached hook.
    pub hooks: Vec<String>,
    /// What is not counted on this kernel, one line each, with the reason.
    pub not_covered: Vec<String>,
    /// Why per-file residency cannot be kept from the collector's counts here (page-cache
    /// inserts, removals or migrations are not all traced); `None` when it can.
    pub residency_unavailable: Option<String>,
}

/// The attached programs. Dropping it (or the process ending, however it ends) detaches
/// them: every link is owned by this process's file descriptors.
pub struct Collector {
    #[cfg(numaio_bpf_object)]
    ebpf: aya::Ebpf,
    attached: Attached,
    cache: CacheReader,
}

impl Drop for Collector {
    fn drop(&mut self) {
        // Readers handed out may outlive the programs; from here on they say so.
        self.cache
            .alive
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// One file's page-cache changes per node since the collector started: the net of pages
/// inserted, removed and migrated in and out. Pages whose node could not be decoded are
/// under [`crate::NODE_UNKNOWN`].
pub type NetPages = std::collections::BTreeMap<u32, i64>;

/// Reads the collector's per-file page-cache counters from any thread, for as long as the
/// collector runs (a clone of it after the collector is dropped answers [`Unavailable`]).
#[derive(Clone)]
pub struct CacheReader {
    alive: std::sync::Arc<std::sync::atomic::AtomicBool>,
    residency_unavailable: Option<String>,
    #[cfg(numaio_bpf_object)]
    maps: Option<std::sync::Arc<imp::CacheMaps>>,
}

impl std::fmt::Debug for CacheReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheReader")
            .field("alive", &self.alive)
            .field("residency_unavailable", &self.residency_unavailable)
            .finish_non_exhaustive()
    }
}

impl CacheReader {
    // Made only where the programs are built in.
    #[cfg_attr(not(numaio_bpf_object), allow(dead_code))]
    fn new(residency_unavailable: Option<String>) -> CacheReader {
        CacheReader {
            alive: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
            residency_unavailable,
            #[cfg(numaio_bpf_object)]
            maps: None,
        }
    }

    /// Whether residency can be derived from the counts: the collector still runs, traces
    /// every kind of page-cache change on this kernel, and has lost no event to a full map.
    pub fn residency_ready(&self) -> Result<(), Unavailable> {
        if !self.alive.load(std::sync::atomic::Ordering::Acquire) {
            return Err(unavailable("the eBPF collector has stopped"));
        }
        if let Some(r) = &self.residency_unavailable {
            return Err(unavailable(r.clone()));
        }
        let lost = imp::lost_events(self)?;
        if lost > 0 {
            return Err(unavailable(format!(
                "the collector's per-file table filled up and {lost} page-cache event(s) went \
                 uncounted; restart the daemon to count afresh"
            )));
        }
        if let Some(n @ 1..) = imp::cache_program_misses(self)? {
            return Err(unavailable(format!(
                "the kernel skipped {n} run(s) of the collector's page-cache programs (another \
                 BPF program was running on that CPU), so per-file counts are incomplete; \
                 restart the daemon to count afresh"
            )));
        }
        Ok(())
    }

    /// When the collector last freed the counters of the file `(dev, ino)` (`st_dev`,
    /// `st_ino`) because the kernel destroyed its inode, on the clock of [`clock_ns`]; `None`
    /// when it did not since the records were last taken ([`CacheReader::take_freed`]).
    /// Counts under the key start from zero after it: a baseline taken before is of a dead
    /// inode.
    pub fn freed_at(&self, dev: u64, ino: u64) -> Result<Option<u64>, Unavailable> {
        imp::freed_at(self, dev, ino)
    }

    /// Takes (and deletes, so the collector can record more) every record of freed
    /// counters: `(st_dev, st_ino, when)`. While the collector's record table is full it
    /// frees nothing, so records must be taken now and then.
    pub fn take_freed(&self) -> Result<Vec<(u64, u64, u64)>, Unavailable> {
        imp::take_freed(self)
    }

    /// The net page-cache change of the file `(dev, ino)` (`st_dev`, `st_ino`) per node since
    /// the collector started; nodes without change are left out. Counters of several nodes
    /// are read one after the other, not at one instant.
    pub fn net_pages(&self, dev: u64, ino: u64) -> Result<NetPages, Unavailable> {
        self.residency_ready()?;
        imp::net_pages(self, dev, ino)
    }
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("attached", &self.attached)
            .finish_non_exhaustive()
    }
}

impl Collector {
    /// Loads and attaches the programs.
    pub fn start(opts: &CollectorOptions) -> Result<Collector, Unavailable> {
        if let Some(p) = opts.pids.iter().find(|&&p| p <= 0) {
            return Err(unavailable(format!(
                "pid {p} is not a process id: give positive pids to count"
            )));
        }
        imp::start(opts)
    }

    /// Everything counted since [`Collector::start`].
    pub fn snapshot(&self) -> Result<Snapshot, Unavailable> {
        imp::snapshot(self)
    }

    /// The hooks attached, the attach mode, and what this kernel leaves uncounted.
    pub fn attached(&self) -> &Attached {
        &self.attached
    }

    /// A reader of the per-file page-cache counters for other threads.
    pub fn cache_reader(&self) -> CacheReader {
        self.cache.clone()
    }
}

/// Offset and end of `recursion_misses` in the kernel's `struct bpf_prog_info` (since 5.12;
/// the fields before it are fixed by the UAPI).
const RECURSION_MISSES_AT: usize = 208;
const PROG_INFO_LEN: usize = RECURSION_MISSES_AT + 8;

/// `recursion_misses` from the first `filled` bytes of a `struct bpf_prog_info` the kernel
/// wrote; `None` when the kernel's struct ends before it (it reports the length it knows).
pub fn recursion_misses_of(info: &[u8], filled: usize) -> Option<u64> {
    let end = RECURSION_MISSES_AT + 8;
    if filled < end || info.len() < end {
        return None;
    }
    let b: [u8; 8] = info[RECURSION_MISSES_AT..end].try_into().ok()?;
    Some(u64::from_ne_bytes(b))
}

/// How many runs of the program the kernel skipped because the program was already running
/// on that CPU (`BPF_OBJ_GET_INFO_BY_FD`); `None` on kernels that do not count them.
pub fn prog_recursion_misses(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Option<u64>> {
    use std::os::fd::AsRawFd;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    #[repr(C, align(8))]
    struct Info([u8; PROG_INFO_LEN]);
    #[repr(C)]
    struct Attr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut info = Info([0; PROG_INFO_LEN]);
    let mut attr = Attr {
        bpf_fd: u32::try_from(fd.as_raw_fd()).map_err(|_| std::io::ErrorKind::InvalidInput)?,
        info_len: PROG_INFO_LEN as u32,
        info: info.0.as_mut_ptr() as u64,
    };
    // SAFETY: attr points at a live buffer of info_len bytes for the kernel to fill, and
    // attr itself is passed with its size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            std::ptr::addr_of_mut!(attr),
            std::mem::size_of::<Attr>(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(recursion_misses_of(&info.0, attr.info_len as usize))
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the collector's records
/// (`bpf_ktime_get_ns`), for ordering user-space events against them.
pub fn clock_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own; CLOCK_MONOTONIC always exists on
    // Linux, so it cannot fail (EINVAL/EFAULT only for a bad clock or pointer).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// The names every program of ours is loaded under start with this (the kernel keeps 15
/// characters of a program's name): `bpftool prog` and leak checks find them by it.
pub const PROGRAM_PREFIX: &str = "nio_";

/// How many programs named with [`PROGRAM_PREFIX`] the kernel holds now, whoever loaded
/// them (for leak checks: after a collector's process ends, none of its stay).
pub fn loaded_programs() -> Result<usize, Unavailable> {
    let mut n = 0;
    for p in aya::programs::loaded_programs() {
        let p = p.map_err(|e| unavailable(format!("listing the kernel's BPF programs: {e}")))?;
        n += usize::from(
            p.name_as_str()
                .is_some_and(|n| n.starts_with(PROGRAM_PREFIX)),
        );
    }
    Ok(n)
}

#[cfg(not(numaio_bpf_object))]
mod imp {
    use super::*;

    pub(super) fn start(_opts: &CollectorOptions) -> Result<Collector, Unavailable> {
        Err(unavailable(
            "built without clang: install clang and libbpf-dev and rebuild",
        ))
    }

    pub(super) fn snapshot(_c: &Collector) -> Result<Snapshot, Unavailable> {
        Ok(Snapshot::default())
    }

    pub(super) fn lost_events(_r: &CacheReader) -> Result<u64, Unavailable> {
        Ok(0)
    }

    pub(super) fn cache_program_misses(_r: &CacheReader) -> Result<Option<u64>, Unavailable> {
        Ok(None)
    }

    pub(super) fn freed_at(
        _r: &CacheReader,
        _dev: u64,
        _ino: u64,
    ) -> Result<Option<u64>, Unavailable> {
        Ok(None)
    }

    pub(super) fn take_freed(_r: &CacheReader) -> Result<Vec<(u64, u64, u64)>, Unavailable> {
        Ok(Vec::new())
    }

    pub(super) fn net_pages(
        _r: &CacheReader,
        _dev: u64,
        _ino: u64,
    ) -> Result<NetPages, Unavailable> {
        Ok(NetPages::new())
    }
}

#[cfg(numaio_bpf_object)]
mod imp {
    use super::*;
    use crate::record::{
        cache_key, decode_cache, decode_fault, decode_io, CACHE_KEY_LEN, CACHE_VAL_LEN,
        FAULT_KEY_LEN, FAULT_VAL_LEN, IO_KEY_LEN, IO_VAL_LEN, NODE_UNKNOWN,
    };
    use aya::maps::{Array, HashMap, MapData};
    use aya::programs::{BtfTracePoint, FEntry, FExit, KProbe};
    use aya::{Btf, Ebpf, EbpfLoader};
    use std::collections::HashSet;

    static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/numaio.bpf.o"));

    const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Mode {
        Fentry,
        Kprobe,
    }

    #[derive(Clone, Copy)]
    enum Kind {
        Entry,
        Exit,
        Kprobe,
        Kretprobe,
        Tracepoint,
    }

    /// One program attached to the first of `targets` that the kernel has.
    struct Hook {
        prog: &'static str,
        kind: Kind,
        targets: &'static [&'static str],
    }

    /// Hooks that count one thing together: the copy hooks come first, the operation's
    /// exit before its entry, so a group cut short leaves nothing that counts wrongly.
    struct Group {
        what: &'static str,
        required: bool,
        /// Tried where this group cannot attach (functions of a module, whose BTF the
        /// loader cannot attach trampolines to, take kprobes).
        fallback: Option<&'static Group>,
        hooks: &'static [Hook],
    }

    const fn h(prog: &'static str, kind: Kind, targets: &'static [&'static str]) -> Hook {
        Hook {
            prog,
            kind,
            targets,
        }
    }

    /// The page-cache lookup of the file systems' write_begin.
    const FOLIO_GET: &[&str] = &["__filemap_get_folio", "__filemap_get_folio_mpol"];

    const CACHE: Group = Group {
        what: "page-cache inserts and removals",
        required: false,
        fallback: None,
        hooks: &[
            h(
                "nio_tp_add",
                Kind::Tracepoint,
                &["mm_filemap_add_to_page_cache"],
            ),
            h(
                "nio_tp_del",
                Kind::Tracepoint,
                &["mm_filemap_delete_from_page_cache"],
            ),
        ],
    };

    const MIGRATION_WHAT: &str = "page-cache migrations between nodes (move_to_new_folio)";

    const MIGRATION_FENTRY: Group = Group {
        what: MIGRATION_WHAT,
        required: false,
        fallback: None,
        hooks: &[h("nio_fx_migrate", Kind::Exit, &["move_to_new_folio"])],
    };

    const MIGRATION_KPROBE: Group = Group {
        what: MIGRATION_WHAT,
        required: false,
        fallback: None,
        hooks: &[
            h("nio_kr_migrate", Kind::Kretprobe, &["move_to_new_folio"]),
            h("nio_kp_migrate", Kind::Kprobe, &["move_to_new_folio"]),
        ],
    };

    const FREE_WHAT: &str = "freeing the per-file counters of destroyed inodes (__destroy_inode; \
         without it they stay until the map fills)";

    const FUSE_WHAT: &str = "buffered writes through FUSE (fuse_file_write_iter)";

    /// Where `fuse_file_write_iter` is in a module (`fuse.ko`): kprobes, with the folio
    /// lookups still traced by the fentry group's program.
    const FUSE_KPROBE: Group = Group {
        what: FUSE_WHAT,
        required: false,
        fallback: None,
        hooks: &[
            h("nio_fx_get", Kind::Exit, FOLIO_GET),
            h("nio_kr_op", Kind::Kretprobe, &["fuse_file_write_iter"]),
            h("nio_kp_wr", Kind::Kprobe, &["fuse_file_write_iter"]),
        ],
    };

    const FUSE_FENTRY: Group = Group {
        what: FUSE_WHAT,
        required: false,
        fallback: Some(&FUSE_KPROBE),
        hooks: &[
            h("nio_fx_get", Kind::Exit, FOLIO_GET),
            h("nio_fx_fusewr", Kind::Exit, &["fuse_file_write_iter"]),
            h("nio_fe_fusewr", Kind::Entry, &["fuse_file_write_iter"]),
        ],
    };

    /// The page-cache lookup of write_begin, as a return probe.
    const KPROBE_GET: Hook = h("nio_kr_get", Kind::Kretprobe, FOLIO_GET);

    /// The per-file counters' maps, shared by the collector and its [`CacheReader`]s, and
    /// the programs that feed them (whose skipped runs make the counts incomplete).
    pub(super) struct CacheMaps {
        cache: HashMap<MapData, [u8; CACHE_KEY_LEN], [u8; CACHE_VAL_LEN]>,
        lost: Array<MapData, u64>,
        freed: HashMap<MapData, [u8; 16], u64>,
        nr_nodes: u32,
        programs: Vec<(String, std::os::fd::OwnedFd)>,
    }

    const FENTRY_GROUPS: &[Group] = &[
        Group {
            what: "buffered reads (filemap_read)",
            required: true,
            fallback: None,
            hooks: &[
                h("nio_fx_batch", Kind::Exit, &["filemap_get_pages"]),
                h("nio_fx_rd", Kind::Exit, &["filemap_read"]),
                h("nio_fe_rd", Kind::Entry, &["filemap_read"]),
            ],
        },
        Group {
            what: "splice and sendfile reads (filemap_splice_read; older kernels read through filemap_read)",
            required: false,
            fallback: None,
            hooks: &[
                h("nio_fx_batch", Kind::Exit, &["filemap_get_pages"]),
                h("nio_fx_splice", Kind::Exit, &["filemap_splice_read"]),
                h("nio_fe_splice", Kind::Entry, &["filemap_splice_read"]),
            ],
        },
        Group {
            what: "tmpfs folio lookups (shmem_get_folio)",
            required: false,
            fallback: None,
            hooks: &[h("nio_fx_shget", Kind::Exit, &["shmem_get_folio"])],
        },
        Group {
            what: "tmpfs folio lookups (shmem_get_folio_gfp)",
            required: false,
            fallback: None,
            hooks: &[h("nio_fx_shgetgfp", Kind::Exit, &["shmem_get_folio_gfp"])],
        },
        Group {
            what: "tmpfs reads (shmem_file_read_iter)",
            required: false,
            fallback: None,
            hooks: &[
                h("nio_fx_shget", Kind::Exit, &["shmem_get_folio"]),
                h("nio_fx_shrd", Kind::Exit, &["shmem_file_read_iter"]),
                h("nio_fe_shrd", Kind::Entry, &["shmem_file_read_iter"]),
            ],
        },
        Group {
            what: "buffered writes (generic_perform_write)",
            required: false,
            fallback: None,
            hooks: &[
                h("nio_fx_get", Kind::Exit, FOLIO_GET),
                h("nio_fx_wr", Kind::Exit, &["generic_perform_write"]),
                h("nio_fe_wr", Kind::Entry, &["generic_perform_write"]),
            ],
        },
        Group {
            what: "iomap buffered writes (iomap_file_buffered_write)",
            required: false,
            fallback: None,
            hooks: &[
                h("nio_fx_get", Kind::Exit, FOLIO_GET),
                h("nio_fx_iomapwr", Kind::Exit, &["iomap_file_buffered_write"]),
                h("nio_fe_iomapwr", Kind::Entry, &["iomap_file_buffered_write"]),
            ],
        },
        Group {
            what: "page faults on file mappings (filemap_fault)",
            required: false,
            fallback: None,
            hooks: &[h("nio_fx_fault", Kind::Exit, &["filemap_fault"])],
        },
        Group {
            what: "page faults on tmpfs mappings (shmem_fault)",
            required: false,
            fallback: None,
            hooks: &[h("nio_fx_shfault", Kind::Exit, &["shmem_fault"])],
        },
        FUSE_FENTRY,
        CACHE,
        MIGRATION_FENTRY,
        Group {
            what: FREE_WHAT,
            required: false,
            fallback: None,
            hooks: &[h("nio_fe_destroy", Kind::Entry, &["__destroy_inode"])],
        },
    ];

    const KPROBE_GROUPS: &[Group] = &[
        Group {
            what: "buffered reads (filemap_read)",
            required: true,
            fallback: None,
            hooks: &[
                h("nio_kr_batch", Kind::Kretprobe, &["filemap_get_pages"]),
                h("nio_kp_batch", Kind::Kprobe, &["filemap_get_pages"]),
                h("nio_kr_op", Kind::Kretprobe, &["filemap_read"]),
                h("nio_kp_rd", Kind::Kprobe, &["filemap_read"]),
            ],
        },
        Group {
            what: "splice and sendfile reads (filemap_splice_read; older kernels read through filemap_read)",
            required: false,
            fallback: None,
            hooks: &[
                h("nio_kr_op", Kind::Kretprobe, &["filemap_splice_read"]),
                h("nio_kp_splice", Kind::Kprobe, &["filemap_splice_read"]),
            ],
        },
        Group {
            what: "buffered writes (generic_perform_write)",
            required: false,
            fallback: None,
            hooks: &[
                KPROBE_GET,
                h("nio_kr_op", Kind::Kretprobe, &["generic_perform_write"]),
                h("nio_kp_wr", Kind::Kprobe, &["generic_perform_write"]),
            ],
        },
        Group {
            what: "iomap buffered writes (iomap_file_buffered_write)",
            required: false,
            fallback: None,
            hooks: &[
                KPROBE_GET,
                h("nio_kr_op", Kind::Kretprobe, &["iomap_file_buffered_write"]),
                h("nio_kp_wr", Kind::Kprobe, &["iomap_file_buffered_write"]),
            ],
        },
        Group {
            what: FUSE_WHAT,
            required: false,
            fallback: None,
            hooks: &[
                KPROBE_GET,
                h("nio_kr_op", Kind::Kretprobe, &["fuse_file_write_iter"]),
                h("nio_kp_wr", Kind::Kprobe, &["fuse_file_write_iter"]),
            ],
        },
        CACHE,
        MIGRATION_KPROBE,
        Group {
            what: FREE_WHAT,
            required: false,
            fallback: None,
            hooks: &[h("nio_kp_destroy", Kind::Kprobe, &["__destroy_inode"])],
        },
    ];

    /// An error with its causes, on one line.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut s = e.to_string();
        let mut src = e.source();
        while let Some(c) = src {
            s.push_str(": ");
            s.push_str(&c.to_string());
            src = c.source();
        }
        s
    }

    fn preflight() -> Result<(), Unavailable> {
        if !std::path::Path::new(BTF_PATH).exists() {
            return Err(unavailable(format!(
                "no {BTF_PATH}: the kernel was built without BTF (CONFIG_DEBUG_INFO_BTF)"
            )));
        }
        if let Ok(l) = std::fs::read_to_string("/sys/kernel/security/lockdown") {
            if l.contains("[confidentiality]") {
                return Err(unavailable(
                    "the kernel is locked down (confidentiality): BPF may not read kernel memory",
                ));
            }
        }
        Ok(())
    }

    /// The names of the kernel's functions, for probing which hooks exist.
    fn kernel_functions() -> Result<HashSet<String>, Unavailable> {
        let text = std::fs::read_to_string("/proc/kallsyms").map_err(|e| {
            unavailable(format!(
                "cannot read /proc/kallsyms to find the kernel's functions: {e}"
            ))
        })?;
        Ok(text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (_addr, ty, name) = (f.next()?, f.next()?, f.next()?);
                matches!(ty, "t" | "T").then(|| name.to_string())
            })
            .collect())
    }

    fn privilege_hint(e: &str) -> String {
        if e.contains("Operation not permitted") || e.contains("EPERM") {
            format!("{e}: run as root, or with CAP_BPF and CAP_PERFMON")
        } else {
            e.to_string()
        }
    }

    pub(super) fn start(opts: &CollectorOptions) -> Result<Collector, Unavailable> {
        preflight()?;
        let btf = Btf::from_sys_fs()
            .map_err(|e| unavailable(format!("cannot parse {BTF_PATH}: {}", chain(&e))))?;
        let funcs = kernel_functions()?;
        if opts.kprobe_only {
            return load(opts, &btf, &funcs, Mode::Kprobe);
        }
        match load(opts, &btf, &funcs, Mode::Fentry) {
            Ok(c) => Ok(c),
            Err(fentry) => load(opts, &btf, &funcs, Mode::Kprobe).map_err(|kprobe| {
                unavailable(format!("{} (fentry: {})", kprobe.reason, fentry.reason))
            }),
        }
    }

    fn load(
        opts: &CollectorOptions,
        btf: &Btf,
        funcs: &HashSet<String>,
        mode: Mode,
    ) -> Result<Collector, Unavailable> {
        let nr_nodes = u32::try_from(numaio_sys::mask::possible_nodes()).unwrap_or(u32::MAX);
        let filter_pids = u32::from(!opts.pids.is_empty());
        let mut ebpf = EbpfLoader::new()
            .btf(Some(btf))
            .override_global("nr_nodes", &nr_nodes, true)
            .override_global("filter_pids", &filter_pids, true)
            // nio_ops is task storage, which aya has no type for; only the programs use it.
            .allow_unsupported_maps()
            .load(OBJECT)
            .map_err(|e| {
                unavailable(format!(
                    "loading the BPF maps failed: {}",
                    privilege_hint(&chain(&e))
                ))
            })?;
        if !opts.pids.is_empty() {
            let map = ebpf
                .map_mut("nio_pids")
                .ok_or_else(|| unavailable("the BPF object has no map nio_pids"))?;
            let mut pids: HashMap<_, u32, u8> = HashMap::try_from(map)
                .map_err(|e| unavailable(format!("map nio_pids: {}", chain(&e))))?;
            for &p in &opts.pids {
                let p = u32::try_from(p).unwrap_or(0);
                pids.insert(p, 1, 0).map_err(|e| {
                    unavailable(format!("adding pid {p} to the filter: {}", chain(&e)))
                })?;
            }
        }
        let groups = match mode {
            Mode::Fentry => FENTRY_GROUPS,
            Mode::Kprobe => KPROBE_GROUPS,
        };
        let mut attached = Attached {
            mode: match mode {
                Mode::Fentry => "fentry",
                Mode::Kprobe => "kprobe",
            }
            .into(),
            ..Default::default()
        };
        let mut loaded: HashSet<&str> = HashSet::new();
        let mut fentry_targets: std::collections::HashMap<&str, &str> = Default::default();
        let mut kprobe_links: HashSet<(&str, &str)> = HashSet::new();
        for g in groups {
            let mut res = attach_group(
                &mut ebpf,
                btf,
                funcs,
                g,
                &mut loaded,
                &mut fentry_targets,
                &mut kprobe_links,
            );
            if let (Err(first), Some(alt)) = (&res, g.fallback) {
                res = attach_group(
                    &mut ebpf,
                    btf,
                    funcs,
                    alt,
                    &mut loaded,
                    &mut fentry_targets,
                    &mut kprobe_links,
                )
                .map_err(|e| format!("{e} (fentry: {first})"));
            }
            match res {
                Ok(hooks) => attached.hooks.extend(hooks),
                Err(e) if g.required => {
                    return Err(unavailable(format!(
                        "cannot count {}: {}",
                        g.what,
                        privilege_hint(&e)
                    )))
                }
                Err(e) => attached.not_covered.push(format!("{}: {e}", g.what)),
            }
        }
        if mode == Mode::Kprobe {
            for what in [
                "tmpfs reads and writes (shmem_get_folio returns its folio through a pointer)",
                "page faults on file mappings",
            ] {
                attached.not_covered.push(format!(
                    "{what}: counted with fentry only, which this kernel refused"
                ));
            }
        }
        // Residency is the net of every change: without one kind of event the per-node
        // counts would drift, so none is derived.
        attached.residency_unavailable = attached
            .not_covered
            .iter()
            .find(|l| l.starts_with(CACHE.what) || l.starts_with(MIGRATION_WHAT))
            .map(|l| format!("per-file residency is not kept on this kernel: {l}"));
        let mut maps = take_cache_maps(&mut ebpf, nr_nodes)?;
        for name in CACHE_PROGRAMS {
            if let Some(fd) = program_fd(&ebpf, name)? {
                maps.programs.push((name.to_string(), fd));
            }
        }
        let mut cache = CacheReader::new(attached.residency_unavailable.clone());
        cache.maps = Some(std::sync::Arc::new(maps));
        Ok(Collector {
            ebpf,
            attached,
            cache,
        })
    }

    fn take_cache_maps(ebpf: &mut Ebpf, nr_nodes: u32) -> Result<CacheMaps, Unavailable> {
        let take = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| unavailable(format!("the BPF object has no map {name}")))
        };
        let cache = HashMap::try_from(take(ebpf, "nio_cache")?)
            .map_err(|e| unavailable(format!("map nio_cache: {}", chain(&e))))?;
        let lost = Array::try_from(take(ebpf, "nio_lost")?)
            .map_err(|e| unavailable(format!("map nio_lost: {}", chain(&e))))?;
        let freed = HashMap::try_from(take(ebpf, "nio_freed")?)
            .map_err(|e| unavailable(format!("map nio_freed: {}", chain(&e))))?;
        Ok(CacheMaps {
            cache,
            lost,
            freed,
            nr_nodes,
            programs: Vec::new(),
        })
    }

    /// The programs whose runs feed `nio_cache`.
    const CACHE_PROGRAMS: [&str; 4] = [
        "nio_tp_add",
        "nio_tp_del",
        "nio_fx_migrate",
        "nio_kr_migrate",
    ];

    /// A duplicate of the file descriptor of `name` if it is loaded (for reading its
    /// statistics from other threads).
    fn program_fd(ebpf: &Ebpf, name: &str) -> Result<Option<std::os::fd::OwnedFd>, Unavailable> {
        let Some(p) = ebpf.program(name) else {
            return Ok(None);
        };
        let Ok(fd) = p.fd() else {
            // Not loaded: this kernel or mode does not use it.
            return Ok(None);
        };
        use std::os::fd::AsFd;
        fd.as_fd()
            .try_clone_to_owned()
            .map(Some)
            .map_err(|e| unavailable(format!("duplicating the descriptor of program {name}: {e}")))
    }

    /// `recursion_misses` of each loaded program in `progs`; `None` where the kernel does
    /// not count them.
    fn misses_of<'a>(
        progs: impl Iterator<Item = (&'a str, std::os::fd::BorrowedFd<'a>)>,
    ) -> Result<Option<std::collections::BTreeMap<String, u64>>, Unavailable> {
        let mut out = std::collections::BTreeMap::new();
        for (name, fd) in progs {
            match super::prog_recursion_misses(fd).map_err(|e| {
                unavailable(format!("reading the statistics of program {name}: {e}"))
            })? {
                Some(0) => {}
                Some(n) => {
                    out.insert(name.to_string(), n);
                }
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    pub(super) fn cache_program_misses(r: &CacheReader) -> Result<Option<u64>, Unavailable> {
        use std::os::fd::AsFd;
        let maps = maps_of(r)?;
        let m = misses_of(maps.programs.iter().map(|(n, fd)| (n.as_str(), fd.as_fd())))?;
        Ok(m.map(|m| m.values().sum()))
    }

    fn lost_slot(lost: &Array<MapData, u64>, slot: u32) -> Result<u64, Unavailable> {
        lost.get(&slot, 0)
            .map_err(|e| unavailable(format!("reading map nio_lost[{slot}]: {}", chain(&e))))
    }

    fn missed(c: &Collector) -> Result<crate::record::Missed, Unavailable> {
        use std::os::fd::AsFd;
        let mut progs = Vec::new();
        for (name, p) in c.ebpf.programs() {
            if let Ok(fd) = p.fd() {
                progs.push((name, fd.as_fd()));
            }
        }
        let maps = maps_of(&c.cache)?;
        let runs = misses_of(progs.into_iter())?;
        Ok(crate::record::Missed {
            counted_runs: runs.is_some(),
            program_runs: runs.unwrap_or_default(),
            io_events: lost_slot(&maps.lost, LOST_IO)?,
            cache_events: lost_slot(&maps.lost, LOST_CACHE)?,
        })
    }

    /// Reads and deletes the `u64` value of `key` in the hash map `fd` in one step
    /// (`BPF_MAP_LOOKUP_AND_DELETE_ELEM`, hash maps since 5.14); `None` when there is none.
    fn map_lookup_and_delete(
        fd: std::os::fd::BorrowedFd<'_>,
        key: &[u8],
    ) -> std::io::Result<Option<u64>> {
        use std::os::fd::AsRawFd;
        const BPF_MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;
        #[repr(C)]
        struct Attr {
            map_fd: u32,
            pad: u32,
            key: u64,
            value: u64,
            flags: u64,
        }
        let mut value = 0u64;
        let mut attr = Attr {
            map_fd: u32::try_from(fd.as_raw_fd()).map_err(|_| std::io::ErrorKind::InvalidInput)?,
            pad: 0,
            key: key.as_ptr() as u64,
            value: std::ptr::addr_of_mut!(value) as u64,
            flags: 0,
        };
        // SAFETY: key and value point at live buffers of the map's key and value sizes (the
        // caller passes the map's key; the value is one u64), attr is passed with its size.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_AND_DELETE_ELEM,
                std::ptr::addr_of_mut!(attr),
                std::mem::size_of::<Attr>(),
            )
        };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(value))
    }

    /// The slots of `nio_lost` (`LOST_CACHE`, `LOST_IO` in the BPF program).
    const LOST_CACHE: u32 = 0;
    const LOST_IO: u32 = 1;

    fn maps_of(r: &CacheReader) -> Result<&CacheMaps, Unavailable> {
        r.maps
            .as_deref()
            .ok_or_else(|| unavailable("the collector's page-cache counters are not loaded"))
    }

    pub(super) fn lost_events(r: &CacheReader) -> Result<u64, Unavailable> {
        lost_slot(&maps_of(r)?.lost, LOST_CACHE)
    }

    fn freed_key(dev: u64, ino: u64) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&crate::record::kernel_dev(dev).to_ne_bytes());
        k[8..].copy_from_slice(&ino.to_ne_bytes());
        k
    }

    pub(super) fn freed_at(
        r: &CacheReader,
        dev: u64,
        ino: u64,
    ) -> Result<Option<u64>, Unavailable> {
        match maps_of(r)?.freed.get(&freed_key(dev, ino), 0) {
            Ok(t) => Ok(Some(t)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(unavailable(format!("reading map nio_freed: {}", chain(&e)))),
        }
    }

    pub(super) fn take_freed(r: &CacheReader) -> Result<Vec<(u64, u64, u64)>, Unavailable> {
        let maps = maps_of(r)?;
        let mut keys = Vec::new();
        for k in maps.freed.keys() {
            match k {
                Ok(k) => keys.push(k),
                Err(aya::maps::MapError::KeyNotFound) => continue,
                Err(e) => return Err(unavailable(format!("reading map nio_freed: {}", chain(&e)))),
            }
        }
        let mut out = Vec::with_capacity(keys.len());
        use std::os::fd::AsFd;
        let fd = aya::maps::IterableMap::map(&maps.freed).fd().as_fd();
        for k in keys {
            // Read and deleted in one step: a freeing recorded in between is not lost.
            let t = match map_lookup_and_delete(fd, &k) {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(e) => {
                    return Err(unavailable(format!(
                        "taking the records of map nio_freed: {e}"
                    )))
                }
            };
            let kdev = u64::from_ne_bytes(k[..8].try_into().unwrap_or_default());
            let ino = u64::from_ne_bytes(k[8..].try_into().unwrap_or_default());
            out.push((crate::record::user_dev(kdev), ino, t));
        }
        Ok(out)
    }

    pub(super) fn net_pages(r: &CacheReader, dev: u64, ino: u64) -> Result<NetPages, Unavailable> {
        let maps = maps_of(r)?;
        let mut out = NetPages::new();
        for node in (0..maps.nr_nodes).chain([NODE_UNKNOWN]) {
            let key = cache_key(dev, ino, node);
            match maps.cache.get(&key, 0) {
                Ok(v) => {
                    if let Some(rec) = decode_cache(&key, &v) {
                        if rec.net_pages() != 0 {
                            out.insert(node, rec.net_pages());
                        }
                    }
                }
                Err(aya::maps::MapError::KeyNotFound) => {}
                Err(e) => return Err(unavailable(format!("reading map nio_cache: {}", chain(&e)))),
            }
        }
        Ok(out)
    }

    fn attach_group<'a>(
        ebpf: &mut Ebpf,
        btf: &Btf,
        funcs: &HashSet<String>,
        g: &'a Group,
        loaded: &mut HashSet<&'a str>,
        fentry_targets: &mut std::collections::HashMap<&'a str, &'a str>,
        kprobe_links: &mut HashSet<(&'a str, &'a str)>,
    ) -> Result<Vec<String>, String> {
        // Resolve every target first: a group whose functions are missing attaches nothing.
        let mut plan = Vec::new();
        for hook in g.hooks {
            let target = match hook.kind {
                Kind::Tracepoint => hook.targets[0],
                _ => *hook
                    .targets
                    .iter()
                    .find(|t| funcs.contains(**t))
                    .ok_or_else(|| {
                        format!("the kernel has no function {}", hook.targets.join(" or "))
                    })?,
            };
            plan.push((hook, target));
        }
        let mut out = Vec::new();
        for (hook, target) in plan {
            let prog = ebpf
                .program_mut(hook.prog)
                .ok_or_else(|| format!("the BPF object has no program {}", hook.prog))?;
            let fail = |what: &str, e: &dyn std::error::Error| {
                format!("{what} {}@{target}: {}", hook.prog, chain(e))
            };
            let first = loaded.insert(hook.prog);
            match hook.kind {
                Kind::Entry | Kind::Exit | Kind::Tracepoint if !first => {
                    // A trampoline program is bound to one function at load; groups that
                    // share it (the write copy) share its one attachment.
                    if fentry_targets.get(hook.prog) == Some(&target) {
                        continue;
                    }
                    return Err(format!(
                        "{} could not be attached to {target}: it is bound to {}",
                        hook.prog,
                        fentry_targets
                            .get(hook.prog)
                            .unwrap_or(&"nothing (its load failed)")
                    ));
                }
                Kind::Entry => {
                    let p: &mut FEntry = prog.try_into().map_err(|e| fail("loading", &e))?;
                    p.load(target, btf).map_err(|e| fail("loading", &e))?;
                    p.attach().map_err(|e| fail("attaching", &e))?;
                }
                Kind::Exit => {
                    let p: &mut FExit = prog.try_into().map_err(|e| fail("loading", &e))?;
                    p.load(target, btf).map_err(|e| fail("loading", &e))?;
                    p.attach().map_err(|e| fail("attaching", &e))?;
                }
                Kind::Tracepoint => {
                    let p: &mut BtfTracePoint = prog.try_into().map_err(|e| fail("loading", &e))?;
                    p.load(target, btf).map_err(|e| fail("loading", &e))?;
                    p.attach().map_err(|e| fail("attaching", &e))?;
                }
                // Groups that share a probe (the write lookups) share its one link.
                Kind::Kprobe | Kind::Kretprobe if kprobe_links.contains(&(hook.prog, target)) => {
                    continue
                }
                Kind::Kprobe | Kind::Kretprobe => {
                    let p: &mut KProbe = prog.try_into().map_err(|e| fail("loading", &e))?;
                    if first {
                        p.load().map_err(|e| fail("loading", &e))?;
                    }
                    p.attach(target, 0).map_err(|e| fail("attaching", &e))?;
                    kprobe_links.insert((hook.prog, target));
                }
            }
            if matches!(hook.kind, Kind::Entry | Kind::Exit | Kind::Tracepoint) {
                fentry_targets.insert(hook.prog, target);
            }
            out.push(format!("{}@{target}", hook.prog));
        }
        Ok(out)
    }

    fn read_map<const K: usize, const V: usize, T>(
        ebpf: &Ebpf,
        name: &str,
        decode: fn(&[u8], &[u8]) -> Option<T>,
    ) -> Result<Vec<T>, Unavailable> {
        let map = ebpf
            .map(name)
            .ok_or_else(|| unavailable(format!("the BPF object has no map {name}")))?;
        let m: HashMap<&MapData, [u8; K], [u8; V]> = HashMap::try_from(map)
            .map_err(|e| unavailable(format!("map {name}: {}", chain(&e))))?;
        let mut out = Vec::new();
        for item in m.iter() {
            match item {
                Ok((k, v)) => out.extend(decode(&k, &v)),
                // An entry deleted while we walk the map; the walk goes on.
                Err(aya::maps::MapError::KeyNotFound) => continue,
                Err(e) => {
                    return Err(unavailable(format!("reading map {name}: {}", chain(&e))));
                }
            }
        }
        Ok(out)
    }

    fn read_cache(r: &CacheReader) -> Result<Vec<crate::record::CacheRecord>, Unavailable> {
        let mut out = Vec::new();
        for item in maps_of(r)?.cache.iter() {
            match item {
                Ok((k, v)) => out.extend(decode_cache(&k, &v)),
                // An entry deleted while we walk the map; the walk goes on.
                Err(aya::maps::MapError::KeyNotFound) => continue,
                Err(e) => {
                    return Err(unavailable(format!("reading map nio_cache: {}", chain(&e))));
                }
            }
        }
        Ok(out)
    }

    pub(super) fn snapshot(c: &Collector) -> Result<Snapshot, Unavailable> {
        let mut s = Snapshot {
            io: read_map::<IO_KEY_LEN, IO_VAL_LEN, _>(&c.ebpf, "nio_io", decode_io)?,
            cache: read_cache(&c.cache)?,
            faults: read_map::<FAULT_KEY_LEN, FAULT_VAL_LEN, _>(
                &c.ebpf,
                "nio_faults",
                decode_fault,
            )?,
            missed: missed(c)?,
        };
        s.io.sort_by_key(|r| (r.pid, r.tid, r.dev, r.ino, r.data_node, r.cpu_node));
        s.cache.sort_by_key(|r| (r.dev, r.ino, r.node));
        s.faults
            .sort_by_key(|r| (r.pid, r.dev, r.ino, r.data_node, r.cpu_node));
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recursion_misses_only_where_the_kernel_filled_them() {
        let mut info = [0u8; PROG_INFO_LEN];
        info[RECURSION_MISSES_AT..].copy_from_slice(&42u64.to_ne_bytes());
        assert_eq!(recursion_misses_of(&info, PROG_INFO_LEN), Some(42));
        assert_eq!(recursion_misses_of(&info, PROG_INFO_LEN + 8), Some(42));
        // A kernel older than 5.12 reports a shorter struct: nothing counted.
        assert_eq!(recursion_misses_of(&info, RECURSION_MISSES_AT), None);
        assert_eq!(recursion_misses_of(&info[..100], PROG_INFO_LEN), None);
    }

    #[test]
    fn a_descriptor_that_is_no_program_is_an_error() {
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        assert!(prog_recursion_misses(f.as_fd()).is_err());
    }
}
