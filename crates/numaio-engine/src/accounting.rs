//! Per-node I/O accounting, per thread and per process.
//!
//! Counters: bytes read and written per node (the node of the buffer), local and remote buffer
//! accesses, hits and misses per slice, thread migrations, forwarded requests and checksum
//! verifications. Each thread owns its counters (relaxed atomics on its own cache lines, which
//! only that thread writes: an add is a plain load and store, no locked instruction and no
//! shared-line traffic); a process total is the sum over live threads plus the totals of
//! threads that have exited, so merged values are exact.
//!
//! Four exports: [`Accounting::snapshot`] (a serde value), Tofalos's `/proc/<pid>/numa_io`
//! text format ([`Snapshot::to_numa_io_text`]), JSON ([`Snapshot::to_json`]) and Prometheus
//! text ([`Snapshot::to_prometheus`]); the text formats are numaio-numa's.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use numaio_numa::counters::{Fields, IoBytes, NodeIo};
use serde::Serialize;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One thread's counters for one cache. Written only by its thread (see [`bump`]), read by
/// anyone.
#[derive(Debug)]
#[repr(align(128))]
pub struct ThreadCounters {
    pub tid: i32,
    pub name: String,
    read_bytes: Vec<AtomicU64>,
    write_bytes: Vec<AtomicU64>,
    hits: Vec<AtomicU64>,
    misses: Vec<AtomicU64>,
    local: AtomicU64,
    remote: AtomicU64,
    migrations: AtomicU64,
    forwards: AtomicU64,
    checksums_verified: AtomicU64,
    checksum_errors: AtomicU64,
}

/// Adds to a counter only the calling thread writes: no read-modify-write needed.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

fn zeros(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

impl ThreadCounters {
    fn new(nodes: usize, slices: usize) -> Self {
        let cur = std::thread::current();
        Self {
            // SAFETY: gettid has no failure mode.
            tid: unsafe { libc::syscall(libc::SYS_gettid) } as i32,
            name: cur.name().unwrap_or("").to_string(),
            read_bytes: zeros(nodes),
            write_bytes: zeros(nodes),
            hits: zeros(slices),
            misses: zeros(slices),
            local: AtomicU64::new(0),
            remote: AtomicU64::new(0),
            migrations: AtomicU64::new(0),
            forwards: AtomicU64::new(0),
            checksums_verified: AtomicU64::new(0),
            checksum_errors: AtomicU64::new(0),
        }
    }

    fn add_into(&self, c: &mut Counters) {
        let get = |v: &[AtomicU64]| v.iter().map(|x| x.load(Relaxed)).collect::<Vec<_>>();
        c.merge(&Counters {
            read_bytes: get(&self.read_bytes),
            write_bytes: get(&self.write_bytes),
            hits: get(&self.hits),
            misses: get(&self.misses),
            local_accesses: self.local.load(Relaxed),
            remote_accesses: self.remote.load(Relaxed),
            migrations: self.migrations.load(Relaxed),
            forwards: self.forwards.load(Relaxed),
            checksums_verified: self.checksums_verified.load(Relaxed),
            checksum_errors: self.checksum_errors.load(Relaxed),
        });
    }
}

/// One block access, for [`Accounting::record_block`].
#[derive(Debug, Clone, Copy)]
pub struct BlockAccess {
    pub slice: usize,
    pub hit: bool,
    pub data_node: u32,
    pub thread_node: u32,
    pub bytes: u64,
    pub write: bool,
    pub migrated: bool,
}

/// Plain counter values (a snapshot of one thread, or of the process).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Bytes read from buffers on each node (index = position in `Snapshot::nodes`).
    pub read_bytes: Vec<u64>,
    pub write_bytes: Vec<u64>,
    /// Hits and misses per slice.
    pub hits: Vec<u64>,
    pub misses: Vec<u64>,
    pub local_accesses: u64,
    pub remote_accesses: u64,
    pub migrations: u64,
    pub forwards: u64,
    pub checksums_verified: u64,
    pub checksum_errors: u64,
}

