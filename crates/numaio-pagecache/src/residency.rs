//! `where`: how much of a file is cached, and on which nodes, without reading anything in.

use crate::error::PagecacheError;
use crate::file::{mincore_is_truthful, open_regular, OpenFile};
use crate::scan::{pages_of, scan, Batch, BATCH_PAGES};
use crate::target::Target;
use numaio_sys::PageStatus;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What to look at. Default: the whole file, no map.
#[derive(Debug, Clone, Default)]
pub struct WhereOptions {
    /// `(offset, len)` in bytes; widened to whole pages and clipped to the file.
    pub range: Option<(u64, u64)>,
    /// Bytes per `--map` cell; `None` = no map.
    pub map_chunk: Option<u64>,
    /// Map and query pages even when the machine has a single node with memory (where
    /// every cached page is known to be on that node and mincore alone answers). For tests
    /// and benchmarks of the full technique; also forced by setting `NUMAIO_PAGE_QUERY`.
    pub full_scan: bool,
}

/// Pages `[first, end)` of a file of `size` bytes that `range` (`(offset, len)` in bytes)
/// covers: widened to whole pages and clipped to the file; the whole file without a range.
pub fn page_span(size: u64, range: Option<(u64, u64)>, ps: u64) -> (u64, u64) {
    let total_pages = pages_of(size, ps);
    match range {
        None => (0, total_pages),
        Some((off, len)) => {
            let first = (off / ps).min(total_pages);
            let end = off.saturating_add(len).div_ceil(ps).min(total_pages);
            (first, end.max(first))
        }
    }
}

/// The only node with memory, if there is exactly one (read once).
pub fn single_memory_node() -> Option<u32> {
    static N: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        let s = std::fs::read_to_string("/sys/devices/system/node/has_memory").ok()?;
        match numaio_sys::cpulist::parse(s.trim()).ok()?.as_slice() {
            [n] => Some(*n),
            _ => None,
        }
    })
}

/// One cell of the residency map: a byte range of the file and where its pages are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MapCell {
    pub offset: u64,
    pub len: u64,
    pub pages: u64,
    pub resident_pages: u64,
    pub nodes: BTreeMap<u32, u64>,
}

impl MapCell {
    /// One character for the compact picture: `.` nothing cached, the node's id in base 36
    /// (`0`-`9`, then `a`-`z`) when every cached page of the cell is on that node, `*` for a
    /// mix of nodes.
    pub fn symbol(&self) -> char {
        if self.resident_pages == 0 {
            return '.';
        }
        if self.nodes.len() != 1 {
            return '*';
        }
        let n = *self.nodes.keys().next().unwrap_or(&0);
        std::char::from_digit(n, 36).unwrap_or('#')
    }
}

/// The byte range examined, after rounding to pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ByteRange {
    pub offset: u64,
    pub len: u64,
}

/// Residency of one file (or of a range of it).
#[derive(Debug, Clone, Serialize)]
pub struct FileResidency {
    #[serde(serialize_with = "crate::serialize_path")]
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Pages examined (the whole file, or the range).
    pub pages: u64,
    /// Resident pages found: the sum of `nodes` plus `unknown_node_pages`.
    pub resident_pages: u64,
    /// Resident pages per node.
    pub nodes: BTreeMap<u32, u64>,
    /// Present only with a range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<ByteRange>,
    pub page_size: u64,
    /// Pages mincore reported resident that were evicted before their node was read.
    pub evicted_during_query: u64,
    /// Pages read back in because they were evicted between mincore and the touch (the
    /// residual race; see the scan module). Normally 0.
    pub read_in_during_query: u64,
    /// Resident pages whose node the kernel would not report (busy, special).
    pub unknown_node_pages: u64,
    /// False when mincore cannot see this file's cache for this caller (not root, not the
    /// owner, no write permission): then residency reads as 0 whatever is cached.
    pub mincore_truthful: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<Vec<MapCell>>,
}

/// Sums over several files, for the `total` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub pages: u64,
    pub resident_pages: u64,
    pub nodes: BTreeMap<u32, u64>,
}

