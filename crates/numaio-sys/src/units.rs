//! Pure, bounded parsers for the numbers users type: seconds, sizes and counts. Each returns
//! a message naming the accepted range; none panics or accepts NaN, infinities or overflow.

/// Parses seconds as a finite number within `[lo, hi]` (`lo` excluded when `lo_open`).
pub fn parse_secs(s: &str, lo: f64, lo_open: bool, hi: f64) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{:?} is not a number of seconds", short(s)))?;
    let above = if lo_open { v > lo } else { v >= lo };
    if v.is_finite() && above && v <= hi {
        Ok(v)
    } else {
        Err(format!(
            "{:?} is out of range: give seconds in {}{lo}, {hi}]",
            short(s),
            if lo_open { "(" } else { "[" }
        ))
    }
}

/// Parses a size with an optional K/M/G/T/P suffix (binary units) within `[lo, hi]` bytes.
pub fn parse_size_in(s: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let v = crate::topology::parse_size(s).ok_or_else(|| {
        format!(
            "{:?} is not a size: use a number with an optional K/M/G/T suffix (binary: 1K = 1024)",
            short(s)
        )
    })?;
    if v < lo || v > hi {
        return Err(format!(
            "{:?} is out of range: give a size from {} to {}",
            short(s),
            size_text(lo),
            size_text(hi)
        ));
    }
    Ok(v)
}

/// Parses a whole number within `[lo, hi]`.
pub fn parse_count_in(s: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{:?} is not a whole number (give {lo} to {hi})", short(s)))?;
    if v < lo || v > hi {
        return Err(format!("{:?} is out of range: give {lo} to {hi}", short(s)));
    }
    Ok(v)
}

/// The input as shown in messages: at most 32 characters.
fn short(s: &str) -> String {
    s.chars().take(32).collect()
}

/// `4K`, `1T`, or plain bytes when not a whole number of a unit: exact and in the form the
/// parser reads back, which `bytesize`'s rounded `1.0 MiB` is not.
fn size_text(b: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if b >= 1 << shift && b & ((1 << shift) - 1) == 0 {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_finite() {
        assert_eq!(parse_secs(" 2.5 ", 0.0, true, 10.0), Ok(2.5));
        for bad in ["nan", "inf", "-inf", "1e300", "0", "-0", "", "1s", "10.5"] {
            assert!(parse_secs(bad, 0.0, true, 10.0).is_err(), "{bad}");
        }
        assert_eq!(parse_secs("0", 0.0, false, 10.0), Ok(0.0));
        assert_eq!(parse_size_in("4K", 1, 1 << 20), Ok(4096));
        let e = parse_size_in("2M", 1, 1 << 20).unwrap_err();
        assert!(e.contains("from 1 to 1M"), "{e}");
        assert!(parse_size_in("99999999999999T", 0, u64::MAX).is_err());
        assert!(parse_size_in("1Q", 0, u64::MAX).is_err());
        assert_eq!(parse_count_in("7", 1, 7), Ok(7));
        assert!(parse_count_in("8", 1, 7).is_err());
        assert!(parse_count_in("-1", 0, 7).is_err());
        assert!(parse_count_in("99999999999999999999999", 0, u64::MAX).is_err());
        let long = "9".repeat(10_000);
        assert!(parse_count_in(&long, 0, 7).unwrap_err().len() < 100);
    }
}
