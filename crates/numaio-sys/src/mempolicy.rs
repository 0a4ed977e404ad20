//! Memory policies: `get_mempolicy`, `set_mempolicy` and `mbind`.

use crate::error::{SysError, SysResult};
use crate::mask::NodeMask;

/// A memory policy mode (`MPOL_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Default,
    Preferred,
    Bind,
    Interleave,
    Local,
    PreferredMany,
    WeightedInterleave,
}

impl Mode {
    pub fn as_raw(self) -> i32 {
        match self {
            Mode::Default => 0,
            Mode::Preferred => 1,
            Mode::Bind => 2,
            Mode::Interleave => 3,
            Mode::Local => 4,
            Mode::PreferredMany => 5,
            Mode::WeightedInterleave => 6,
        }
    }

    pub fn from_raw(raw: i32) -> Option<Mode> {
        // The high bits carry mode flags (MPOL_F_STATIC_NODES etc.).
        Some(match raw & 0xff {
            0 => Mode::Default,
            1 => Mode::Preferred,
            2 => Mode::Bind,
            3 => Mode::Interleave,
            4 => Mode::Local,
            5 => Mode::PreferredMany,
            6 => Mode::WeightedInterleave,
            _ => return None,
        })
    }
}

/// A mode with its node mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    pub nodes: NodeMask,
}

impl Policy {
    pub fn default_policy() -> Policy {
        Policy {
            mode: Mode::Default,
            nodes: NodeMask::new(),
        }
    }
    pub fn bind(nodes: &[u32]) -> Policy {
        Policy {
            mode: Mode::Bind,
            nodes: NodeMask::from_ids(nodes),
        }
    }
    pub fn interleave(nodes: &[u32]) -> Policy {
        Policy {
            mode: Mode::Interleave,
            nodes: NodeMask::from_ids(nodes),
        }
    }
    pub fn preferred(node: u32) -> Policy {
        Policy {
            mode: Mode::Preferred,
            nodes: NodeMask::from_ids(&[node]),
        }
    }

    fn check(&self) -> SysResult<()> {
        self.nodes.check_possible()
    }
}

/// `mbind` flags (`MPOL_MF_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MbindFlags {
    /// Fail if existing pages do not follow the policy.
    pub strict: bool,
    /// Move existing pages used only by this process.
    pub move_own: bool,
    /// Move all existing pages (needs CAP_SYS_NICE).
    pub move_all: bool,
}

impl MbindFlags {
    fn bits(self) -> u32 {
        (self.strict as u32) | ((self.move_own as u32) << 1) | ((self.move_all as u32) << 2)
    }
}

const MPOL_F_NODE: libc::c_ulong = 1;
const MPOL_F_ADDR: libc::c_ulong = 2;

/// The calling thread's policy (`addr == None`) or the policy of the VMA holding address `addr`.
pub fn get_mempolicy(addr: Option<usize>) -> SysResult<Policy> {
    let mut mode: libc::c_int = 0;
    let mut mask = NodeMask::new();
    let flags = if addr.is_some() { MPOL_F_ADDR } else { 0 };
    // get_mempolicy requires maxnode >= nr_node_ids; our mask is sized for that.
    let maxnode = mask.0.bits() as libc::c_ulong;
    // SAFETY: mode and mask are valid for writes of the sizes given; addr is only looked up.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.0.as_mut_ptr(),
            maxnode,
            addr.unwrap_or(0),
            flags,
        )
    };
    if r != 0 {
        return Err(SysError::last_os("get_mempolicy", ""));
    }
    let mode = Mode::from_raw(mode).ok_or_else(|| {
        SysError::from_errno(
            "get_mempolicy",
            format!("unknown mode {mode}"),
            libc::EINVAL,
        )
    })?;
    Ok(Policy { mode, nodes: mask })
}

/// The node of the page at `addr`, faulting it in if needed (`MPOL_F_NODE | MPOL_F_ADDR`).
/// Prefer [`crate::query_pages`], which never faults.
pub fn node_of_address(addr: usize) -> SysResult<u32> {
    let mut node: libc::c_int = -1;
    // SAFETY: node is valid for writes; no mask is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(SysError::last_os(
            "get_mempolicy",
            format!("address {addr:#x}"),
        ));
    }
    Ok(node as u32)
}

