//! The daemon's guards: pure checks that can veto a move. Each returns `Err(reason)` with
//! the numbers behind the veto, which ends up in the decision's JSON line.

use crate::config::Filter;
use std::collections::BTreeMap;

/// Tofalos's CPU-congestion rule: node `target` is congested if it is busier than
/// `threshold` while every other node is below half of its load. Moving more work there
/// would only trade remote memory for run-queue waits.
pub fn cpu_congested(target: u32, util: &BTreeMap<u32, f64>, threshold: f64) -> Option<String> {
    let t = *util.get(&target)?;
    if t <= threshold {
        return None;
    }
    let others_low = util
        .iter()
        .filter(|(&n, _)| n != target)
        .all(|(_, &u)| u < 0.5 * t);
    others_low.then(|| {
        format!(
            "node {target} is CPU-congested ({:.0} % busy, others below half of that)",
            t * 100.0
        )
    })
}

/// The target must keep `min_free` bytes free after receiving `incoming` bytes.
pub fn free_memory(target: u32, free: u64, incoming: u64, min_free: u64) -> Result<(), String> {
    if free.saturating_sub(incoming) < min_free {
        return Err(format!(
            "node {target} has {free} bytes free; receiving {incoming} would leave less than {min_free}"
        ));
    }
    Ok(())
}

/// Anti-oscillation: the target's share must beat the current node's by `factor`.
pub fn wins(target_share: f64, current_share: f64, factor: f64) -> Result<(), String> {
    if target_share > 0.0 && target_share >= factor * current_share {
        Ok(())
    } else {
        Err(format!(
            "target share {target_share:.2} does not beat current share {current_share:.2} by the win factor {factor}"
        ))
    }
}

/// Minimum residence: `since_move` seconds since the last move (None: never moved).
pub fn residence(since_move: Option<f64>, min_secs: f64, what: &str) -> Result<(), String> {
    match since_move {
        Some(s) if s < min_secs => Err(format!(
            "{what} was moved {s:.1} s ago (minimum residence {min_secs} s)"
        )),
        _ => Ok(()),
    }
}

fn comm_matches(pattern: &str, comm: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => comm.starts_with(prefix),
        None => pattern == comm,
    }
}

fn cgroup_matches(prefix: &str, cgroup: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    cgroup == p || cgroup.starts_with(&format!("{p}/")) || p.is_empty()
}

/// Include/exclude lists; pid 1 and pid <= 0 are always refused.
pub fn filter(f: &Filter, pid: i32, comm: &str, cgroup: &str) -> Result<(), String> {
    if pid <= 1 {
        return Err("pid 1 is never moved".into());
    }
    if f.exclude_pids.contains(&pid) {
        return Err(format!("pid {pid} is excluded"));
    }
    if let Some(p) = f.exclude_comms.iter().find(|p| comm_matches(p, comm)) {
        return Err(format!("command {comm:?} is excluded by {p:?}"));
    }
    if let Some(p) = f.exclude_cgroups.iter().find(|p| cgroup_matches(p, cgroup)) {
        return Err(format!("cgroup {cgroup} is excluded by {p:?}"));
    }
    let any_include =
        !f.include_pids.is_empty() || !f.include_comms.is_empty() || !f.include_cgroups.is_empty();
    if any_include
        && !(f.include_pids.contains(&pid)
            || f.include_comms.iter().any(|p| comm_matches(p, comm))
            || f.include_cgroups.iter().any(|p| cgroup_matches(p, cgroup)))
    {
        return Err(format!("pid {pid} ({comm}) is not in the include lists"));
    }
    Ok(())
}

/// Per-interval caps on actions and bytes moved.
#[derive(Debug, Clone)]
pub struct Budget {
    pub actions_left: usize,
    pub bytes_left: u64,
}

impl Budget {
    pub fn new(actions: usize, bytes: u64) -> Self {
        Budget {
            actions_left: actions,
            bytes_left: bytes,
        }
    }

    /// Takes one action moving `bytes`, or says which cap it would break.
    pub fn take(&mut self, bytes: u64) -> Result<(), String> {
        if self.actions_left == 0 {
            return Err("the cap on actions per interval is reached".into());
        }
        if bytes > self.bytes_left {
            return Err(format!(
                "moving {bytes} bytes would exceed the cap on bytes per interval ({} left)",
                self.bytes_left
            ));
        }
        self.actions_left -= 1;
        self.bytes_left -= bytes;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn congestion_rule() {
        let u: BTreeMap<u32, f64> = [(0, 0.95), (1, 0.4)].into_iter().collect();
        assert!(cpu_congested(0, &u, 0.9).is_some());
        assert!(cpu_congested(1, &u, 0.9).is_none());
        // Everyone busy: not congested relative to the others (moving does not help).
        let u: BTreeMap<u32, f64> = [(0, 0.95), (1, 0.5)].into_iter().collect();
        assert!(cpu_congested(0, &u, 0.9).is_none());
        assert!(cpu_congested(5, &u, 0.9).is_none());
    }

    #[test]
    fn memory_win_residence() {
        assert!(free_memory(1, 1000, 100, 900).is_ok());
        assert!(free_memory(1, 1000, 101, 900)
            .unwrap_err()
            .contains("node 1"));
        assert!(wins(0.8, 0.2, 2.0).is_ok());
        assert!(wins(0.5, 0.4, 2.0).is_err());
        assert!(wins(0.0, 0.0, 2.0).is_err());
        assert!(residence(None, 10.0, "x").is_ok());
        assert!(residence(Some(3.0), 10.0, "x").is_err());
        assert!(residence(Some(11.0), 10.0, "x").is_ok());
    }

    #[test]
    fn filters() {
        let f = Filter {
            exclude_comms: vec!["systemd*".into(), "sshd".into()],
            exclude_cgroups: vec!["/system.slice/db.service".into()],
            ..Default::default()
        };
        assert!(filter(&f, 1, "x", "/").is_err());
        assert!(filter(&f, 50, "systemd-journal", "/").is_err());
        assert!(filter(&f, 50, "sshd", "/").is_err());
        assert!(filter(&f, 50, "sshd2", "/").is_ok());
        assert!(filter(&f, 50, "x", "/system.slice/db.service").is_err());
        assert!(filter(&f, 50, "x", "/system.slice/db.service/sub").is_err());
        assert!(filter(&f, 50, "x", "/system.slice/db.service2").is_ok());
        let inc = Filter {
            include_comms: vec!["reader".into()],
            exclude_pids: vec![7],
            ..Default::default()
        };
        assert!(filter(&inc, 9, "reader", "/").is_ok());
        assert!(filter(&inc, 9, "other", "/").is_err());
        assert!(filter(&inc, 7, "reader", "/").is_err());
    }

    #[test]
    fn budget_caps() {
        let mut b = Budget::new(2, 100);
        assert!(b.take(60).is_ok());
        assert!(b.take(50).unwrap_err().contains("bytes"));
        assert!(b.take(40).is_ok());
        assert!(b.take(0).unwrap_err().contains("actions"));
    }
}
