//! Devices that belong to a NUMA node: NVMe disks behind a PCI expander bridge on the node
//! ([`crate::Scenario::node_disk`]) and persistent memory, an NVDIMM on the node
//! ([`crate::Scenario::node_pmem`]).
//!
//! # Host side
//!
//! Nodes are given as QEMU node ids, like everywhere in the lab. Each node with disks gets
//! one `pxb` bridge (`numa_node=N`, its own `bus_nr`), and its disks sit behind it as
//! `nvme` devices with the serial `node<N>-<K>` (QEMU node `N`, `K`-th disk of that node,
//! in the order the scenario added them). A disk is a blank sparse raw image in the run's
//! temp dir, or a caller's image ([`crate::Scenario::node_disk_image`], created with
//! [`blank_image`]) that outlives the run, so a second boot sees what the first wrote.
//! Caller images are opened with `cache=none,aio=native`, like
//! [`crate::Scenario::disk_image`]: the guest sees a volatile write cache and its flushes
//! reach the host file.
//!
//! Persistent memory is a `memory-backend-file` (`share=on`) per node, exposed as an
//! `nvdimm` on the node (`-machine nvdimm=on`, memory slots added to `-m`). Guest writes
//! land in the host file's shared mapping, so they survive a killed QEMU: boot again on
//! the same file ([`crate::Scenario::node_pmem_image`]) to read them back. One NVDIMM per
//! node; its size is a multiple of [`PMEM_ALIGN`].
//!
//! # Guest side
//!
//! The guest names NVMe disks `/dev/nvmeXn1` in no particular order, and renumbers nodes
//! (CPU-less nodes after the others, see [`crate::topology`]). Before the scenario starts,
//! /init waits for every device and writes:
//! - `/tmp/node-disks`: one line `NODE DEVPATH SERIAL` per disk, e.g. `1 /dev/nvme0n1
//!   node1-0`, where `NODE` is the **guest** node id (`/sys/block/*/device/numa_node`),
//!   sorted by node and serial;
//! - `/tmp/node-pmem`: one line `NODE DEVPATH` per NVDIMM, e.g. `1 /dev/pmem0`
//!   (the libnvdimm modules are loaded first).
//!
//! Helpers read them: `node-disk NODE [K]` prints the device of guest node `NODE`'s `K`-th
//! disk (default 0), `node-pmem NODE` its pmem device; both fail with a message if there is
//! none. `node-disk-stat` prints `NODE DEVPATH SERIAL SECTORS_WRITTEN` per disk (parse it
//! with [`NodeDiskStat::parse`]). The pmem device comes up in raw mode (no DAX);
//! `node-pmem-fsdax NODE` switches it to fsdax mode (for `mount -o dax` and mappings
//! without a page cache; the contents count as lost, the mode itself is kept on the device
//! for later boots) and prints the device.
//!
//! Pin a writer to a node with `numactl --cpunodebind=N --membind=N CMD` or `numaio run
//! --cpunodebind N -- CMD` (a CPU-less node has no CPUs to bind to: bind only its memory).
//! A scenario fragment:
//!
//! ```text
//! d=$(node-disk 1) || exit 1
//! numactl --cpunodebind=1 --membind=1 dd if=/dev/zero of=$d bs=1M count=4 oflag=direct
//! awk '{print $7}' /sys/block/${d#/dev/}/stat     # sectors written
//! ```

use crate::error::{LabError, LabResult};
use crate::topology::LabTopology;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the guest lists its node disks (`NODE DEVPATH SERIAL` per line).
pub const GUEST_NODE_DISKS: &str = "/tmp/node-disks";
/// Where the guest lists its persistent-memory devices (`NODE DEVPATH` per line).
pub const GUEST_NODE_PMEM: &str = "/tmp/node-pmem";
/// Tells /init how many node devices to wait for (`want_disks=N`, `want_pmem=M`).
pub const GUEST_NODE_DEVICES: &str = "/etc/numaio-lab/node-devices";

