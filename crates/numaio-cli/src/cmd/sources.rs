//! Choosing where `ps` and `top` get per-node I/O counts (`--source`), and the numaio mounts'
//! counters as one of those sources.

use crate::cmd::mount_stats;
use numaio_numa::IoBytes;
use numaio_proc::io_source::{MountCounts, MountProcessIo, MountReader, SourceChoice, Sources};

/// `--source`'s help.
pub const HELP: &str = "Where per-node I/O counts come from: auto (the eBPF collector when it \
    attaches, which needs root and BTF; else a numaio mount's counters for processes using one; \
    else the estimate), ebpf (fail if it cannot attach), mount, or estimate";

/// `--source`'s parser: the names are offered to completions and listed by `--help`.
pub fn parser() -> impl clap::builder::TypedValueParser<Value = SourceChoice> {
    use clap::builder::TypedValueParser;
    // The names are checked first, so every one that gets through parses.
    clap::builder::PossibleValuesParser::new(SourceChoice::NAMES)
        .map(|s| s.parse::<SourceChoice>().unwrap_or_default())
}

/// The sources `choice` asks for; an error saying why when eBPF was asked for and cannot run.
pub fn open(choice: SourceChoice) -> anyhow::Result<Sources> {
    Sources::choose(choice, Some(Box::new(NumaioMounts))).map_err(|why| {
        anyhow::anyhow!(
            "--source ebpf: the eBPF collector cannot run here: {why}; \
             use --source auto to fall back to the mounts' counters and the estimate"
        )
    })
}

/// One line saying which source counts, and why not eBPF where it does not.
pub fn describe(s: &Sources) -> String {
    match s.fallback_reason() {
        None => format!("per-node I/O: {} (exact)", s.primary()),
        Some(why) if s.reads_mounts() => format!(
            "per-node I/O: counted by numaio mounts for processes using one, else estimated \
             (eBPF not used: {why})"
        ),
        Some(why) => format!("per-node I/O: estimated (eBPF not used: {why})"),
    }
}

/// Every numaio mount in this mount namespace, read through its statistics xattr.
#[derive(Debug)]
pub struct NumaioMounts;

impl MountReader for NumaioMounts {
    fn read_all(&mut self) -> Vec<MountCounts> {
        let Ok(mounts) = numaio_sys::mountinfo::read_self() else {
            return Vec::new();
        };
        // FUSE mounts only (numaio's shows as `fuse`, or `fuse.numaio` where the subtype is
        // kept); the statistics xattr tells numaio's from others.
        mounts
            .iter()
            .filter(|m| m.fs_type == "fuse" || m.fs_type == "fuse.numaio")
            .filter_map(|m| {
                let s = mount_stats::read(&m.point).ok()?;
                Some(MountCounts {
                    mountpoint: m.point.clone(),
                    processes: s
                        .processes
                        .iter()
                        .filter_map(|p| {
                            let pid = i32::try_from(p.pid).ok()?;
                            let local = p.nodes.iter().fold(IoBytes::default(), |a, x| {
                                IoBytes::new(
                                    a.read_bytes.saturating_add(x.local_read_bytes),
                                    a.write_bytes.saturating_add(x.local_write_bytes),
                                )
                            });
                            Some((
                                pid,
                                MountProcessIo {
                                    by_data_node: p.node_io(),
                                    local,
                                },
                            ))
                        })
                        .collect(),
                })
            })
            .collect()
    }
}
