//! `numaio fs`: offline tools on an unmounted numaio-fs volume (like debugfs): copy files in
//! and out, list, make and remove directories, show where a file's blocks are and each
//! node's space, get and set a directory's placement.
//!
//! The volume is opened exclusively for the command and unmounted cleanly at its end, so
//! everything a command wrote is durable when it exits 0. Writes are made by the node of the
//! CPU the command runs on at the time, so `numactl --cpunodebind=N numaio fs put ...` is a
//! node-N writer.

use crate::output::{human_bytes, print_json, quote};
use crate::{outln, warnln};
use anyhow::{bail, Context};
use numaio_fs::meta::{Kind, ROOT_INO};
use numaio_fs::volume::Volume;
use numaio_fs::{Caller, Fs, FsError, MountOptions, PlacementPolicy, SetAttr, PLACEMENT_XATTR};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Bytes copied per read or write call.
const CHUNK: usize = 1 << 20;

#[derive(clap::Args)]
#[command(after_help = crate::exit::HELP)]
pub struct FsArgs {
    #[command(subcommand)]
    cmd: FsCmd,
}

#[derive(clap::Args)]
struct Vol {
    /// A device of the volume (repeat for each; any order).
    #[arg(short = 'd', long = "device", value_name = "DEV", required = true)]
    devices: Vec<PathBuf>,
    /// Print JSON (schema in the subcommand's --help).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum FsCmd {
    /// Space per node: capacity, used, free, files with blocks there, inodes whose metadata
    /// the node's device holds (their creator's node, unless it was full), misplaced blocks
    /// (of files whose placement names a node: fixed:N, or directory with its home node,
    /// that sit on another node), and the allocator's fallback blocks and soft errors since
    /// the volume was opened. JSON: {"schema_version":1,"block_size","total_bytes",
    /// "free_bytes","files","nodes":[{"node","capacity_bytes","used_bytes","free_bytes",
    /// "files","inodes","misplaced_blocks","fallback_blocks","soft_errors"}]}
    ///
    /// With a MOUNTPOINT of a running `numaio mount` instead of devices: the mount's live
    /// statistics (read from the virtual xattr user.numaio.stats of its root): per node
    /// capacity, used, free, cache, bytes read/written through the mount whose data is on
    /// the node, misplaced blocks (allocated on the node although the policy chose another,
    /// since the mount), the thread moves, and the top processes by I/O. JSON (fixed schema):
    /// {"mountpoint":str,"fuse_mode":"classic"|"io_uring","nodes":[{"node","capacity_bytes",
    /// "used_bytes","free_bytes","cache_bytes","read_bytes","write_bytes",
    /// "misplaced_blocks"}],"processes":[{"pid","comm","nodes":[{"node","read_bytes",
    /// "write_bytes"}],"threads":[{"tid","nodes":[...]}]}],"moves":{"mode":str|null,"moved",
    /// "skipped"}} (processes by total bytes, top 50). --pid PID prints that process's
    /// numa<N>_read_bytes: / numa<N>_write_bytes: lines (with --json: {"mountpoint","pid",
    /// "nodes":[{"node","read_bytes","write_bytes"}]}).
    Stat {
        /// A device of the volume (repeat for each; any order).
        #[arg(short = 'd', long = "device", value_name = "DEV")]
        devices: Vec<PathBuf>,
        /// A running numaio mount (or, when it is not a directory, a device of a volume).
        #[arg(
            value_name = "MOUNTPOINT",
            conflicts_with = "devices",
            required_unless_present = "devices"
        )]
        target: Option<PathBuf>,
        /// With a MOUNTPOINT: one process's per-node bytes as numa<N>_read_bytes: lines.
        #[arg(long, value_name = "PID", requires = "target")]
        pid: Option<u32>,
        /// Print JSON (schema above).
        #[arg(long)]
        json: bool,
        /// With a MOUNTPOINT: print the statistics in Prometheus' text format
        /// (numaio_mount_* metrics; for node_exporter's textfile collector).
        #[arg(long, requires = "target", conflicts_with_all = ["json", "pid"])]
        prometheus: bool,
    },
    /// Copy host files and directories into the volume (SRC... DEST; DEST may be an existing
    /// directory). JSON: {"schema_version":1,"node","files":[{"src","dest","bytes"}]}
    Put {
        #[command(flatten)]
        vol: Vol,
        /// fsync each file after writing it.
        #[arg(long)]
        fsync: bool,
        #[arg(value_name = "SRC... DEST", required = true, num_args = 2..)]
        paths: Vec<PathBuf>,
    },
    /// Make everything on a running numaio mount durable now: fsyncs the mount point, which
    /// commits the whole volume. A plain `sync` cannot reach a FUSE server (Linux sends
    /// SYNCFS only to virtiofs), so without this, or an fsync, the mount's commit interval
    /// bounds what a crash loses. JSON: {"schema_version":1,"mountpoint"}
    Sync {
        /// The root of a running numaio mount.
        mountpoint: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Copy a file or directory out of the volume to the host.
    /// JSON: {"schema_version":1,"files":[{"src","dest","bytes"}]}
    Get {
        #[command(flatten)]
        vol: Vol,
        src: String,
        dest: PathBuf,
    },
    /// List a directory. JSON: {"schema_version":1,"entries":[{"name","ino","kind","size",
    /// "mode","nlink","blocks","policy","home","meta_node"}]} (meta_node: the node whose
    /// device holds the inode's metadata)
    Ls {
        #[command(flatten)]
        vol: Vol,
        /// Long listing: kind, mode, links, size, blocks.
        #[arg(short = 'l')]
        long: bool,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Make a directory (its parent must exist). JSON: {"schema_version":1,"path","ino",
    /// "home"} (home: the node a `directory` placement puts its files on, or null)
    Mkdir {
        #[command(flatten)]
        vol: Vol,
        path: String,
    },
    /// Remove a file, symlink or empty directory (-r: a directory and all under it).
    /// JSON: {"schema_version":1,"removed":[PATH...]}
    Rm {
        #[command(flatten)]
        vol: Vol,
        #[arg(short = 'r')]
        recursive: bool,
        path: String,
    },
    /// Each file's extents with device and node, and the fraction of its blocks on each node
    /// (a directory: every file under it), and the node holding the file's metadata.
    /// JSON: {"schema_version":1,"files":[{"path","size","blocks","meta_node",
    /// "extents":[{"logical","dev","device","start","len","node"}],
    /// "nodes":[{"node","blocks","fraction"}]}]}
    Map {
        #[command(flatten)]
        vol: Vol,
        path: String,
    },
    /// Show a file's or directory's placement, or set a directory's (inherited by what is
    /// created under it). JSON: {"schema_version":1,"path","policy"}
    Policy {
        #[command(flatten)]
        vol: Vol,
        path: String,
        /// writer-local, directory, interleave, stripe:K[:CHUNK] (CHUNK 64K when left out)
        /// or fixed:N.
        #[arg(value_parser = crate::cmd::mkfs::parse_policy)]
        policy: Option<PlacementPolicy>,
    },
}

/// The caller: the node of the CPU this thread runs on now; root, as the offline tool acts
/// for whoever could write the devices.
fn caller() -> Caller {
    let node = numaio_sys::getcpu().map(|c| c.node).unwrap_or(0);
    Caller {
        node,
        uid: 0,
        gid: 0,
        pid: std::process::id(),
        tid: 0,
    }
}

fn components(path: &str) -> Vec<&[u8]> {
    path.as_bytes()
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect()
}

/// The inode at `path` (absolute or relative to the root; symlinks are not followed).
fn resolve(fs: &Fs, path: &str) -> anyhow::Result<u64> {
    let c = caller();
    let mut ino = ROOT_INO;
    for comp in components(path) {
        ino = fs
            .lookup(ino, comp, &c)
            .map_err(|e| fs_err(e, path, "looking up"))?
            .ino;
    }
    Ok(ino)
}

/// The parent's inode and the last name of `path`.
fn parent_of<'a>(fs: &Fs, path: &'a str) -> anyhow::Result<(u64, &'a [u8])> {
    let comps = components(path);
    let Some((last, dirs)) = comps.split_last() else {
        bail!(
            "{}: the root has no parent; name something under it",
            quote(path)
        );
    };
    let c = caller();
    let mut ino = ROOT_INO;
    for comp in dirs {
        ino = fs
            .lookup(ino, comp, &c)
            .map_err(|e| fs_err(e, path, "looking up"))?
            .ino;
    }
    Ok((ino, last))
}

fn fs_err(e: FsError, path: &str, what: &str) -> anyhow::Error {
    anyhow::anyhow!("{what} {} in the volume: {e}", quote(path))
}

/// Prints `body`'s fields as one JSON object after `"schema_version":1` (every subcommand's
/// schema starts so).
fn print_v1<T: Serialize>(body: &T) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct V<'a, T> {
        schema_version: u32,
        #[serde(flatten)]
        body: &'a T,
    }
    print_json(&V {
        schema_version: 1,
        body,
    })
}

