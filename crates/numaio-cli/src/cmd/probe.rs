//! `numaio probe`: measure this machine's NUMA costs (MLC-style matrices, loaded latency,
//! page-cache and move_pages costs) next to what the firmware advertises.

use crate::output::print_json;
use anyhow::Context;
use numaio_model::probe::{probe, ProbeOptions};
use numaio_model::{Matrix, Profile};
use numaio_sys::Topology;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// Short runs with fewer repeats (under 10 s on a small machine); numbers are rougher.
    #[arg(long)]
    quick: bool,
    /// Print the profile as JSON: {"nodes","latency_ns","bandwidth_mb_s":{"read","write",
    /// "write_nt","rw_3_1","rw_2_1","rw_1_1","copy"},"loaded_latency","advertised","spread",...}
    #[arg(long)]
    json: bool,
    /// Also write the profile to FILE (what `numaio model --profile FILE`, the daemon's `auto`
    /// policy and `run --near` read; their default is $NUMAIO_PROFILE or
    /// /var/lib/numaio/profile.json).
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Directory for the page-cache test file (default: the temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Measure latency with 4 KiB pages only (includes TLB misses) instead of huge pages.
    #[arg(long)]
    no_huge: bool,
    /// Buffer size per node in MiB instead of a multiple of the last-level cache (for small
    /// or emulated machines: the matrices' shape and the advertised values stay right, the
    /// timings do not measure memory).
    #[arg(long, value_name = "MIB")]
    buffer_mib: Option<usize>,
}