/// Most disks on one node (they share the node's bridge).
pub const MAX_DISKS_PER_NODE: usize = 8;
/// A node disk's size is a multiple of this (and at least this).
pub const DISK_ALIGN: u64 = 1 << 20;
/// A pmem device's size is a multiple of this (and at least this).
pub const PMEM_ALIGN: u64 = 2 << 20;

/// What backs a node device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A blank sparse file of this many bytes in the run's temp dir, gone after the run.
    Blank(u64),
    /// An existing file, kept (its length is the device size).
    Image(PathBuf),
}

/// An NVMe disk on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDisk {
    /// QEMU node id.
    pub node: usize,
    pub backing: Backing,
}

/// Persistent memory (an NVDIMM) on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePmem {
    /// QEMU node id.
    pub node: usize,
    pub backing: Backing,
}

/// One line of the guest's `/tmp/node-disks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestNodeDisk {
    /// Guest node id.
    pub node: i64,
    pub dev: String,
    pub serial: String,
}

impl GuestNodeDisk {
    /// Parses `/tmp/node-disks` text (e.g. a scenario's `cat /tmp/node-disks`); lines that
    /// are not `NODE DEVPATH SERIAL` are skipped.
    pub fn parse(text: &str) -> Vec<GuestNodeDisk> {
        text.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let node = w.next()?.parse().ok()?;
                let dev = w.next()?;
                let serial = w.next()?;
                (dev.starts_with("/dev/") && w.next().is_none()).then(|| GuestNodeDisk {
                    node,
                    dev: dev.to_string(),
                    serial: serial.to_string(),
                })
            })
            .collect()
    }
}

/// The serial of the `k`-th disk of QEMU node `node`.
pub fn disk_serial(node: usize, k: usize) -> String {
    format!("node{node}-{k}")
}

/// Creates a blank sparse image of `bytes` at `path` for [`crate::Scenario::node_disk_image`]
/// or [`crate::Scenario::node_pmem_image`]. Refuses to overwrite an existing file.
pub fn blank_image(path: impl AsRef<Path>, bytes: u64) -> LabResult<()> {
    let path = path.as_ref();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(LabError::io(format!(
            "creating the blank image {} (it must not exist yet)",
            path.display()
        )))?;
    f.set_len(bytes).map_err(LabError::io(format!(
        "sizing {} to {bytes} bytes",
        path.display()
    )))
}

/// Parses the CLI form `NODE=SIZE` (a blank device, SIZE like `16M`) or `NODE=PATH` (an
/// existing image; a path has a `/`, e.g. `./d.img`).
pub fn parse_node_arg(arg: &str) -> LabResult<(usize, Backing)> {
    let (node, what) = arg.split_once('=').ok_or_else(|| {
        bad(format!(
            "{arg:?}: write NODE=SIZE (e.g. 1=16M) or NODE=PATH (e.g. 1=./d.img)"
        ))
    })?;
    let node = node
        .trim()
        .parse()
        .map_err(|_| bad(format!("{arg:?}: {node:?} is not a QEMU node id")))?;
    if what.contains('/') {
        return Ok((node, Backing::Image(what.into())));
    }
    let bytes = numaio_sys::topology::parse_size(what).ok_or_else(|| {
        bad(format!(
            "{arg:?}: {what:?} is not a size (e.g. 16M) nor a path (write ./{what} for a file here)"
        ))
    })?;
    Ok((node, Backing::Blank(bytes)))
}

fn bad(msg: String) -> LabError {
    LabError::BadNodeDevice(msg)
}

/// The size of a device, checked against `align`.
fn size_of(what: &str, node: usize, b: &Backing, align: u64) -> LabResult<u64> {
    let (bytes, from) = match b {
        Backing::Blank(n) => (*n, String::new()),
        Backing::Image(p) => {
            let s = p.to_string_lossy();
            if s.contains(',') {
                // QEMU option values are comma-separated
                return Err(bad(format!(
                    "{what} image {} on node {node}: QEMU cannot take a path with a comma; move or link it",
                    p.display()
                )));
            }
            let m = std::fs::metadata(p).map_err(|e| {
                bad(format!(
                    "{what} image {} on node {node}: {e} (create it with numaio_lab::nodedev::blank_image)",
                    p.display()
                ))
            })?;
            if !m.is_file() {
                return Err(bad(format!(
                    "{what} image {} on node {node} is not a regular file",
                    p.display()
                )));
            }
            (m.len(), format!(" (the length of {})", p.display()))
        }
    };
    if bytes < align || bytes % align != 0 {
        return Err(bad(format!(
            "{what} on node {node}: {bytes} bytes{from}; the size must be a non-zero multiple of {} MiB",
            align >> 20
        )));
    }
    Ok(bytes)
}