impl Counters {
    /// The bytes read and written per node, `nodes` giving the node of each index.
    pub fn node_io(&self, nodes: &[u32]) -> NodeIo {
        nodes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
                (n, IoBytes::new(at(&self.read_bytes), at(&self.write_bytes)))
            })
            .collect()
    }

    fn merge(&mut self, o: &Counters) {
        fn add(a: &mut Vec<u64>, b: &[u64]) {
            if a.len() < b.len() {
                a.resize(b.len(), 0);
            }
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        add(&mut self.read_bytes, &o.read_bytes);
        add(&mut self.write_bytes, &o.write_bytes);
        add(&mut self.hits, &o.hits);
        add(&mut self.misses, &o.misses);
        self.local_accesses += o.local_accesses;
        self.remote_accesses += o.remote_accesses;
        self.migrations += o.migrations;
        self.forwards += o.forwards;
        self.checksums_verified += o.checksums_verified;
        self.checksum_errors += o.checksum_errors;
    }

    /// Share of buffer accesses that were node-local (None before any access).
    pub fn local_fraction(&self) -> Option<f64> {
        let t = self.local_accesses + self.remote_accesses;
        (t > 0).then(|| self.local_accesses as f64 / t as f64)
    }

    /// Difference `self - earlier` (for measuring one phase).
    pub fn since(&self, earlier: &Counters) -> Counters {
        let sub = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .enumerate()
                .map(|(i, x)| x.saturating_sub(*b.get(i).unwrap_or(&0)))
                .collect()
        };
        Counters {
            read_bytes: sub(&self.read_bytes, &earlier.read_bytes),
            write_bytes: sub(&self.write_bytes, &earlier.write_bytes),
            hits: sub(&self.hits, &earlier.hits),
            misses: sub(&self.misses, &earlier.misses),
            local_accesses: self.local_accesses.saturating_sub(earlier.local_accesses),
            remote_accesses: self.remote_accesses.saturating_sub(earlier.remote_accesses),
            migrations: self.migrations.saturating_sub(earlier.migrations),
            forwards: self.forwards.saturating_sub(earlier.forwards),
            checksums_verified: self
                .checksums_verified
                .saturating_sub(earlier.checksums_verified),
            checksum_errors: self.checksum_errors.saturating_sub(earlier.checksum_errors),
        }
    }
}

/// Counters of one thread in a snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadSnapshot {
    pub tid: i32,
    pub name: String,
    pub live: bool,
    #[serde(flatten)]
    pub counters: Counters,
}

/// A point-in-time copy of a cache's accounting.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub pid: u32,
    /// Node ids; `read_bytes[i]` belongs to `nodes[i]`.
    pub nodes: Vec<u32>,
    /// Node of each slice.
    pub slice_nodes: Vec<u32>,
    pub process: Counters,
    pub local_fraction: Option<f64>,
    pub threads: Vec<ThreadSnapshot>,
}

struct Registry {
    live: Vec<Arc<ThreadCounters>>,
    /// Totals of exited threads, kept per thread (bounded: oldest folded into `retired_sum`).
    retired: Vec<ThreadSnapshot>,
    retired_sum: Counters,
}

/// Bound on exited threads listed individually; older ones only count in the process total.
const MAX_RETIRED_LISTED: usize = 256;

/// The accounting of one cache.
pub struct Accounting {
    id: u64,
    nodes: Vec<u32>,
    slice_nodes: Vec<u32>,
    reg: Arc<Mutex<Registry>>,
}

impl std::fmt::Debug for Accounting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounting")
            .field("nodes", &self.nodes)
            .field("slice_nodes", &self.slice_nodes)
            .finish()
    }
}

/// Unregisters a thread's counters from every accounting when the thread exits.
struct TlsEntry {
    acc: u64,
    counters: Arc<ThreadCounters>,
    reg: std::sync::Weak<Mutex<Registry>>,
}

struct Tls(Vec<TlsEntry>);

impl Drop for Tls {
    fn drop(&mut self) {
        for e in self.0.drain(..) {
            if let Some(reg) = e.reg.upgrade() {
                let mut r = reg.lock().unwrap_or_else(|p| p.into_inner());
                r.live.retain(|c| !Arc::ptr_eq(c, &e.counters));
                let mut c = Counters::default();
                e.counters.add_into(&mut c);
                r.retired.push(ThreadSnapshot {
                    tid: e.counters.tid,
                    name: e.counters.name.clone(),
                    live: false,
                    counters: c,
                });
                if r.retired.len() > MAX_RETIRED_LISTED {
                    let old = r.retired.remove(0);
                    r.retired_sum.merge(&old.counters);
                }
            }
        }
    }
}

thread_local! {
    static TLS: RefCell<Tls> = const { RefCell::new(Tls(Vec::new())) };
}

