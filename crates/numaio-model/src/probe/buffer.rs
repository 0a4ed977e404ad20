//! Probe buffers: anonymous memory bound to one node (strict `mbind`), faulted in, and
//! verified with `move_pages` queries before any timing.

use crate::error::{ModelError, ModelResult};
use numaio_sys::{mbind, query_pages, MbindFlags, PageStatus, Policy};

/// Anonymous memory whose pages all sit on `node`.
pub struct NodeBuffer {
    ptr: *mut u8,
    len: usize,
    pub node: u32,
}

// SAFETY: the buffer is plain memory owned by this value; threads that share it work on
// disjoint ranges (the kernels split it), and it is unmapped only on drop.
unsafe impl Send for NodeBuffer {}
// SAFETY: as above; shared references only hand out the base address.
unsafe impl Sync for NodeBuffer {}

impl NodeBuffer {
    /// Maps `len` bytes (rounded up to 2 MiB), binds them to `node`, asks for transparent huge
    /// pages when `huge`, faults every page in and checks a sample of pages' node.
    pub fn new(len: usize, node: u32, huge: bool) -> ModelResult<NodeBuffer> {
        let align = 2 << 20;
        let len = len.div_ceil(align).max(1) * align;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ModelError::Probe(format!(
                "cannot map {} MiB for node {node}: {}",
                len >> 20,
                std::io::Error::last_os_error()
            )));
        }
        let buf = NodeBuffer {
            ptr: p as *mut u8,
            len,
            node,
        };
        if huge {
            // SAFETY: the range is our own mapping; the advice only changes page size.
            unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
        }
        // SAFETY: the range is the mapping just created and owned by `buf`.
        unsafe {
            mbind(
                buf.ptr,
                len,
                &Policy::bind(&[node]),
                MbindFlags {
                    strict: true,
                    ..MbindFlags::default()
                },
            )
        }?;
        let page = numaio_sys::page_size();
        // SAFETY: every written byte lies inside the mapping.
        unsafe {
            let mut off = 0;
            while off < len {
                buf.ptr.add(off).write_volatile(1);
                off += page;
            }
        }
        buf.verify()?;
        Ok(buf)
    }

    /// Checks that sampled pages sit on the buffer's node.
    fn verify(&self) -> ModelResult<()> {
        let page = numaio_sys::page_size();
        let pages = self.len / page;
        let step = (pages / 256).max(1);
        let addrs: Vec<*const u8> = (0..pages)
            .step_by(step)
            // SAFETY: the offset stays inside the mapping.
            .map(|k| unsafe { self.ptr.add(k * page) } as *const u8)
            .collect();
        let st = query_pages(0, &addrs)?;
        if let Some(bad) = st.iter().find(|s| **s != PageStatus::Node(self.node)) {
            return Err(ModelError::Probe(format!(
                "a page bound to node {} reports {bad:?}; the binding did not hold",
                self.node
            )));
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for NodeBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr/len are the mapping created in new(), unmapped once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