/// Checks the node devices against the topology; returns the pmem total in bytes.
pub(crate) fn validate(
    topo: &LabTopology,
    disks: &[NodeDisk],
    pmem: &[NodePmem],
) -> LabResult<u64> {
    let n = topo.nodes.len();
    let mut per_node: BTreeMap<usize, usize> = BTreeMap::new();
    let mut images: Vec<&Path> = Vec::new();
    for d in disks {
        if d.node >= n {
            return Err(bad(format!(
                "node disk on node {}: the topology has nodes 0..={} (QEMU node ids)",
                d.node,
                n - 1
            )));
        }
        size_of("node disk", d.node, &d.backing, DISK_ALIGN)?;
        let c = per_node.entry(d.node).or_default();
        *c += 1;
        if *c > MAX_DISKS_PER_NODE {
            return Err(bad(format!(
                "node {} has more than {MAX_DISKS_PER_NODE} node disks",
                d.node
            )));
        }
        if let Backing::Image(p) = &d.backing {
            images.push(p);
        }
    }
    let mut total = 0u64;
    let mut pmem_nodes = Vec::new();
    for p in pmem {
        if p.node >= n {
            return Err(bad(format!(
                "pmem on node {}: the topology has nodes 0..={} (QEMU node ids)",
                p.node,
                n - 1
            )));
        }
        if pmem_nodes.contains(&p.node) {
            return Err(bad(format!(
                "node {} has two pmem devices; the lab gives a node at most one",
                p.node
            )));
        }
        pmem_nodes.push(p.node);
        total += size_of("pmem", p.node, &p.backing, PMEM_ALIGN)?;
        if let Backing::Image(p) = &p.backing {
            images.push(p);
        }
    }
    for (i, a) in images.iter().enumerate() {
        if images[..i].contains(a) {
            return Err(bad(format!(
                "{} backs two node devices; give each its own image",
                a.display()
            )));
        }
    }
    Ok(total)
}

/// QEMU options for the node devices (blank images are created in `work`), and the
/// guest's [`GUEST_NODE_DEVICES`] file. `topology_args` gets memory slots when there is
/// persistent memory.
pub(crate) fn qemu_args(
    topo: &LabTopology,
    disks: &[NodeDisk],
    pmem: &[NodePmem],
    work: &Path,
    topology_args: &mut [String],
) -> LabResult<(Vec<String>, String)> {
    let pmem_total = validate(topo, disks, pmem)?;
    let mut a = Vec::new();
    let backing_path = |b: &Backing, name: String| -> LabResult<(PathBuf, bool)> {
        match b {
            Backing::Image(p) => Ok((p.clone(), true)),
            Backing::Blank(bytes) => {
                let p = work.join(name);
                blank_image(&p, *bytes)?;
                Ok((p, false))
            }
        }
    };
    // one bridge per node, the node's disks behind it, in the order they were added
    let mut by_node: BTreeMap<usize, Vec<&NodeDisk>> = BTreeMap::new();
    for d in disks {
        by_node.entry(d.node).or_default().push(d);
    }
    for (b, (node, list)) in by_node.iter().enumerate() {
        // bus numbers 16, 32, ...: each bridge keeps room for buses below it
        a.push("-device".into());
        a.push(format!(
            "pxb,id=numaio-pxb{node},bus=pci.0,bus_nr={},numa_node={node}",
            16 * (b + 1)
        ));
        for (k, d) in list.iter().enumerate() {
            let serial = disk_serial(*node, k);
            let (path, kept) = backing_path(&d.backing, format!("{serial}.img"))?;
            let cache = if kept {
                "cache=none,aio=native"
            } else {
                "cache=unsafe"
            };
            a.push("-drive".into());
            a.push(format!(
                "file={},if=none,id=numaio-{serial},format=raw,{cache}",
                path.display()
            ));
            a.push("-device".into());
            a.push(format!(
                "nvme,drive=numaio-{serial},serial={serial},bus=numaio-pxb{node}"
            ));
        }
    }
    if !pmem.is_empty() {
        add_memory_slots(topology_args, pmem.len(), pmem_total)?;
        a.push("-machine".into());
        a.push("nvdimm=on".into());
        for p in pmem {
            let node = p.node;
            let bytes = size_of("pmem", node, &p.backing, PMEM_ALIGN)?;
            let (path, _) = backing_path(&p.backing, format!("pmem{node}.img"))?;
            a.push("-object".into());
            a.push(format!(
                "memory-backend-file,id=numaio-nv{node},share=on,mem-path={},size={bytes}",
                path.display()
            ));
            a.push("-device".into());
            a.push(format!(
                "nvdimm,id=numaio-nvd{node},memdev=numaio-nv{node},node={node}"
            ));
        }
    }
    let conf = format!("want_disks={}\nwant_pmem={}\n", disks.len(), pmem.len());
    Ok((a, conf))
}

