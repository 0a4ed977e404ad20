//! Large metadata arrays (slot table, index buckets) on transparent huge pages, bound to the
//! slice's node. On a random-access hit path most time goes to TLB and cache misses; with
//! 4 KiB pages (especially under virtualisation, where a TLB miss walks two page tables)
//! every metadata access would cost a page walk.

use numaio_sys::{mbind, MbindFlags, Policy};
use std::ops::Deref;

pub struct HugeArray<T> {
    ptr: *mut T,
    len: usize,
    bytes: usize,
}

// SAFETY: the array owns its elements like a Box<[T]>.
unsafe impl<T: Send> Send for HugeArray<T> {}
unsafe impl<T: Sync> Sync for HugeArray<T> {}

impl<T> HugeArray<T> {
    /// `len` elements made by `init(i)`, on huge pages when possible, bound to `node` if given
    /// (best effort: metadata placement failures only cost speed).
    pub fn new(
        len: usize,
        node: Option<u32>,
        mut init: impl FnMut(usize) -> T,
    ) -> std::io::Result<Self> {
        let align = std::mem::align_of::<T>().max(8);
        assert!(align <= 4096);
        let too_big = || {
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!(
                    "{len} elements of {} bytes overflow the address space",
                    std::mem::size_of::<T>()
                ),
            )
        };
        let bytes = len
            .max(1)
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|b| b.checked_next_multiple_of(numaio_sys::page_size()))
            .ok_or_else(too_big)?;
        // SAFETY: anonymous private mapping checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("mmap of {bytes} bytes failed: {e}"),
            ));
        }
        // SAFETY: advisory calls on our fresh mapping.
        unsafe {
            libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
            if let Some(n) = node {
                let _ = mbind(
                    p as *mut u8,
                    bytes,
                    &Policy::bind(&[n]),
                    MbindFlags::default(),
                );
            }
        }
        let ptr = p as *mut T;
        for i in 0..len {
            // SAFETY: within the mapping, properly aligned (page-aligned base, align <= 4096).
            unsafe { ptr.add(i).write(init(i)) };
        }
        Ok(HugeArray { ptr, len, bytes })
    }
}

impl<T> Deref for HugeArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> Drop for HugeArray<T> {
    fn drop(&mut self) {
        // SAFETY: drop the initialised elements, then unmap our mapping once.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len));
            libc::munmap(self.ptr as *mut _, self.bytes);
        }
    }
}