impl Totals {
    pub fn add(&mut self, r: &FileResidency) {
        self.pages += r.pages;
        self.resident_pages += r.resident_pages;
        for (&n, &c) in &r.nodes {
            *self.nodes.entry(n).or_default() += c;
        }
    }
}

/// Where `path`'s cached pages are. Never reads a non-resident page in.
pub fn file_residency(path: &Path, opts: &WhereOptions) -> Result<FileResidency, PagecacheError> {
    let f = open_regular(path)?;
    residency_of(&f, opts)
}

/// [`file_residency`] on a file already open. Fails with
/// [`PagecacheError::MincoreRestricted`] when mincore cannot be trusted for this caller.
pub fn residency_of(f: &OpenFile, opts: &WhereOptions) -> Result<FileResidency, PagecacheError> {
    if !mincore_is_truthful(f) {
        return Err(PagecacheError::MincoreRestricted {
            path: f.path.clone(),
        });
    }
    Ok(residency_against(f, opts, None)?.0)
}

/// Residency, plus (with a target) how many resident pages sit on their target node.
/// Does not check [`mincore_is_truthful`]: callers that may not read pages in must.
pub(crate) fn residency_against(
    f: &OpenFile,
    opts: &WhereOptions,
    target: Option<&Target>,
) -> Result<(FileResidency, u64), PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let (first, end) = page_span(f.size, opts.range, ps);
    let cell_pages = opts.map_chunk.map(|c| c.div_ceil(ps).max(1));
    let map: Option<Vec<MapCell>> = cell_pages.map(|cp| {
        let mut cells = Vec::new();
        let mut p = first;
        while p < end {
            let q = (p + cp).min(end);
            cells.push(MapCell {
                offset: p * ps,
                len: ((q * ps).min(f.size)).saturating_sub(p * ps),
                pages: q - p,
                resident_pages: 0,
                nodes: BTreeMap::new(),
            });
            p = q;
        }
        cells
    });
    let single = if opts.full_scan || std::env::var_os("NUMAIO_PAGE_QUERY").is_some() {
        None
    } else {
        single_memory_node()
    };
    let threads = scan_threads(end - first);
    let acc = if let Some(node) = single {
        // One node with memory: every cached page is on it. mincore alone answers, and
        // nothing is touched at all.
        let mut acc = Acc::new(map.clone());
        let mut st = Vec::new();
        scan(f, first, end, false, |b| {
            st.clear();
            st.resize(b.pages.len(), PageStatus::Node(node));
            acc.add(
                &Batch {
                    pages: b.pages,
                    addrs: b.addrs,
                    status: &st,
                },
                first,
                cell_pages,
                target,
                ps,
            );
            Ok(())
        })?;
        acc
    } else if threads <= 1 {
        let mut acc = Acc::new(map.clone());
        let stats = scan(f, first, end, true, |b| {
            acc.add(b, first, cell_pages, target, ps);
            Ok(())
        })?;
        acc.read_in = stats.read_in;
        acc
    } else {
        // Split into contiguous, batch-aligned parts, one per thread; merge the tallies.
        let per = (end - first).div_ceil(threads as u64).div_ceil(BATCH_PAGES) * BATCH_PAGES;
        let parts: Vec<Result<Acc, PagecacheError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads as u64)
                .map(|i| (first + i * per, (first + (i + 1) * per).min(end)))
                .filter(|(a, b)| a < b)
                .map(|(a, b)| {
                    let cells = map.clone();
                    s.spawn(move || {
                        let mut acc = Acc::new(cells);
                        let stats = scan(f, a, b, true, |bt| {
                            acc.add(bt, first, cell_pages, target, ps);
                            Ok(())
                        })?;
                        acc.read_in = stats.read_in;
                        Ok(acc)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("scan thread panicked"))
                .collect()
        });
        let mut total = Acc::new(map.clone());
        for p in parts {
            total.merge(p?);
        }
        total
    };
    let map = acc.cells;
    let (nodes, evicted, unknown, on_target) = (acc.nodes, acc.evicted, acc.unknown, acc.on_target);
    let stats = ScanTotals {
        read_in: acc.read_in,
    };
    let resident = nodes.values().sum::<u64>() + unknown;
    let r = FileResidency {
        path: f.path.clone(),
        size_bytes: f.size,
        pages: end - first,
        resident_pages: resident,
        nodes,
        range: opts.range.map(|_| ByteRange {
            offset: first * ps,
            len: ((end * ps).min(f.size)).saturating_sub(first * ps),
        }),
        page_size: ps,
        evicted_during_query: evicted,
        read_in_during_query: stats.read_in,
        unknown_node_pages: unknown,
        mincore_truthful: mincore_is_truthful(f),
        map,
    };
    Ok((r, on_target))
}

