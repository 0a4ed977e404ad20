//! CPU affinity of any task (`sched_getaffinity` / `sched_setaffinity`).

use crate::error::{SysError, SysResult};
use crate::mask::{Bitmask, CpuSet};

/// The CPUs task `tid` may run on (0 = the calling thread).
pub fn get_affinity(tid: i32) -> SysResult<CpuSet> {
    let mut set = CpuSet::new();
    loop {
        // SAFETY: the mask is valid for writes of byte_len() bytes.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sched_getaffinity,
                tid,
                set.0.byte_len(),
                set.0.as_mut_ptr(),
            )
        };
        if r >= 0 {
            return Ok(set);
        }
        let e = std::io::Error::last_os_error();
        // EINVAL: our mask is shorter than nr_cpu_ids; grow it and retry.
        if e.raw_os_error() == Some(libc::EINVAL) && set.0.bits() < 1 << 16 {
            set = CpuSet(Bitmask::with_bits(set.0.bits() * 2));
            continue;
        }
        return Err(SysError::Syscall {
            call: "sched_getaffinity",
            context: format!("tid {tid}"),
            source: e,
        });
    }
}

/// Restricts task `tid` (0 = the calling thread) to `cpus`.
pub fn set_affinity(tid: i32, cpus: &CpuSet) -> SysResult<()> {
    if cpus.is_empty() {
        return Err(SysError::from_errno(
            "sched_setaffinity",
            format!("tid {tid}: empty CPU set"),
            libc::EINVAL,
        ));
    }
    // SAFETY: the mask is valid for reads of byte_len() bytes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid,
            cpus.0.byte_len(),
            cpus.0.as_ptr(),
        )
    };
    if r != 0 {
        return Err(SysError::last_os(
            "sched_setaffinity",
            format!("tid {tid} to cpus {cpus}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_in_own_thread() {
        std::thread::spawn(|| {
            let orig = get_affinity(0).unwrap();
            assert!(!orig.is_empty());
            let first = orig.to_vec()[0];
            set_affinity(0, &CpuSet::from_ids(&[first])).unwrap();
            assert_eq!(get_affinity(0).unwrap().to_vec(), vec![first]);
            assert_eq!(crate::getcpu().unwrap().cpu, first);
            set_affinity(0, &orig).unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn errors() {
        assert!(set_affinity(0, &CpuSet::new()).is_err());
        let e = get_affinity(i32::MAX).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ESRCH));
        assert!(e.to_string().contains("tid 2147483647"));
        // A CPU that is not online.
        let e = set_affinity(0, &CpuSet::from_ids(&[4000])).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
    }
}
