//! Node-bound anonymous memory: a private anonymous mapping, optionally bound to one node
//! with `mbind` before its pages are first touched, unmapped on drop.
//!
//! Binding must come before the first touch: a page is placed when it is faulted in, and a
//! later non-moving `mbind` leaves pages already present where they are.

use crate::error::{SysError, SysResult};
use crate::mempolicy::{mbind, MbindFlags, Policy};
use std::ptr::NonNull;

/// A private anonymous mapping owned by this value.
pub struct NodeBuffer {
    ptr: NonNull<u8>,
    len: usize,
    node: Option<u32>,
}

// SAFETY: the mapping is plain memory owned by this value; safe code reaches its bytes only
// through `&mut self` (`as_mut_slice`, `fault_in`) or `&self` (`as_slice`), so Rust's
// borrow rules keep those accesses apart. Writes through `as_ptr` are the caller's unsafe
// responsibility.
unsafe impl Send for NodeBuffer {}
// SAFETY: as above.
unsafe impl Sync for NodeBuffer {}

impl NodeBuffer {
    /// Maps `len` bytes (rounded up to whole pages, at least one), bound to no node.
    pub fn anonymous(len: usize) -> SysResult<NodeBuffer> {
        let len = len.max(1).next_multiple_of(crate::page_size());
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected, and
        // the result is checked before use.
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
            return Err(SysError::last_os("mmap", format!("{len} anonymous bytes")));
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| SysError::from_errno("mmap", "returned a null mapping", libc::ENOMEM))?;
        Ok(NodeBuffer {
            ptr,
            len,
            node: None,
        })
    }

    /// Maps `len` bytes and binds them to `node` (`MPOL_BIND`) before any page is touched.
    pub fn on_node(len: usize, node: u32, flags: MbindFlags) -> SysResult<NodeBuffer> {
        let mut b = NodeBuffer::anonymous(len)?;
        b.bind(node, flags)?;
        Ok(b)
    }

    /// Binds the whole mapping to `node`; pages touched from now on are placed there.
    pub fn bind(&mut self, node: u32, flags: MbindFlags) -> SysResult<()> {
        // SAFETY: the range is exactly this value's own page-aligned mapping; a memory
        // policy (and, with move flags, a migration) changes where pages live, not their
        // contents.
        unsafe { mbind(self.ptr.as_ptr(), self.len, &Policy::bind(&[node]), flags) }?;
        self.node = Some(node);
        Ok(())
    }

    /// Asks for transparent huge pages (advice only: the kernel may ignore it).
    pub fn advise_huge(&self) {
        // SAFETY: the range is this value's own mapping; the advice changes page size only.
        unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_HUGEPAGE) };
    }

    /// Touches every page (a write), so each is allocated now under the mapping's policy.
    pub fn fault_in(&mut self) {
        let page = crate::page_size();
        let base = self.ptr.as_ptr();
        for off in (0..self.len).step_by(page) {
            // SAFETY: `off < len`, inside the mapping; `&mut self` excludes other users.
            unsafe { base.add(off).write_volatile(0) };
        }
    }

    /// The node the mapping was bound to, if any.
    pub fn node(&self) -> Option<u32> {
        self.node
    }

    /// Length in bytes (a whole number of pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte. Memory the kernel or other threads write through this pointer must
    /// not be read through `as_slice` at the same time.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, zero-filled until written, alive as
        // long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for NodeBuffer {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `anonymous` created, once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl std::fmt::Debug for NodeBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuffer")
            .field("len", &self.len)
            .field("node", &self.node)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_pages_and_reads_zeros() {
        let mut b = NodeBuffer::anonymous(10).unwrap();
        assert_eq!(b.len(), crate::page_size());
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[5] = 7;
        b.fault_in();
        assert_eq!(b.as_slice()[5], 7);
        assert_eq!(b.node(), None);
    }

    #[test]
    fn bound_pages_land_on_the_node() {
        // Node 0 exists on every Linux system, NUMA or not.
        let mut b = match NodeBuffer::on_node(4 * crate::page_size(), 0, MbindFlags::default()) {
            Ok(b) => b,
            Err(e) if e.errno() == Some(libc::ENOSYS) => {
                eprintln!("SKIPPED: bound_pages_land_on_the_node: mbind unsupported: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(b.node(), Some(0));
        b.fault_in();
        let pages: Vec<*const u8> = (0..4)
            .map(|i| b.as_ptr().wrapping_add(i * crate::page_size()) as *const u8)
            .collect();
        let st = crate::query_pages(0, &pages).unwrap();
        assert!(
            st.iter().all(|s| *s == crate::PageStatus::Node(0)),
            "{st:?}"
        );
    }

    #[test]
    fn an_absent_node_is_refused() {
        let absent = crate::mask::possible_nodes() as u32 + 3;
        let e = NodeBuffer::on_node(4096, absent, MbindFlags::default()).unwrap_err();
        assert!(matches!(e, SysError::InvalidNode { .. }), "{e}");
    }
}
