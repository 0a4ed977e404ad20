//! Prometheus metrics of the daemon and a minimal HTTP endpoint for them.
//!
//! Off by default; `--metrics 127.0.0.1:PORT` turns it on. One thread accepts connections
//! and answers every GET with the OpenMetrics text encoding, so a scrape never blocks the
//! decision loop for longer than copying the counters.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

type Labels = Vec<(String, String)>;

/// The daemon's metrics.
pub struct Metrics {
    registry: Registry,
    pub node_page_cache: Family<Labels, Gauge>,
    pub node_free: Family<Labels, Gauge>,
    pub process_locality: Family<Labels, Gauge<f64, AtomicU64>>,
    pub process_read_rate: Family<Labels, Gauge<f64, AtomicU64>>,
    pub actions: Family<Labels, Counter>,
    pub decisions: Family<Labels, Counter>,
    pub bytes_moved: Family<Labels, Counter>,
    pub intervals: Counter,
    pub interval_cpu_seconds: Gauge<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("numaio");
        let m = Metrics {
            registry: Registry::default(),
            node_page_cache: Family::default(),
            node_free: Family::default(),
            process_locality: Family::default(),
            process_read_rate: Family::default(),
            actions: Family::default(),
            decisions: Family::default(),
            bytes_moved: Family::default(),
            intervals: Counter::default(),
            interval_cpu_seconds: Gauge::default(),
        };
        registry.register(
            "node_page_cache_bytes",
            "Page cache (FilePages) per NUMA node",
            m.node_page_cache.clone(),
        );
        registry.register(
            "node_free_bytes",
            "Free memory per NUMA node",
            m.node_free.clone(),
        );
        registry.register(
            "process_read_locality_ratio",
            "Estimated share of a process's file reads served from the node(s) it runs on",
            m.process_locality.clone(),
        );
        registry.register(
            "process_read_bytes_per_second",
            "Read rate (rchar) of I/O-active processes",
            m.process_read_rate.clone(),
        );
        registry.register("actions", "Actions carried out, by kind", m.actions.clone());
        registry.register(
            "decisions",
            "Decisions by verdict (act, advise, blocked, skipped)",
            m.decisions.clone(),
        );
        registry.register(
            "moved_bytes",
            "Bytes migrated, by kind (process memory or page cache)",
            m.bytes_moved.clone(),
        );
        registry.register("intervals", "Intervals completed", m.intervals.clone());
        registry.register(
            "interval_cpu_seconds",
            "CPU time the daemon used in its last interval",
            m.interval_cpu_seconds.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = encode(&mut s, &self.registry);
        s
    }
}

/// One label pair.
pub fn label(k: &str, v: impl ToString) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

/// Serves `metrics` on `addr` from a background thread; returns the bound address.
pub fn serve(metrics: Arc<Metrics>, addr: &str) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    std::thread::Builder::new()
        .name("numaio-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                let mut line = String::new();
                let mut r = BufReader::new(&s);
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                // Drain the headers.
                let mut h = String::new();
                while r.read_line(&mut h).map(|n| n > 2).unwrap_or(false) {
                    h.clear();
                }
                let (status, body, ctype) = if line.starts_with("GET ") {
                    (
                        "200 OK",
                        metrics.render(),
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )
                } else {
                    ("405 Method Not Allowed", String::new(), "text/plain")
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        })?;
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn render_and_serve() {
        let m = Arc::new(Metrics::new());
        m.node_page_cache.get_or_create(&label("node", 1)).set(4096);
        m.actions.get_or_create(&label("kind", "follow-data")).inc();
        m.process_locality
            .get_or_create(&vec![
                ("pid".into(), "42".into()),
                ("comm".into(), "cat".into()),
            ])
            .set(0.25);
        let text = m.render();
        assert!(
            text.contains("numaio_node_page_cache_bytes{node=\"1\"} 4096"),
            "{text}"
        );
        assert!(
            text.contains("numaio_actions_total{kind=\"follow-data\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("numaio_process_read_locality_ratio{pid=\"42\",comm=\"cat\"} 0.25"),
            "{text}"
        );
        let addr = serve(m.clone(), "127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
        assert!(resp.contains("numaio_node_page_cache_bytes{node=\"1\"} 4096"));
    }
}
