//! Estimating where a process's file reads come from.
//!
//! The kernel does not say from which node the page-cache pages behind a `read(2)` came
//! (Tofalos had to add `/proc/PID/numa_io` to the kernel for that). numaio estimates it:
//! each interval's read bytes (`rchar` delta) are split over nodes in proportion to where
//! the cached pages of the process's open files sit. A file whose descriptor offset moved
//! during the interval is weighted by how far it moved (it was evidently being read); when no
//! offset moved (pread, mmap, or first sample), every open file is weighted by its cached
//! bytes. This is an estimate, documented as such in `docs/daemon.md`.

use std::collections::BTreeMap;

/// One file's contribution: its cached bytes per node and, if known, the bytes its
/// descriptor offsets advanced during the interval.
#[derive(Debug, Clone, Default)]
pub struct FileWeight<'a> {
    pub nodes: Option<&'a BTreeMap<u32, u64>>,
    pub advanced: u64,
}

/// Each file's share of the process's recent file reads (summing to 1, or all zero when
/// none of its files has cached pages): by how far its offsets moved where any did, else by
/// its cached bytes.
pub fn file_shares(files: &[FileWeight<'_>]) -> Vec<f64> {
    let by_offset = files.iter().any(|f| f.advanced > 0 && cached(f) > 0);
    let mut w: Vec<f64> = files
        .iter()
        .map(|f| match cached(f) {
            0 => 0.0,
            _ if by_offset => f.advanced as f64,
            total => total as f64,
        })
        .collect();
    let sum: f64 = w.iter().sum();
    if sum > 0.0 {
        w.iter_mut().for_each(|x| *x /= sum);
    }
    w
}

/// The weight of each node in the process's recent file reads (fractions summing to 1),
/// or an empty map when none of its files has cached pages.
pub fn read_distribution(files: &[FileWeight<'_>]) -> BTreeMap<u32, f64> {
    let mut acc: BTreeMap<u32, f64> = BTreeMap::new();
    for (f, share) in files.iter().zip(file_shares(files)) {
        let Some(nodes) = f.nodes else { continue };
        let total = cached(f);
        if share == 0.0 || total == 0 {
            continue;
        }
        for (&n, &b) in nodes {
            *acc.entry(n).or_insert(0.0) += share * b as f64 / total as f64;
        }
    }
    let sum: f64 = acc.values().sum();
    if sum > 0.0 {
        acc.values_mut().for_each(|v| *v /= sum);
    }
    acc.retain(|_, v| *v > 0.0);
    acc
}

fn cached(f: &FileWeight<'_>) -> u64 {
    f.nodes.map_or(0, |n| n.values().sum())
}

/// Splits `bytes` over nodes by `dist`; the parts add up to exactly `bytes`.
pub fn attribute(bytes: u64, dist: &BTreeMap<u32, f64>) -> BTreeMap<u32, u64> {
    let mut out: BTreeMap<u32, u64> = dist
        .iter()
        .map(|(&n, &f)| (n, (bytes as f64 * f).floor() as u64))
        .collect();
    let given: u64 = out.values().sum();
    if let Some((&top, _)) = dist
        .iter()
        .max_by(|a, b| a.1.partial_cmp(b.1).unwrap_or(std::cmp::Ordering::Equal))
    {
        *out.entry(top).or_insert(0) += bytes.saturating_sub(given);
    }
    out
}

/// The share of `dist` on the given nodes (the process's locality), or `None` without data.
pub fn local_share(dist: &BTreeMap<u32, f64>, run_nodes: &[u32]) -> Option<f64> {
    if dist.is_empty() || run_nodes.is_empty() {
        return None;
    }
    Some(
        dist.iter()
            .filter(|(n, _)| run_nodes.contains(n))
            .map(|(_, f)| f)
            .sum::<f64>()
            .min(1.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(v: &[(u32, u64)]) -> BTreeMap<u32, u64> {
        v.iter().copied().collect()
    }

    #[test]
    fn cached_bytes_weight_without_offsets() {
        let a = m(&[(0, 300), (1, 100)]);
        let b = m(&[(1, 600)]);
        let d = read_distribution(&[
            FileWeight {
                nodes: Some(&a),
                advanced: 0,
            },
            FileWeight {
                nodes: Some(&b),
                advanced: 0,
            },
        ]);
        assert!((d[&0] - 0.3).abs() < 1e-9);
        assert!((d[&1] - 0.7).abs() < 1e-9);
        assert_eq!(local_share(&d, &[1]), Some(0.7));
    }

    #[test]
    fn offsets_select_the_files_being_read() {
        let a = m(&[(0, 1000)]);
        let b = m(&[(1, 10)]);
        // Only b's offset moved: all reads come from node 1 although a holds more cache.
        let d = read_distribution(&[
            FileWeight {
                nodes: Some(&a),
                advanced: 0,
            },
            FileWeight {
                nodes: Some(&b),
                advanced: 4096,
            },
        ]);
        assert_eq!(d.len(), 1);
        assert!((d[&1] - 1.0).abs() < 1e-9);
        let r = attribute(1_000_001, &d);
        assert_eq!(r[&1], 1_000_001);
    }

    #[test]
    fn attribution_sums_exactly_and_empty_without_cache() {
        let a = m(&[(0, 1), (1, 1), (2, 1)]);
        let d = read_distribution(&[FileWeight {
            nodes: Some(&a),
            advanced: 0,
        }]);
        let r = attribute(100, &d);
        assert_eq!(r.values().sum::<u64>(), 100);
        assert!(r.values().all(|&v| v >= 33));
        let none = read_distribution(&[FileWeight {
            nodes: None,
            advanced: 5,
        }]);
        assert!(none.is_empty());
        assert!(attribute(5, &none).is_empty());
        assert_eq!(local_share(&none, &[0]), None);
    }
}
