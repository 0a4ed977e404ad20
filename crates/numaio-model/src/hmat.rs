//! What the firmware advertises about memory performance: the ACPI HMAT, read from sysfs's
//! access classes (`nodeN/access0/initiators/`, local pairs only, readable by anyone) and from
//! the raw table (`/sys/firmware/acpi/tables/HMAT`, every pair, root only).

use crate::profile::Matrix;
use std::path::Path;

/// One System Locality Latency and Bandwidth entry of the raw table, normalised the way the
/// kernel does: latency in ns, bandwidth in the table's MB/s unit (which sysfs shows).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LbEntry {
    /// 0 = memory, 1..3 = memory-side cache levels.
    pub hierarchy: u8,
    /// 0 access / 1 read / 2 write latency, 3 access / 4 read / 5 write bandwidth.
    pub data_type: u8,
    pub initiator_pd: u32,
    pub target_pd: u32,
    pub value: u64,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Parses the raw HMAT table. A truncated or malformed table gives an error naming the
/// offset; entries of 0 or 0xffff (no path / no information) are left out.
pub fn parse_hmat(b: &[u8]) -> Result<Vec<LbEntry>, String> {
    if b.get(0..4) != Some(b"HMAT") {
        return Err("not an HMAT table (signature)".into());
    }
    let len = u32_at(b, 4).ok_or("truncated header")? as usize;
    if len > b.len() || len < 40 {
        return Err(format!("table length {len} but {} bytes read", b.len()));
    }
    let revision = b[8];
    let mut out = Vec::new();
    let mut off = 40;
    while off + 8 <= len {
        let ty = u16_at(b, off).ok_or("truncated structure")?;
        let slen = u32_at(b, off + 4).ok_or("truncated structure")? as usize;
        if slen < 8 || off + slen > len {
            return Err(format!("structure at offset {off} has bad length {slen}"));
        }
        if ty == 1 {
            let s = &b[off..off + slen];
            let bad = || format!("latency/bandwidth structure at offset {off} is truncated");
            let flags = *s.get(8).ok_or_else(bad)?;
            let data_type = *s.get(9).ok_or_else(bad)?;
            let ni = u32_at(s, 12).ok_or_else(bad)? as usize;
            let nt = u32_at(s, 16).ok_or_else(bad)? as usize;
            let base = u64_at(s, 24).ok_or_else(bad)?;
            if 32 + 4 * (ni + nt) + 2 * ni * nt > s.len() {
                return Err(bad());
            }
            let inits: Vec<u32> = (0..ni).map(|k| u32_at(s, 32 + 4 * k).unwrap()).collect();
            let targets: Vec<u32> = (0..nt)
                .map(|k| u32_at(s, 32 + 4 * ni + 4 * k).unwrap())
                .collect();
            let e0 = 32 + 4 * (ni + nt);
            for (a, &ip) in inits.iter().enumerate() {
                for (t, &tp) in targets.iter().enumerate() {
                    let raw = u16_at(s, e0 + 2 * (a * nt + t)).unwrap();
                    if raw == 0 || raw == 0xffff {
                        continue;
                    }
                    let mut value = u64::from(raw) * base;
                    // Revision 2 tables give latency in picoseconds; the kernel shows ns.
                    if data_type <= 2 && revision >= 2 {
                        value = value.div_ceil(1000);
                    }
                    out.push(LbEntry {
                        hierarchy: flags & 0x0f,
                        data_type,
                        initiator_pd: ip,
                        target_pd: tp,
                        value,
                    });
                }
            }
        }
        off += slen;
    }
    Ok(out)
}

/// Latency and bandwidth matrices over `nodes` from raw entries. Proximity domains are mapped
/// to nodes the way Linux numbers them from the SRAT: domains with CPUs (the initiators)
/// first, in increasing order, then the others; the k-th domain is `nodes[k]`.
pub fn matrices_from_entries(entries: &[LbEntry], nodes: &[u32]) -> (Matrix, Matrix) {
    let n = nodes.len();
    let mut inits: Vec<u32> = entries.iter().map(|e| e.initiator_pd).collect();
    inits.sort_unstable();
    inits.dedup();
    let mut others: Vec<u32> = entries
        .iter()
        .map(|e| e.target_pd)
        .filter(|t| !inits.contains(t))
        .collect();
    others.sort_unstable();
    others.dedup();
    let pds: Vec<u32> = inits.into_iter().chain(others).collect();
    let pos = |pd: u32| pds.iter().position(|&p| p == pd).filter(|&k| k < n);
    let mut lat: Matrix = vec![vec![None; n]; n];
    let mut bw: Matrix = vec![vec![None; n]; n];
    for e in entries.iter().filter(|e| e.hierarchy == 0) {
        let (Some(i), Some(j)) = (pos(e.initiator_pd), pos(e.target_pd)) else {
            continue;
        };
        let v = e.value as f64;
        match e.data_type {
            // Access values win over read-only ones; read over write.
            0 | 1 if lat[i][j].is_none() || e.data_type == 0 => lat[i][j] = Some(v),
            3 | 4 if bw[i][j].is_none() || e.data_type == 3 => bw[i][j] = Some(v),
            _ => {}
        }
    }
    (lat, bw)
}

