//! `numaio model`: predict the throughput and latency of a placement on a machine profile.

use crate::output::print_json;
use anyhow::{bail, Context};
use numaio_model::shipped::{self, SHIPPED};
use numaio_model::{predict, MachineMatch, Origin, Placement, Prediction, Sharing, Workload};
use numaio_sys::Topology;
use serde::Serialize;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ModelArgs {
    /// A shipped profile's name (see --profiles) or a profile file from `numaio probe --save`
    /// (default: $NUMAIO_PROFILE or /var/lib/numaio/profile.json).
    #[arg(long, value_name = "NAME|FILE")]
    profile: Option<String>,
    /// List the shipped profiles and exit.
    #[arg(long)]
    profiles: bool,
    /// Where the data sits: single[:NODE], local, fair, stripe:K, weights:F0,F1,..., or replica
    /// (a copy of the file on every node that reads it, as `numaio replicate` makes).
    #[arg(long, default_value = "local")]
    placement: String,
    /// How threads share files: private, medium (disjoint chunks of one file), high (any chunk).
    #[arg(long, default_value = "private")]
    sharing: String,
    /// Threads, spread round robin over the nodes with CPUs.
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// Threads per node instead, in the profile's node order: `10,10,0,0`.
    #[arg(long, value_name = "LIST", conflicts_with = "threads")]
    threads_per_node: Option<String>,
    /// Request size (K/M/G suffixes).
    #[arg(long, default_value = "4K")]
    bs: String,
    /// Fraction of bytes read; the rest is written.
    #[arg(long, default_value_t = 1.0)]
    read_fraction: f64,
    /// Print the predicted ratio of placement A to placement B (same workload otherwise).
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    compare: Option<Vec<String>>,
    /// Print JSON: {"profile","throughput_mb_s","latency_ns","memory_latency_ns","per_node",
    /// "bottlenecks","copies",...}; with --compare {"a","b","ratio"}.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct ProfileInfo {
    name: String,
    origin: Origin,
    nodes: Vec<u32>,
    source: String,
}

#[derive(Serialize)]
struct Answer<'a> {
    profile: &'a str,
    placement: String,
    sharing: Sharing,
    threads_per_node: &'a [u32],
    bs: u64,
    read_fraction: f64,
    #[serde(flatten)]
    prediction: Prediction,
}