/// Threads for a residency scan of `pages`: one per CPU we may run on (at most 4), and
/// only for files big enough to repay the start-up (256 MiB per thread).
fn scan_threads(pages: u64) -> usize {
    let ps = numaio_sys::page_size() as u64;
    let by_size = (pages * ps / (256 << 20)).max(1) as usize;
    if by_size == 1 {
        return 1;
    }
    // available_parallelism reads cgroup files: ask once, not per file of a big tree.
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    cpus.min(4).min(by_size)
}

struct ScanTotals {
    read_in: u64,
}

/// Per-thread tallies of a residency scan.
struct Acc {
    nodes: BTreeMap<u32, u64>,
    evicted: u64,
    unknown: u64,
    on_target: u64,
    read_in: u64,
    cells: Option<Vec<MapCell>>,
}

impl Acc {
    fn new(cells: Option<Vec<MapCell>>) -> Acc {
        Acc {
            nodes: BTreeMap::new(),
            evicted: 0,
            unknown: 0,
            on_target: 0,
            read_in: 0,
            cells,
        }
    }

    fn add(
        &mut self,
        b: &Batch,
        first: u64,
        cell_pages: Option<u64>,
        target: Option<&Target>,
        ps: u64,
    ) {
        for (&page, &st) in b.pages.iter().zip(b.status) {
            let node = match st {
                PageStatus::Node(n) => Some(n),
                PageStatus::NotPresent => {
                    self.evicted += 1;
                    continue;
                }
                _ => None,
            };
            match node {
                Some(n) => {
                    *self.nodes.entry(n).or_default() += 1;
                    if target.is_some_and(|t| t.node_for_page(page, ps) == n) {
                        self.on_target += 1;
                    }
                }
                None => self.unknown += 1,
            }
            if let (Some(m), Some(cp)) = (self.cells.as_mut(), cell_pages) {
                let c = &mut m[((page - first) / cp) as usize];
                c.resident_pages += 1;
                if let Some(n) = node {
                    *c.nodes.entry(n).or_default() += 1;
                }
            }
        }
    }

    fn merge(&mut self, o: Acc) {
        for (n, c) in o.nodes {
            *self.nodes.entry(n).or_default() += c;
        }
        self.evicted += o.evicted;
        self.unknown += o.unknown;
        self.on_target += o.on_target;
        self.read_in += o.read_in;
        if let (Some(m), Some(om)) = (self.cells.as_mut(), o.cells) {
            for (c, oc) in m.iter_mut().zip(om) {
                c.resident_pages += oc.resident_pages;
                for (n, k) in oc.nodes {
                    *c.nodes.entry(n).or_default() += k;
                }
            }
        }
    }
}

/// Resident pages by mincore alone (touches nothing; no nodes). Cheap. `None` when mincore
/// hides the truth from this caller.
pub fn resident_pages_mincore(f: &OpenFile) -> Result<Option<u64>, PagecacheError> {
    resident_in_range(f, None)
}

/// [`resident_pages_mincore`] of the pages a byte range covers (see [`page_span`]).
pub fn resident_in_range(
    f: &OpenFile,
    range: Option<(u64, u64)>,
) -> Result<Option<u64>, PagecacheError> {
    if !mincore_is_truthful(f) {
        return Ok(None);
    }
    let ps = numaio_sys::page_size() as u64;
    let (first, end) = page_span(f.size, range, ps);
    Ok(Some(
        scan(f, first, end, false, |_| Ok(()))?.mincore_resident,
    ))
}
