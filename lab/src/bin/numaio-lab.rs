//! `numaio-lab`: boot a QEMU guest with a NUMA topology and run a scenario in it.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use numaio_lab::{kernel, nodedev, DiskSpec, LabConfig, LabNode, LabTopology, Scenario};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "numaio-lab",
    about = "The numaio NUMA lab: QEMU guests with emulated NUMA nodes"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Boot a guest, run a scenario, print its output and exit with its status.
    Run(Box<RunArgs>),
    /// Download and extract a Debian cloud kernel into the lab cache (no-op when present).
    FetchKernel {
        /// `6.1` (Debian 12, from the host's apt sources) or `7.3` (trixie-backports,
        /// through a private apt state in the lab cache).
        #[arg(long, default_value = "6.1", value_parser = parse_release)]
        release: kernel::GuestKernel,
    },
    /// Print the QEMU node -> guest node mapping and the topology the guest should report.
    Expect(TopoArgs),
}

#[derive(clap::Args)]
struct TopoArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// CPUs per node, comma separated (0 = CPU-less node). Default: 1 each.
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<u32>,
    /// Memory per node in MiB, comma separated. Default: 512 each.
    #[arg(long, value_delimiter = ',')]
    mem: Vec<u64>,
    /// Distance matrix in QEMU node order, rows separated by ';': "10,20;20,10".
    #[arg(long)]
    dist: Option<String>,
    /// Print JSON (run: {"exit_code","output","boot_secs","elapsed_secs"}).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    topo: TopoArgs,
    /// Put a pattern-filled file NAME of SIZE (e.g. data.bin=64M) on an ext4 disk mounted
    /// at /mnt. Repeatable.
    #[arg(long = "disk", value_name = "NAME=SIZE")]
    disk: Vec<String>,
    /// An NVMe disk on QEMU node NODE: a blank one of SIZE (e.g. 1=16M) or an existing
    /// image (e.g. 1=./d.img, kept). The guest lists them in /tmp/node-disks. Repeatable.
    #[arg(long = "node-disk", value_name = "NODE=SIZE|PATH")]
    node_disks: Vec<String>,
    /// Persistent memory on QEMU node NODE: blank of SIZE (e.g. 1=16M) or backed by an
    /// existing file (e.g. 1=./pmem.img, kept). The guest lists them in /tmp/node-pmem.
    #[arg(long = "node-pmem", value_name = "NODE=SIZE|PATH")]
    node_pmem: Vec<String>,
    /// Load this module of the guest kernel's package before the scenario (e.g. dm-mod,
    /// fuse). Repeatable, loaded in order.
    #[arg(long = "module", value_name = "NAME")]
    modules: Vec<String>,
    /// Guest kernel: `6.1` or `7.3` (fetched into the lab cache) or the path of a kernel
    /// image (default: NUMAIO_LAB_KERNEL, else 6.1).
    #[arg(long)]
    kernel: Option<String>,
    /// Give up after this many seconds, boot included.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Try KVM first and fall back to TCG if the guest stays silent.
    #[arg(long)]
    kvm: bool,
    /// Count guest time in instructions (QEMU -icount, one host thread): times measured in
    /// the guest then model instruction counts, not the host's speed.
    #[arg(long, conflicts_with = "kvm")]
    icount: bool,
    /// Copy a host executable (with its libraries) into the guest at the same path.
    #[arg(long = "host-binary", value_name = "PATH")]
    host_binaries: Vec<PathBuf>,
    /// Print boot and total time to stderr.
    #[arg(long)]
    timing: bool,
    /// A busybox sh script to run.
    #[arg(long, conflicts_with = "cmd")]
    script: Option<PathBuf>,
    /// Or a command line to run (after `--`).
    #[arg(last = true)]
    cmd: Vec<String>,
}

fn parse_release(s: &str) -> Result<kernel::GuestKernel, String> {
    kernel::GuestKernel::parse(s)
        .ok_or_else(|| format!("`{s}` is not a lab kernel: give 6.1 or 7.3"))
}

fn topology(t: &TopoArgs) -> anyhow::Result<LabTopology> {
    let n = t.nodes;
    let pick = |v: &[u64], what: &str, default: u64| -> anyhow::Result<Vec<u64>> {
        match v.len() {
            0 => Ok(vec![default; n]),
            l if l == n => Ok(v.to_vec()),
            l => bail!("--{what} lists {l} value(s) but --nodes is {n}"),
        }
    };
    let cpus = pick(
        &t.cpus.iter().map(|&c| c as u64).collect::<Vec<_>>(),
        "cpus",
        1,
    )?;
    let mem = pick(&t.mem, "mem", 512)?;
    let mut topo = LabTopology {
        nodes: cpus
            .iter()
            .zip(&mem)
            .map(|(&c, &m)| LabNode {
                cpus: c as u32,
                mem_mib: m,
            })
            .collect(),
        distances: None,
    };
    if let Some(d) = &t.dist {
        topo = topo.with_distances(LabTopology::parse_distances(d)?);
    }
    topo.validate()?;
    Ok(topo)
}