/// Turns `-m SIZE` into `-m SIZE,slots=N,maxmem=SIZE+extra` so NVDIMMs can be plugged.
fn add_memory_slots(args: &mut [String], slots: usize, extra: u64) -> LabResult<()> {
    let i = args.iter().position(|a| a == "-m").ok_or_else(|| {
        bad("the topology's QEMU options have no -m to add memory slots to".into())
    })?;
    let mib: u64 = args
        .get(i + 1)
        .and_then(|v| v.strip_suffix('M'))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad(format!("unexpected -m value {:?}", args.get(i + 1))))?;
    args[i + 1] = format!(
        "{mib}M,slots={slots},maxmem={}M",
        mib + extra.div_ceil(1 << 20)
    );
    Ok(())
}

/// Guest helper: `node-disk NODE [K]` prints guest node NODE's K-th disk.
pub const NODE_DISK_HELPER: &str = r#"#!/bin/sh
# usage: node-disk NODE [K]  -- the device of guest node NODE's K-th disk (default 0), from /tmp/node-disks
[ $# -ge 1 ] || { echo "usage: node-disk NODE [K]" >&2; exit 2; }
d=$(awk -v n="$1" -v i="${2:-0}" 'BEGIN { k = 0 } $1 == n { if (k == i) { print $2; exit } k++ }' /tmp/node-disks 2>/dev/null)
[ -n "$d" ] || { echo "node-disk: guest node $1 has no disk ${2:-0} (see /tmp/node-disks)" >&2; exit 1; }
echo "$d"
"#;

/// Guest helper: `node-disk-stat` prints `NODE DEVPATH SERIAL SECTORS_WRITTEN` for every
/// node disk (field 7 of `/sys/block/<dev>/stat`, 512-byte sectors).
pub const NODE_DISK_STAT_HELPER: &str = r#"#!/bin/sh
# usage: node-disk-stat  -- one line per node disk: NODE DEVPATH SERIAL SECTORS_WRITTEN
while read -r n d s; do
  set -- $(cat /sys/block/${d#/dev/}/stat)
  echo "$n $d $s $7"
done < /tmp/node-disks
"#;

/// One line of `node-disk-stat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDiskStat {
    /// Guest node id.
    pub node: i64,
    pub dev: String,
    pub serial: String,
    /// 512-byte sectors written since boot.
    pub sectors_written: u64,
}

impl NodeDiskStat {
    /// Parses `node-disk-stat` output; other lines are skipped.
    pub fn parse(text: &str) -> Vec<NodeDiskStat> {
        text.lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                match w[..] {
                    [node, dev, serial, written] if dev.starts_with("/dev/") => {
                        Some(NodeDiskStat {
                            node: node.parse().ok()?,
                            dev: dev.to_string(),
                            serial: serial.to_string(),
                            sectors_written: written.parse().ok()?,
                        })
                    }
                    _ => None,
                }
            })
            .collect()
    }
}