pub fn run(a: ModelArgs) -> anyhow::Result<ExitCode> {
    if a.profiles {
        let list: Vec<ProfileInfo> = SHIPPED
            .iter()
            .map(|(n, _)| {
                let p = shipped::shipped(n).expect("shipped profiles are valid");
                ProfileInfo {
                    name: p.name,
                    origin: p.origin,
                    nodes: p.nodes,
                    source: p.source,
                }
            })
            .collect();
        if a.json {
            print_json(&list)?;
        } else {
            for p in list {
                println!(
                    "{:<8} {:<9} {} nodes  {}",
                    p.name,
                    format!("{:?}", p.origin).to_lowercase(),
                    p.nodes.len(),
                    p.source
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let name = a
        .profile
        .clone()
        .unwrap_or_else(|| shipped::local_profile_path().to_string_lossy().into_owned());
    let profile = shipped::load(&name)?;
    let mut warnings = Vec::new();
    if profile.origin == Origin::Measured {
        if let Ok(topo) = Topology::detect() {
            if let MachineMatch::Different(why) = profile.matches(&topo) {
                warnings.push(format!(
                    "profile {name} is from another machine ({}): the prediction is for that machine",
                    why.join("; ")
                ));
            }
        }
    }
    let bs = numaio_sys::topology::parse_size(&a.bs)
        .with_context(|| format!("--bs {:?}: expected a size like 4K or 1M", a.bs))?;
    let sharing: Sharing = a.sharing.parse()?;
    let workload = |placement: &str| -> anyhow::Result<Workload> {
        let placement: Placement = placement.parse()?;
        let mut w = Workload::spread(&profile, a.threads, placement)?;
        if let Some(list) = &a.threads_per_node {
            let v: Result<Vec<u32>, _> = list.split(',').map(|x| x.trim().parse()).collect();
            w.threads_per_node = v.with_context(|| {
                format!("--threads-per-node {list:?}: expected counts like 10,10,0,0")
            })?;
        }
        w.bs = bs;
        w.read_fraction = a.read_fraction;
        w.sharing = sharing;
        Ok(w)
    };
    for w in &warnings {
        eprintln!("numaio model: warning: {w}");
    }
    if let Some(pair) = &a.compare {
        let (wa, wb) = (workload(&pair[0])?, workload(&pair[1])?);
        let (pa, pb) = (predict(&profile, &wa)?, predict(&profile, &wb)?);
        if pb.throughput_mb_s <= 0.0 {
            bail!("placement {} predicts no throughput", pair[1]);
        }
        let ratio = pa.throughput_mb_s / pb.throughput_mb_s;
        if a.json {
            #[derive(Serialize)]
            struct Cmp<'a> {
                a: Answer<'a>,
                b: Answer<'a>,
                ratio: f64,
            }
            print_json(&Cmp {
                a: answer(&profile.name, &wa, pa),
                b: answer(&profile.name, &wb, pb),
                ratio,
            })?;
        } else {
            // Replicas buy their speed with memory: say so when the two differ in copies.
            let copies = if pa.copies != pb.copies {
                format!("; copies of the file {} vs {}", pa.copies, pb.copies)
            } else {
                String::new()
            };
            println!(
                "{}: {} {:.0} MB/s vs {} {:.0} MB/s: {} / {} = {ratio:.3} ({:+.1} %){copies}",
                profile.name,
                pair[0],
                pa.throughput_mb_s,
                pair[1],
                pb.throughput_mb_s,
                pair[0],
                pair[1],
                (ratio - 1.0) * 100.0
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let w = workload(&a.placement)?;
    let pred = predict(&profile, &w)?;
    if a.json {
        print_json(&answer(&profile.name, &w, pred))?;
    } else {
        print!("{}", render(&profile.name, &w, &pred));
    }
    Ok(ExitCode::SUCCESS)
}

fn answer<'a>(profile: &'a str, w: &'a Workload, prediction: Prediction) -> Answer<'a> {
    Answer {
        profile,
        placement: w.placement.to_string(),
        sharing: w.sharing,
        threads_per_node: &w.threads_per_node,
        bs: w.bs,
        read_fraction: w.read_fraction,
        prediction,
    }
}

fn render(profile: &str, w: &Workload, p: &Prediction) -> String {
    let threads: u32 = w.threads_per_node.iter().sum();
    let mut s = format!(
        "{profile}: {threads} thread(s), placement {}, sharing {}, {} B requests, {:.0} % reads\n",
        w.placement,
        format!("{:?}", w.sharing).to_lowercase(),
        w.bs,
        w.read_fraction * 100.0
    );
    s += &format!(
        "throughput {:.0} MB/s, {:.0} ns per request, loaded memory latency {:.1} ns\n",
        p.throughput_mb_s, p.latency_ns, p.memory_latency_ns
    );
    s += &format!(
        "{:<6} {:>8} {:>14} {:>14}  data per node\n",
        "node", "threads", "alone MB/s", "shared MB/s"
    );
    for n in p.per_node.iter().filter(|n| n.threads > 0) {
        let data: Vec<String> = n.data.iter().map(|f| format!("{f:.2}")).collect();
        s += &format!(
            "{:<6} {:>8} {:>14.0} {:>14.0}  {}\n",
            n.node,
            n.threads,
            n.demand_mb_s,
            n.mb_s_per_thread,
            data.join(" ")
        );
    }
    if p.copies > 1 {
        s += &format!(
            "copies of the file: {} (memory: {} x the file's size)\n",
            p.copies, p.copies
        );
    }
    if !p.bottlenecks.is_empty() {
        s += &format!("at capacity: {}\n", p.bottlenecks.join(", "));
    }
    for n in &p.notes {
        s += &format!("note: {n}\n");
    }
    s
}
