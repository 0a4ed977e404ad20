//! Bit masks of nodes and CPUs in the kernel's `unsigned long[]` layout.
//!
//! The kernel rejects node masks shorter than `nr_node_ids` and affinity masks shorter than
//! `nr_cpu_ids`, so masks are sized from `/sys/devices/system/{node,cpu}/possible` rather than
//! fixed at 64 bits.

use crate::cpulist;
use crate::error::{SysError, SysResult};
use std::fmt;
use std::sync::OnceLock;

const WORD_BITS: usize = libc::c_ulong::BITS as usize;

/// A bit mask of ids stored as kernel `unsigned long` words.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Bitmask {
    words: Vec<libc::c_ulong>,
}

impl Bitmask {
    /// An empty mask able to hold at least `bits` ids.
    pub fn with_bits(bits: usize) -> Self {
        let n = bits.max(1).div_ceil(WORD_BITS);
        Bitmask { words: vec![0; n] }
    }

    /// The number of ids the mask can hold.
    pub fn bits(&self) -> usize {
        self.words.len() * WORD_BITS
    }

    /// Sets `id`, growing the mask if needed.
    pub fn set(&mut self, id: u32) {
        let id = id as usize;
        if id >= self.bits() {
            self.words.resize(id / WORD_BITS + 1, 0);
        }
        self.words[id / WORD_BITS] |= 1 << (id % WORD_BITS);
    }

    /// Clears `id`.
    pub fn clear(&mut self, id: u32) {
        let id = id as usize;
        if id < self.bits() {
            self.words[id / WORD_BITS] &= !(1 << (id % WORD_BITS));
        }
    }

    /// Whether `id` is set.
    pub fn contains(&self, id: u32) -> bool {
        let id = id as usize;
        id < self.bits() && self.words[id / WORD_BITS] & (1 << (id % WORD_BITS)) != 0
    }

    /// The set ids in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        // Word by word: cost follows the words, and ids up to u32::MAX stay exact.
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            (0..WORD_BITS)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| (wi * WORD_BITS + b) as u32)
        })
    }

    /// The set ids as a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }

    /// Number of set ids.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Raw words, for passing to the kernel.
    pub fn as_ptr(&self) -> *const libc::c_ulong {
        self.words.as_ptr()
    }

    /// Raw mutable words, for the kernel to fill.
    pub fn as_mut_ptr(&mut self) -> *mut libc::c_ulong {
        self.words.as_mut_ptr()
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.words.len() * std::mem::size_of::<libc::c_ulong>()
    }
}

impl fmt::Debug for Bitmask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", cpulist::format(&self.to_vec()))
    }
}

fn possible_count(path: &str, fallback: usize) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| cpulist::parse(&s).ok())
        .and_then(|v| v.last().map(|&m| m as usize + 1))
        .unwrap_or(fallback)
}

/// Number of node ids the kernel may ever use (`nr_node_ids`), from `node/possible`.
pub fn possible_nodes() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| possible_count("/sys/devices/system/node/possible", 1))
}

/// Number of CPU ids the kernel may ever use (`nr_cpu_ids`), from `cpu/possible`.
pub fn possible_cpus() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| possible_count("/sys/devices/system/cpu/possible", 1024))
}

macro_rules! typed_mask {
    ($name:ident, $what:literal, $possible:ident) => {
        #[doc = concat!("A mask of ", $what, " ids, sized from the kernel's possible ", $what, "s.")]
        #[derive(Clone, PartialEq, Eq, Hash)]
        pub struct $name(pub Bitmask);

        impl $name {
            #[doc = concat!("An empty mask sized for every possible ", $what, ".")]
            pub fn new() -> Self {
                $name(Bitmask::with_bits($possible()))
            }

            /// A mask holding exactly `ids`.
            pub fn from_ids(ids: &[u32]) -> Self {
                let mut m = Self::new();
                for &i in ids {
                    m.0.set(i);
                }
                m
            }

            /// Parses a kernel list such as `0-3,8`.
            pub fn parse(s: &str) -> SysResult<Self> {
                Ok(Self::from_ids(&cpulist::parse(s)?))
            }

            pub fn set(&mut self, id: u32) {
                self.0.set(id)
            }
            pub fn contains(&self, id: u32) -> bool {
                self.0.contains(id)
            }
            pub fn to_vec(&self) -> Vec<u32> {
                self.0.to_vec()
            }
            pub fn count(&self) -> usize {
                self.0.count()
            }
            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{:?}", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&cpulist::format(&self.to_vec()))
            }
        }
    };
}

typed_mask!(NodeMask, "node", possible_nodes);
typed_mask!(CpuSet, "CPU", possible_cpus);

impl NodeMask {
    /// The `maxnode` argument for mbind/set_mempolicy/migrate_pages. The kernel reads
    /// `maxnode - 1` bits (a historical off-by-one that libnuma also compensates for).
    pub fn maxnode_arg(&self) -> libc::c_ulong {
        self.0.bits() as libc::c_ulong + 1
    }

    /// Fails with [`SysError::InvalidNode`] if a set node is not possible on this kernel.
    pub fn check_possible(&self) -> SysResult<()> {
        let max = possible_nodes();
        match self.to_vec().into_iter().find(|&n| n as usize >= max) {
            Some(node) => Err(SysError::InvalidNode {
                node,
                max: max.saturating_sub(1) as u32,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_contains_grow() {
        let mut m = Bitmask::with_bits(8);
        assert_eq!(m.bits(), 64);
        m.set(3);
        m.set(130);
        assert!(m.contains(3) && m.contains(130) && !m.contains(4));
        assert_eq!(m.bits(), 192);
        assert_eq!(m.to_vec(), vec![3, 130]);
        m.clear(3);
        assert_eq!(m.count(), 1);
        assert_eq!(format!("{m:?}"), "[130]");
    }

    #[test]
    fn typed_masks_parse_and_display() {
        let m = NodeMask::parse("0,2-3").unwrap();
        assert_eq!(m.to_vec(), vec![0, 2, 3]);
        assert_eq!(m.to_string(), "0,2-3");
        assert!(m.maxnode_arg() as usize > m.0.bits());
        let c = CpuSet::from_ids(&[1, 5]);
        assert!(c.contains(5) && !c.contains(2));
    }

    #[test]
    fn impossible_node_is_rejected() {
        let m = NodeMask::from_ids(&[possible_nodes() as u32 + 7]);
        assert!(matches!(
            m.check_possible(),
            Err(SysError::InvalidNode { .. })
        ));
    }
}