impl Accounting {
    /// `nodes`: the node ids byte counters are kept for; `slice_nodes`: node of each slice.
    pub fn new(nodes: Vec<u32>, slice_nodes: Vec<u32>) -> Self {
        Self {
            id: NEXT_ID.fetch_add(1, Relaxed),
            nodes,
            slice_nodes,
            reg: Arc::new(Mutex::new(Registry {
                live: Vec::new(),
                retired: Vec::new(),
                retired_sum: Counters::default(),
            })),
        }
    }

    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    fn node_index(&self, node: u32) -> Option<usize> {
        self.nodes.iter().position(|&n| n == node)
    }

    /// Runs `f` on the calling thread's counters (registering them on first use).
    pub fn with_thread<R>(&self, f: impl FnOnce(&ThreadCounters) -> R) -> R {
        TLS.with(|tls| {
            let mut tls = tls.borrow_mut();
            if let Some(e) = tls.0.iter().find(|e| e.acc == self.id) {
                return f(&e.counters);
            }
            let c = Arc::new(ThreadCounters::new(
                self.nodes.len(),
                self.slice_nodes.len(),
            ));
            self.reg
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .live
                .push(c.clone());
            tls.0.push(TlsEntry {
                acc: self.id,
                counters: c.clone(),
                reg: Arc::downgrade(&self.reg),
            });
            // Drop entries of accountings that are gone, so the list stays short.
            tls.0.retain(|e| e.reg.strong_count() > 0);
            f(&c)
        })
    }

    /// One cached block access in one step (the engine hook's hot path): hit or miss in
    /// `slice`, `bytes` moved to or from a buffer on `data_node` by a thread on
    /// `thread_node`, and whether the thread was migrated for it.
    pub fn record_block(&self, b: BlockAccess) {
        self.record_blocks(b, 1);
    }

    /// `count` accesses like `b` at once (a run of blocks of one slice): the same totals as
    /// `count` calls of [`record_block`](Self::record_block), with `b.migrated` counted once.
    pub fn record_blocks(&self, b: BlockAccess, count: u64) {
        let idx = self.node_index(b.data_node);
        self.with_thread(|c| {
            let v = if b.hit { &c.hits } else { &c.misses };
            if let Some(h) = v.get(b.slice) {
                bump(h, count);
            }
            if let Some(i) = idx {
                let v = if b.write {
                    &c.write_bytes
                } else {
                    &c.read_bytes
                };
                bump(&v[i], b.bytes.wrapping_mul(count));
            }
            if b.data_node == b.thread_node {
                bump(&c.local, count);
            } else {
                bump(&c.remote, count);
            }
            if b.migrated {
                bump(&c.migrations, 1);
            }
        });
    }

    pub fn record_forward(&self) {
        self.with_thread(|c| bump(&c.forwards, 1));
    }

    pub fn record_verify(&self, ok: bool) {
        self.with_thread(|c| {
            if ok {
                bump(&c.checksums_verified, 1)
            } else {
                bump(&c.checksum_errors, 1)
            }
        });
    }

    /// The calling thread's counters.
    pub fn thread_counters(&self) -> Counters {
        let mut c = self.empty();
        self.with_thread(|t| t.add_into(&mut c));
        c
    }

    fn empty(&self) -> Counters {
        Counters {
            read_bytes: vec![0; self.nodes.len()],
            write_bytes: vec![0; self.nodes.len()],
            hits: vec![0; self.slice_nodes.len()],
            misses: vec![0; self.slice_nodes.len()],
            ..Default::default()
        }
    }

    /// Process totals only (cheaper than a full snapshot).
    pub fn totals(&self) -> Counters {
        let r = self.reg.lock().unwrap_or_else(|p| p.into_inner());
        let mut total = self.empty();
        total.merge(&r.retired_sum);
        for t in &r.retired {
            total.merge(&t.counters);
        }
        for t in &r.live {
            t.add_into(&mut total);
        }
        total
    }

    pub fn snapshot(&self) -> Snapshot {
        let r = self.reg.lock().unwrap_or_else(|p| p.into_inner());
        let mut total = self.empty();
        total.merge(&r.retired_sum);
        let mut threads = Vec::new();
        for t in &r.retired {
            total.merge(&t.counters);
            threads.push(t.clone());
        }
        for t in &r.live {
            let mut c = self.empty();
            t.add_into(&mut c);
            total.merge(&c);
            threads.push(ThreadSnapshot {
                tid: t.tid,
                name: t.name.clone(),
                live: true,
                counters: c,
            });
        }
        Snapshot {
            pid: std::process::id(),
            nodes: self.nodes.clone(),
            slice_nodes: self.slice_nodes.clone(),
            local_fraction: total.local_fraction(),
            process: total,
            threads,
        }
    }
}

