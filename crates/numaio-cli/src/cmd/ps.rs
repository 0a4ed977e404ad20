//! `numaio ps`: processes' file I/O locality per node.
//!
//! Samples `/proc` twice, `--interval` seconds apart, and shows for each process that did
//! I/O (or each PID given): the nodes its threads ran on, allowed CPUs and memory nodes,
//! memory per node, read/write rates, its open and mapped files with their cache per node,
//! the locality and the bytes read and written per node of the data during the interval:
//! counted by the eBPF collector or a numaio mount where one can ([`numaio_proc::io_source`]),
//! else estimated.

use crate::output::{human_bytes, print_json, quote};
use numaio_proc::io_source::{NumaIoSource, SourceChoice};
use numaio_proc::sample::{FileView, MountNs, ProcessView};
use numaio_proc::{PageCache, ScanOptions, Scanner};
use numaio_sys::{cpulist, Topology};
use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct PsArgs {
    /// Processes to show (default: every process that did I/O during the interval).
    #[arg(value_name = "PID", value_parser = crate::args::pid)]
    pids: Vec<i32>,
    /// Seconds between the two samples that rates and read estimates come from.
    #[arg(long, default_value_t = 1.0, value_name = "SECS", value_parser = crate::args::secs)]
    interval: f64,
    /// Keep sampling every SECS seconds until interrupted; `numa_io_total` accumulates.
    #[arg(long, value_name = "SECS", value_parser = crate::args::secs)]
    watch: Option<f64>,
    /// Stop --watch after N rounds.
    #[arg(long, value_name = "N", value_parser = crate::args::positive)]
    count: Option<u64>,
    /// Also list processes that did no I/O.
    #[arg(long)]
    all: bool,
    /// Print JSON: {"interval_secs","numa_io_source":"ebpf"|"mount"|"estimate",
    /// "numa_io_fallback_reason":str|null,"processes":[{pid,comm,thread_nodes,cpus_allowed,
    /// mems_allowed,memory_per_node,read_bytes_per_sec,files:[{path,dev,ino,nodes,...}],
    /// locality,numa_io:{"numa<N>_read_bytes":u64,...},numa_io_source,numa_io_exact:bool,
    /// local_bytes?,remote_bytes?,numa_io_mount?,...}]}; with --watch one line per round.
    /// numa_io holds the bytes of the interval by node of the data: counted (numa_io_exact
    /// true; numa<N>_read_bytes and numa<N>_write_bytes) where numa_io_source is ebpf (every
    /// file system's page cache) or mount (numa_io_mount names the numaio mount), else
    /// estimated from residency and read rate (reads only). local_bytes and remote_bytes
    /// ({read_bytes,write_bytes}) split the counted bytes by whether the data's node was the
    /// node of the CPU that asked. The top-level numa_io_source is the best source in use,
    /// numa_io_fallback_reason why eBPF is not. numa_io_exact is false, with the reason in
    /// numa_io_incomplete (per process and at the top), for an interval in which the kernel
    /// skipped runs of the collector's programs or a full map dropped events; numa_io_missed
    /// ({counted_runs,program_runs:{prog:n},io_events,cache_events}, null without eBPF) has
    /// the interval's counts. Processes whose /proc files did not answer
    /// within --read-timeout are left out of processes and listed in
    /// unresponsive:[{pid,comm?,file,error}].
    #[arg(long)]
    json: bool,
    #[arg(long, default_value = "auto", value_name = "SOURCE", help = crate::cmd::sources::HELP,
          value_parser = crate::cmd::sources::parser())]
    source: SourceChoice,
    /// Seconds to wait for one process's stat and io (its other files: 10 times as long);
    /// a process past it is reported unresponsive (stuck in the kernel) and skipped.
    #[arg(long, default_value_t = 0.2, value_name = "SECS", value_parser = crate::args::secs)]
    read_timeout: f64,
    /// Test aid: reads of this process's /proc files block as if it were stuck.
    #[arg(long, value_name = "PID", value_parser = crate::args::pid, hide = true)]
    test_stall_pid: Vec<i32>,
}