/// The sysfs access-class values: for each target node, its best initiators' read latency
/// (ns) and read bandwidth (MiB/s). `root` is normally `/sys/devices/system/node`.
pub fn sysfs_access0(root: &Path, nodes: &[u32]) -> Option<(Matrix, Matrix)> {
    let n = nodes.len();
    let mut lat: Matrix = vec![vec![None; n]; n];
    let mut bw: Matrix = vec![vec![None; n]; n];
    let mut any = false;
    for (j, &t) in nodes.iter().enumerate() {
        let dir = root.join(format!("node{t}/access0/initiators"));
        let read = |f: &str| -> Option<f64> {
            std::fs::read_to_string(dir.join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let (l, b) = (read("read_latency"), read("read_bandwidth"));
        if l.is_none() && b.is_none() {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|s| s.strip_prefix("node"))
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(i) = nodes.iter().position(|&x| x == id) {
                lat[i][j] = l.filter(|v| *v > 0.0);
                bw[i][j] = b.filter(|v| *v > 0.0);
                any = true;
            }
        }
    }
    any.then_some((lat, bw))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a revision-2 HMAT with one latency and one bandwidth structure.
    pub(crate) fn table(pds: &[u32], lat_ns: &[u16], bw: &[u16]) -> Vec<u8> {
        let mut body = Vec::new();
        for (dt, vals, base) in [(0u8, lat_ns, 1000u64), (3u8, bw, 1u64)] {
            let n = pds.len();
            let len = 32 + 8 * n + 2 * n * n;
            body.extend(1u16.to_le_bytes());
            body.extend(0u16.to_le_bytes());
            body.extend((len as u32).to_le_bytes());
            body.extend([0u8, dt, 0, 0]);
            body.extend((n as u32).to_le_bytes());
            body.extend((n as u32).to_le_bytes());
            body.extend(0u32.to_le_bytes());
            body.extend(base.to_le_bytes());
            for _ in 0..2 {
                for p in pds {
                    body.extend(p.to_le_bytes());
                }
            }
            for v in vals {
                body.extend(v.to_le_bytes());
            }
        }
        let mut t = b"HMAT".to_vec();
        t.extend(((40 + body.len()) as u32).to_le_bytes());
        t.push(2);
        t.resize(40, 0);
        t.extend(body);
        t
    }

    #[test]
    fn raw_table_round_trip() {
        let t = table(&[0, 1], &[10, 20, 30, 40], &[100, 0, 300, 400]);
        let e = parse_hmat(&t).unwrap();
        let (lat, bw) = matrices_from_entries(&e, &[0, 1]);
        assert_eq!(
            lat,
            vec![vec![Some(10.0), Some(20.0)], vec![Some(30.0), Some(40.0)]]
        );
        assert_eq!(bw[0][1], None);
        assert_eq!(bw[1][0], Some(300.0));
    }

    #[test]
    fn cpu_less_domains_are_numbered_after_initiators() {
        // Domains 0 and 2 have CPUs (initiators), domain 1 is memory only: Linux calls
        // domain 2 node 1 and domain 1 node 2.
        let e = |i: u32, t: u32, v: u64| LbEntry {
            hierarchy: 0,
            data_type: 0,
            initiator_pd: i,
            target_pd: t,
            value: v,
        };
        let entries = [
            e(0, 0, 10),
            e(0, 1, 11),
            e(0, 2, 12),
            e(2, 2, 22),
            e(2, 1, 21),
        ];
        let (lat, _) = matrices_from_entries(&entries, &[0, 1, 2]);
        assert_eq!(lat[0], vec![Some(10.0), Some(12.0), Some(11.0)]);
        assert_eq!(lat[1], vec![None, Some(22.0), Some(21.0)]);
        assert_eq!(lat[2], vec![None, None, None]);
    }

    #[test]
    fn malformed_tables_are_errors_not_panics() {
        let t = table(&[0, 1], &[10, 20, 30, 40], &[1, 2, 3, 4]);
        for cut in [0, 3, 20, 41, 60, t.len() - 1] {
            let mut b = t[..cut].to_vec();
            if b.len() >= 8 {
                // Keep the declared length, so the truncation is inside the structures.
                let len = b.len() as u32;
                b[4..8].copy_from_slice(&len.to_le_bytes());
            }
            let _ = parse_hmat(&b);
        }
        assert!(parse_hmat(b"XXXX").is_err());
        let mut bad = t.clone();
        bad[44..48].copy_from_slice(&3u32.to_le_bytes());
        assert!(parse_hmat(&bad).is_err());
    }

    #[test]
    fn sysfs_access_class_is_read() {
        let d = tempfile::tempdir().unwrap();
        let ini = d.path().join("node1/access0/initiators");
        std::fs::create_dir_all(ini.join("node0")).unwrap();
        std::fs::write(ini.join("read_latency"), "25\n").unwrap();
        std::fs::write(ini.join("read_bandwidth"), "20480\n").unwrap();
        let (lat, bw) = sysfs_access0(d.path(), &[0, 1]).unwrap();
        assert_eq!(lat[0][1], Some(25.0));
        assert_eq!(bw[0][1], Some(20480.0));
        assert_eq!(lat[1][1], None);
        assert!(sysfs_access0(&d.path().join("none"), &[0]).is_none());
    }
}