impl Snapshot {
    /// Tofalos's `/proc/<pid>/numa_io` format for the process: one `numa<N>_read_bytes: <u64>`
    /// and one `numa<N>_write_bytes: <u64>` line per node.
    pub fn to_numa_io_text(&self) -> String {
        self.process
            .node_io(&self.nodes)
            .numa_io_text(&self.nodes, Fields::ReadWrite)
    }

    /// The same format for one thread (Tofalos's `/proc/<pid>/task/<tid>/numa_io`).
    pub fn thread_numa_io_text(&self, tid: i32) -> Option<String> {
        self.threads.iter().find(|t| t.tid == tid).map(|t| {
            t.counters
                .node_io(&self.nodes)
                .numa_io_text(&self.nodes, Fields::ReadWrite)
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Prometheus text exposition (OpenMetrics), through numaio-numa's encoder.
    pub fn to_prometheus(&self) -> String {
        use numaio_numa::prometheus::{labels, Exposition, Format};
        let p = &self.process;
        let mut e = Exposition::new("numaio_engine");
        let bytes = self.nodes.iter().enumerate().flat_map(|(i, n)| {
            [("read", &p.read_bytes), ("write", &p.write_bytes)].map(|(op, v)| {
                (
                    labels(&[("numa_node", n.to_string()), ("op", op.into())]),
                    v.get(i).copied().unwrap_or(0),
                )
            })
        });
        e.counter(
            "bytes",
            "Bytes moved to or from cache buffers, by buffer node",
            bytes,
        );
        let slice_ops = self.slice_nodes.iter().enumerate().flat_map(|(s, n)| {
            [("hit", &p.hits), ("miss", &p.misses)].map(|(res, v)| {
                (
                    labels(&[
                        ("slice", s.to_string()),
                        ("numa_node", n.to_string()),
                        ("result", res.into()),
                    ]),
                    v.get(s).copied().unwrap_or(0),
                )
            })
        });
        e.counter("slice_requests", "Cache lookups per slice", slice_ops);
        e.counter(
            "buffer_accesses",
            "Buffer accesses by locality of the accessing thread",
            [("local", p.local_accesses), ("remote", p.remote_accesses)]
                .map(|(l, v)| (labels(&[("locality", l)]), v)),
        );
        e.counter(
            "events",
            "Thread migrations, forwards, checksum checks",
            [
                ("migration", p.migrations),
                ("forward", p.forwards),
                ("checksum_verified", p.checksums_verified),
                ("checksum_error", p.checksum_errors),
            ]
            .map(|(k, v)| (labels(&[("kind", k)]), v)),
        );
        e.gauge_f64(
            "local_access_ratio",
            "Share of buffer accesses that were node-local",
            [(Vec::new(), self.local_fraction.unwrap_or(0.0))],
        );
        e.render(Format::OpenMetrics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Single-counter updates, for checking the sums.
    impl Accounting {
        /// A buffer access of `bytes` to data on `data_node` by a thread on `thread_node`.
        fn record_access(&self, data_node: u32, thread_node: u32, bytes: u64, write: bool) {
            let idx = self.node_index(data_node);
            self.with_thread(|c| {
                if let Some(i) = idx {
                    let v = if write { &c.write_bytes } else { &c.read_bytes };
                    v[i].fetch_add(bytes, Relaxed);
                }
                if data_node == thread_node {
                    c.local.fetch_add(1, Relaxed);
                } else {
                    c.remote.fetch_add(1, Relaxed);
                }
            });
        }

        fn record_hit(&self, slice: usize) {
            self.with_thread(|c| {
                if let Some(h) = c.hits.get(slice) {
                    h.fetch_add(1, Relaxed);
                }
            });
        }

        fn record_migration(&self) {
            self.with_thread(|c| c.migrations.fetch_add(1, Relaxed));
        }
    }

    #[test]
    fn per_thread_and_process_totals() {
        let acc = Arc::new(Accounting::new(vec![0, 1], vec![0, 1]));
        let blk = |slice, hit, data_node, thread_node, bytes, write, migrated| BlockAccess {
            slice,
            hit,
            data_node,
            thread_node,
            bytes,
            write,
            migrated,
        };
        acc.record_block(blk(1, true, 0, 0, 4096, false, false));
        acc.record_block(blk(1, true, 1, 0, 100, true, false));
        let tids: Vec<i32> = (0..3)
            .map(|i| {
                let acc = acc.clone();
                std::thread::spawn(move || {
                    for k in 0..=i {
                        acc.record_block(blk(0, false, 1, 1, 10, false, k == i));
                    }
                    acc.record_forward();
                    acc.record_verify(i != 2);
                    acc.thread_counters();
                    // SAFETY: gettid takes no arguments and cannot fail.
                    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
                })
                .join()
                .unwrap()
            })
            .collect();
        let me = acc.thread_counters();
        assert_eq!(me.read_bytes, vec![4096, 0]);
        assert_eq!(me.write_bytes, vec![0, 100]);
        assert_eq!((me.local_accesses, me.remote_accesses), (1, 1));
        let s = acc.snapshot();
        assert_eq!(s.process.read_bytes, vec![4096, 60]);
        assert_eq!(s.process.misses, vec![6, 0]);
        assert_eq!(s.process.hits, vec![0, 2]);
        assert_eq!(s.process.migrations, 3);
        assert_eq!(s.process.forwards, 3);
        assert_eq!(s.process.checksums_verified, 2);
        assert_eq!(s.process.checksum_errors, 1);
        assert_eq!(s.process.local_accesses, 7);
        assert_eq!(s.local_fraction, Some(7.0 / 8.0));
        assert_eq!(s.threads.len(), 4);
        // Exited threads are kept with their own totals.
        let t = s.threads.iter().find(|t| t.tid == tids[2]).unwrap();
        assert!(!t.live);
        assert_eq!(t.counters.read_bytes, vec![0, 30]);
        assert_eq!(acc.totals(), s.process);
        let d = acc.totals().since(&me);
        assert_eq!(d.read_bytes, vec![0, 60]);
    }

    #[test]
    fn numa_io_text_roundtrip() {
        let acc = Accounting::new(vec![0, 2], vec![0, 2]);
        acc.record_access(2, 0, 123, false);
        acc.record_access(0, 0, 7, true);
        acc.record_access(5, 0, 1, true); // unknown node: counted as access, no bytes
        let s = acc.snapshot();
        let text = s.to_numa_io_text();
        assert_eq!(
            text,
            "numa0_read_bytes: 0\nnuma0_write_bytes: 7\nnuma2_read_bytes: 123\nnuma2_write_bytes: 0\n"
        );
        assert_eq!(
            NodeIo::parse_numa_io_text(&text).unwrap(),
            [(0, IoBytes::new(0, 7)), (2, IoBytes::new(123, 0))]
                .into_iter()
                .collect()
        );
        // SAFETY: gettid cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        assert_eq!(s.thread_numa_io_text(tid).unwrap(), text);
    }

    #[test]
    fn json_and_prometheus() {
        let acc = Accounting::new(vec![0, 1], vec![0, 1]);
        acc.record_access(1, 0, 4096, false);
        acc.record_access(1, 1, 4096, false);
        acc.record_hit(1);
        acc.record_migration();
        let s = acc.snapshot();
        let v: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(v["process"]["read_bytes"][1], 8192);
        assert_eq!(v["local_fraction"], 0.5);
        assert_eq!(v["threads"][0]["migrations"], 1);
        {
            let p = s.to_prometheus();
            assert!(
                p.contains(r#"numaio_engine_bytes_total{numa_node="1",op="read"} 8192"#),
                "{p}"
            );
            assert!(p.contains(r#"numaio_engine_buffer_accesses_total{locality="remote"} 1"#));
            assert!(p.contains(
                r#"numaio_engine_slice_requests_total{slice="1",numa_node="1",result="hit"} 1"#
            ));
            assert!(p.contains("numaio_engine_local_access_ratio 0.5"));
            assert!(p.trim_end().ends_with("# EOF"));
        }
    }

    #[test]
    fn two_accountings_are_separate() {
        let a = Accounting::new(vec![0], vec![0]);
        let b = Accounting::new(vec![0], vec![0]);
        a.record_access(0, 0, 1, false);
        assert_eq!(b.totals().read_bytes, vec![0]);
        drop(a);
        b.record_access(0, 0, 5, false);
        assert_eq!(b.totals().read_bytes, vec![5]);
    }
}