/// Sets the calling thread's memory policy.
pub fn set_mempolicy(policy: &Policy) -> SysResult<()> {
    policy.check()?;
    let (ptr, maxnode) = if policy.mode == Mode::Default || policy.mode == Mode::Local {
        (std::ptr::null(), 0)
    } else {
        (policy.nodes.0.as_ptr(), policy.nodes.maxnode_arg())
    };
    // SAFETY: the mask outlives the call and holds maxnode - 1 bits.
    let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, policy.mode.as_raw(), ptr, maxnode) };
    if r != 0 {
        return Err(SysError::last_os(
            "set_mempolicy",
            format!("{:?} on nodes {}", policy.mode, policy.nodes),
        ));
    }
    Ok(())
}

/// Applies `policy` to `[addr, addr+len)`. `addr` must be page aligned.
///
/// # Safety
/// The range must be a mapping owned by the caller; moving pages does not change their
/// contents, but the caller asserts that no other code relies on the range's policy.
pub unsafe fn mbind(
    addr: *mut u8,
    len: usize,
    policy: &Policy,
    flags: MbindFlags,
) -> SysResult<()> {
    policy.check()?;
    if !(addr as usize).is_multiple_of(crate::page_size()) {
        return Err(SysError::from_errno(
            "mbind",
            format!("address {addr:p} is not page aligned"),
            libc::EINVAL,
        ));
    }
    let (ptr, maxnode) = if policy.mode == Mode::Default || policy.mode == Mode::Local {
        (std::ptr::null(), 0)
    } else {
        (policy.nodes.0.as_ptr(), policy.nodes.maxnode_arg())
    };
    let r = libc::syscall(
        libc::SYS_mbind,
        addr,
        len as libc::c_ulong,
        policy.mode.as_raw() as libc::c_ulong,
        ptr,
        maxnode,
        flags.bits(),
    );
    if r != 0 {
        return Err(SysError::last_os(
            "mbind",
            format!(
                "{len} bytes at {addr:p}, {:?} on nodes {}",
                policy.mode, policy.nodes
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_roundtrip() {
        for m in [
            Mode::Default,
            Mode::Preferred,
            Mode::Bind,
            Mode::Interleave,
            Mode::Local,
            Mode::PreferredMany,
            Mode::WeightedInterleave,
        ] {
            assert_eq!(Mode::from_raw(m.as_raw()), Some(m));
        }
        assert_eq!(Mode::from_raw(2 | (1 << 15)), Some(Mode::Bind));
        assert_eq!(Mode::from_raw(77), None);
    }

    #[test]
    fn own_policy_roundtrips_on_node0() {
        // Runs in its own thread so the policy does not leak into other tests.
        std::thread::spawn(|| {
            set_mempolicy(&Policy::bind(&[0])).unwrap();
            let p = get_mempolicy(None).unwrap();
            assert_eq!(p.mode, Mode::Bind);
            assert_eq!(p.nodes.to_vec(), vec![0]);
            set_mempolicy(&Policy::default_policy()).unwrap();
            assert_eq!(get_mempolicy(None).unwrap().mode, Mode::Default);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn impossible_node_is_a_typed_error() {
        let bad = Policy::bind(&[crate::mask::possible_nodes() as u32 + 3]);
        assert!(matches!(
            set_mempolicy(&bad),
            Err(SysError::InvalidNode { .. })
        ));
    }

    #[test]
    fn empty_bind_mask_is_einval() {
        let p = Policy {
            mode: Mode::Bind,
            nodes: NodeMask::new(),
        };
        let e = std::thread::spawn(move || set_mempolicy(&p))
            .join()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert!(e.to_string().starts_with("set_mempolicy failed"), "{e}");
    }

    #[test]
    fn mbind_rejects_unaligned_and_unmapped() {
        let mut buf = vec![0u8; 3 * 4096];
        let unaligned = unsafe { buf.as_mut_ptr().add(1) };
        let e = unsafe { mbind(unaligned, 4096, &Policy::bind(&[0]), MbindFlags::default()) }
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        // A page-aligned address that is not mapped: EFAULT or ENOMEM from the kernel.
        let e = unsafe {
            mbind(
                (1usize << 46) as *mut u8,
                4096,
                &Policy::bind(&[0]),
                MbindFlags::default(),
            )
        }
        .unwrap_err();
        assert!(
            matches!(e.errno(), Some(libc::EFAULT) | Some(libc::ENOMEM)),
            "{e}"
        );
    }
}