pub fn run(a: PsArgs) -> anyhow::Result<ExitCode> {
    let period = a.watch.unwrap_or(a.interval);
    if !(period > 0.0 && period <= crate::args::MAX_SECS) {
        crate::usage_bail!(
            "--interval/--watch must be seconds in (0, {}]",
            crate::args::MAX_SECS
        );
    }
    let limit = Duration::from_secs_f64(a.read_timeout);
    for &p in &a.pids {
        match numaio_procfs::bounded::global().read_stat(p, limit) {
            // A process that does not answer exists; the scan reports it.
            Err(e) if !e.is_unresponsive() => crate::usage_bail!(
                "no process with pid {p} (it may have exited); list processes with `numaio ps --all`"
            ),
            _ => {}
        }
    }
    let topo = Topology::detect()?;
    let opts = ScanOptions {
        pids: (!a.pids.is_empty()).then(|| a.pids.clone()),
        all: a.all || !a.pids.is_empty(),
        deep_all: true,
        read_limit: limit,
        stall_pids: a.test_stall_pid.clone(),
        ..Default::default()
    };
    let cache = PageCache;
    let mut sources = crate::cmd::sources::open(a.source)?;
    if !a.json {
        crate::outln!("{}", crate::cmd::sources::describe(&sources))?;
    }
    let nodes = topo.node_ids();
    let mut sc = Scanner::new();
    sc.scan(&opts, &topo, &cache);
    sources.begin_interval();
    let mut totals: HashMap<(i32, u64), BTreeMap<u32, u64>> = HashMap::new();
    let mut round = 0u64;
    loop {
        std::thread::sleep(Duration::from_secs_f64(period));
        let res = sc.scan(&opts, &topo, &cache);
        let mut views = res.views;
        sources.apply(&mut views, &nodes);
        views.sort_by(|x, y| y.read_bytes.cmp(&x.read_bytes).then(x.pid.cmp(&y.pid)));
        let exact: HashMap<i32, String> = views
            .iter()
            .filter_map(|v| {
                let mp = sources.mounts_of(v.pid).first()?;
                Some((v.pid, mp.display().to_string()))
            })
            .collect();
        round += 1;
        for u in &res.unresponsive {
            crate::warnln!("warning: {}", u.error);
        }
        if a.watch.is_some() {
            for v in &views {
                let t = totals.entry((v.pid, v.start_ticks)).or_default();
                for (&n, &b) in &v.numa_read_bytes {
                    *t.entry(n).or_insert(0) += b;
                }
            }
        }
        if a.json {
            let procs: Vec<serde_json::Value> = views
                .iter()
                .map(|v| -> anyhow::Result<serde_json::Value> {
                    let mut j = serde_json::to_value(v)?;
                    if let Some(o) = j.as_object_mut() {
                        o.insert("numa_io_exact".into(), serde_json::json!(v.numa_io_exact()));
                        if let Some(mp) = exact.get(&v.pid) {
                            o.insert("numa_io_mount".into(), serde_json::json!(mp));
                        }
                    }
                    if let (Some(o), Some(t)) =
                        (j.as_object_mut(), totals.get(&(v.pid, v.start_ticks)))
                    {
                        let tot: BTreeMap<String, u64> = topo
                            .node_ids()
                            .iter()
                            .map(|n| {
                                (
                                    format!("numa{n}_read_bytes"),
                                    t.get(n).copied().unwrap_or(0),
                                )
                            })
                            .collect();
                        o.insert("numa_io_total".into(), serde_json::json!(tot));
                    }
                    Ok(j)
                })
                .collect::<anyhow::Result<_>>()?;
            print_json(&serde_json::json!({
                "interval_secs": period,
                "numa_io_source": sources.primary(),
                "numa_io_fallback_reason": sources.fallback_reason(),
                "numa_io_incomplete": sources.incomplete_reason(),
                "numa_io_missed": sources.last_delta().map(|d| &d.missed),
                "scanned": res.scanned,
                "unreadable": res.unreadable,
                "unresponsive": res.unresponsive,
                "processes": procs,
            }))?;
        } else {
            crate::out!(
                "{}",
                render_with(&views, &topo, period, res.unreadable, &exact)
            )?;
            if let Some(r) = sources.incomplete_reason() {
                crate::outln!("not exact: {r}")?;
            }
        }
        if a.watch.is_none() || a.count.is_some_and(|c| round >= c) {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn nodes_bytes(m: &BTreeMap<u32, u64>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(n, b)| format!("N{n}={}", human_bytes(*b)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The marker after a path relative to another mount namespace.
fn ns_marker(f: &FileView) -> String {
    match (f.mount_ns, f.mount_ns_inode) {
        (MountNs::Foreign, Some(i)) => format!(" [mnt:{i}]"),
        (MountNs::Foreign, None) => " [mnt:other]".into(),
        _ => String::new(),
    }
}

#[cfg(test)]
fn render(views: &[ProcessView], topo: &Topology, secs: f64, unreadable: usize) -> String {
    render_with(views, topo, secs, unreadable, &HashMap::new())
}

fn render_with(
    views: &[ProcessView],
    topo: &Topology,
    secs: f64,
    unreadable: usize,
    exact: &HashMap<i32, String>,
) -> String {
    let mut s = String::new();
    let mut foreign = false;
    if views.is_empty() {
        s += &format!(
            "no process did file I/O in the last {secs} s (use --all to list every process)\n"
        );
    }
    for v in views {
        foreign |= v.mount_ns == MountNs::Foreign;
        let ran: Vec<String> = v
            .thread_nodes
            .iter()
            .map(|(n, c)| format!("{c} on node {n}"))
            .collect();
        s += &format!(
            "{} {}  threads: {}  cpus allowed {}  mems allowed {}{}{}\n",
            v.pid,
            quote(&v.comm),
            if ran.is_empty() {
                "-".into()
            } else {
                ran.join(", ")
            },
            cpulist::format(&v.cpus_allowed),
            cpulist::format(&v.mems_allowed),
            if v.pinned { "  (pinned)" } else { "" },
            match (v.mount_ns, v.mount_ns_inode) {
                (MountNs::Foreign, Some(i)) => format!("  mount ns [mnt:{i}]"),
                _ => String::new(),
            }
        );
        s += &format!(
            "    memory {} (rss {})  read {}/s  write {}/s  {:.0} % cpu",
            nodes_bytes(&v.memory_per_node),
            human_bytes(v.rss_bytes),
            human_bytes(v.read_bytes_per_sec as u64),
            human_bytes(v.write_bytes_per_sec as u64),
            v.cpu_percent
        );
        match (v.locality, v.numa_io_source) {
            (Some(l), src) => s += &format!("  locality {:.0} % ({src})\n", l * 100.0),
            (None, NumaIoSource::Estimate) => s += "  locality unknown (no cached file data)\n",
            (None, _) => s += "  locality unknown (no reads counted)\n",
        }
        if v.numa_io_source.is_exact() {
            s += &format!(
                "    numa_io exact ({}{}) for the interval:\n",
                v.numa_io_source,
                match exact.get(&v.pid) {
                    Some(mp) => format!(", numaio mount at {}", quote(mp)),
                    None => String::new(),
                }
            );
            for (k, b) in &v.numa_io {
                s += &format!("    {k}: {b}\n");
            }
            if let (Some(l), Some(r)) = (v.local_bytes, v.remote_bytes) {
                s += &format!(
                    "    local (data on the CPU's node): read {} write {}  remote: read {} write {}\n",
                    human_bytes(l.read_bytes),
                    human_bytes(l.write_bytes),
                    human_bytes(r.read_bytes),
                    human_bytes(r.write_bytes)
                );
            }
        } else {
            for n in topo.node_ids() {
                s += &format!(
                    "    numa{n}_read_bytes: {}\n",
                    v.numa_read_bytes.get(&n).copied().unwrap_or(0)
                );
            }
        }
        for f in &v.files {
            match &f.error {
                Some(e) => {
                    s += &format!(
                        "    {:<6} {}{}  ({})\n",
                        f.via,
                        quote(&f.path),
                        ns_marker(f),
                        crate::output::escape_message(e)
                    )
                }
                None => {
                    s += &format!(
                        "    {:<6} {}{}  {} of {} cached: {}\n",
                        f.via,
                        quote(&f.path),
                        ns_marker(f),
                        human_bytes(f.cached_bytes),
                        human_bytes(f.size_bytes),
                        nodes_bytes(&f.nodes)
                    )
                }
            }
        }
        for e in &v.errors {
            s += &format!("    note: {}\n", crate::output::escape_message(e));
        }
    }
    if foreign {
        s += "([mnt:N]: the path is inside another mount namespace, a container or a service \
              with PrivateTmp=; the file shown is the process's own, read through /proc/PID)\n";
    }
    if unreadable > 0 {
        s += &format!("({unreadable} process(es) could not be read: run as root to see them)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_numa_io_files_and_locality() {
        let topo = Topology::synthetic("n0=0-1@1G n1=2-3@1G").unwrap();
        let out = render(&[sample_view()], &topo, 1.0, 2);
        assert!(out.contains("77 reader  threads: 1 on node 0"), "{out}");
        assert!(out.contains("numa0_read_bytes: 0\n"), "{out}");
        assert!(out.contains("numa1_read_bytes: 1048576\n"), "{out}");
        assert!(out.contains("locality 0 % (estimate)"), "{out}");
        assert!(
            out.contains("/data/f  1.0 MiB of 2.0 MiB cached: N1=1.0 MiB"),
            "{out}"
        );
        assert!(out.contains("2 process(es) could not be read"), "{out}");
        assert!(render(&[], &topo, 1.0, 0).contains("no process did file I/O"));
        assert!(!out.contains("[mnt:"), "{out}");
    }

    #[test]
    fn foreign_namespace_is_marked() {
        let topo = Topology::synthetic("n0=0-1@1G n1=2-3@1G").unwrap();
        let mut v = sample_view();
        v.mount_ns = MountNs::Foreign;
        v.mount_ns_inode = Some(4026532177);
        v.files[0].mount_ns = MountNs::Foreign;
        v.files[0].mount_ns_inode = Some(4026532177);
        let out = render(&[v], &topo, 1.0, 0);
        assert!(out.contains("mount ns [mnt:4026532177]"), "{out}");
        assert!(
            out.contains("/data/f [mnt:4026532177]  1.0 MiB of 2.0 MiB cached"),
            "{out}"
        );
        assert!(out.contains("another mount namespace"), "{out}");
    }

    #[test]
    fn hostile_names_are_quoted() {
        let topo = Topology::synthetic("n0=0-1@1G").unwrap();
        let mut v = sample_view();
        v.comm = "x\u{1b}]0;pwned\u{7}".into();
        v.files[0].path = "/data/f\n    fd     /etc/shadow  0 B of 0 B cached: -".into();
        let out = render(&[v], &topo, 1.0, 0);
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out}");
        assert!(out.contains("77 $'x\\033]0;pwned\\a'  threads"), "{out}");
        assert!(
            !out.lines()
                .any(|l| l.contains("fd") && l.contains("shadow") && !l.contains("$'")),
            "{out}"
        );
    }

    #[test]
    fn exact_counts_are_shown_as_counted() {
        use numaio_numa::IoBytes;
        use numaio_proc::io_source::ExactIo;
        let topo = Topology::synthetic("n0=0-1@1G n1=2-3@1G").unwrap();
        let mut v = sample_view();
        let io = ExactIo {
            by_data_node: [(1, IoBytes::new(1 << 20, 4096))].into_iter().collect(),
            local: Some(IoBytes::new(0, 0)),
            remote: Some(IoBytes::new(1 << 20, 4096)),
        };
        v.set_exact(NumaIoSource::Ebpf, &io, &[0, 1]);
        let out = render(&[v.clone()], &topo, 1.0, 0);
        assert!(out.contains("locality 0 % (ebpf)"), "{out}");
        assert!(
            out.contains("numa_io exact (ebpf) for the interval:"),
            "{out}"
        );
        assert!(out.contains("numa1_write_bytes: 4096\n"), "{out}");
        assert!(
            out.contains("local (data on the CPU's node): read 0 B write 0 B  remote: read 1.0 MiB write 4.0 KiB"),
            "{out}"
        );
        v.set_exact(NumaIoSource::Mount, &io, &[0, 1]);
        let mounts = HashMap::from([(77, "/mnt/numaio".to_string())]);
        let out = render_with(&[v], &topo, 1.0, 0, &mounts);
        assert!(
            out.contains("numa_io exact (mount, numaio mount at /mnt/numaio) for the interval:"),
            "{out}"
        );
    }

    fn sample_view() -> ProcessView {
        use numaio_proc::sample::FileView;
        ProcessView {
            pid: 77,
            start_ticks: 1,
            comm: "reader".into(),
            uid: 0,
            cgroup: "/".into(),
            mount_ns: Default::default(),
            mount_ns_inode: None,
            threads: 1,
            thread_nodes: [(0, 1)].into_iter().collect(),
            main_node: Some(0),
            cpus_allowed: vec![0, 1, 2, 3],
            mems_allowed: vec![0, 1],
            cpuset_cpus: vec![0, 1, 2, 3],
            pinned: false,
            memory_per_node: [(0, 4096)].into_iter().collect(),
            rss_bytes: 4096,
            interval_secs: 1.0,
            read_bytes: 1 << 20,
            write_bytes: 0,
            read_bytes_per_sec: (1 << 20) as f64,
            write_bytes_per_sec: 0.0,
            avg_read_bytes: 1 << 20,
            cpu_percent: 10.0,
            files: vec![FileView {
                path: "/data/f".into(),
                via: "fd".into(),
                size_bytes: 2 << 20,
                cached_bytes: 1 << 20,
                nodes: [(1, 1 << 20)].into_iter().collect(),
                advanced_bytes: 1 << 20,
                write_only: false,
                error: None,
                ..Default::default()
            }],
            read_distribution: [(1, 1.0)].into_iter().collect(),
            locality: Some(0.0),
            numa_io: BTreeMap::new(),
            numa_read_bytes: [(1, 1 << 20)].into_iter().collect(),
            errors: vec![],
            ..Default::default()
        }
    }
}
