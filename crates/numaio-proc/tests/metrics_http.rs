//! The metrics endpoint against hostile and slow clients, over real sockets.

use numaio_proc::metrics::{label, serve, serve_with, Metrics, ServeOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn server() -> SocketAddr {
    let m = Arc::new(Metrics::new());
    m.actions
        .get_or_create(&label("kind", "pull-data"))
        .inc_by(7);
    serve(m, "127.0.0.1:0").expect("bind the metrics endpoint on loopback")
}

fn server_with(opts: ServeOptions) -> SocketAddr {
    serve_with(Arc::new(Metrics::new()), "127.0.0.1:0", &opts).expect("bind on loopback")
}

/// Sends `request` and returns the whole response, failing the test after 5 s.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(request).unwrap();
    let mut resp = Vec::new();
    c.read_to_end(&mut resp)
        .unwrap_or_else(|e| panic!("reading the response from {addr}: {e}"));
    String::from_utf8_lossy(&resp).into_owned()
}

fn scrape(addr: SocketAddr) -> String {
    exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// Reads until EOF or reset and says how long that took; fails the test if the server keeps
/// the connection open past `limit`.
fn wait_closed(c: &mut TcpStream, limit: Duration) -> Duration {
    let t0 = Instant::now();
    c.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return t0.elapsed(),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("server kept the connection open for more than {limit:?}")
            }
            Err(_) => return t0.elapsed(),
        }
    }
}

#[test]
fn scrape_answers_metrics() {
    let addr = server();
    let resp = scrape(addr);
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert!(
        resp.contains("content-type: text/plain; version=0.0.4"),
        "{resp}"
    );
    assert!(
        resp.contains("# TYPE numaio_actions_total counter\r\n")
            || resp.contains("# TYPE numaio_actions_total counter\n"),
        "{resp}"
    );
    assert!(
        resp.contains("numaio_actions_total{kind=\"pull-data\"} 7"),
        "{resp}"
    );
    assert!(!resp.contains("# EOF"), "{resp}");
    // Prometheus asks for OpenMetrics and gets it.
    let om = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n",
    );
    assert!(
        om.contains("content-type: application/openmetrics-text"),
        "{om}"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    // The served text reads back with a Prometheus text parser, counters typed as such.
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    let s = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    let actions = s
        .samples
        .iter()
        .find(|x| x.metric == "numaio_actions_total" && x.labels.get("kind") == Some("pull-data"))
        .expect("numaio_actions_total");
    assert_eq!(actions.value, prometheus_parse::Value::Counter(7.0));
    assert!(s.samples.iter().any(|x| x.metric == "numaio_build_info"));
    assert!(s
        .samples
        .iter()
        .any(|x| x.metric == "process_cpu_seconds_total"));
}

#[test]
fn other_paths_404_other_methods_405() {
    let addr = server();
    let r = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 404 "), "{r}");
    let r = exchange(addr, b"GET /metricsx HTTP/1.0\r\n\r\n");
    assert!(
        r.starts_with("HTTP/1.0 404 ") || r.starts_with("HTTP/1.1 404 "),
        "{r}"
    );
    let r = exchange(addr, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
    assert!(r.contains("allow: GET"), "{r}");
    let r = exchange(addr, b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
    let r = exchange(addr, b"\x16\x03\x01\x02\x00garbage\r\n\r\n");
    assert!(!r.contains("numaio_"), "garbage must not get metrics: {r}");
}

#[test]
fn silent_and_trickling_clients_do_not_stall_a_scrape() {
    let addr = server();
    // Clients that connect and send nothing.
    let silent: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // A client that sends one byte per second.
    let trickle = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        for b in b"GET /metrics HTTP/1.1\r\n" {
            if c.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..3 {
        let t0 = Instant::now();
        let resp = scrape(addr);
        let took = t0.elapsed();
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
        assert!(
            took < Duration::from_secs(1),
            "scrape took {took:?} with slow clients connected"
        );
    }
    drop(silent);
    trickle.join().unwrap();
}

#[test]
fn silent_client_is_cut_off_after_the_read_timeout() {
    let addr = server_with(ServeOptions {
        read_timeout: Duration::from_secs(1),
        ..ServeOptions::default()
    });
    let mut c = TcpStream::connect(addr).unwrap();
    let took = wait_closed(&mut c, Duration::from_secs(5));
    assert!(
        took >= Duration::from_millis(800),
        "closed too early: {took:?}"
    );
}

#[test]
fn trickling_client_is_cut_off_after_the_read_timeout() {
    let addr = server_with(ServeOptions {
        read_timeout: Duration::from_secs(2),
        ..ServeOptions::default()
    });
    let mut c = TcpStream::connect(addr).unwrap();
    let t0 = Instant::now();
    let mut closed = false;
    // One byte per 300 ms would take 7 s for the whole request line.
    for b in b"GET /metrics HTTP/1.1\r\n" {
        if c.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    if !closed {
        wait_closed(&mut c, Duration::from_secs(5));
    }
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(4500),
        "a trickling client kept its connection for {took:?} with a 2 s read timeout"
    );
}

/// Sends up to 100 MiB after `head`; returns how much the server took before closing.
fn flood(addr: SocketAddr, head: &[u8], filler: u8) -> (u64, String) {
    const TOTAL: u64 = 100 << 20;
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(head).unwrap();
    let chunk = vec![filler; 64 << 10];
    let mut sent = 0u64;
    while sent < TOTAL {
        match c.write(&chunk) {
            Ok(n) => sent += n as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("server stopped reading after {sent} bytes but did not close")
            }
            Err(_) => break,
        }
    }
    assert!(
        sent < TOTAL,
        "the server accepted all {TOTAL} bytes instead of closing the connection"
    );
    let mut resp = Vec::new();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.read_to_end(&mut resp);
    (sent, String::from_utf8_lossy(&resp).into_owned())
}

#[test]
fn hundred_mib_head_or_body_is_cut_off_with_bounded_memory() {
    let addr = server();
    let before = rss_bytes();
    // One endless header line.
    let (sent_head, _) = flood(addr, b"GET /metrics HTTP/1.1\r\nX-Long: ", b'a');
    // A declared 100 MiB body.
    let (sent_body, resp) = flood(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n",
        b'b',
    );
    let grown = rss_bytes().saturating_sub(before);
    eprintln!(
        "metrics flood: head cut after {sent_head} B, body cut after {sent_body} B, RSS +{grown} B"
    );
    // What got through is the kernel's socket buffers, not the server's.
    assert!(sent_head < 64 << 20 && sent_body < 64 << 20);
    assert!(
        grown < 16 << 20,
        "RSS grew by {grown} bytes while 200 MiB were sent"
    );
    assert!(
        resp.is_empty() || resp.starts_with("HTTP/1.1 413 "),
        "unexpected answer to a request with a body: {resp}"
    );
    // The endpoint still answers.
    assert!(scrape(addr).starts_with("HTTP/1.1 200 OK"));
}

#[test]
fn connections_over_the_limit_are_closed_and_the_endpoint_recovers() {
    let addr = server_with(ServeOptions {
        read_timeout: Duration::from_secs(1),
        max_connections: 4,
        ..ServeOptions::default()
    });
    let hogs: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = TcpStream::connect(addr).unwrap();
    let took = wait_closed(&mut extra, Duration::from_secs(5));
    assert!(
        took < Duration::from_millis(500),
        "extra connection kept {took:?}"
    );
    // Once the read timeout has cut off the hogs, scrapes are served again.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(scrape(addr).starts_with("HTTP/1.1 200 OK"));
    drop(hogs);
}
