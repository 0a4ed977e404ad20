//! Pinning probe threads to CPUs.

use crate::error::ModelResult;
use numaio_sys::{get_affinity, set_affinity, CpuSet};

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: u32) -> ModelResult<()> {
    set_affinity(0, &CpuSet::from_ids(&[cpu]))?;
    Ok(())
}

/// The CPUs of `node_cpus` this process may use.
pub fn usable(node_cpus: &[u32]) -> ModelResult<Vec<u32>> {
    let allowed = get_affinity(0)?;
    Ok(node_cpus
        .iter()
        .copied()
        .filter(|&c| allowed.contains(c))
        .collect())
}
