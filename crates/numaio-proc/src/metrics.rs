//! Prometheus metrics of the daemon and a minimal HTTP endpoint for them.
//!
//! Off by default; `--metrics 127.0.0.1:PORT` turns it on. Only `GET /metrics` is answered
//! (OpenMetrics text); other paths get 404, other methods 405, a request body 413.
//!
//! The endpoint runs on its own thread, so a scrape never blocks the decision loop for longer
//! than copying the counters. HTTP is hyper's HTTP/1 server on a single-threaded tokio
//! runtime: connections are served concurrently (a slow or silent client does not delay a
//! scrape), the request head is bounded in size ([`MAX_HEAD_BYTES`]) and in time
//! ([`ServeOptions::read_timeout`]), and each connection ends after one response. hyper was
//! chosen over `tiny_http` because tiny_http reads header lines without a size limit, and
//! over axum because routing one path needs no framework; with tokio limited to its `rt`,
//! `net` and `time` features it adds a dozen crates.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

/// Largest request head (request line and headers) the endpoint reads; larger requests get
/// 431 and the connection is closed. hyper's smallest read buffer is this size too.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// Bounds on the endpoint's clients.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Time a client has to send its whole request head.
    pub read_timeout: Duration,
    /// Time a connection may stay open in all, response included (a client that never reads
    /// its response is cut off here).
    pub connection_timeout: Duration,
    /// Connections served at once; further ones are closed at once until one ends.
    pub max_connections: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            read_timeout: Duration::from_secs(3),
            connection_timeout: Duration::from_secs(10),
            max_connections: 256,
        }
    }
}

/// The endpoint's answer to one request: status code, content type and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// Decides the answer to a request from its method, target path (a query string is
/// ignored), the size of its head in bytes and whether it carries a body. `render` is only
/// called for a request that gets the metrics. Pure apart from `render`, so it can be fuzzed.
pub fn respond(
    method: &str,
    path: &str,
    head_bytes: usize,
    has_body: bool,
    render: impl FnOnce() -> String,
) -> Reply {
    let plain = |status, body: &str| Reply {
        status,
        content_type: TEXT,
        body: format!("{body}\n"),
    };
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if head_bytes > MAX_HEAD_BYTES {
        return plain(431, "request head too large");
    }
    if path != "/metrics" {
        return plain(404, "not found; metrics are at /metrics");
    }
    if method != "GET" {
        return plain(405, "only GET is allowed");
    }
    if has_body {
        return plain(413, "a request body is not accepted");
    }
    Reply {
        status: 200,
        content_type: OPENMETRICS,
        body: render(),
    }
}

/// A warning to show when the endpoint listens on an address other hosts may reach: the
/// metrics name processes and their read rates, and the endpoint has no authentication.
pub fn exposure_warning(addr: SocketAddr) -> Option<String> {
    if addr.ip().to_canonical().is_loopback() {
        return None;
    }
    Some(format!(
        "metrics endpoint listens on {addr}, which is not a loopback address: anyone who can \
         reach port {} can read process names, pids and read rates; bind to 127.0.0.1 or \
         firewall the port",
        addr.port()
    ))
}

/// Serves `metrics` on `addr` from a background thread with the default bounds; returns the
/// bound address. Warns (tracing and stderr) when `addr` is not a loopback address.
pub fn serve(metrics: Arc<Metrics>, addr: &str) -> std::io::Result<SocketAddr> {
    serve_with(metrics, addr, &ServeOptions::default())
}

/// [`serve`] with explicit bounds.
pub fn serve_with(
    metrics: Arc<Metrics>,
    addr: &str,
    opts: &ServeOptions,
) -> std::io::Result<SocketAddr> {
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?;
    if let Some(w) = exposure_warning(local) {
        tracing::warn!("{w}");
        eprintln!("numaio: warning: {w}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let listener = {
        let _ctx = rt.enter();
        tokio::net::TcpListener::from_std(std_listener)?
    };
    let opts = opts.clone();
    std::thread::Builder::new()
        .name("numaio-metrics".into())
        .spawn(move || rt.block_on(accept_loop(listener, metrics, opts)))?;
    Ok(local)
}

async fn accept_loop(listener: tokio::net::TcpListener, metrics: Arc<Metrics>, opts: ServeOptions) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: wait instead of
                // spinning, the condition usually clears once connections close.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if active.load(Ordering::Relaxed) >= opts.max_connections {
            drop(stream);
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let active = active.clone();
        let metrics = metrics.clone();
        let opts = opts.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let reply = reply_to(&metrics, &req);
                async move { Ok::<_, Infallible>(into_response(reply)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(opts.read_timeout)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            // Dropping the connection on timeout closes the socket.
            let _ = tokio::time::timeout(opts.connection_timeout, conn).await;
            active.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

fn reply_to(metrics: &Metrics, req: &Request<Incoming>) -> Reply {
    // hyper keeps no raw head; count it as the request line plus "name: value\r\n" lines.
    let head_bytes = req.method().as_str().len()
        + req.uri().to_string().len()
        + 12
        + req
            .headers()
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>();
    respond(
        req.method().as_str(),
        req.uri().path(),
        head_bytes,
        !req.body().is_end_stream(),
        || metrics.render(),
    )
}

fn into_response(reply: Reply) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(reply.body)));
    *resp.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    if reply.status == 405 {
        h.insert(ALLOW, HeaderValue::from_static("GET"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn status(method: &str, path: &str, head: usize, body: bool) -> u16 {
        respond(method, path, head, body, || "m".into()).status
    }

    #[test]
    fn respond_routes_and_bounds() {
        assert_eq!(status("GET", "/metrics", 40, false), 200);
        assert_eq!(status("GET", "/metrics?x=1", 40, false), 200);
        assert_eq!(status("GET", "/", 40, false), 404);
        assert_eq!(status("GET", "/metrics/", 40, false), 404);
        assert_eq!(status("POST", "/x", 40, false), 404);
        assert_eq!(status("POST", "/metrics", 40, false), 405);
        assert_eq!(status("HEAD", "/metrics", 40, false), 405);
        assert_eq!(status("GET", "/metrics", 40, true), 413);
        assert_eq!(status("GET", "/metrics", MAX_HEAD_BYTES, false), 200);
        assert_eq!(status("GET", "/metrics", MAX_HEAD_BYTES + 1, false), 431);
        let r = respond("GET", "/metrics", 10, false, || "body".into());
        assert_eq!((r.content_type, r.body.as_str()), (OPENMETRICS, "body"));
        let mut rendered = false;
        respond("PUT", "/metrics", 10, false, || {
            rendered = true;
            String::new()
        });
        assert!(
            !rendered,
            "metrics must only be rendered for a GET /metrics"
        );
    }

    #[test]
    fn warns_only_off_loopback() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(exposure_warning(a("127.0.0.1:9477")), None);
        assert_eq!(exposure_warning(a("127.0.0.2:9477")), None);
        assert_eq!(exposure_warning(a("[::1]:9477")), None);
        assert_eq!(exposure_warning(a("[::ffff:127.0.0.1]:9477")), None);
        let w = exposure_warning(a("0.0.0.0:9477")).expect("0.0.0.0 must warn");
        assert!(w.contains("0.0.0.0:9477") && w.contains("127.0.0.1"), "{w}");
        assert!(exposure_warning(a("[::]:9477")).is_some());
        assert!(exposure_warning(a("192.168.1.5:80")).is_some());
    }

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
