//! What the collector counts, and its per-process sums.

use numaio_numa::counters::{IoBytes, NodeIo};
use serde::Serialize;
use std::collections::BTreeMap;

/// Bytes one thread copied from (read) and to (write) the page cache of one file, whose
/// pages were on `data_node`, while it ran on a CPU of `cpu_node`. Cumulative since the
/// collector started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IoRecord {
    pub pid: i32,
    pub tid: i32,
    /// The file's device (`st_dev`, as user space sees it) and inode.
    pub dev: u64,
    pub ino: u64,
    pub data_node: u32,
    pub cpu_node: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// Pages of one file inserted into (misses) and removed from the page cache on `node`, and
/// migrated to and from `node` while cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheRecord {
    pub dev: u64,
    pub ino: u64,
    pub node: u32,
    pub inserted_pages: u64,
    pub removed_pages: u64,
    pub migrated_in_pages: u64,
    pub migrated_out_pages: u64,
}

impl CacheRecord {
    /// How many more of the file's pages are cached on `node` than when counting began
    /// (negative: fewer).
    pub fn net_pages(&self) -> i64 {
        let gained = u128::from(self.inserted_pages) + u128::from(self.migrated_in_pages);
        let lost = u128::from(self.removed_pages) + u128::from(self.migrated_out_pages);
        let clamp = |v: u128| i64::try_from(v).unwrap_or(i64::MAX);
        if gained >= lost {
            clamp(gained - lost)
        } else {
            -clamp(lost - gained)
        }
    }
}

/// Page faults by one process on a file mapping whose page was on `data_node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FaultRecord {
    pub pid: i32,
    pub dev: u64,
    pub ino: u64,
    pub data_node: u32,
    pub cpu_node: u32,
    pub faults: u64,
}

/// What the collector could not count, cumulative since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Missed {
    /// Whether the kernel counts skipped runs (`recursion_misses`, since 5.12); without it
    /// `program_runs` is empty and says nothing.
    pub counted_runs: bool,
    /// Runs of each program the kernel skipped (programs without any left out): a program
    /// runs at most once at a time per CPU, so a task that hits a hook while another task,
    /// preempted inside the same program on that CPU, holds it is not counted.
    pub program_runs: BTreeMap<String, u64>,
    /// File operations, byte records and faults dropped because a map was full.
    pub io_events: u64,
    /// Page-cache inserts, removals and migrations dropped because `nio_cache` was full.
    pub cache_events: u64,
}

impl Missed {
    /// What was missed after `earlier`.
    pub fn since(&self, earlier: &Missed) -> Missed {
        Missed {
            counted_runs: self.counted_runs,
            program_runs: self
                .program_runs
                .iter()
                .filter_map(|(name, &n)| {
                    let d = n.saturating_sub(earlier.program_runs.get(name).copied().unwrap_or(0));
                    (d > 0).then(|| (name.clone(), d))
                })
                .collect(),
            io_events: self.io_events.saturating_sub(earlier.io_events),
            cache_events: self.cache_events.saturating_sub(earlier.cache_events),
        }
    }

    /// Skipped program runs in all.
    pub fn runs(&self) -> u64 {
        self.program_runs
            .values()
            .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Why byte and fault counts with these misses are short, in one line; `None` when
    /// nothing I/O counting depends on was missed. (Page-cache events alone do not make
    /// byte counts short: residency answers refuse them separately.)
    pub fn io_reason(&self) -> Option<String> {
        let runs = self.runs();
        let mut parts = Vec::new();
        if runs > 0 {
            let by: Vec<String> = self
                .program_runs
                .iter()
                .map(|(n, c)| format!("{n} {c}"))
                .collect();
            parts.push(format!(
                "the kernel skipped {runs} run(s) of the collector's programs ({}): another task \
                 was inside the same program on that CPU",
                by.join(", ")
            ));
        }
        if self.io_events > 0 {
            parts.push(format!(
                "{} I/O event(s) were dropped because the collector's tables are full \
                 (65,536 entries each): restart it to count afresh",
                self.io_events
            ));
        }
        (!parts.is_empty()).then(|| format!("counts are short: {}", parts.join("; ")))
    }
}

/// Everything the collector counted, cumulative since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub io: Vec<IoRecord>,
    pub cache: Vec<CacheRecord>,
    pub faults: Vec<FaultRecord>,
    /// What it could not count.
    pub missed: Missed,
}