/// The files `put` or `get` copied: JSON `{"schema_version":1[,"node"],"files":[...]}`
/// (`node`: the writer's, for `put`), else a line a file.
fn print_copied(node: Option<u32>, files: Vec<Copied>, json: bool) -> anyhow::Result<()> {
    if json {
        #[derive(Serialize)]
        struct J {
            #[serde(skip_serializing_if = "Option::is_none")]
            node: Option<u32>,
            files: Vec<Copied>,
        }
        return print_v1(&J { node, files });
    }
    for f in &files {
        outln!("{} -> {}: {} bytes", quote(&f.src), quote(&f.dest), f.bytes)?;
    }
    Ok(())
}

fn join(dir: &str, name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Every entry of directory `ino` but `.` and `..`.
fn entries(fs: &Fs, ino: u64) -> Result<Vec<numaio_fs::DirEntry>, FsError> {
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let batch = fs.readdir(ino, cookie)?;
        let Some(last) = batch.last() else { break };
        cookie = last.cookie;
        out.extend(
            batch
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b".."),
        );
    }
    Ok(out)
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::File => "file",
        Kind::Dir => "dir",
        Kind::Symlink => "symlink",
        Kind::Fifo => "fifo",
        Kind::Socket => "socket",
        Kind::CharDev(_) => "chardev",
        Kind::BlockDev(_) => "blockdev",
    }
}

