//! The Prometheus text exposition, in its two formats, for every numaio metric.
//!
//! Encoding is prometheus-client's (it writes the `# HELP`/`# TYPE` lines and escapes label
//! values: a mount point or a process name holding `"`, `\` or a newline cannot break the
//! text). [`encode`] renders a registry in either [`Format`]; [`Exposition`] builds the
//! registry of a snapshot (counters read once, as the engine's accounting and a mount's
//! statistics are) from plain values, so no caller handles prometheus-client's metric types.

use prometheus_client::encoding::text::encode as encode_openmetrics;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

pub use prometheus_client;

/// Label pairs of one sample, in the order they are written.
pub type Labels = Vec<(String, String)>;

/// Content type of OpenMetrics 1.0 text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of Prometheus' classic text format 0.0.4.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The two text formats metrics are rendered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (ends with `# EOF`; counter families are named without `_total`).
    OpenMetrics,
    /// Prometheus' classic text format 0.0.4, which node_exporter's textfile collector reads.
    Classic,
}

impl Format {
    /// The format a client asks for with its `Accept` header (OpenMetrics when it names
    /// `application/openmetrics-text`, as Prometheus does).
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Classic,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Classic => CLASSIC_CONTENT_TYPE,
        }
    }
}

/// One label pair.
pub fn label(k: &str, v: impl ToString) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

/// Labels from `(name, value)` pairs.
pub fn labels<V: ToString>(pairs: &[(&str, V)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Renders every metric of `registry` in `format`. An encoding error (only a broken
/// collector can cause one) ends the text early with a comment saying so.
pub fn encode(registry: &Registry, format: Format) -> String {
    let mut s = String::new();
    if let Err(e) = encode_openmetrics(&mut s, registry) {
        s.push_str(&format!("# encoding error: {e}\n"));
    }
    match format {
        Format::OpenMetrics => s,
        Format::Classic => openmetrics_to_classic(&s),
    }
}

/// Rewrites prometheus-client's OpenMetrics text into the classic format: a counter family's
/// `# HELP`/`# TYPE` lines name its `_total` sample, `# UNIT` and `# EOF` are dropped, and an
/// info family becomes a gauge. Samples and label escaping are the same in both formats.
pub fn openmetrics_to_classic(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut push = |line: &str| {
        out.push_str(line);
        out.push('\n');
    };
    let mut help: Option<&str> = None;
    for line in text.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some(h) = help.replace(rest) {
                push(&format!("# HELP {h}"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
            let (name, ty) = match ty {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_string(), ty),
                _ => (name.to_string(), "untyped"),
            };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                push(&format!("# HELP {name} {text}"));
            }
            push(&format!("# TYPE {name} {ty}"));
            continue;
        }
        if let Some(h) = help.take() {
            push(&format!("# HELP {h}"));
        }
        push(line);
    }
    out
}

/// The metric families of one snapshot, each written with its help text and labelled
/// samples, then rendered with [`Exposition::render`].
///
/// A family whose only sample has no labels is written as a plain metric (`name 1`).
#[derive(Debug, Default)]
pub struct Exposition {
    registry: Registry,
}

impl Exposition {
    /// Families named `PREFIX_NAME` (no prefix when `prefix` is empty).
    pub fn new(prefix: &str) -> Self {
        Self {
            registry: if prefix.is_empty() {
                Registry::default()
            } else {
                Registry::with_prefix(prefix)
            },
        }
    }

    /// A counter family (named `NAME_total` in the output). Samples with the same labels add
    /// up.
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels, u64)>,
    ) -> &mut Self {
        self.family(name, help, samples, |c: &Counter<u64, AtomicU64>, v| {
            c.inc_by(v);
        })
    }

    /// A gauge family of whole numbers (values above `i64::MAX` are written as `i64::MAX`).
    pub fn gauge(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels, u64)>,
    ) -> &mut Self {
        self.family(name, help, samples, |g: &Gauge<i64>, v: u64| {
            g.set(v.min(i64::MAX as u64) as i64);
        })
    }

    /// A gauge family of fractions or rates.
    pub fn gauge_f64(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels, f64)>,
    ) -> &mut Self {
        self.family(name, help, samples, |g: &Gauge<f64, AtomicU64>, v| {
            g.set(v);
        })
    }

    /// Registers the samples as one metric of type `M`, each value applied with `set`.
    fn family<M, V>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Labels, V)>,
        set: impl Fn(&M, V),
    ) -> &mut Self
    where
        M: EncodeMetric + TypedMetric + Default + std::fmt::Debug + Send + Sync + 'static,
    {
        let mut samples: Vec<(Labels, V)> = samples.into_iter().collect();
        if samples.len() == 1 && samples[0].0.is_empty() {
            let m = M::default();
            set(&m, samples.remove(0).1);
            self.registry.register(name, help, m);
        } else {
            let f = Family::<Labels, M>::default();
            for (l, v) in samples {
                set(&f.get_or_create(&l), v);
            }
            self.registry.register(name, help, f);
        }
        self
    }

    /// The per-node byte counter family `NAME{..base, numa_node, direction=read|write}` of `io`,
    /// one sample pair for each of `nodes` (zeros where `io` has none) and each other node
    /// `io` counted.
    pub fn node_io(
        &mut self,
        name: &str,
        help: &str,
        base: &Labels,
        io: &crate::counters::NodeIo,
        nodes: &[u32],
    ) -> &mut Self {
        self.counter(name, help, node_io_samples(base, io, nodes))
    }

    /// The text in `format`.
    pub fn render(&self, format: Format) -> String {
        encode(&self.registry, format)
    }
}

