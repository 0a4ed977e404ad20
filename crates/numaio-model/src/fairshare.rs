//! Max-min fair sharing of capacitated resources by rate-limited flows (progressive filling).
//!
//! Every unfrozen flow's rate rises at the same pace; a flow freezes when it reaches its own
//! demand or when any resource it uses is full. This is how the model splits a memory
//! controller or a link among the threads that use it: the threads a resource limits get equal
//! shares, and threads limited elsewhere leave their unused share to the others.

/// A group of identical flows (threads with the same node and data placement).
#[derive(Debug, Clone)]
pub struct Flow {
    /// How many identical flows the group holds.
    pub count: f64,
    /// The rate one flow reaches when nothing else limits it.
    pub demand: f64,
    /// `(resource index, use per unit of one flow's rate)`.
    pub uses: Vec<(usize, f64)>,
}

/// Per-flow rates (one flow of each group), in the order of `flows`.
pub fn solve(capacity: &[f64], flows: &[Flow]) -> Vec<f64> {
    let mut rate = vec![0.0; flows.len()];
    let mut left: Vec<f64> = capacity.to_vec();
    let mut active: Vec<bool> = flows
        .iter()
        .map(|f| f.count > 0.0 && f.demand > 0.0)
        .collect();
    // Each round freezes at least one group or fills one resource, so the loop ends.
    for _ in 0..(flows.len() + capacity.len() + 1) {
        if !active.iter().any(|&a| a) {
            break;
        }
        let mut load = vec![0.0; capacity.len()];
        for (_, f) in flows.iter().enumerate().filter(|(k, _)| active[*k]) {
            for &(r, u) in &f.uses {
                load[r] += u * f.count;
            }
        }
        let mut step = f64::INFINITY;
        for (r, &l) in load.iter().enumerate() {
            if l > 0.0 {
                step = step.min(left[r].max(0.0) / l);
            }
        }
        for (k, f) in flows.iter().enumerate().filter(|(k, _)| active[*k]) {
            step = step.min(f.demand - rate[k]);
        }
        let step = step.max(0.0);
        for (k, f) in flows.iter().enumerate() {
            if active[k] {
                rate[k] += step;
                for &(r, u) in &f.uses {
                    left[r] -= u * f.count * step;
                }
            }
        }
        let full = |r: usize| left[r] <= capacity[r] * 1e-9;
        for (k, f) in flows.iter().enumerate() {
            if active[k]
                && (rate[k] >= f.demand * (1.0 - 1e-12)
                    || f.uses.iter().any(|&(r, u)| u > 0.0 && full(r)))
            {
                active[k] = false;
            }
        }
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconstrained_flows_get_their_demand() {
        let r = solve(
            &[100.0],
            &[Flow {
                count: 2.0,
                demand: 10.0,
                uses: vec![(0, 1.0)],
            }],
        );
        assert_eq!(r, vec![10.0]);
    }

    #[test]
    fn a_full_resource_is_split_evenly_and_leftovers_go_to_others() {
        // Resource 0 (cap 30) is shared by groups a (2 flows) and b (1 flow); b is also
        // limited by its demand 5, so a's two flows share the remaining 25.
        let flows = [
            Flow {
                count: 2.0,
                demand: 100.0,
                uses: vec![(0, 1.0)],
            },
            Flow {
                count: 1.0,
                demand: 5.0,
                uses: vec![(0, 1.0), (1, 1.0)],
            },
        ];
        let r = solve(&[30.0, 1000.0], &flows);
        assert!(
            (r[0] - 12.5).abs() < 1e-9 && (r[1] - 5.0).abs() < 1e-9,
            "{r:?}"
        );
    }

    #[test]
    fn fractional_use_of_several_resources() {
        // One flow spreads half its traffic over each of two resources of capacity 10 and 40.
        let flows = [Flow {
            count: 1.0,
            demand: 1e9,
            uses: vec![(0, 0.5), (1, 0.5)],
        }];
        let r = solve(&[10.0, 40.0], &flows);
        assert!((r[0] - 20.0).abs() < 1e-9, "{r:?}");
    }
}
