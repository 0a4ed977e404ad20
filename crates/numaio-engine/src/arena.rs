//! A slice's buffer arena: private anonymous memory bound to the slice's node.
//!
//! The binding is strict (`MPOL_BIND`, `MPOL_MF_STRICT`) and applied before the first touch,
//! so every page is allocated on the node; the arena is then prefaulted (a whole
//! write pass) so no page fault lands on the hit path, and the result is verified with a
//! `move_pages` query (memory binding is checked, never assumed). Transparent huge pages are requested when the
//! kernel supports them; the verification reports what actually happened.

use numaio_sys::{mbind, query_pages, MbindFlags, PageStatus, Policy};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;

/// Where the arena's pages really are, from a `move_pages` query at start-up.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PlacementCheck {
    /// The node the arena was bound to.
    pub node: u32,
    /// Whether `mbind` succeeded (it fails on kernels without NUMA support).
    pub bound: bool,
    pub bind_error: Option<String>,
    pub huge_pages_requested: bool,
    /// Pages sampled (every page for arenas up to 256 Ki pages, else an even sample).
    pub pages_sampled: u64,
    /// Sampled pages per node.
    pub pages_per_node: BTreeMap<u32, u64>,
    /// Sampled pages not present or with an error.
    pub pages_other: u64,
    pub query_error: Option<String>,
}

impl PlacementCheck {
    /// Fraction of sampled pages that are on the intended node.
    pub fn local_fraction(&self) -> f64 {
        if self.pages_sampled == 0 {
            return 0.0;
        }
        *self.pages_per_node.get(&self.node).unwrap_or(&0) as f64 / self.pages_sampled as f64
    }
}

pub struct Arena {
    ptr: *mut u8,
    len: usize,
    pub check: PlacementCheck,
}

// SAFETY: the arena is a plain memory region; synchronisation of its contents is done by the
// slot state machine of the slice that owns it.
unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

impl Arena {
    /// Maps `len` bytes bound to `node` (binding skipped when `bind` is false).
    pub fn new(len: usize, node: u32, bind: bool) -> io::Result<Arena> {
        let len = len.max(1).next_multiple_of(numaio_sys::page_size());
        // SAFETY: anonymous private mapping, no file, checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("mmap of a {len}-byte buffer arena for node {node} failed: {e}"),
            ));
        }
        let ptr = ptr as *mut u8;
        let mut check = PlacementCheck {
            node,
            ..Default::default()
        };
        if bind {
            let pol = Policy::bind(&[node]);
            let flags = MbindFlags {
                strict: true,
                move_own: false,
                move_all: false,
            };
            // SAFETY: the range is our fresh mapping.
            match unsafe { mbind(ptr, len, &pol, flags) } {
                Ok(()) => check.bound = true,
                Err(e) => check.bind_error = Some(e.to_string()),
            }
        }
        // SAFETY: advisory call on our mapping; failure (no THP) is harmless.
        check.huge_pages_requested =
            unsafe { libc::madvise(ptr as *mut _, len, libc::MADV_HUGEPAGE) } == 0;
        let arena = Arena { ptr, len, check };
        arena.prefault();
        let mut arena = arena;
        arena.verify();
        Ok(arena)
    }

    fn prefault(&self) {
        let ps = numaio_sys::page_size();
        let mut off = 0;
        while off < self.len {
            // SAFETY: within our mapping; volatile so the touch is not optimised away.
            unsafe { std::ptr::write_volatile(self.ptr.add(off), 0) };
            off += ps;
        }
    }

    fn verify(&mut self) {
        let ps = numaio_sys::page_size();
        let pages = self.len / ps;
        let stride = (pages / (256 * 1024)).max(1);
        let addrs: Vec<*const u8> = (0..pages)
            .step_by(stride)
            // SAFETY: i < pages, so the address lies inside the arena's `len` bytes.
            .map(|i| unsafe { self.ptr.add(i * ps) as *const u8 })
            .collect();
        self.check.pages_sampled = addrs.len() as u64;
        match query_pages(0, &addrs) {
            Ok(st) => {
                for s in st {
                    match s {
                        PageStatus::Node(n) => {
                            *self.check.pages_per_node.entry(n).or_default() += 1
                        }
                        _ => self.check.pages_other += 1,
                    }
                }
            }
            Err(e) => self.check.query_error = Some(e.to_string()),
        }
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping exactly once.
        unsafe { libc::munmap(self.ptr as *mut _, self.len) };
    }
}
