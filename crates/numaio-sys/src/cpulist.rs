//! The kernel's list format for CPU and node sets (`0-3,8-11`), as in `cpulist_parse()`.

use crate::error::{SysError, SysResult};

/// Parses a kernel list such as `0-3,8-11` or `0-7:2` (stride) into sorted, deduplicated ids.
/// An empty or whitespace-only string is the empty set (a CPU-less node's `cpulist`).
pub fn parse(s: &str) -> SysResult<Vec<u32>> {
    let err = |what: &str| SysError::Spec {
        spec: s.to_string(),
        what: what.to_string(),
    };
    let mut out = Vec::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (range, stride) = match part.split_once(':') {
            Some((r, st)) => (r, st.parse::<u32>().map_err(|_| err("bad stride"))?),
            None => (part, 1),
        };
        if stride == 0 {
            return Err(err("stride must be positive"));
        }
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (
                a.trim()
                    .parse::<u32>()
                    .map_err(|_| err("bad range start"))?,
                b.trim().parse::<u32>().map_err(|_| err("bad range end"))?,
            ),
            None => {
                let v = range.parse::<u32>().map_err(|_| err("bad number"))?;
                (v, v)
            }
        };
        if hi < lo {
            return Err(err("range end below start"));
        }
        if hi - lo > 1 << 20 {
            return Err(err("range too large"));
        }
        out.extend((lo..=hi).step_by(stride as usize));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Formats ids as a compact kernel list (`0-3,8-11`).
pub fn format(ids: &[u32]) -> String {
    let mut v: Vec<u32> = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_gaps() {
        assert_eq!(parse("0-3,8-11").unwrap(), vec![0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(parse("5").unwrap(), vec![5]);
        assert_eq!(parse("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse("\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse("0-6:2").unwrap(), vec![0, 2, 4, 6]);
        assert_eq!(parse("3,1,1").unwrap(), vec![1, 3]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("a-b").is_err());
        assert!(parse("3-1").is_err());
        assert!(parse("0-4:0").is_err());
        assert!(parse("0-99999999").is_err());
    }

    #[test]
    fn formats_compactly() {
        assert_eq!(format(&[0, 1, 2, 3, 8, 9, 10, 11]), "0-3,8-11");
        assert_eq!(format(&[4]), "4");
        assert_eq!(format(&[]), "");
        assert_eq!(format(&[1, 3, 4]), "1,3-4");
    }
}
