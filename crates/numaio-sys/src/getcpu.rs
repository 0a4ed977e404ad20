//! The calling thread's current CPU and node (`getcpu(2)`).

use crate::error::{SysError, SysResult};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuNode {
    pub cpu: u32,
    pub node: u32,
}

/// The CPU and node the calling thread is running on right now (may change at any time).
pub fn getcpu() -> SysResult<CpuNode> {
    let mut cpu: libc::c_uint = 0;
    let mut node: libc::c_uint = 0;
    // SAFETY: both out-pointers are valid; the third (tcache) argument is unused and NULL.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut libc::c_uint,
            &mut node as *mut libc::c_uint,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r != 0 {
        return Err(SysError::last_os("getcpu", ""));
    }
    Ok(CpuNode { cpu, node })
}

#[cfg(test)]
mod tests {
    #[test]
    fn getcpu_matches_topology() {
        let c = super::getcpu().unwrap();
        let t = crate::Topology::detect().unwrap();
        assert_eq!(t.cpu_to_node(c.cpu), Some(c.node));
    }
}