pub fn run(a: ProbeArgs) -> anyhow::Result<ExitCode> {
    let topo = Topology::detect()?;
    let mut opts = ProbeOptions {
        quick: a.quick,
        huge_pages: !a.no_huge,
        buffer_mib: a.buffer_mib,
        ..ProbeOptions::default()
    };
    if let Some(d) = a.dir {
        opts.dir = d;
    }
    let bar = indicatif::ProgressBar::new(1);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    let profile = probe(&topo, &opts, &mut |what, done, total| {
        bar.set_length(u64::from(total));
        bar.set_position(u64::from(done));
        bar.set_message(what.to_string());
    })?;
    bar.finish_and_clear();
    if let Some(path) = &a.save {
        profile
            .save(path)
            .with_context(|| "saving the probe's profile (give a writable path to --save)")?;
    }
    if a.json {
        print_json(&profile)?;
    } else {
        print!("{}", render(&profile));
        if let Some(path) = &a.save {
            println!("profile saved to {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cell(m: &Option<Matrix>, i: usize, j: usize) -> Option<f64> {
    m.as_ref()?.get(i)?.get(j).copied().flatten()
}

fn num(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.prec$}"))
}

fn matrix_table(p: &Profile, title: &str, m: &Option<Matrix>, prec: usize) -> String {
    let Some(_) = m else {
        return format!("{title}: not measured\n");
    };
    let mut s = format!("{title}\n{:<10}", "cpu\\mem");
    for n in &p.nodes {
        s += &format!("{n:>10}");
    }
    s += "\n";
    for (i, n) in p.nodes.iter().enumerate() {
        if !p.has_cpus(i) {
            continue;
        }
        s += &format!("{n:<10}");
        for j in 0..p.nodes.len() {
            s += &format!("{:>10}", num(cell(m, i, j), prec));
        }
        s += "\n";
    }
    s
}

/// The human report: matrices like MLC's, then each pair next to its advertised values.
pub fn render(p: &Profile) -> String {
    let mut s = format!("{} ({})\n\n", p.name, p.source);
    s += &matrix_table(p, "idle latency (ns)", &p.latency_ns, 1);
    let b = &p.bandwidth_mb_s;
    for (name, m) in [
        ("read", &b.read),
        ("write", &b.write),
        ("write, non-temporal", &b.write_nt),
        ("3:1 reads:writes", &b.rw_3_1),
        ("2:1 reads:writes", &b.rw_2_1),
        ("1:1 reads:writes", &b.rw_1_1),
        ("copy", &b.copy),
    ] {
        s += "\n";
        s += &matrix_table(p, &format!("bandwidth, {name} (MB/s)"), m, 0);
    }
    s += "\nloaded latency (one chasing thread, the other CPUs reading)\n";
    if p.loaded_latency.is_empty() {
        s += "  not measured\n";
    }
    for pt in &p.loaded_latency {
        s += &format!(
            "  {:>10.0} MB/s  {:>8.1} ns\n",
            pt.bandwidth_mb_s, pt.latency_ns
        );
    }
    s += "\n";
    s += &matrix_table(
        p,
        "page-cache read(2), 1 MiB requests, one thread (MB/s)",
        &p.pagecache_read_mb_s,
        0,
    );
    if let Some(m) = &p.move_pages {
        s += &format!(
            "\nmove_pages node {} -> {}: {:.2} us/page, {:.0} MB/s{}\n",
            m.from,
            m.to,
            m.us_per_page,
            m.mb_s,
            if m.from == m.to {
                " (same node: the call's own cost)"
            } else {
                ""
            }
        );
    }
    let a = &p.advertised;
    s += &format!(
        "\nmeasured vs advertised (SLIT distance; HMAT from {})\n{:<8} {:>9} {:>7} {:>6} {:>9} {:>7} {:>10} {:>10} {:>7}\n",
        a.hmat_source.as_deref().unwrap_or("-"),
        "cpu>mem",
        "lat ns",
        "x local",
        "SLIT",
        "HMAT ns",
        "ratio",
        "read MB/s",
        "HMAT MB/s",
        "ratio"
    );
    for (i, ni) in p.nodes.iter().enumerate() {
        if !p.has_cpus(i) {
            continue;
        }
        for (j, nj) in p.nodes.iter().enumerate() {
            let lat = p.latency(i, j);
            let rel = match (lat, p.latency(i, i)) {
                (Some(x), Some(l)) if l > 0.0 => Some(x / l),
                _ => None,
            };
            let dist = cell(&a.distance, i, j).map(|d| d / 10.0);
            let hl = cell(&a.latency_ns, i, j);
            // HMAT bandwidth is in MiB/s; the measured is in MB/s.
            let hb = cell(&a.bandwidth_mb_s, i, j).map(|v| v * 1.048576);
            let rb = cell(&b.read, i, j);
            let ratio = |m: Option<f64>, adv: Option<f64>| match (m, adv) {
                (Some(m), Some(a)) if a > 0.0 => Some(m / a),
                _ => None,
            };
            s += &format!(
                "{:<8} {:>9} {:>7} {:>6} {:>9} {:>7} {:>10} {:>10} {:>7}\n",
                format!("{ni}>{nj}"),
                num(lat, 1),
                num(rel, 2),
                num(dist, 1),
                num(hl, 0),
                num(ratio(lat, hl), 2),
                num(rb, 0),
                num(hb, 0),
                num(ratio(rb, hb), 2),
            );
        }
    }
    if !p.spread.is_empty() {
        s += "\nconfidence: largest relative spread (max-min)/median of repeats\n";
        for (k, v) in &p.spread {
            s += &format!("  {k:<16} {:>5.1} %\n", v * 100.0);
        }
    }
    if !p.notes.is_empty() {
        s += "\nskipped or notes\n";
        for n in &p.notes {
            s += &format!("  {n}\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_shows_matrices_advertised_and_skips() {
        let mut p = numaio_model::shipped::shipped("adams").unwrap();
        p.advertised.distance = Some(vec![
            vec![Some(10.0), Some(21.0)],
            vec![Some(21.0), Some(10.0)],
        ]);
        p.notes.push("raw HMAT needs root".into());
        let out = render(&p);
        assert!(out.contains("108.8"), "{out}");
        assert!(out.contains("18405"), "{out}");
        assert!(out.contains("1.63"), "{out}"); // 108.8 / 66.8
        assert!(out.contains("2.1"), "{out}");
        assert!(out.contains("raw HMAT needs root"), "{out}");
        assert!(
            out.contains("bandwidth, write (MB/s): not measured"),
            "{out}"
        );
    }
}
