//! Reading a live `numaio mount`'s statistics: the virtual xattr `user.numaio.stats` of its
//! root directory (JSON, schema in `numaio_fuse::stats`). Used by `numaio fs stat MOUNTPOINT`
//! and by `numaio ps` and `numaio top` (`cmd::sources`) for the exact per-node I/O of
//! processes using the mount.

use crate::output::{human_bytes, quote};
use numaio_fuse::stats::{NodeIo, ProcessStats, Stats, MAX_BYTES, STATS_XATTR};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// statfs f_type of a FUSE mount.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

fn is_fuse(c: &CString) -> bool {
    // SAFETY: statfs writes into a zeroed struct of the right type; the path is NUL-terminated.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type as i64 == FUSE_SUPER_MAGIC
    }
}

/// Why a path's statistics could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// Not a FUSE mount, or a FUSE mount that is not numaio's (no such xattr).
    NotNumaio,
    Other(std::io::Error),
}

/// The statistics of the numaio mount whose root is `mp`.
pub fn read(mp: &Path) -> Result<Stats, ReadError> {
    let c = CString::new(mp.as_os_str().as_bytes())
        .map_err(|_| ReadError::Other(std::io::ErrorKind::InvalidInput.into()))?;
    if !is_fuse(&c) {
        return Err(ReadError::NotNumaio);
    }
    let name = CString::new(STATS_XATTR).expect("no NUL in the name");
    let mut buf = vec![0u8; MAX_BYTES];
    // SAFETY: both strings are NUL-terminated; the buffer is valid for buf.len() bytes.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => ReadError::NotNumaio,
            _ => ReadError::Other(e),
        });
    }
    buf.truncate(n as usize);
    serde_json::from_slice(&buf)
        .map_err(|e| ReadError::Other(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// The statistics in Prometheus' text format (for node_exporter's textfile collector or a
/// scrape wrapper): space and I/O per node, I/O per process and node, thread moves. Counters
/// count since the mount started.
pub fn prometheus(s: &Stats) -> String {
    use numaio_numa::prometheus::{labels, Exposition, Format, Labels};
    let node_l = |n: u32| -> Labels {
        labels(&[
            ("mountpoint", s.mountpoint.clone()),
            ("numa_node", n.to_string()),
        ])
    };
    let mut e = Exposition::new("numaio_mount");
    type Field = fn(&numaio_fuse::stats::NodeStats) -> u64;
    let gauges: [(&str, &str, Field); 4] = [
        (
            "capacity_bytes",
            "Capacity of the volume's devices on a node",
            |n| n.capacity_bytes,
        ),
        ("free_bytes", "Free space on a node", |n| n.free_bytes),
        (
            "cache_bytes",
            "Device data cached in the node's slice",
            |n| n.cache_bytes,
        ),
        (
            "misplaced_blocks",
            "Blocks allocated on a node their policy did not choose",
            |n| n.misplaced_blocks,
        ),
    ];
    for (name, help, get) in gauges {
        e.gauge(name, help, s.nodes.iter().map(|n| (node_l(n.node), get(n))));
    }
    let node_io: numaio_numa::NodeIo = s
        .nodes
        .iter()
        .map(|n| {
            (
                n.node,
                numaio_numa::IoBytes::new(n.read_bytes, n.write_bytes),
            )
        })
        .collect();
    e.node_io(
        "io_bytes",
        "Bytes read or written whose data lies on a node",
        &labels(&[("mountpoint", s.mountpoint.as_str())]),
        &node_io,
        &s.node_ids(),
    );
    let mut proc_io = Vec::new();
    for p in &s.processes {
        for x in &p.nodes {
            for (dir, v, local) in [
                ("read", x.read_bytes, x.local_read_bytes),
                ("write", x.write_bytes, x.local_write_bytes),
            ] {
                for (caller, v) in [("local", local), ("remote", v.saturating_sub(local))] {
                    let mut l = node_l(x.node);
                    l.extend(labels(&[
                        ("pid", p.pid.to_string()),
                        ("comm", p.comm.clone()),
                        ("direction", dir.into()),
                        ("caller", caller.into()),
                    ]));
                    proc_io.push((l, v));
                }
            }
        }
    }
    e.counter(
        "process_io_bytes",
        "Bytes a process read or wrote per node of the data; caller=local when it ran on that node",
        proc_io,
    );
    e.counter(
        "thread_moves",
        "Threads moved to their data's node, or left",
        [("moved", s.moves.moved), ("skipped", s.moves.skipped)].map(|(what, v)| {
            (
                labels(&[("mountpoint", s.mountpoint.as_str()), ("outcome", what)]),
                v,
            )
        }),
    );
    e.render(Format::Classic)
}

/// Tofalos's `/proc/PID/numa_io` text: `numa<N>_read_bytes` and `numa<N>_write_bytes` for
/// every node of the mount (zeros for a process that did no I/O there, or for none).
pub fn numa_io_text(s: &Stats, p: Option<&ProcessStats>) -> String {
    p.map(ProcessStats::node_io)
        .unwrap_or_default()
        .numa_io_text(&s.node_ids(), numaio_numa::counters::Fields::ReadWrite)
}

fn io_summary(nodes: &[NodeIo]) -> String {
    if nodes.is_empty() {
        return "-".into();
    }
    nodes
        .iter()
        .map(|x| {
            let total = x.read_bytes.saturating_add(x.write_bytes);
            let local = x.local_read_bytes.saturating_add(x.local_write_bytes);
            format!(
                "N{} read {} write {} ({:.0}% asked from N{})",
                x.node,
                human_bytes(x.read_bytes),
                human_bytes(x.write_bytes),
                if total == 0 {
                    0.0
                } else {
                    100.0 * local as f64 / total as f64
                },
                x.node
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The human form: a per-node table, the moves, and the top processes.
pub fn render(s: &Stats) -> String {
    let mut out = format!(
        "{} (numaio mount, {} FUSE)\n{:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}\n",
        quote(&s.mountpoint),
        s.fuse_mode,
        "node",
        "capacity",
        "used",
        "free",
        "cache",
        "read",
        "written",
        "misplaced"
    );
    for n in &s.nodes {
        out += &format!(
            "{:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}\n",
            n.node,
            human_bytes(n.capacity_bytes),
            human_bytes(n.used_bytes),
            human_bytes(n.free_bytes),
            human_bytes(n.cache_bytes),
            human_bytes(n.read_bytes),
            human_bytes(n.write_bytes),
            n.misplaced_blocks
        );
    }
    out += &match &s.moves.mode {
        Some(m) => format!(
            "move-work {m}: {} threads moved, {} moves skipped\n",
            s.moves.moved, s.moves.skipped
        ),
        None => "move-work off\n".into(),
    };
    if s.processes.is_empty() {
        out += "no process has read or written through the mount yet\n";
    }
    for p in s.processes.iter().take(10) {
        out += &format!(
            "{:>8} {:<16} {}\n",
            p.pid,
            quote(&p.comm),
            io_summary(&p.nodes)
        );
    }
    if s.processes.len() > 10 {
        out += &format!(
            "({} more processes: --json lists up to 50)\n",
            s.processes.len() - 10
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaio_fuse::stats::{MoveStats, NodeStats};

    fn stats() -> Stats {
        Stats {
            mountpoint: "/mnt/x".into(),
            fuse_mode: "classic".into(),
            nodes: vec![
                NodeStats {
                    node: 0,
                    capacity_bytes: 1 << 20,
                    used_bytes: 4096,
                    free_bytes: (1 << 20) - 4096,
                    cache_bytes: 0,
                    read_bytes: 10,
                    write_bytes: 4096,
                    misplaced_blocks: 0,
                },
                NodeStats {
                    node: 1,
                    capacity_bytes: 1 << 20,
                    used_bytes: 0,
                    free_bytes: 1 << 20,
                    cache_bytes: 0,
                    read_bytes: 0,
                    write_bytes: 0,
                    misplaced_blocks: 3,
                },
            ],
            processes: vec![ProcessStats {
                pid: 77,
                comm: "dd".into(),
                nodes: vec![NodeIo {
                    node: 0,
                    read_bytes: 10,
                    write_bytes: 4096,
                    local_read_bytes: 10,
                    local_write_bytes: 0,
                }],
                threads: vec![],
            }],
            moves: MoveStats {
                mode: Some("migrate-thread".into()),
                moved: 2,
                skipped: 1,
            },
        }
    }

    #[test]
    fn numa_io_text_lists_every_node() {
        let s = stats();
        assert_eq!(
            numa_io_text(&s, s.processes.first()),
            "numa0_read_bytes: 10\nnuma0_write_bytes: 4096\nnuma1_read_bytes: 0\nnuma1_write_bytes: 0\n"
        );
        assert!(numa_io_text(&s, None).contains("numa0_write_bytes: 0\n"));
    }

    #[test]
    fn human_form_has_table_moves_and_processes() {
        let out = render(&stats());
        assert!(out.contains("misplaced"), "{out}");
        assert!(out.contains("2 threads moved, 1 moves skipped"), "{out}");
        assert!(out.contains("77 dd"), "{out}");
    }

    #[test]
    fn prometheus_form_has_nodes_processes_and_moves() {
        let out = prometheus(&stats());
        let mp = &stats().mountpoint;
        for want in [
            format!("numaio_mount_io_bytes_total{{mountpoint=\"{mp}\",numa_node=\"0\",direction=\"write\"}} 4096"),
            format!("numaio_mount_process_io_bytes_total{{mountpoint=\"{mp}\",numa_node=\"0\",pid=\"77\",comm=\"dd\",direction=\"read\",caller=\"local\"}} 10"),
            format!("numaio_mount_process_io_bytes_total{{mountpoint=\"{mp}\",numa_node=\"0\",pid=\"77\",comm=\"dd\",direction=\"write\",caller=\"remote\"}} 4096"),
            format!("numaio_mount_thread_moves_total{{mountpoint=\"{mp}\",outcome=\"moved\"}} 2"),
            "# TYPE numaio_mount_free_bytes gauge".to_string(),
            "# TYPE numaio_mount_io_bytes_total counter".to_string(),
        ] {
            assert!(out.contains(&want), "missing {want} in:\n{out}");
        }
        assert!(!out.contains("# EOF"), "classic text format: {out}");
        // A hostile mount point or process name stays inside its label.
        let mut s = stats();
        s.mountpoint = "/mnt/\"x\"\n{y}".into();
        s.processes[0].comm = "a\\b\"} 1\nevil 2".into();
        let out = prometheus(&s);
        assert!(
            out.lines()
                .all(|l| l.starts_with('#') || l.starts_with("numaio_mount_")),
            "{out}"
        );
        assert!(out.contains(r#"comm="a\\b\"} 1\nevil 2""#), "{out}");
        // promtool (Debian package prometheus) finds nothing to lint in it.
        let text = prometheus(&stats());
        let run = || -> std::io::Result<std::process::Output> {
            use std::io::Write;
            let mut c = std::process::Command::new("promtool")
                .args(["check", "metrics"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            c.stdin.take().unwrap().write_all(text.as_bytes())?;
            c.wait_with_output()
        };
        match run() {
            Ok(o) => assert!(
                o.status.success(),
                "promtool check metrics: {}{}\n{text}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => numaio_testkit::skip!("promtool", "cannot run promtool: {e}"),
        }
    }
}