pub fn run(a: FsArgs) -> anyhow::Result<ExitCode> {
    let stat_vol;
    let (vol, writes) = match &a.cmd {
        FsCmd::Stat {
            devices,
            target,
            pid,
            json,
            prometheus,
        } => {
            let devices = match target {
                Some(t) if !t.exists() => bail!(
                    "{}: no such mount point or device (give the root of a numaio mount, or \
                     the volume's devices)",
                    t.display()
                ),
                Some(t) if t.is_dir() => return mount_stat(t, *pid, *json, *prometheus),
                Some(_) if *prometheus => {
                    crate::usage_bail!("--prometheus needs a mount point, not a device")
                }
                Some(t) => {
                    if pid.is_some() {
                        crate::usage_bail!("--pid needs a mount point, not a device");
                    }
                    vec![t.clone()]
                }
                None => devices.clone(),
            };
            stat_vol = Vol {
                devices,
                json: *json,
            };
            (&stat_vol, false)
        }
        FsCmd::Sync { mountpoint, json } => return mount_sync(mountpoint, *json),
        FsCmd::Get { vol, .. } | FsCmd::Ls { vol, .. } => (vol, false),
        FsCmd::Map { vol, .. } => (vol, false),
        FsCmd::Policy { vol, policy, .. } => (vol, policy.is_some()),
        FsCmd::Put { vol, .. } | FsCmd::Mkdir { vol, .. } | FsCmd::Rm { vol, .. } => (vol, true),
    };
    let v = Volume::open(&vol.devices, !writes)?;
    let fs = v
        .mount(MountOptions {
            read_only: !writes,
            ..Default::default()
        })
        .context("mounting the volume (run `numaio fsck` on its devices)")?;
    let json = vol.json;
    let res = match a.cmd {
        FsCmd::Stat { .. } => stat(&fs, json),
        FsCmd::Sync { .. } => unreachable!("served without opening the volume"),
        FsCmd::Put { fsync, paths, .. } => put(&fs, &paths, fsync, json),
        FsCmd::Get { src, dest, .. } => get(&fs, &src, &dest, json),
        FsCmd::Ls { long, path, .. } => ls(&fs, &path, long, json),
        FsCmd::Mkdir { path, .. } => mkdir(&fs, &path, json),
        FsCmd::Rm {
            recursive, path, ..
        } => rm(&fs, &path, recursive, json),
        FsCmd::Map { path, .. } => map(&fs, &v, &path, json),
        FsCmd::Policy { path, policy, .. } => policy_cmd(&fs, &path, policy, json),
    };
    // Unmount even after an error, so what was done before it is kept; the first error wins.
    let un = fs
        .unmount()
        .context("unmounting the volume (commit and checkpoint)");
    res?;
    un?;
    Ok(ExitCode::SUCCESS)
}