/// The samples of [`Exposition::node_io`], for families that gather several counters.
pub fn node_io_samples(
    base: &Labels,
    io: &crate::counters::NodeIo,
    nodes: &[u32],
) -> Vec<(Labels, u64)> {
    let extra = io.iter().map(|(n, _)| n).filter(|n| !nodes.contains(n));
    let all: Vec<u32> = nodes.iter().copied().chain(extra).collect();
    let mut out = Vec::with_capacity(all.len() * 2);
    for n in all {
        let x = io.get(n);
        for (dir, v) in [("read", x.read_bytes), ("write", x.write_bytes)] {
            let mut l = base.clone();
            // `numa_node`, not `node`: Kubernetes and node_exporter use `node` for the host.
            l.push(("numa_node".into(), n.to_string()));
            l.push(("direction".into(), dir.into()));
            out.push((l, v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{IoBytes, NodeIo};

    #[test]
    fn families_have_help_type_and_escaped_labels() {
        let io: NodeIo = [(1, IoBytes::new(4096, 7))].into_iter().collect();
        let mut e = Exposition::new("numaio_test");
        e.node_io(
            "io_bytes",
            "Bytes by node",
            &label("mountpoint", "/mnt/a \"b\"\\\nc"),
            &io,
            &[0, 1],
        )
        .gauge("free_bytes", "Free", [(label("numa_node", 0), u64::MAX)])
        .gauge_f64("local_ratio", "Share", [(Vec::new(), 0.5)])
        .counter("events", "Events", [(Vec::new(), 3)]);
        let om = e.render(Format::OpenMetrics);
        assert!(
            om.contains("# HELP numaio_test_io_bytes Bytes by node.\n"),
            "{om}"
        );
        assert!(om.contains("# TYPE numaio_test_io_bytes counter\n"), "{om}");
        assert!(
            om.contains(
                r#"numaio_test_io_bytes_total{mountpoint="/mnt/a \"b\"\\\nc",numa_node="1",direction="read"} 4096"#
            ),
            "{om}"
        );
        assert!(om.contains(r#"numa_node="0",direction="write"} 0"#), "{om}");
        assert!(om.contains("numaio_test_local_ratio 0.5\n"), "{om}");
        assert!(om.contains("numaio_test_events_total 3\n"), "{om}");
        assert!(
            om.contains(&format!("{{numa_node=\"0\"}} {}", i64::MAX)),
            "{om}"
        );
        assert!(om.trim_end().ends_with("# EOF"));
        let classic = e.render(Format::Classic);
        assert!(classic.contains("# TYPE numaio_test_io_bytes_total counter\n"));
        assert!(classic.contains("# HELP numaio_test_io_bytes_total Bytes by node.\n"));
        assert!(!classic.contains("# EOF"));
        // Every sample line is one line: the newline in the label stayed escaped.
        assert_eq!(
            classic.lines().filter(|l| l.contains("mountpoint")).count(),
            4
        );
    }

    #[test]
    fn classic_rewrites_counters_and_info() {
        let om = "# HELP a_things Things.\n# TYPE a_things counter\na_things_total 1\n\
                  # HELP b Build.\n# TYPE b info\nb_info{v=\"1\"} 1\n# UNIT c seconds\n# EOF\n";
        assert_eq!(
            openmetrics_to_classic(om),
            "# HELP a_things_total Things.\n# TYPE a_things_total counter\na_things_total 1\n\
             # HELP b_info Build.\n# TYPE b_info gauge\nb_info{v=\"1\"} 1\n"
        );
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::from_accept(None).content_type(),
            CLASSIC_CONTENT_TYPE
        );
    }
}
