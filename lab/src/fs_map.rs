//! Reading what numaio-fs lab tests print: the volume's block map (`numaio fs map --json`),
//! the node disks' write counters between two `node-disk-stat` sections, and whether a file
//! is misplaced (most of its blocks off its creator's node).

use crate::dm_linear::LinearMap;
use crate::filefrag;
use crate::{NodeDiskStat, Outcome};
use serde_json::Value;
use std::collections::BTreeMap;

/// Blocks per node and extents `(logical, len, node)` of one file.
pub type FileMap = (BTreeMap<u64, u64>, Vec<(u64, u64, u64)>);

/// `fs map --json` output: path → its [`FileMap`].
pub type Map = BTreeMap<String, FileMap>;

/// Parses `numaio fs map --json`; `None` if the document does not have its shape.
pub fn parse_map(v: &Value) -> Option<Map> {
    let mut m = Map::new();
    for f in v["files"].as_array()? {
        let mut per = BTreeMap::new();
        for n in f["nodes"].as_array()? {
            per.insert(n["node"].as_u64()?, n["blocks"].as_u64()?);
        }
        let mut ext = Vec::new();
        for e in f["extents"].as_array()? {
            ext.push((
                e["logical"].as_u64()?,
                e["len"].as_u64()?,
                e["node"].as_u64()?,
            ));
        }
        m.insert(f["path"].as_str()?.to_string(), (per, ext));
    }
    Some(m)
}

/// The map in section `name` of a run (`numaio fs map --json` after `@@begin NAME`);
/// panics with the run's report when it is missing or has another shape.
pub fn map_section(out: &Outcome, name: &str) -> Map {
    parse_map(&out.section_json(name)).unwrap_or_else(|| {
        panic!(
            "section {name}: fs map --json has an unexpected shape\n{}",
            out.report()
        )
    })
}

/// The share of `per`'s blocks on `node` (0 for an empty file).
pub fn fraction_on(per: &BTreeMap<u64, u64>, node: u64) -> f64 {
    let total: u64 = per.values().sum();
    per.get(&node).copied().unwrap_or(0) as f64 / total.max(1) as f64
}

/// Sectors written per disk (`dev` → `(node, sectors)`) between two `node-disk-stat`
/// sections of a run; panics with the run's report when a disk is missing.
pub fn written(out: &Outcome, before: &str, after: &str) -> BTreeMap<String, (i64, u64)> {
    let b = NodeDiskStat::parse(out.section(before));
    let a = NodeDiskStat::parse(out.section(after));
    b.iter()
        .map(|d| {
            let now = a
                .iter()
                .find(|x| x.dev == d.dev)
                .unwrap_or_else(|| panic!("{} missing after\n{}", d.dev, out.report()));
            (
                d.dev.clone(),
                (d.node, now.sectors_written - d.sectors_written),
            )
        })
        .collect()
}

/// Whether a file is misplaced: most of its blocks are not on its creator's node.
pub fn misplaced(per_node: &BTreeMap<i64, u64>, creator: i64) -> bool {
    let total: u64 = per_node.values().sum();
    let home = per_node.get(&creator).copied().unwrap_or(0);
    (total - home) * 2 > total
}

/// Misplaced files of the creator comparison, `(ext4, numaio)`: `per_node` files of 64 KiB
/// created by writers alternating between nodes 0 and 1, named `n<creator>-<i>`; ext4's in
/// `/mnt` from filefrag's `ext4` section mapped through the dm-linear table (`dm-table`,
/// `dm-disks`), numaio's from the `map` section. Panics with the guest's report when the
/// output lacks a file or a block lies outside the table.
pub fn misplaced_ext4_vs_numaio(out: &Outcome, per_node: u64) -> (usize, usize) {
    let files = 2 * per_node as usize;
    let lin = LinearMap::parse(out.section("dm-table"), out.section("dm-disks"))
        .unwrap_or_else(|e| panic!("{e}\n{}", out.report()));
    let ext4 =
        filefrag::parse(out.section("ext4")).unwrap_or_else(|e| panic!("{e}\n{}", out.report()));
    assert_eq!(
        ext4.len(),
        files,
        "one filefrag report per file\n{}",
        out.report()
    );
    let mut ext4_bad = 0;
    for f in &ext4 {
        let creator: i64 = if f.path.starts_with("/mnt/n1-") { 1 } else { 0 };
        assert_eq!(f.blocks() * f.block_size, 65536, "{}: {f:?}", f.path);
        let mut per: BTreeMap<i64, u64> = BTreeMap::new();
        for e in &f.extents {
            assert!(!e.unplaced(), "{}: fsync left {e:?} unplaced", f.path);
            for (n, c) in lin.blocks_per_node(e.physical, e.len, f.block_size) {
                *per.entry(n).or_insert(0) += c;
            }
        }
        assert!(
            !per.contains_key(&-1),
            "{}: blocks outside the table: {per:?}",
            f.path
        );
        ext4_bad += usize::from(misplaced(&per, creator));
    }
    let map = map_section(out, "map");
    let mut numaio_bad = 0;
    for n in 0..2u64 {
        for i in 0..per_node {
            let (per, _) = map
                .get(&format!("/n{n}-{i}"))
                .unwrap_or_else(|| panic!("/n{n}-{i} missing from the map\n{}", out.report()));
            let per: BTreeMap<i64, u64> = per.iter().map(|(&k, &v)| (k as i64, v)).collect();
            assert_eq!(per.values().sum::<u64>(), 16, "/n{n}-{i}: {per:?}");
            numaio_bad += usize::from(misplaced(&per, n as i64));
        }
    }
    (ext4_bad, numaio_bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_and_fractions() {
        let v: Value = serde_json::from_str(
            r#"{"files":[{"path":"/a","nodes":[{"node":0,"blocks":1},{"node":1,"blocks":99}],
                "extents":[{"logical":0,"len":99,"node":1},{"logical":99,"len":1,"node":0}]}]}"#,
        )
        .unwrap();
        let m = parse_map(&v).unwrap();
        let (per, ext) = &m["/a"];
        assert_eq!(fraction_on(per, 1), 0.99);
        assert_eq!(ext[1], (99, 1, 0));
        assert!(parse_map(&serde_json::json!({"files": [{"path": "/x"}]})).is_none());
        let per: BTreeMap<i64, u64> = [(0, 9), (1, 7)].into();
        assert!(!misplaced(&per, 0) && misplaced(&per, 1));
        // half and half is not misplaced
        let per: BTreeMap<i64, u64> = [(0, 8), (1, 8)].into();
        assert!(!misplaced(&per, 0) && !misplaced(&per, 1));
    }
}
