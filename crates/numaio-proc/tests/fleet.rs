//! The daemon's metrics as a fleet sees them: `promtool check metrics` on every exposition
//! (HTTP and textfile), and the Grafana dashboard in `dist/grafana/` naming only metrics the
//! daemon really exports.

use numaio_numa::IoBytes;
use numaio_proc::io_source::{ExactIo, NumaIoSource};
use numaio_proc::metrics::{label, Format, Metrics};
use numaio_proc::replicas::NodeCounts;
use numaio_proc::sample::FileView;
use numaio_proc::ProcessView;
use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

/// Metrics with every family holding samples: per-process and per-file series on, counted
/// and estimated processes, replicas, actions.
fn full_metrics() -> Metrics {
    let m = Metrics::with_top(5, 5);
    m.actions.get_or_create(&label("kind", "follow-data")).inc();
    m.decisions.get_or_create(&label("verdict", "act")).inc();
    m.bytes_moved
        .get_or_create(&label("kind", "page-cache"))
        .inc_by(4096);
    m.intervals.inc();
    m.interval_cpu_seconds.set(0.01);
    m.interval_duration_seconds.set(0.02);
    let mut views = Vec::new();
    for pid in 10..20 {
        let mut v = ProcessView {
            pid,
            comm: format!("reader{pid}"),
            thread_nodes: [(0, 1)].into_iter().collect(),
            main_node: Some(0),
            interval_secs: 1.0,
            read_bytes_per_sec: pid as f64 * 1e6,
            locality: Some(0.5),
            files: vec![FileView {
                path: format!("/srv/data/{pid}.db").into(),
                ino: pid as u64,
                size_bytes: 1 << 20,
                cached_bytes: 1 << 20,
                nodes: [(0, 1 << 19), (1, 1 << 19)].into_iter().collect(),
                advanced_bytes: 4096,
                ..Default::default()
            }],
            ..Default::default()
        };
        if pid % 2 == 0 {
            v.set_exact(
                NumaIoSource::Ebpf,
                &ExactIo {
                    by_data_node: [(0, IoBytes::new(1000, 10)), (1, IoBytes::new(3000, 0))]
                        .into_iter()
                        .collect(),
                    local: Some(IoBytes::new(1000, 10)),
                    remote: Some(IoBytes::new(3000, 0)),
                },
                &[0, 1],
            );
        }
        views.push(v);
    }
    m.observe_processes(200, &views);
    m.observe_io(&[0, 1], &views);
    let counts = NodeCounts {
        made: [(0, 1)].into_iter().collect(),
        held: [(0, (1, 1 << 20))].into_iter().collect(),
        ..Default::default()
    };
    m.observe_replicas(&[0, 1], &counts);
    m
}

/// `promtool check metrics` on `text`: Ok(()) when it finds nothing, Err(its complaints)
/// otherwise; None when promtool is not installed.
fn promtool(text: &str) -> Option<Result<(), String>> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

#[test]
fn promtool_accepts_every_exposition() {
    let m = full_metrics();
    let served = m.render_as(Format::Classic);
    let textfile = m.render_textfile();
    // Opted-in series are really there, so promtool sees every family.
    for want in [
        "numaio_process_read_bytes_per_second{",
        "numaio_file_cached_bytes{",
        "numaio_io_bytes_total{numa_node=",
        "numaio_processes{numa_io_source=\"ebpf\"} 5",
    ] {
        assert!(served.contains(want), "{want} missing:\n{served}");
    }
    for (what, text) in [("HTTP", &served), ("textfile", &textfile)] {
        match promtool(text) {
            None => numaio_testkit::skip!("promtool", "install the Debian package prometheus"),
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("promtool check metrics on the {what} exposition:\n{e}\n{text}"),
        }
    }
    // The check itself catches what it should: a counter without _total.
    let bad = "# HELP numaio_bad Bad.\n# TYPE numaio_bad counter\nnumaio_bad 1\n";
    assert!(promtool(bad).is_some_and(|r| r.is_err()));
}

