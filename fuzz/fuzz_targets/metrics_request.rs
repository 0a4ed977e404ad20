//! The metrics endpoint's request handling: raw request bytes (parsed by httparse, the
//! parser hyper uses), arbitrary method/path/size/body combinations, and label values
//! (process names are chosen by processes) rendered into the OpenMetrics text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_proc::metrics::{label, respond, Metrics, MAX_HEAD_BYTES};

fn expect(method: &str, path: &str, head: usize, body: bool) -> u16 {
    let path = path.split('?').next().unwrap_or("");
    if head > MAX_HEAD_BYTES {
        431
    } else if path != "/metrics" {
        404
    } else if method != "GET" {
        405
    } else if body {
        413
    } else {
        200
    }
}

fn check(method: &str, path: &str, head: usize, body: bool) {
    let mut rendered = false;
    let r = respond(method, path, head, body, None, |_| {
        rendered = true;
        "numaio_intervals_total 1\n".into()
    });
    assert_eq!(
        r.status,
        expect(method, path, head, body),
        "{method:?} {path:?} {head} {body}"
    );
    assert_eq!(rendered, r.status == 200);
    assert!(!r.content_type.is_empty() && !r.body.is_empty());
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            let Ok(httparse::Status::Complete(len)) = req.parse(rest) else {
                return;
            };
            let body = req.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("transfer-encoding")
                    || (h.name.eq_ignore_ascii_case("content-length") && h.value != b"0")
            });
            check(req.method.unwrap_or(""), req.path.unwrap_or(""), len, body);
        }
        1 => {
            let s = String::from_utf8_lossy(rest);
            let (method, path) = s.split_once(' ').unwrap_or((&s, "/metrics"));
            let head = rest.len() * 7;
            check(method, path, head, mode & 0x80 != 0);
        }
        _ => {
            // A label value must not break out of its quotes or its line.
            let s = String::from_utf8_lossy(rest);
            let m = Metrics::with_top_processes(1);
            m.process_locality
                .get_or_create(&vec![
                    ("pid".into(), "1".into()),
                    ("comm".into(), s.to_string()),
                ])
                .set(0.5);
            m.actions.get_or_create(&label("kind", &*s)).inc();
            let text = m.render();
            for line in text.lines() {
                assert!(
                    line.starts_with("# ")
                        || line.starts_with("numaio_")
                        || line.starts_with("process_"),
                    "label {s:?} injected line {line:?}"
                );
            }
            let samples = text
                .lines()
                .filter(|l| l.starts_with("numaio_process_read_locality_ratio{"))
                .count();
            assert_eq!(samples, 1, "label {s:?} split the sample:\n{text}");
        }
    }
});