/// Quotes a word for sh.
fn sh_quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    let topo = topology(&a.topo)?;
    let script = match (&a.script, a.cmd.is_empty()) {
        (Some(p), _) => std::fs::read_to_string(p)
            .with_context(|| format!("reading scenario script {}", p.display()))?,
        (None, false) => {
            a.cmd
                .iter()
                .map(|w| sh_quote(w))
                .collect::<Vec<_>>()
                .join(" ")
                + "\n"
        }
        (None, true) => bail!("give a scenario: --script FILE or -- CMD ARGS..."),
    };
    let mut s = Scenario::new(topo, script).timeout(Duration::from_secs(a.timeout));
    if !a.disk.is_empty() {
        let mut d = DiskSpec::new();
        for f in &a.disk {
            d = d.file(DiskSpec::parse_file_arg(f)?);
        }
        s = s.disk(d);
    }
    for arg in &a.node_disks {
        let (node, backing) = nodedev::parse_node_arg(arg)?;
        s.node_disks.push(numaio_lab::NodeDisk { node, backing });
    }
    for arg in &a.node_pmem {
        let (node, backing) = nodedev::parse_node_arg(arg)?;
        s.node_pmem.push(numaio_lab::NodePmem { node, backing });
    }
    for m in &a.modules {
        s = s.kernel_module(m);
    }
    for b in a.host_binaries {
        s = s.host_binary(b);
    }
    if a.icount {
        s = s.icount();
    }
    let mut cfg = LabConfig::from_env();
    match a
        .kernel
        .as_deref()
        .map(|k| (k, kernel::GuestKernel::parse(k)))
    {
        Some((_, Some(release))) => s = s.kernel(release),
        Some((path, None)) => cfg.kernel = Some(PathBuf::from(path)),
        None => {}
    }
    if a.kvm {
        cfg.accel = numaio_lab::Accel::KvmOrTcg;
    }
    let out = cfg.run(&s)?;
    if a.topo.json {
        println!(
            "{}",
            serde_json::json!({
                "exit_code": out.exit_code,
                "output": out.output,
                "boot_secs": out.boot_time.as_secs_f64(),
                "elapsed_secs": out.elapsed.as_secs_f64(),
            })
        );
        return Ok(ExitCode::from(out.exit_code.clamp(0, 255) as u8));
    }
    print!("{}", out.output);
    if !out.output.is_empty() && !out.output.ends_with('\n') {
        println!();
    }
    if a.timing {
        eprintln!(
            "numaio-lab: boot {:.1} s, total {:.1} s, exit status {}",
            out.boot_time.as_secs_f64(),
            out.elapsed.as_secs_f64(),
            out.exit_code
        );
    }
    Ok(ExitCode::from(out.exit_code.clamp(0, 255) as u8))
}

fn expect(t: &TopoArgs) -> anyhow::Result<ExitCode> {
    let topo = topology(t)?;
    let exp = topo.expected_guest();
    if t.json {
        let nodes: Vec<_> = exp
            .iter()
            .map(|n| {
                serde_json::json!({
                    "id": n.id,
                    "qemu_id": n.qemu_id,
                    "cpus": n.cpus,
                    "mem_backend_bytes": n.mem_mib << 20,
                    "mem_total_min_bytes": n.mem_total_min_bytes(),
                    "distances": n.distances.iter().map(|(k, v)| (k.to_string(), v)).collect::<std::collections::BTreeMap<_, _>>(),
                })
            })
            .collect();
        println!("{}", serde_json::json!({ "nodes": nodes }));
    } else {
        println!("QEMU: {}", topo.qemu_args().join(" "));
        println!(
            "{:<6} {:<6} {:<12} {:>8}  distances",
            "guest", "qemu", "cpus", "mem MiB"
        );
        for n in &exp {
            let cpus = if n.cpus.is_empty() {
                "-".to_string()
            } else {
                numaio_sys::cpulist::format(&n.cpus)
            };
            let d: Vec<String> = n.distances.values().map(|v| v.to_string()).collect();
            println!(
                "{:<6} {:<6} {:<12} {:>8}  {}",
                n.id,
                n.qemu_id,
                cpus,
                n.mem_mib,
                d.join(" ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(a) => run(*a),
        Cmd::Expect(t) => expect(&t),
        Cmd::FetchKernel { release } => kernel::fetch(&numaio_lab::cache_dir(), release)
            .map(|k| {
                println!("{}", k.vmlinuz.display());
                ExitCode::SUCCESS
            })
            .map_err(Into::into),
    };
    match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("numaio-lab: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn topology_from_flags() {
        let cli = Cli::parse_from([
            "numaio-lab",
            "run",
            "--nodes",
            "3",
            "--cpus",
            "1,0,2",
            "--mem",
            "256,128,128",
            "--",
            "true",
        ]);
        let Cmd::Run(a) = cli.cmd else {
            panic!("not run")
        };
        let t = topology(&a.topo).unwrap();
        assert_eq!(t.guest_node_ids(), vec![0, 2, 1]);
        let cli = Cli::parse_from([
            "numaio-lab",
            "run",
            "--nodes",
            "3",
            "--cpus",
            "1,1",
            "--",
            "true",
        ]);
        let Cmd::Run(a) = cli.cmd else {
            panic!("not run")
        };
        assert!(topology(&a.topo).is_err());
    }

    #[test]
    fn commands_are_quoted_for_sh() {
        assert_eq!(sh_quote("numaio"), "numaio");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_quote(""), "''");
    }
}
