//! Stock ext4 over the node disks joined with dm-linear: what the kernel does without a
//! NUMA-aware file system, the baseline numaio-fs is compared with.
//!
//! [`setup_script`] joins the disks in `$devs` (see
//! [`crate::guest_script::node_disks_prelude`]) into one linear device, makes ext4 on it,
//! mounts it on `/mnt` and prints the table (section `dm-table`) and each disk's node and
//! device number (section `dm-disks`). [`LinearMap`] reads both back and tells on which
//! node a sector of the linear device lies, so `filefrag` extents ([`crate::filefrag`])
//! map to nodes.
//!
//! The guest has no udev; libdevmapper makes the `/dev/mapper` node itself with
//! `DM_DISABLE_UDEV=1`. The scenario needs the `dm-mod` module and [`EXT4_TOOLS`].

use crate::Scenario;

/// Host tools the guest needs, copied with their libraries.
pub const EXT4_TOOLS: [&str; 3] = [
    "/usr/sbin/dmsetup",
    "/usr/sbin/mkfs.ext4",
    "/usr/sbin/filefrag",
];

/// The first of [`EXT4_TOOLS`] missing on the host.
pub fn missing_tool() -> Option<&'static str> {
    EXT4_TOOLS
        .iter()
        .copied()
        .find(|t| !std::path::Path::new(t).is_file())
}

/// Adds the `dm-mod` module and [`EXT4_TOOLS`] to a scenario.
pub fn with_tools(mut s: Scenario) -> Scenario {
    s = s.kernel_module("dm-mod");
    for t in EXT4_TOOLS {
        s = s.host_binary(t);
    }
    s
}

