//! `migrate_pages(2)`: move all of a process's pages from one node set to another.

use crate::error::{SysError, SysResult};
use crate::mask::NodeMask;

/// Moves the pages of `pid` that lie on `from` to `to`. Returns the number of pages that
/// could not be moved (the kernel's return value).
pub fn migrate_pages(pid: i32, from: &NodeMask, to: &NodeMask) -> SysResult<u64> {
    from.check_possible()?;
    to.check_possible()?;
    // Both masks must have the same size; they are sized alike, but be defensive.
    let bits = from.0.bits().max(to.0.bits());
    let mut f = crate::mask::Bitmask::with_bits(bits);
    let mut t = crate::mask::Bitmask::with_bits(bits);
    from.to_vec().into_iter().for_each(|n| f.set(n));
    to.to_vec().into_iter().for_each(|n| t.set(n));
    // SAFETY: both masks hold `bits` bits and outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_migrate_pages,
            pid,
            bits as libc::c_ulong + 1,
            f.as_ptr(),
            t.as_ptr(),
        )
    };
    if r < 0 {
        return Err(SysError::last_os(
            "migrate_pages",
            format!("pid {pid}, nodes {from} -> {to}"),
        ));
    }
    Ok(r as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pages_node0_to_node0() {
        let m = NodeMask::from_ids(&[0]);
        assert_eq!(migrate_pages(0, &m, &m).unwrap(), 0);
    }

    #[test]
    fn missing_pid_is_esrch() {
        let m = NodeMask::from_ids(&[0]);
        let e = migrate_pages(i32::MAX, &m, &m).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ESRCH));
    }

    #[test]
    fn impossible_node_is_rejected() {
        let bad = NodeMask::from_ids(&[crate::mask::possible_nodes() as u32 + 2]);
        assert!(matches!(
            migrate_pages(0, &NodeMask::from_ids(&[0]), &bad),
            Err(SysError::InvalidNode { .. })
        ));
    }
}
