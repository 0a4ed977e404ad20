//! Wiring the engine's add-ons into an [`EngineConfig`] from options: placement policy, work
//! moving, accounting and checksums, chosen per cache.
//!
//! ```no_run
//! use numaio_engine::numa::{NumaOptions, apply};
//! use numaio_engine::{Engine, EngineConfig};
//! let mut cfg = EngineConfig::default();
//! let opts = NumaOptions {
//!     placement: "directory".parse().unwrap(),
//!     move_work: "migrate-thread".parse().unwrap(),
//!     root: Some("/data".into()),
//!     ..Default::default()
//! };
//! let parts = apply(&mut cfg, &opts).unwrap();
//! let engine = Engine::new(cfg)?;
//! // ... use the engine ...
//! println!("{}", parts.accounting.snapshot().to_numa_io_text());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use numaio_sys::Topology;

use crate::accounting::Accounting;
use crate::hysteresis::HysteresisConfig;
use crate::integrity::{IntegrityConfig, IntegrityStage};
use crate::move_work::{Forwarder, MoveWork, Mover, NodeCpus, NumaHook};
use crate::placement::{DeviceNodeMap, PlacementPolicy, Placer, PolicyPlacement};
use crate::{EngineBuilder, EngineConfig, EngineError};

/// The add-on settings of one cache.
#[derive(Debug, Clone)]
pub struct NumaOptions {
    /// Default: `range` (the core's Jericho ranges).
    pub placement: PlacementPolicy,
    /// Default: `none`.
    pub move_work: MoveWork,
    /// Default: `consecutive:4`, cooldown 64 accesses.
    pub hysteresis: HysteresisConfig,
    /// migrate-thread: also restrict the parent process. Default: false.
    pub move_parent: bool,
    /// forward: workers per node. Default: 1.
    pub forward_workers: usize,
    /// forward: how long idle workers and waiting callers poll before sleeping.
    /// Default: 20 µs (a forwarded 4 KiB read costs ~14 µs with polling, ~115 µs without,
    /// on our host; see docs/engine-placement.md).
    pub forward_spin: Duration,
    /// `directory`: top-level directories are taken relative to this root. Default: the
    /// grandparent of each file.
    pub root: Option<PathBuf>,
    /// Files bound to a device node (path-prefix rules, sysfs numa_node).
    pub devices: DeviceNodeMap,
    /// Per-block checksums. Default: off.
    pub checksums: Option<IntegrityConfig>,
}

impl Default for NumaOptions {
    fn default() -> Self {
        Self {
            placement: PlacementPolicy::Range {
                range_blocks: crate::placement::DEFAULT_RANGE_BLOCKS,
            },
            move_work: MoveWork::None,
            hysteresis: HysteresisConfig::default(),
            move_parent: false,
            forward_workers: 1,
            forward_spin: Duration::from_micros(20),
            root: None,
            devices: DeviceNodeMap::default(),
            checksums: None,
        }
    }
}

/// What [`apply`] installed, for reading the accounting and stats afterwards.
#[derive(Debug, Clone)]
pub struct NumaParts {
    pub accounting: Arc<Accounting>,
    pub slice_nodes: Vec<u32>,
    pub placement: Option<Arc<PolicyPlacement>>,
    pub forwarder: Option<Arc<Forwarder>>,
    pub integrity: Option<Arc<IntegrityStage>>,
}

/// The slice nodes the engine will use for `cfg` (the rule `Engine::new` uses).
pub fn slice_nodes_for(cfg: &EngineConfig, topo: &Topology) -> Vec<u32> {
    crate::config::slice_nodes(topo, cfg.slice_nodes.as_deref(), cfg.slices)
}

impl EngineBuilder {
    /// Installs the add-ons chosen by `opts` (see [`apply`]) and returns what was installed,
    /// for reading the accounting afterwards.
    pub fn with_numa(mut self, opts: &NumaOptions) -> Result<(Self, NumaParts), EngineError> {
        let parts = apply(self.config_mut(), opts).map_err(EngineError::Config)?;
        Ok((self, parts))
    }
}

/// Installs the add-ons into `cfg`: fixes its slice nodes, sets the placement (unless
/// `range` without device rules, which keeps the core's), adds the accounting / work-moving
/// hook, the forwarder and the integrity stage.
pub fn apply(cfg: &mut EngineConfig, opts: &NumaOptions) -> Result<NumaParts, String> {
    let topo = match &cfg.topology {
        Some(t) => t.clone(),
        None => Topology::detect().map_err(|e| format!("cannot read the NUMA topology: {e}"))?,
    };
    let slice_nodes = slice_nodes_for(cfg, &topo);
    cfg.slice_nodes = Some(slice_nodes.clone());
    let mut nodes: Vec<u32> = topo.node_ids();
    for n in &slice_nodes {
        if !nodes.contains(n) {
            nodes.push(*n);
        }
    }
    let accounting = Arc::new(Accounting::new(nodes, slice_nodes.clone()));
    let keep_core = matches!(opts.placement, PlacementPolicy::Range { .. })
        && opts.devices.rules.is_empty()
        && !opts.devices.use_sysfs;
    let placement = if keep_core {
        // The core's range placement, with the user's range length.
        if let PlacementPolicy::Range { range_blocks } = opts.placement {
            cfg.range_blocks = range_blocks;
        }
        None
    } else {
        let mut placer = Placer::new(opts.placement.clone(), slice_nodes.clone())?
            .with_devices(opts.devices.clone());
        if let Some(r) = &opts.root {
            placer = placer.with_root(r);
        }
        let p = Arc::new(
            PolicyPlacement::new(placer, cfg.block_size as u64)
                .with_cpus(NodeCpus::from_topology(&topo)),
        );
        cfg.placement = Some(p.clone());
        Some(p)
    };
    let cpus = NodeCpus::from_topology(&topo);
    let mut mover = Mover::new(opts.move_work, cpus.clone(), opts.hysteresis);
    mover.move_parent = opts.move_parent;
    cfg.hooks.push(Arc::new(NumaHook::new(
        mover,
        accounting.clone(),
        slice_nodes.clone(),
        cfg.block_size as u64,
    )));
    let forwarder = if opts.move_work == MoveWork::Forward {
        let mut uniq = slice_nodes.clone();
        uniq.sort_unstable();
        uniq.dedup();
        let f = Forwarder::with_spin(
            &cpus,
            &uniq,
            opts.forward_workers.max(1),
            64,
            opts.forward_spin,
        )
        .map_err(|e| format!("cannot start forwarding workers: {e}"))?
        .with_accounting(accounting.clone());
        let f = Arc::new(f);
        cfg.router = Some(f.clone());
        Some(f)
    } else {
        None
    };
    let integrity = opts.checksums.map(|c| {
        let s = Arc::new(IntegrityStage::new(c).with_accounting(accounting.clone()));
        cfg.integrity = Some(s.clone());
        s
    });
    Ok(NumaParts {
        accounting,
        slice_nodes,
        placement,
        forwarder,
        integrity,
    })
}