/// One process's file I/O summed over its threads and files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcessIo {
    /// Bytes by the node the data's pages were on.
    pub by_data_node: NodeIo,
    /// Bytes whose pages were on the node of the CPU that copied them.
    pub local: IoBytes,
    /// Bytes whose pages were on another node.
    pub remote: IoBytes,
}

impl Snapshot {
    /// What was counted after `earlier` (a snapshot of the same collector); records that did
    /// not change are left out.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let io_key = |r: &IoRecord| (r.pid, r.tid, r.dev, r.ino, r.data_node, r.cpu_node);
        let before: BTreeMap<_, _> = earlier.io.iter().map(|r| (io_key(r), r)).collect();
        let io = self
            .io
            .iter()
            .filter_map(|r| {
                let (rb, wb) = before
                    .get(&io_key(r))
                    .map_or((0, 0), |b| (b.read_bytes, b.write_bytes));
                let d = IoRecord {
                    read_bytes: r.read_bytes.saturating_sub(rb),
                    write_bytes: r.write_bytes.saturating_sub(wb),
                    ..*r
                };
                (d.read_bytes > 0 || d.write_bytes > 0).then_some(d)
            })
            .collect();
        let cache_key = |r: &CacheRecord| (r.dev, r.ino, r.node);
        let before: BTreeMap<_, _> = earlier.cache.iter().map(|r| (cache_key(r), r)).collect();
        let cache = self
            .cache
            .iter()
            .filter_map(|r| {
                let b = before.get(&cache_key(r));
                let sub = |now: u64, then: fn(&CacheRecord) -> u64| {
                    now.saturating_sub(b.map_or(0, |b| then(b)))
                };
                let d = CacheRecord {
                    inserted_pages: sub(r.inserted_pages, |b| b.inserted_pages),
                    removed_pages: sub(r.removed_pages, |b| b.removed_pages),
                    migrated_in_pages: sub(r.migrated_in_pages, |b| b.migrated_in_pages),
                    migrated_out_pages: sub(r.migrated_out_pages, |b| b.migrated_out_pages),
                    ..*r
                };
                (d.inserted_pages > 0
                    || d.removed_pages > 0
                    || d.migrated_in_pages > 0
                    || d.migrated_out_pages > 0)
                    .then_some(d)
            })
            .collect();
        let fault_key = |r: &FaultRecord| (r.pid, r.dev, r.ino, r.data_node, r.cpu_node);
        let before: BTreeMap<_, _> = earlier.faults.iter().map(|r| (fault_key(r), r)).collect();
        let faults = self
            .faults
            .iter()
            .filter_map(|r| {
                let f = before.get(&fault_key(r)).map_or(0, |b| b.faults);
                let d = FaultRecord {
                    faults: r.faults.saturating_sub(f),
                    ..*r
                };
                (d.faults > 0).then_some(d)
            })
            .collect();
        Snapshot {
            io,
            cache,
            faults,
            missed: self.missed.since(&earlier.missed),
        }
    }

    /// The I/O records summed per process.
    pub fn per_process(&self) -> BTreeMap<i32, ProcessIo> {
        let mut out: BTreeMap<i32, ProcessIo> = BTreeMap::new();
        for r in &self.io {
            let p = out.entry(r.pid).or_default();
            let bytes = IoBytes::new(r.read_bytes, r.write_bytes);
            p.by_data_node.add(r.data_node, bytes);
            let side = if r.data_node == r.cpu_node {
                &mut p.local
            } else {
                &mut p.remote
            };
            side.read_bytes += r.read_bytes;
            side.write_bytes += r.write_bytes;
        }
        out
    }
}

