//! `numaio mkfs`: format block devices, plain files or persistent memory zones as one
//! numaio-fs volume, each device on a NUMA node.

use crate::output::{human_bytes, print_json, quote};
use crate::{outln, usage_bail};
use anyhow::Context;
use numaio_fs::device::{probe_devices, NodeRule};
use numaio_fs::format::{Header, Label};
use numaio_fs::store::{BlockStore, DeviceInfo, FileStore, ZoneSpec, ZoneStore};
use numaio_fs::volume::uuid_text;
use numaio_fs::{Fs, MkfsOptions, PlacementPolicy, BLOCK_SIZE};
use numaio_sys::Topology;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(after_help = crate::exit::HELP)]
pub struct MkfsArgs {
    /// The devices (block devices or regular files), one volume over all of them.
    #[arg(value_name = "DEV", required_unless_present = "zone")]
    devices: Vec<PathBuf>,
    /// DEV belongs to NODE (for files and devices whose sysfs numa_node is -1); repeatable.
    #[arg(long = "node-of", value_name = "DEV=NODE", value_parser = parse_rule)]
    node_of: Vec<NodeRule>,
    /// Default placement: writer-local, directory, interleave, stripe:K[:CHUNK] (CHUNK 64K
    /// when left out) or fixed:N.
    #[arg(long, value_name = "POLICY", default_value = "writer-local", value_parser = parse_policy)]
    placement: PlacementPolicy,
    /// Allocation group size (a multiple of 4K; default: 128M, smaller on small devices so
    /// each device holds at least 16 groups).
    #[arg(long, value_name = "SIZE", value_parser = crate::args::nonzero_size)]
    group_size: Option<u64>,
    /// Journal size on the first device (default: 1/64 of it, 256K to 8M).
    #[arg(long, value_name = "SIZE", value_parser = crate::args::nonzero_size)]
    journal_size: Option<u64>,
    /// Size of each of the two checkpoint slots on the first device, which must hold the
    /// whole metadata (default: 1/64 of it, 256K to 64M).
    #[arg(long, value_name = "SIZE", value_parser = crate::args::nonzero_size)]
    checkpoint_size: Option<u64>,
    /// Create each missing DEV as a regular file of SIZE (an existing file is never resized).
    #[arg(long, value_name = "SIZE", value_parser = crate::args::nonzero_size)]
    size: Option<u64>,
    /// Format a device that already holds a file system, swap or a numaio-fs volume.
    #[arg(long)]
    force: bool,
    /// A persistent memory zone NODE:SIZE:PATH (a /dev/pmemN, or a file on a DAX file
    /// system, created when missing); repeatable, instead of DEVs.
    #[arg(long, value_name = "NODE:SIZE:PATH", conflicts_with = "devices", value_parser = parse_zone)]
    zone: Vec<ZoneSpec>,
    /// Print JSON: {"schema_version":1,"uuid","policy","block_size","group_blocks",
    /// "journal_blocks","checkpoint_blocks","capacity_bytes","devices":[{"path","node",
    /// "bytes","kind","groups"}],"nodes":[{"node","groups","capacity_bytes"}]}
    #[arg(long)]
    json: bool,
}

fn parse_rule(s: &str) -> Result<NodeRule, String> {
    s.parse().map_err(|e: numaio_fs::FsError| e.to_string())
}

pub(crate) fn parse_policy(s: &str) -> Result<PlacementPolicy, String> {
    numaio_fs::policy::parse(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_zone(s: &str) -> Result<ZoneSpec, String> {
    s.parse().map_err(|e: numaio_fs::FsError| e.to_string())
}

/// What a device already holds, from its first 68 KiB: the signatures `blkid` would find
/// first for the file systems most likely to be formatted over by mistake.
pub(crate) fn existing_signature(path: &Path) -> anyhow::Result<Option<&'static str>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .with_context(|| format!("{}: opening to look for a file system", path.display()))?;
    let mut buf = vec![0u8; 65600 + 8];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("{}: reading its first blocks", path.display())))
            }
        }
    }
    let b = &buf[..got];
    let at = |off: usize, magic: &[u8]| b.get(off..off + magic.len()) == Some(magic);
    Ok(
        if got >= BLOCK_SIZE as usize && Label::decode(&b[..BLOCK_SIZE as usize], path).is_ok() {
            Some("a numaio-fs volume")
        } else if at(1080, &[0x53, 0xef]) {
            Some("an ext2/ext3/ext4 file system")
        } else if at(0, b"XFSB") {
            Some("an XFS file system")
        } else if at(65600, b"_BHRfS_M") {
            Some("a btrfs file system")
        } else if at(4086, b"SWAPSPACE2") {
            Some("swap space")
        } else {
            None
        },
    )
}

/// The options for devices `devs` (bytes and node of each, device 0 first), defaults
/// scaled to them.
fn options(a: &MkfsArgs, devs: &[(u64, u32)]) -> anyhow::Result<MkfsOptions> {
    let blocks = |what: &str, b: Option<u64>| -> anyhow::Result<Option<u64>> {
        match b {
            Some(b) if !b.is_multiple_of(BLOCK_SIZE) => {
                usage_bail!("--{what} {b}: must be a multiple of {BLOCK_SIZE} bytes")
            }
            b => Ok(b.map(|b| b / BLOCK_SIZE)),
        }
    };
    Ok(MkfsOptions::sized(
        devs,
        a.placement.clone(),
        blocks("group-size", a.group_size)?,
        blocks("journal-size", a.journal_size)?,
        blocks("checkpoint-size", a.checkpoint_size)?,
    ))
}

#[derive(Serialize)]
struct JsonDevice {
    path: PathBuf,
    node: u32,
    bytes: u64,
    kind: numaio_fs::store::DeviceKind,
    groups: u64,
}