/// Guest helper: `node-pmem NODE` prints guest node NODE's pmem device.
pub const NODE_PMEM_HELPER: &str = r#"#!/bin/sh
# usage: node-pmem NODE  -- the pmem device of guest node NODE, from /tmp/node-pmem
[ $# -eq 1 ] || { echo "usage: node-pmem NODE" >&2; exit 2; }
d=$(awk -v n="$1" '$1 == n { print $2; exit }' /tmp/node-pmem 2>/dev/null)
[ -n "$d" ] || { echo "node-pmem: guest node $1 has no pmem device (see /tmp/node-pmem)" >&2; exit 1; }
echo "$d"
"#;

/// Guest helper: `node-pmem-fsdax NODE` switches guest node NODE's pmem device to fsdax
/// mode and prints its device. A label-less NVDIMM comes up as a raw namespace, which
/// cannot do DAX; an fsdax (pfn) info block written into the namespace gives it page
/// structures (kept on the device itself), and the kernel finds the info block again on
/// later boots. The info block and the page structures take the start of the device:
/// treat its contents as lost.
pub const NODE_PMEM_FSDAX_HELPER: &str = r#"#!/bin/sh
# usage: node-pmem-fsdax NODE  -- puts guest node NODE's pmem device in fsdax mode (DAX mounts, mmap without page cache); prints it
[ $# -eq 1 ] || { echo "usage: node-pmem-fsdax NODE" >&2; exit 2; }
d=$(node-pmem "$1") || exit 1
b=/sys/block/${d#/dev/}
if [ "$(cat $b/queue/dax)" = 1 ]; then echo "$d"; exit 0; fi
ns=$(basename "$(readlink -f $b/device)")
region=$(dirname "$(readlink -f $b/device)")
fail() { echo "node-pmem-fsdax: $d ($ns): $1" >&2; exit 1; }
case "$ns" in namespace*) ;; *) fail "its device is $ns, not a namespace";; esac
pfn=$(cat $region/pfn_seed) || fail "no pfn seed in $region"
P=/sys/bus/nd/devices/$pfn
echo "$ns" > /sys/bus/nd/drivers/nd_pmem/unbind || fail "cannot detach the namespace (in use? unmount it first)"
cat /proc/sys/kernel/random/uuid > $P/uuid || fail "setting $pfn/uuid"
echo pmem > $P/mode || fail "setting $pfn/mode"
echo 2097152 > $P/align || fail "setting $pfn/align"
echo "$ns" > $P/namespace || fail "setting $pfn/namespace"
echo "$pfn" > /sys/bus/nd/drivers/nd_pmem/bind || fail "binding $pfn (see dmesg)"
i=0
while [ ! -d $P/block ] && [ $i -lt 100 ]; do usleep 50000; i=$((i+1)); done
new=$(ls $P/block 2>/dev/null | head -n 1)
[ -n "$new" ] || fail "no block device after the switch (see dmesg)"
[ "$(cat /sys/block/$new/queue/dax)" = 1 ] || fail "/dev/$new still has no DAX"
# keep /tmp/node-pmem right if the name changed
sed -i "s|^$1 $d\$|$1 /dev/$new|" /tmp/node-pmem
echo "/dev/$new"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(node: usize, bytes: u64) -> NodeDisk {
        NodeDisk {
            node,
            backing: Backing::Blank(bytes),
        }
    }

    #[test]
    fn bridges_serials_and_slots() {
        let topo = LabTopology::uniform(3);
        let work = tempfile::tempdir().unwrap();
        let mut targs = topo.qemu_args();
        let pm = [NodePmem {
            node: 1,
            backing: Backing::Blank(16 << 20),
        }];
        let (a, conf) = qemu_args(
            &topo,
            &[disk(2, 8 << 20), disk(0, 8 << 20), disk(2, 8 << 20)],
            &pm,
            work.path(),
            &mut targs,
        )
        .unwrap();
        let s = a.join(" ");
        assert!(
            s.contains("pxb,id=numaio-pxb0,bus=pci.0,bus_nr=16,numa_node=0"),
            "{s}"
        );
        assert!(
            s.contains("pxb,id=numaio-pxb2,bus=pci.0,bus_nr=32,numa_node=2"),
            "{s}"
        );
        assert!(s.contains("serial=node2-1,bus=numaio-pxb2"), "{s}");
        assert!(s.contains("serial=node0-0,bus=numaio-pxb0"), "{s}");
        assert!(
            s.contains("nvdimm,id=numaio-nvd1,memdev=numaio-nv1,node=1"),
            "{s}"
        );
        assert!(s.contains("share=on"), "{s}");
        assert!(s.contains("cache=unsafe"), "{s}");
        assert_eq!(conf, "want_disks=3\nwant_pmem=1\n");
        assert!(
            targs.join(" ").contains("-m 1536M,slots=1,maxmem=1552M"),
            "{targs:?}"
        );
        let img = work.path().join("node2-1.img");
        assert_eq!(std::fs::metadata(img).unwrap().len(), 8 << 20);
    }

    #[test]
    fn bad_devices_are_refused_with_the_reason() {
        let topo = LabTopology::uniform(2);
        let msg = |d: &[NodeDisk], p: &[NodePmem]| validate(&topo, d, p).unwrap_err().to_string();
        assert!(msg(&[disk(2, 8 << 20)], &[]).contains("nodes 0..=1"));
        assert!(msg(&[disk(0, 1000)], &[]).contains("multiple of 1 MiB"));
        let pm = |node, bytes| NodePmem {
            node,
            backing: Backing::Blank(bytes),
        };
        assert!(msg(&[], &[pm(0, 3 << 20)]).contains("multiple of 2 MiB"));
        assert!(msg(&[], &[pm(1, 4 << 20), pm(1, 4 << 20)]).contains("two pmem"));
        let missing = NodeDisk {
            node: 0,
            backing: Backing::Image("/nonexistent/d.img".into()),
        };
        let m = msg(&[missing], &[]);
        assert!(
            m.contains("/nonexistent/d.img") && m.contains("blank_image"),
            "{m}"
        );
        let many: Vec<NodeDisk> = (0..=MAX_DISKS_PER_NODE).map(|_| disk(1, 1 << 20)).collect();
        assert!(msg(&many, &[]).contains("more than"));
    }

    #[test]
    fn shared_and_existing_images() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.img");
        blank_image(&p, 4 << 20).unwrap();
        assert!(blank_image(&p, 4 << 20).is_err(), "must not overwrite");
        let topo = LabTopology::uniform(2);
        let d = NodeDisk {
            node: 0,
            backing: Backing::Image(p.clone()),
        };
        validate(&topo, std::slice::from_ref(&d), &[]).unwrap();
        let pm = NodePmem {
            node: 1,
            backing: Backing::Image(p),
        };
        let m = validate(&topo, &[d], &[pm]).unwrap_err().to_string();
        assert!(m.contains("backs two"), "{m}");
    }

    #[test]
    fn parses_cli_args() {
        assert_eq!(
            parse_node_arg("1=16M").unwrap(),
            (1, Backing::Blank(16 << 20))
        );
        assert_eq!(
            parse_node_arg("0=./d.img").unwrap(),
            (0, Backing::Image("./d.img".into()))
        );
        for bad in ["1", "x=16M", "1=lots", "-1=4M"] {
            assert!(parse_node_arg(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_disk_stats() {
        let l =
            NodeDiskStat::parse("1 /dev/nvme0n1 node1-0 8192\nnoise\n0 /dev/nvme1n1 node0-0 x\n");
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].sectors_written, 8192);
        assert_eq!(l[0].serial, "node1-0");
    }

    #[test]
    fn parses_the_guest_list() {
        let l = GuestNodeDisk::parse("junk\n1 /dev/nvme0n1 node1-0\n0 /dev/nvme1n1 node0-0\n");
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].node, 1);
        assert_eq!(l[1].dev, "/dev/nvme1n1");
        assert_eq!(l[1].serial, "node0-0");
    }
}
