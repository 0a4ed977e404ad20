//! The kernel's list format for CPU and node sets (`0-3,8-11`), as in `cpulist_parse()`.

use crate::error::{SysError, SysResult};

/// Largest id any list may name: above the kernel's limits (`NR_CPUS` is at most 8192,
/// `MAX_NUMNODES` 1024), so real lists always fit while hostile ones stay small.
pub const MAX_ID: u32 = 65_535;

/// Most ids a list may expand to before deduplication, so that repeated ranges cannot make a
/// short string cost unbounded memory or time.
pub const MAX_EXPANDED: usize = 1 << 20;

/// Parses a kernel list such as `0-3,8-11` or `0-7:2` (stride) into sorted, deduplicated ids.
/// An empty or whitespace-only string is the empty set (a CPU-less node's `cpulist`).
/// Ids above [`MAX_ID`] are rejected; see [`parse_bounded`] for a tighter bound.
pub fn parse(s: &str) -> SysResult<Vec<u32>> {
    parse_bounded(s, MAX_ID)
}

/// Like [`parse`], but every id must be at most `max_id` (itself capped at [`MAX_ID`]), e.g.
/// the largest node id the kernel can ever use. Never panics; memory and time are bounded by
/// [`MAX_EXPANDED`] whatever the input.
pub fn parse_bounded(s: &str, max_id: u32) -> SysResult<Vec<u32>> {
    let max_id = max_id.min(MAX_ID);
    let err = |what: String| SysError::Spec {
        spec: s.chars().take(64).collect(),
        what,
    };
    let mut out = Vec::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (range, stride) = match part.split_once(':') {
            Some((r, st)) => (
                r,
                st.trim()
                    .parse::<u32>()
                    .map_err(|_| err("bad stride".into()))?,
            ),
            None => (part, 1),
        };
        if stride == 0 {
            return Err(err("stride must be positive".into()));
        }
        let num = |t: &str, what: &str| {
            t.trim().parse::<u32>().map_err(|_| {
                err(format!(
                    "bad {what} {:?}",
                    t.chars().take(16).collect::<String>()
                ))
            })
        };
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (num(a, "range start")?, num(b, "range end")?),
            None => {
                let v = num(range, "number")?;
                (v, v)
            }
        };
        if hi < lo {
            return Err(err("range end below start".into()));
        }
        if hi > max_id {
            return Err(err(format!(
                "id {hi} is above the largest allowed, {max_id}"
            )));
        }
        let count = ((hi - lo) / stride) as usize + 1;
        if out.len() + count > MAX_EXPANDED {
            return Err(err(format!(
                "list names more than {MAX_EXPANDED} ids (repeated ranges?)"
            )));
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
        assert!(parse("0-1048576").is_err());
        assert!(parse("4294967295").is_err());
        assert!(parse("1:x").is_err());
        assert!(parse("--").is_err());
    }

    #[test]
    fn bounds_ids_and_total_work() {
        assert_eq!(parse_bounded("0-3", 3).unwrap(), vec![0, 1, 2, 3]);
        let e = parse_bounded("0-4", 3).unwrap_err().to_string();
        assert!(e.contains("above the largest allowed, 3"), "{e}");
        // Repeated full ranges stay within the expansion budget or are refused quickly.
        let many = vec!["0-65535"; 40].join(",");
        let t = std::time::Instant::now();
        assert!(parse(&many).is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(parse(&["0-65535"; 4].join(",")).unwrap().len(), 65536);
    }

    #[test]
    fn formats_compactly() {
        assert_eq!(format(&[0, 1, 2, 3, 8, 9, 10, 11]), "0-3,8-11");
        assert_eq!(format(&[4]), "4");
        assert_eq!(format(&[]), "");
        assert_eq!(format(&[1, 3, 4]), "1,3-4");
    }
}