#[derive(Serialize)]
struct JsonNode {
    node: u32,
    groups: u64,
    capacity_bytes: u64,
}

#[derive(Serialize)]
struct JsonVolume {
    schema_version: u32,
    uuid: String,
    policy: String,
    block_size: u64,
    group_blocks: u64,
    journal_blocks: u64,
    checkpoint_blocks: u64,
    capacity_bytes: u64,
    devices: Vec<JsonDevice>,
    nodes: Vec<JsonNode>,
}

fn describe(h: &Header, infos: &[DeviceInfo]) -> JsonVolume {
    let groups = h.groups();
    let mut nodes: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for g in &groups {
        let e = nodes.entry(g.node).or_default();
        e.0 += 1;
        e.1 += g.blocks * BLOCK_SIZE;
    }
    JsonVolume {
        schema_version: 1,
        uuid: uuid_text(&h.uuid),
        policy: h.policy.to_string(),
        block_size: BLOCK_SIZE,
        group_blocks: h.group_blocks,
        journal_blocks: h.journal_blocks,
        checkpoint_blocks: h.checkpoint_blocks,
        capacity_bytes: groups.iter().map(|g| g.blocks * BLOCK_SIZE).sum(),
        devices: infos
            .iter()
            .enumerate()
            .map(|(i, d)| JsonDevice {
                path: d.path.clone(),
                node: d.node,
                bytes: d.bytes,
                kind: d.kind,
                groups: groups.iter().filter(|g| g.dev as usize == i).count() as u64,
            })
            .collect(),
        nodes: nodes
            .into_iter()
            .map(|(node, (groups, capacity_bytes))| JsonNode {
                node,
                groups,
                capacity_bytes,
            })
            .collect(),
    }
}

/// Creates `path` as a file of `size` bytes if nothing is there.
fn create_missing(path: &Path, size: u64) -> anyhow::Result<()> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(f) => f
            .set_len(size)
            .with_context(|| format!("{}: setting the new file's size to {size}", path.display())),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "{}: creating the file (--size); check the directory exists and is writable",
            path.display()
        ))),
    }
}

fn refuse_existing(path: &Path, force: bool) -> anyhow::Result<()> {
    if force {
        return Ok(());
    }
    if let Some(what) = existing_signature(path)? {
        anyhow::bail!(
            "{}: holds {what}; formatting would destroy it. Check the device, or give --force",
            quote(path)
        );
    }
    Ok(())
}

/// Node `node` of `topo`, or a usage error naming the argument `what` and the nodes there are.
pub(crate) fn existing_node<'a>(
    topo: &'a Topology,
    what: &str,
    node: u32,
) -> anyhow::Result<&'a numaio_sys::topology::Node> {
    match topo.node(node) {
        Some(n) => Ok(n),
        None => usage_bail!(
            "{what}: node {node} does not exist on this machine (nodes: {:?})",
            topo.node_ids()
        ),
    }
}

pub fn run(a: MkfsArgs) -> anyhow::Result<ExitCode> {
    let topo = Topology::detect().context("reading the NUMA topology from sysfs")?;
    for r in &a.node_of {
        existing_node(&topo, &format!("--node-of {r}"), r.node)?;
    }
    let (header, infos) = if !a.zone.is_empty() {
        for z in &a.zone {
            let Some(p) = &z.path else {
                usage_bail!(
                    "--zone {z}: a RAM zone lives only while mounted; use `numaio mount --zone`"
                );
            };
            existing_node(&topo, &format!("--zone {z}"), z.node)?;
            create_missing(p, z.bytes)?;
            refuse_existing(p, a.force)?;
        }
        let store = ZoneStore::new(&a.zone)?;
        let devs: Vec<(u64, u32)> = store.devices().iter().map(|d| (d.bytes, d.node)).collect();
        let o = options(&a, &devs)?;
        let h = Fs::mkfs(&store, &o)?;
        (h, store.devices().to_vec())
    } else {
        if let Some(size) = a.size {
            for d in &a.devices {
                create_missing(d, size)?;
            }
        }
        let infos = probe_devices(&a.devices, &a.node_of, &topo)?;
        for d in &infos {
            refuse_existing(&d.path, a.force)?;
        }
        let devs: Vec<(u64, u32)> = infos.iter().map(|d| (d.bytes, d.node)).collect();
        let o = options(&a, &devs)?;
        let store = FileStore::open(&infos, false)?;
        let h = Fs::mkfs(&store, &o)?;
        (h, infos)
    };
    let v = describe(&header, &infos);
    if a.json {
        print_json(&v)?;
    } else {
        outln!("numaio-fs volume {}", v.uuid)?;
        outln!(
            "  placement {}, block size {}, group {} ({} blocks), journal {}, checkpoint slots {}",
            v.policy,
            v.block_size,
            human_bytes(v.group_blocks * BLOCK_SIZE),
            v.group_blocks,
            human_bytes(v.journal_blocks * BLOCK_SIZE),
            human_bytes(v.checkpoint_blocks * BLOCK_SIZE)
        )?;
        for (i, d) in v.devices.iter().enumerate() {
            outln!(
                "  device {i}: {} node {} {} ({} groups)",
                quote(&d.path),
                d.node,
                human_bytes(d.bytes),
                d.groups
            )?;
        }
        for n in &v.nodes {
            outln!(
                "  node {}: {} groups, capacity {}",
                n.node,
                n.groups,
                human_bytes(n.capacity_bytes)
            )?;
        }
        outln!("  capacity {}", human_bytes(v.capacity_bytes))?;
    }
    Ok(ExitCode::SUCCESS)
}