/// Metric names in a PromQL expression: identifiers outside label matchers, strings,
/// ranges and grouping clauses that are not functions, aggregations or keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Strings, label matchers and ranges first.
    let mut flat = String::new();
    let mut depth = 0usize;
    let mut in_str = false;
    for c in expr.chars() {
        match c {
            '"' => in_str = !in_str,
            _ if in_str => {}
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => flat.push(c),
            _ => {}
        }
        if c == '"' && depth == 0 {
            flat.push(' ');
        }
    }
    let chars: Vec<char> = flat.chars().collect();
    let mut out = BTreeSet::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                skip_group = true;
                continue;
            }
            // Keywords, and aggregations that may come before their `by (...)`.
            if matches!(
                word.as_str(),
                "and"
                    | "or"
                    | "unless"
                    | "bool"
                    | "offset"
                    | "sum"
                    | "min"
                    | "max"
                    | "avg"
                    | "count"
                    | "group"
                    | "stddev"
                    | "stdvar"
                    | "topk"
                    | "bottomk"
                    | "quantile"
                    | "count_values"
            ) {
                continue;
            }
            if next == Some(&'(') {
                continue;
            }
            out.insert(word);
        } else if c == '(' && skip_group {
            // The label list of by (...) and friends.
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            skip_group = false;
            i += 1;
        } else {
            if !c.is_whitespace() {
                skip_group = false;
            }
            i += 1;
        }
    }
    out
}

#[test]
fn metric_name_extraction() {
    let names = metric_names(
        r#"sum by (instance, numa_node) (rate(numaio_io_bytes_total{instance=~"$instance",locality="remote"}[$__rate_interval])) / 1 - numaio_x{a="b{c}"}"#,
    );
    assert_eq!(
        names,
        ["numaio_io_bytes_total", "numaio_x"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(
        metric_names("topk(10, numaio_process_read_bytes_per_second)"),
        ["numaio_process_read_bytes_per_second".to_string()]
            .into_iter()
            .collect()
    );
}

/// Metrics the dashboard may take from node_exporter rather than the daemon: per-node page
/// cache comes from its meminfo_numa collector (docs/daemon.md, "Fleet").
const NODE_EXPORTER: &[&str] = &["node_memory_numa_FilePages"];

#[test]
fn dashboard_names_only_exported_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/grafana/numaio-dashboard.json"
    );
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let m = full_metrics();
    // Families in both expositions, with the suffixes samples carry.
    let mut exported = BTreeSet::new();
    for text in [m.render_as(Format::Classic), m.render_textfile()] {
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            exported.insert(line.split(['{', ' ']).next().unwrap().to_string());
        }
    }
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push((
                p["title"].as_str().unwrap_or("?").to_string(),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut used = BTreeSet::new();
    for (title, expr) in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "panel {title:?}: no metric in {expr}");
        for n in names {
            assert!(
                exported.contains(&n) || NODE_EXPORTER.contains(&n.as_str()),
                "panel {title:?} uses {n}, which the daemon does not export: {expr}"
            );
            used.insert(n);
        }
    }
    // The variable's query too.
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(def) = v["definition"].as_str() {
            let inner = def
                .strip_prefix("label_values(")
                .and_then(|r| r.split([',', ')']).next())
                .unwrap();
            assert!(exported.contains(inner.trim()), "{def}");
        }
    }
    // What the dashboard is for: per-node I/O, remote share, top processes and files,
    // actions.
    for want in [
        "numaio_io_bytes_total",
        "numaio_io_locality_bytes_total",
        "numaio_process_read_bytes_per_second",
        "numaio_file_cached_bytes",
        "numaio_actions_total",
        "node_memory_numa_FilePages",
    ] {
        assert!(used.contains(want), "the dashboard does not show {want}");
    }
}

/// The configuration the Kubernetes DaemonSet ships in its ConfigMap is one the daemon takes.
#[test]
fn daemonset_config_parses() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/kubernetes/numaio-daemonset.yaml"
    );
    let yaml = std::fs::read_to_string(path).unwrap();
    // The block scalar under `numaio.toml: |`, indented four spaces.
    let toml: String = yaml
        .lines()
        .skip_while(|l| l.trim() != "numaio.toml: |")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    assert!(toml.contains("textfile_dir"), "{toml}");
    let c = numaio_proc::config::Config::from_toml(&toml, std::path::Path::new(path)).unwrap();
    assert!(c.dry_run && c.collector.ebpf);
    assert_eq!(
        c.textfile_dir.as_deref(),
        Some("/var/lib/numaio/textfile"),
        "the textfile goes where the DaemonSet mounts node_exporter's directory"
    );
    assert!(yaml.contains("mountPath: /var/lib/numaio/textfile"));
    assert!(
        c.metrics.is_none(),
        "no endpoint: nothing could reach its loopback"
    );
}