/// A node the collector could not decode from a page (outside the kernel's possible nodes).
pub const NODE_UNKNOWN: u32 = u32::MAX;

/// Sizes of the BPF maps' keys and values (`struct io_key` etc. in `bpf/numaio.bpf.c`).
pub const IO_KEY_LEN: usize = 32;
pub const IO_VAL_LEN: usize = 16;
pub const CACHE_KEY_LEN: usize = 24;
pub const CACHE_VAL_LEN: usize = 32;
pub const FAULT_KEY_LEN: usize = 32;
pub const FAULT_VAL_LEN: usize = 8;

/// A kernel `dev_t` (`s_dev`: major << 20 | minor) in user space's `st_dev` encoding
/// (glibc's `makedev`), so records compare with `stat(2)`.
pub fn user_dev(kdev: u64) -> u64 {
    let major = (kdev >> 20) & 0xfff;
    let minor = kdev & 0xf_ffff;
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// The inverse of [`user_dev`]: a `st_dev` as the kernel's `s_dev` (the key the collector's
/// maps use).
pub fn kernel_dev(dev: u64) -> u64 {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    ((major & 0xfff) << 20) | (minor & 0xf_ffff)
}

/// The `nio_cache` key of one file's counters on one node.
pub fn cache_key(dev: u64, ino: u64, node: u32) -> [u8; CACHE_KEY_LEN] {
    let mut k = [0u8; CACHE_KEY_LEN];
    k[0..8].copy_from_slice(&kernel_dev(dev).to_ne_bytes());
    k[8..16].copy_from_slice(&ino.to_ne_bytes());
    k[16..20].copy_from_slice(&node.to_ne_bytes());
    k
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn pid_of(raw: u32) -> Option<i32> {
    i32::try_from(raw).ok()
}

/// One entry of the `nio_io` map; `None` when the bytes do not have the map's layout.
pub fn decode_io(key: &[u8], val: &[u8]) -> Option<IoRecord> {
    if key.len() != IO_KEY_LEN || val.len() != IO_VAL_LEN {
        return None;
    }
    Some(IoRecord {
        pid: pid_of(u32_at(key, 0)?)?,
        tid: pid_of(u32_at(key, 4)?)?,
        dev: user_dev(u64_at(key, 8)?),
        ino: u64_at(key, 16)?,
        data_node: u32_at(key, 24)?,
        cpu_node: u32_at(key, 28)?,
        read_bytes: u64_at(val, 0)?,
        write_bytes: u64_at(val, 8)?,
    })
}

/// One entry of the `nio_cache` map.
pub fn decode_cache(key: &[u8], val: &[u8]) -> Option<CacheRecord> {
    if key.len() != CACHE_KEY_LEN || val.len() != CACHE_VAL_LEN {
        return None;
    }
    Some(CacheRecord {
        dev: user_dev(u64_at(key, 0)?),
        ino: u64_at(key, 8)?,
        node: u32_at(key, 16)?,
        inserted_pages: u64_at(val, 0)?,
        removed_pages: u64_at(val, 8)?,
        migrated_in_pages: u64_at(val, 16)?,
        migrated_out_pages: u64_at(val, 24)?,
    })
}

/// One entry of the `nio_faults` map.
pub fn decode_fault(key: &[u8], val: &[u8]) -> Option<FaultRecord> {
    if key.len() != FAULT_KEY_LEN || val.len() != FAULT_VAL_LEN {
        return None;
    }
    Some(FaultRecord {
        pid: pid_of(u32_at(key, 0)?)?,
        dev: user_dev(u64_at(key, 8)?),
        ino: u64_at(key, 16)?,
        data_node: u32_at(key, 24)?,
        cpu_node: u32_at(key, 28)?,
        faults: u64_at(val, 0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(pid: i32, data: u32, cpu: u32, r: u64, w: u64) -> IoRecord {
        IoRecord {
            pid,
            tid: pid,
            dev: 8,
            ino: 12,
            data_node: data,
            cpu_node: cpu,
            read_bytes: r,
            write_bytes: w,
        }
    }

    #[test]
    fn per_process_splits_local_and_remote() {
        let s = Snapshot {
            io: vec![
                io(7, 0, 1, 4096, 0),
                io(7, 1, 1, 100, 50),
                io(9, 0, 0, 1, 0),
            ],
            ..Default::default()
        };
        let p = s.per_process();
        assert_eq!(p[&7].remote, IoBytes::new(4096, 0));
        assert_eq!(p[&7].local, IoBytes::new(100, 50));
        assert_eq!(p[&7].by_data_node.get(0), IoBytes::new(4096, 0));
        assert_eq!(p[&9].local, IoBytes::new(1, 0));
    }

    fn io_key(pid: u32, tid: u32, kdev: u64, ino: u64, data: u32, cpu: u32) -> Vec<u8> {
        let mut k = Vec::new();
        k.extend_from_slice(&pid.to_ne_bytes());
        k.extend_from_slice(&tid.to_ne_bytes());
        k.extend_from_slice(&kdev.to_ne_bytes());
        k.extend_from_slice(&ino.to_ne_bytes());
        k.extend_from_slice(&data.to_ne_bytes());
        k.extend_from_slice(&cpu.to_ne_bytes());
        k
    }

    /// Device numbers at the edges of the kernel's 12-bit major and 20-bit minor.
    const DEVS: [(u32, u32); 5] = [(8, 1), (0, 35), (259, 3), (4095, 0xf_ffff), (253, 256)];

    #[test]
    fn user_dev_matches_libc_makedev() {
        for (major, minor) in DEVS {
            let kdev = (u64::from(major) << 20) | u64::from(minor);
            assert_eq!(
                user_dev(kdev),
                libc::makedev(major, minor),
                "{major}:{minor}"
            );
        }
    }

    #[test]
    fn kernel_dev_inverts_user_dev() {
        for (major, minor) in DEVS {
            let user = libc::makedev(major, minor);
            assert_eq!(user_dev(kernel_dev(user)), user, "{major}:{minor}");
            assert_eq!(
                kernel_dev(user),
                (u64::from(major) << 20) | u64::from(minor)
            );
        }
    }

    #[test]
    fn net_pages_does_not_overflow() {
        let r = CacheRecord {
            dev: 0,
            ino: 1,
            node: 0,
            inserted_pages: u64::MAX,
            removed_pages: 0,
            migrated_in_pages: u64::MAX,
            migrated_out_pages: 0,
        };
        assert_eq!(r.net_pages(), i64::MAX);
        let r = CacheRecord {
            inserted_pages: 0,
            removed_pages: u64::MAX,
            migrated_in_pages: 0,
            ..r
        };
        assert_eq!(r.net_pages(), -i64::MAX);
    }

    #[test]
    fn decodes_io_entries_and_rejects_bad_ones() {
        let key = io_key(7, 8, (8 << 20) | 1, 12, 0, 1);
        let mut val = 4096u64.to_ne_bytes().to_vec();
        val.extend_from_slice(&5u64.to_ne_bytes());
        let r = decode_io(&key, &val).unwrap();
        assert_eq!(
            r,
            IoRecord {
                pid: 7,
                tid: 8,
                dev: libc::makedev(8, 1),
                ino: 12,
                data_node: 0,
                cpu_node: 1,
                read_bytes: 4096,
                write_bytes: 5
            }
        );
        assert_eq!(decode_io(&key[1..], &val), None);
        assert_eq!(decode_io(&key, &val[..8]), None);
        let bad_pid = io_key(u32::MAX, 8, 0, 0, 0, 0);
        assert_eq!(decode_io(&bad_pid, &val), None);
    }

    #[test]
    fn decodes_cache_and_fault_entries() {
        let mut key = ((8u64 << 20) | 2).to_ne_bytes().to_vec();
        key.extend_from_slice(&99u64.to_ne_bytes());
        key.extend_from_slice(&1u32.to_ne_bytes());
        key.extend_from_slice(&0u32.to_ne_bytes());
        let mut val = Vec::new();
        for v in [3u64, 2, 5, 9] {
            val.extend_from_slice(&v.to_ne_bytes());
        }
        let c = decode_cache(&key, &val).unwrap();
        assert_eq!((c.dev, c.ino, c.node), (libc::makedev(8, 2), 99, 1));
        assert_eq!(
            (
                c.inserted_pages,
                c.removed_pages,
                c.migrated_in_pages,
                c.migrated_out_pages
            ),
            (3, 2, 5, 9)
        );
        // 3 in + 5 migrated in - 2 removed - 9 migrated away.
        assert_eq!(c.net_pages(), -3);
        assert_eq!(cache_key(c.dev, 99, 1).as_slice(), key.as_slice());
        assert_eq!(decode_cache(&key, &val[..16]), None);
        let fkey = io_key(7, 0, 1 << 20, 5, 1, 0);
        let f = decode_fault(&fkey, &9u64.to_ne_bytes()).unwrap();
        assert_eq!(
            (f.pid, f.ino, f.data_node, f.cpu_node, f.faults),
            (7, 5, 1, 0, 9)
        );
        assert_eq!(decode_fault(&fkey, &[0; 7]), None);
    }

    #[test]
    fn since_keeps_only_changes() {
        let a = Snapshot {
            io: vec![io(7, 0, 1, 4096, 0), io(8, 0, 0, 10, 0)],
            ..Default::default()
        };
        let b = Snapshot {
            io: vec![io(7, 0, 1, 8192, 0), io(8, 0, 0, 10, 0), io(9, 1, 1, 5, 0)],
            ..Default::default()
        };
        let d = b.since(&a);
        assert_eq!(d.io, vec![io(7, 0, 1, 4096, 0), io(9, 1, 1, 5, 0)]);
    }

    #[test]
    fn missed_runs_and_drops_make_an_interval_short() {
        let before = Missed {
            counted_runs: true,
            program_runs: BTreeMap::from([("nio_fx_get".to_string(), 3)]),
            io_events: 1,
            cache_events: 0,
        };
        // Nothing new: complete, whatever was missed before the interval.
        assert_eq!(before.since(&before).io_reason(), None);
        let after = Missed {
            program_runs: BTreeMap::from([
                ("nio_fx_get".to_string(), 13),
                ("nio_fe_wr".to_string(), 2),
            ]),
            ..before.clone()
        };
        let d = after.since(&before);
        assert_eq!(d.runs(), 12);
        assert_eq!(d.program_runs["nio_fx_get"], 10);
        let why = d.io_reason().unwrap();
        assert!(why.contains("skipped 12 run(s)"), "{why}");
        assert!(why.contains("nio_fe_wr 2, nio_fx_get 10"), "{why}");
        assert!(!why.contains('\n'));
        // A rising drop counter alone makes it short too.
        let full = Missed {
            io_events: 5,
            ..before.clone()
        };
        let why = full.since(&before).io_reason().unwrap();
        assert!(why.contains("4 I/O event(s) were dropped"), "{why}");
        // Page-cache drops are the residency answers' business, not the byte counts'.
        let cache = Missed {
            cache_events: 9,
            ..before.clone()
        };
        assert_eq!(cache.since(&before).io_reason(), None);
        // Snapshots carry it through `since`.
        let s0 = Snapshot {
            missed: before.clone(),
            ..Default::default()
        };
        let s1 = Snapshot {
            missed: after,
            ..Default::default()
        };
        assert_eq!(s1.since(&s0).missed.runs(), 12);
        assert_eq!(s1.since(&s1).missed.io_reason(), None);
    }
}