/// Shell lines: `/dev/mapper/NAME` over the disks of `$devs` in order, ext4 with 4 KiB
/// blocks (`mkfs_opts` added, e.g. `-g 4096`) mounted on `/mnt`; prints sections `dm-table`
/// and `dm-disks` (`NODE DEV MAJ:MIN` per disk). Exits 20–24 when a step fails.
pub fn setup_script(name: &str, mkfs_opts: &str) -> String {
    format!(
        r#"
: > /tmp/dm-table; start=0
for d in $devs; do
  sz=$(cat /sys/block/${{d#/dev/}}/size) || exit 20
  echo "$start $sz linear $d 0" >> /tmp/dm-table; start=$((start + sz))
done
DM_DISABLE_UDEV=1 dmsetup create {name} < /tmp/dm-table || exit 21
echo "@@begin dm-table"; dmsetup table {name} || exit 22
echo "@@begin dm-disks"
for d in $devs; do echo "$(awk -v d=$d '$2 == d {{ print $1 }}' /tmp/node-disks) $d $(cat /sys/block/${{d#/dev/}}/dev)"; done
mkfs.ext4 -q -F -b 4096 {mkfs_opts} /dev/mapper/{name} || exit 23
mount -t ext4 /dev/mapper/{name} /mnt || exit 24
"#
    )
}

/// Shell lines that undo [`setup_script`] (unmount, remove the device), so the disks can
/// be used for something else in the same guest. Exits 25 when a step fails.
pub fn teardown_script(name: &str) -> String {
    format!("umount /mnt || exit 25\nDM_DISABLE_UDEV=1 dmsetup remove {name} || exit 25\n")
}

/// One target line of a linear table: sectors `start..start+len` of the linear device are
/// sectors `offset..` of device `dev` (`MAJ:MIN`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub len: u64,
    pub dev: String,
    pub offset: u64,
    /// Guest node of `dev`.
    pub node: i64,
}

/// The linear device's sectors, by node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearMap {
    pub segments: Vec<Segment>,
}

impl LinearMap {
    /// Reads `dmsetup table` output (`START LEN linear MAJ:MIN OFFSET` per line) and the
    /// disks' `NODE DEV MAJ:MIN` lines. A table line that is not `linear`, or names a
    /// device with no node, is an error naming it.
    pub fn parse(table: &str, disks: &str) -> Result<LinearMap, String> {
        let mut node_of: Vec<(String, i64)> = Vec::new();
        for l in disks.lines().filter(|l| !l.trim().is_empty()) {
            match l.split_whitespace().collect::<Vec<_>>()[..] {
                [node, _dev, majmin] => {
                    let node = node
                        .parse()
                        .map_err(|_| format!("disk line {l:?}: {node:?} is not a node"))?;
                    node_of.push((majmin.to_string(), node));
                }
                _ => return Err(format!("disk line {l:?}: want NODE DEV MAJ:MIN")),
            }
        }
        let mut segments = Vec::new();
        for l in table.lines().filter(|l| !l.trim().is_empty()) {
            let w: Vec<&str> = l.split_whitespace().collect();
            let num = |i: usize| w.get(i).and_then(|v| v.parse::<u64>().ok());
            match (num(0), num(1), w.get(2), w.get(3), num(4)) {
                (Some(start), Some(len), Some(&"linear"), Some(dev), Some(offset)) => {
                    let node = node_of
                        .iter()
                        .find(|(d, _)| d == dev)
                        .map(|(_, n)| *n)
                        .ok_or_else(|| format!("table line {l:?}: {dev} is not a node disk"))?;
                    segments.push(Segment {
                        start,
                        len,
                        dev: dev.to_string(),
                        offset,
                        node,
                    });
                }
                _ => {
                    return Err(format!(
                        "table line {l:?}: want START LEN linear MAJ:MIN OFFSET"
                    ))
                }
            }
        }
        if segments.is_empty() {
            return Err("empty dm-linear table".into());
        }
        Ok(LinearMap { segments })
    }

    /// The node of 512-byte sector `sector` of the linear device.
    pub fn node_of_sector(&self, sector: u64) -> Option<i64> {
        self.segments
            .iter()
            .find(|s| sector >= s.start && sector - s.start < s.len)
            .map(|s| s.node)
    }

    /// Blocks per node of `count` blocks of `block_size` bytes from block `first` of the
    /// linear device (an extent may cross from one disk to the next). Blocks outside the
    /// table count under node -1.
    pub fn blocks_per_node(
        &self,
        first: u64,
        count: u64,
        block_size: u64,
    ) -> std::collections::BTreeMap<i64, u64> {
        let mut per = std::collections::BTreeMap::new();
        let spb = (block_size / 512).max(1);
        for b in first..first + count {
            let n = self.node_of_sector(b * spb).unwrap_or(-1);
            *per.entry(n).or_insert(0) += 1;
        }
        per
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `dmsetup table` prints devices as MAJ:MIN
    const TABLE: &str = "0 131072 linear 259:1 0\n131072 65536 linear 259:0 0\n";
    const DISKS: &str = "0 /dev/nvme1n1 259:1\n1 /dev/nvme0n1 259:0\n";

    #[test]
    fn sectors_map_to_nodes() {
        let m = LinearMap::parse(TABLE, DISKS).unwrap();
        assert_eq!(m.segments.len(), 2);
        assert_eq!(m.node_of_sector(0), Some(0));
        assert_eq!(m.node_of_sector(131071), Some(0));
        assert_eq!(m.node_of_sector(131072), Some(1));
        assert_eq!(m.node_of_sector(196607), Some(1));
        assert_eq!(m.node_of_sector(196608), None);
        // 4 KiB blocks 16382..16386 cross the boundary at block 16384
        let per = m.blocks_per_node(16382, 4, 4096);
        assert_eq!(per.get(&0), Some(&2));
        assert_eq!(per.get(&1), Some(&2));
        assert_eq!(m.blocks_per_node(24575, 2, 4096).get(&-1), Some(&1));
    }

    #[test]
    fn bad_tables_are_named() {
        let e = LinearMap::parse("0 8 striped 2 8 259:0 0\n", DISKS).unwrap_err();
        assert!(e.contains("striped"), "{e}");
        let e = LinearMap::parse("0 8 linear 8:0 0\n", DISKS).unwrap_err();
        assert!(e.contains("8:0 is not a node disk"), "{e}");
        assert!(LinearMap::parse("", DISKS).is_err());
        assert!(LinearMap::parse(TABLE, "x /dev/a 1:2\n").is_err());
    }

    #[test]
    fn the_script_joins_devs_in_order() {
        let s = setup_script("lin", "-g 4096");
        assert!(s.contains("dmsetup create lin < /tmp/dm-table"), "{s}");
        assert!(
            s.contains("mkfs.ext4 -q -F -b 4096 -g 4096 /dev/mapper/lin"),
            "{s}"
        );
        assert!(teardown_script("lin").contains("dmsetup remove lin"));
    }
}
