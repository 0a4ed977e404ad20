//! Block checksums: crc32c (hardware-accelerated on x86-64 and aarch64) or xxh3.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// Checksum algorithm of a cache's integrity stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChecksumKind {
    /// CRC-32C (Castagnoli), 32 bits, SSE4.2/ARMv8 instructions when available.
    #[default]
    Crc32c,
    /// XXH3, 64 bits.
    Xxh3,
}

impl ChecksumKind {
    /// The checksum of `data` (crc32c widened to u64).
    pub fn compute(self, data: &[u8]) -> u64 {
        match self {
            ChecksumKind::Crc32c => u64::from(crc32c::crc32c(data)),
            ChecksumKind::Xxh3 => xxhash_rust::xxh3::xxh3_64(data),
        }
    }
}

impl FromStr for ChecksumKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "crc32c" => Ok(ChecksumKind::Crc32c),
            "xxh3" => Ok(ChecksumKind::Xxh3),
            o => Err(format!("invalid checksum {o:?} (expected crc32c | xxh3)")),
        }
    }
}

impl fmt::Display for ChecksumKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChecksumKind::Crc32c => "crc32c",
            ChecksumKind::Xxh3 => "xxh3",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_sensitivity() {
        // RFC 3720 test vector: crc32c of 32 zero bytes.
        assert_eq!(ChecksumKind::Crc32c.compute(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(ChecksumKind::Crc32c.compute(b"123456789"), 0xE306_9283);
        let mut buf = vec![0xA5u8; 4096];
        for k in [ChecksumKind::Crc32c, ChecksumKind::Xxh3] {
            let a = k.compute(&buf);
            buf[1234] ^= 1;
            assert_ne!(
                a,
                k.compute(&buf),
                "{k}: one flipped bit must change the sum"
            );
            buf[1234] ^= 1;
            assert_eq!(a, k.compute(&buf));
            assert_eq!(k.to_string().parse::<ChecksumKind>().unwrap(), k);
        }
        assert!("md5".parse::<ChecksumKind>().is_err());
    }
}