/// `numaio fs stat MOUNTPOINT`: the live statistics of a running mount.
#[derive(Serialize)]
struct Synced<'a> {
    schema_version: u32,
    mountpoint: &'a Path,
}

fn mount_sync(mp: &Path, json: bool) -> anyhow::Result<ExitCode> {
    use crate::cmd::mount_stats::{self, ReadError};
    if let Err(ReadError::NotNumaio) = mount_stats::read(mp) {
        bail!(
            "{} is not the root of a running numaio mount (give the mount point)",
            mp.display()
        );
    }
    // The mount point's FSYNCDIR commits everything queued on the volume.
    std::fs::File::open(mp)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing the mount at {}", mp.display()))?;
    if json {
        print_json(&Synced {
            schema_version: 1,
            mountpoint: mp,
        })?;
    } else {
        outln!("synced {}", mp.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn mount_stat(
    mp: &Path,
    pid: Option<u32>,
    json: bool,
    prometheus: bool,
) -> anyhow::Result<ExitCode> {
    use crate::cmd::mount_stats::{self, ReadError};
    let s = match mount_stats::read(mp) {
        Ok(s) => s,
        Err(ReadError::NotNumaio) => bail!(
            "{} is not the root of a running numaio mount (for a volume that is not mounted, \
             name its devices: numaio fs stat -d DEV...)",
            mp.display()
        ),
        Err(ReadError::Other(e)) => {
            return Err(anyhow::Error::new(e).context(format!(
                "reading the statistics of the mount at {} (xattr user.numaio.stats)",
                mp.display()
            )))
        }
    };
    if prometheus {
        crate::out!("{}", mount_stats::prometheus(&s))?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(pid) = pid {
        let p = s.processes.iter().find(|p| p.pid == pid);
        // A process that did no I/O here reads as zeros, like Tofalos's numa_io; a pid that
        // names no process, now or in the mount's accounting, is a mistake worth saying.
        if p.is_none() && (pid == 0 || !Path::new(&format!("/proc/{pid}")).exists()) {
            bail!(
                "pid {pid}: no such process, and none with that pid did I/O on {} \
                 (see `numaio fs stat {}` for the processes it counted)",
                mp.display(),
                mp.display()
            );
        }
        if json {
            print_json(&serde_json::json!({
                "mountpoint": s.mountpoint,
                "pid": pid,
                "nodes": p.map(|p| p.nodes.clone()).unwrap_or_default(),
            }))?;
        } else {
            crate::out!("{}", mount_stats::numa_io_text(&s, p))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if json {
        print_json(&s)?;
    } else {
        crate::out!("{}", mount_stats::render(&s))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct NodeStat {
    node: u32,
    capacity_bytes: u64,
    used_bytes: u64,
    free_bytes: u64,
    files: u64,
    inodes: u64,
    misplaced_blocks: u64,
    fallback_blocks: u64,
    soft_errors: u64,
}

fn stat(fs: &Fs, json: bool) -> anyhow::Result<()> {
    let s = fs.statfs();
    let meta = fs.meta_snapshot();
    // A file counts on every node that holds some of its blocks.
    let mut files: BTreeMap<u32, u64> = BTreeMap::new();
    let mut misplaced: BTreeMap<u32, u64> = BTreeMap::new();
    let mut inodes: BTreeMap<u32, u64> = BTreeMap::new();
    for (&ino, i) in &meta.inodes {
        *inodes.entry(i.attr.meta_node).or_default() += 1;
        if i.attr.kind != Kind::File {
            continue;
        }
        let map = fs.block_map(ino).unwrap_or_default();
        let want = match i.attr.policy {
            PlacementPolicy::Fixed(n) => Some(n),
            PlacementPolicy::Directory => i.attr.home,
            _ => None,
        };
        for (_, e, n) in &map {
            if want.is_some_and(|w| w != *n) {
                *misplaced.entry(*n).or_default() += e.len;
            }
        }
        let mut nodes: Vec<u32> = map.iter().map(|(_, _, n)| *n).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for n in nodes {
            *files.entry(n).or_default() += 1;
        }
    }
    let bs = s.block_size;
    let nodes: Vec<NodeStat> = s
        .nodes
        .iter()
        .map(|u| NodeStat {
            node: u.node,
            capacity_bytes: u.total_blocks * bs,
            used_bytes: (u.total_blocks - u.free_blocks.min(u.total_blocks)) * bs,
            free_bytes: u.free_blocks * bs,
            files: files.get(&u.node).copied().unwrap_or(0),
            inodes: inodes.get(&u.node).copied().unwrap_or(0),
            misplaced_blocks: misplaced.get(&u.node).copied().unwrap_or(0),
            fallback_blocks: u.fallback_blocks,
            soft_errors: u.soft_errors,
        })
        .collect();
    if json {
        #[derive(Serialize)]
        struct J {
            block_size: u64,
            total_bytes: u64,
            free_bytes: u64,
            files: u64,
            nodes: Vec<NodeStat>,
        }
        return print_v1(&J {
            block_size: bs,
            total_bytes: s.total_blocks * bs,
            free_bytes: s.free_blocks * bs,
            files: s.files,
            nodes,
        });
    }
    outln!(
        "total {}, free {}, {} inodes",
        human_bytes(s.total_blocks * bs),
        human_bytes(s.free_blocks * bs),
        s.files
    )?;
    outln!(
        "{:>4} {:>10} {:>10} {:>10} {:>7} {:>7} {:>9} {:>9} {:>6}",
        "node",
        "capacity",
        "used",
        "free",
        "files",
        "inodes",
        "misplaced",
        "fallback",
        "errors"
    )?;
    for n in &nodes {
        outln!(
            "{:>4} {:>10} {:>10} {:>10} {:>7} {:>7} {:>9} {:>9} {:>6}",
            n.node,
            human_bytes(n.capacity_bytes),
            human_bytes(n.used_bytes),
            human_bytes(n.free_bytes),
            n.files,
            n.inodes,
            n.misplaced_blocks,
            n.fallback_blocks,
            n.soft_errors
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct Copied {
    src: String,
    dest: String,
    bytes: u64,
}

/// Copies host file `src` to `name` in directory `parent` (replacing a file there).
fn put_file(
    fs: &Fs,
    src: &Path,
    parent: u64,
    name: &[u8],
    dest: &str,
    fsync: bool,
) -> anyhow::Result<u64> {
    let mut f = std::fs::File::open(src)
        .with_context(|| format!("{}: opening the file to copy", quote(src)))?;
    let mode = f
        .metadata()
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    let c = caller();
    let (ino, existed) = existing_or_new(fs, parent, name, dest, Kind::File, || {
        fs.create(parent, name, mode, &c)
            .map_err(|e| fs_err(e, dest, "creating"))
    })?;
    if existed {
        let cut = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        fs.setattr(ino, &cut, &c)
            .map_err(|e| fs_err(e, dest, "truncating"))?;
    }
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(anyhow::Error::new(e).context(format!("{}: reading", quote(src)))),
        };
        let mut done = 0;
        while done < n {
            let w = fs
                .write(ino, off, &buf[done..n], &caller())
                .map_err(|e| fs_err(e, dest, "writing"))?;
            if w == 0 {
                bail!("writing {} in the volume: no progress", quote(dest));
            }
            done += w;
            off += w as u64;
        }
    }
    if fsync {
        fs.fsync(ino, false)
            .map_err(|e| fs_err(e, dest, "fsync of"))?;
    }
    Ok(off)
}

/// The inode `name` in `parent` if it is there and of `kind` (`true`: it was there), else
/// what `make` creates; an entry of another kind is refused.
fn existing_or_new(
    fs: &Fs,
    parent: u64,
    name: &[u8],
    dest: &str,
    kind: Kind,
    make: impl FnOnce() -> anyhow::Result<numaio_fs::FileAttr>,
) -> anyhow::Result<(u64, bool)> {
    match fs.lookup(parent, name, &caller()) {
        Ok(a) if a.kind == kind => Ok((a.ino, true)),
        Ok(_) => bail!(
            "{} exists in the volume and is not a {}",
            quote(dest),
            if kind == Kind::Dir {
                "directory"
            } else {
                "file"
            }
        ),
        Err(FsError::NotFound) => Ok((make()?.ino, false)),
        Err(e) => Err(fs_err(e, dest, "looking up")),
    }
}

fn put_tree(
    fs: &Fs,
    src: &Path,
    parent: u64,
    name: &[u8],
    dest: &str,
    fsync: bool,
    out: &mut Vec<Copied>,
) -> anyhow::Result<()> {
    let meta = std::fs::metadata(src).with_context(|| format!("{}: stat", quote(src)))?;
    if meta.is_dir() {
        let (ino, _) = existing_or_new(fs, parent, name, dest, Kind::Dir, || {
            fs.mkdir(parent, name, meta.permissions().mode() & 0o7777, &caller())
                .map_err(|e| fs_err(e, dest, "making directory"))
        })?;
        let mut kids: Vec<_> = std::fs::read_dir(src)
            .with_context(|| format!("{}: reading the directory", quote(src)))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("{}: reading the directory", quote(src)))?;
        kids.sort_by_key(|e| e.file_name());
        for k in kids {
            let n = k.file_name();
            put_tree(
                fs,
                &k.path(),
                ino,
                n.as_bytes(),
                &join(dest, n.as_bytes()),
                fsync,
                out,
            )?;
        }
        Ok(())
    } else if meta.is_file() {
        let bytes = put_file(fs, src, parent, name, dest, fsync)?;
        out.push(Copied {
            src: src.display().to_string(),
            dest: dest.to_string(),
            bytes,
        });
        Ok(())
    } else {
        bail!(
            "{}: only regular files and directories are copied",
            quote(src)
        )
    }
}

fn put(fs: &Fs, paths: &[PathBuf], fsync: bool, json: bool) -> anyhow::Result<()> {
    let (dest, srcs) = paths.split_last().expect("clap asks for two paths");
    let dest = dest.to_string_lossy().into_owned();
    let c = caller();
    let dest_dir = resolve(fs, &dest)
        .ok()
        .filter(|&ino| fs.getattr(ino).is_ok_and(|a| a.kind == Kind::Dir));
    let mut out = Vec::new();
    match dest_dir {
        Some(dir) => {
            for s in srcs {
                let Some(name) = s.file_name() else {
                    bail!("{}: has no file name to copy under", quote(s));
                };
                put_tree(
                    fs,
                    s,
                    dir,
                    name.as_bytes(),
                    &join(&dest, name.as_bytes()),
                    fsync,
                    &mut out,
                )?;
            }
        }
        None => {
            if srcs.len() > 1 {
                bail!(
                    "{}: not a directory in the volume; copying several files needs one",
                    quote(&dest)
                );
            }
            let (parent, name) = parent_of(fs, &dest)?;
            put_tree(fs, &srcs[0], parent, name, &dest, fsync, &mut out)?;
        }
    }
    print_copied(Some(c.node), out, json)
}

fn get_tree(
    fs: &Fs,
    ino: u64,
    src: &str,
    dest: &Path,
    out: &mut Vec<Copied>,
) -> anyhow::Result<()> {
    let a = fs.getattr(ino).map_err(|e| fs_err(e, src, "reading"))?;
    match a.kind {
        Kind::Dir => {
            match std::fs::create_dir(dest) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dest.is_dir() => {}
                Err(e) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("{}: making the directory", quote(dest))))
                }
            }
            for e in entries(fs, ino).map_err(|e| fs_err(e, src, "listing"))? {
                let name = OsStr::from_bytes(&e.name);
                get_tree(fs, e.ino, &join(src, &e.name), &dest.join(name), out)?;
            }
        }
        Kind::File => {
            let mut f = std::fs::File::create(dest)
                .with_context(|| format!("{}: creating the file", quote(dest)))?;
            let mut buf = vec![0u8; CHUNK];
            let mut off = 0u64;
            while off < a.size {
                let n = fs
                    .read(ino, off, &mut buf)
                    .map_err(|e| fs_err(e, src, "reading"))?;
                if n == 0 {
                    break;
                }
                f.write_all(&buf[..n])
                    .with_context(|| format!("{}: writing", quote(dest)))?;
                off += n as u64;
            }
            f.sync_all()
                .with_context(|| format!("{}: fsync", quote(dest)))?;
            out.push(Copied {
                src: src.to_string(),
                dest: dest.display().to_string(),
                bytes: off,
            });
        }
        Kind::Symlink => {
            let t = fs
                .readlink(ino)
                .map_err(|e| fs_err(e, src, "reading the link"))?;
            std::os::unix::fs::symlink(OsStr::from_bytes(&t), dest)
                .with_context(|| format!("{}: making the symlink", quote(dest)))?;
        }
        // Fifos, sockets and devices hold no data; making them outside is mknod's business.
        k => warnln!("{src}: a {} is not copied", kind_name(k)),
    }
    Ok(())
}

fn get(fs: &Fs, src: &str, dest: &Path, json: bool) -> anyhow::Result<()> {
    let ino = resolve(fs, src)?;
    let dest = match components(src).last() {
        Some(name) if dest.is_dir() => dest.join(OsStr::from_bytes(name)),
        _ => dest.to_path_buf(),
    };
    let mut out = Vec::new();
    get_tree(fs, ino, src, &dest, &mut out)?;
    print_copied(None, out, json)
}

#[derive(Serialize)]
struct Entry {
    name: String,
    ino: u64,
    kind: &'static str,
    size: u64,
    mode: u32,
    nlink: u32,
    blocks: u64,
    policy: String,
    /// The node a `directory` placement puts this directory's files on.
    home: Option<u32>,
    meta_node: u32,
}

fn ls(fs: &Fs, path: &str, long: bool, json: bool) -> anyhow::Result<()> {
    let ino = resolve(fs, path)?;
    let a = fs.getattr(ino).map_err(|e| fs_err(e, path, "reading"))?;
    let list = if a.kind == Kind::Dir {
        entries(fs, ino)
            .map_err(|e| fs_err(e, path, "listing"))?
            .into_iter()
            .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e.ino))
            .collect()
    } else {
        vec![(path.to_string(), ino)]
    };
    let mut out = Vec::new();
    for (name, ino) in list {
        let a = fs.getattr(ino).map_err(|e| fs_err(e, &name, "reading"))?;
        out.push(Entry {
            name,
            ino,
            kind: kind_name(a.kind),
            size: a.size,
            mode: a.mode,
            nlink: a.nlink,
            blocks: a.blocks,
            policy: a.policy.to_string(),
            home: a.home,
            meta_node: a.meta_node,
        });
    }
    if json {
        #[derive(Serialize)]
        struct J {
            entries: Vec<Entry>,
        }
        return print_v1(&J { entries: out });
    }
    for e in &out {
        if long {
            outln!(
                "{:<7} {:04o} {:>3} {:>12} {:>8} m{} {}",
                e.kind,
                e.mode & 0o7777,
                e.nlink,
                e.size,
                e.blocks,
                e.meta_node,
                quote(&e.name)
            )?;
        } else {
            outln!("{}", quote(&e.name))?;
        }
    }
    Ok(())
}

fn mkdir(fs: &Fs, path: &str, json: bool) -> anyhow::Result<()> {
    let (parent, name) = parent_of(fs, path)?;
    let a = fs
        .mkdir(parent, name, 0o755, &caller())
        .map_err(|e| fs_err(e, path, "making directory"))?;
    if json {
        #[derive(Serialize)]
        struct J<'a> {
            path: &'a str,
            ino: u64,
            home: Option<u32>,
        }
        return print_v1(&J {
            path,
            ino: a.ino,
            home: a.home,
        });
    }
    Ok(())
}

fn rm_in(
    fs: &Fs,
    parent: u64,
    name: &[u8],
    path: &str,
    recursive: bool,
    out: &mut Vec<String>,
) -> anyhow::Result<()> {
    let c = caller();
    let a = fs
        .lookup(parent, name, &c)
        .map_err(|e| fs_err(e, path, "looking up"))?;
    if a.kind == Kind::Dir {
        if recursive {
            for e in entries(fs, a.ino).map_err(|e| fs_err(e, path, "listing"))? {
                rm_in(fs, a.ino, &e.name, &join(path, &e.name), true, out)?;
            }
        }
        fs.rmdir(parent, name, &c)
            .map_err(|e| fs_err(e, path, "removing directory"))?;
    } else {
        fs.unlink(parent, name, &c)
            .map_err(|e| fs_err(e, path, "removing"))?;
    }
    out.push(path.to_string());
    Ok(())
}

fn rm(fs: &Fs, path: &str, recursive: bool, json: bool) -> anyhow::Result<()> {
    let (parent, name) = parent_of(fs, path)?;
    let mut out = Vec::new();
    rm_in(fs, parent, name, path, recursive, &mut out)?;
    if json {
        #[derive(Serialize)]
        struct J {
            removed: Vec<String>,
        }
        return print_v1(&J { removed: out });
    }
    Ok(())
}

#[derive(Serialize)]
struct MapExtent {
    logical: u64,
    dev: u16,
    device: PathBuf,
    start: u64,
    len: u64,
    node: u32,
}

#[derive(Serialize)]
struct MapNode {
    node: u32,
    blocks: u64,
    fraction: f64,
}

#[derive(Serialize)]
struct MapFile {
    path: String,
    size: u64,
    blocks: u64,
    meta_node: u32,
    extents: Vec<MapExtent>,
    nodes: Vec<MapNode>,
}

fn map_tree(
    fs: &Fs,
    v: &Volume,
    ino: u64,
    path: &str,
    out: &mut Vec<MapFile>,
) -> anyhow::Result<()> {
    let a = fs.getattr(ino).map_err(|e| fs_err(e, path, "reading"))?;
    match a.kind {
        Kind::Dir => {
            for e in entries(fs, ino).map_err(|e| fs_err(e, path, "listing"))? {
                map_tree(fs, v, e.ino, &join(path, &e.name), out)?;
            }
        }
        Kind::File => {
            let m = fs.block_map(ino).map_err(|e| fs_err(e, path, "mapping"))?;
            let mut per: BTreeMap<u32, u64> = BTreeMap::new();
            let extents: Vec<MapExtent> = m
                .into_iter()
                .map(|(logical, e, node)| {
                    *per.entry(node).or_default() += e.len;
                    MapExtent {
                        logical,
                        dev: e.dev,
                        device: v
                            .devices
                            .get(e.dev as usize)
                            .map(|d| d.path.clone())
                            .unwrap_or_default(),
                        start: e.start,
                        len: e.len,
                        node,
                    }
                })
                .collect();
            let blocks: u64 = per.values().sum();
            out.push(MapFile {
                path: path.to_string(),
                size: a.size,
                blocks,
                meta_node: a.meta_node,
                extents,
                nodes: per
                    .into_iter()
                    .map(|(node, b)| MapNode {
                        node,
                        blocks: b,
                        fraction: b as f64 / blocks.max(1) as f64,
                    })
                    .collect(),
            });
        }
        _ => {}
    }
    Ok(())
}

fn map(fs: &Fs, v: &Volume, path: &str, json: bool) -> anyhow::Result<()> {
    let ino = resolve(fs, path)?;
    let mut out = Vec::new();
    let shown = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    map_tree(fs, v, ino, &shown, &mut out)?;
    if json {
        #[derive(Serialize)]
        struct J {
            files: Vec<MapFile>,
        }
        return print_v1(&J { files: out });
    }
    for f in &out {
        let nodes: Vec<String> = f
            .nodes
            .iter()
            .map(|n| format!("node {} {:.1}%", n.node, n.fraction * 100.0))
            .collect();
        outln!(
            "{}: {} bytes, {} blocks, metadata on node {}: {}",
            quote(&f.path),
            f.size,
            f.blocks,
            f.meta_node,
            if nodes.is_empty() {
                "no blocks".to_string()
            } else {
                nodes.join(", ")
            }
        )?;
        for e in &f.extents {
            outln!(
                "  {:>10} +{:<8} dev {} ({}) block {} node {}",
                e.logical,
                e.len,
                e.dev,
                quote(&e.device),
                e.start,
                e.node
            )?;
        }
    }
    Ok(())
}

fn policy_cmd(
    fs: &Fs,
    path: &str,
    policy: Option<PlacementPolicy>,
    json: bool,
) -> anyhow::Result<()> {
    let ino = resolve(fs, path)?;
    if let Some(p) = &policy {
        fs.setxattr(ino, PLACEMENT_XATTR, p.to_string().as_bytes(), 0, &caller())
            .map_err(|e| fs_err(e, path, "setting the placement of"))?;
    }
    let a = fs.getattr(ino).map_err(|e| fs_err(e, path, "reading"))?;
    let p = a.policy.to_string();
    if json {
        #[derive(Serialize)]
        struct J<'a> {
            path: &'a str,
            policy: String,
        }
        return print_v1(&J { path, policy: p });
    }
    outln!("{}: {p}", quote(path))
}
