//! Cost of a `move_pages` node query through numaio-sys, for comparison with libnuma's
//! `numa_move_pages` (`scripts/numa-layer-cost.sh` runs both on the same mapping size).
//! Usage: `move_pages_cost [PAGES] [ROUNDS]`; prints nanoseconds per page queried.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let pages: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16384);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let page = 4096;
    let mut buf = vec![1u8; pages * page];
    for i in (0..buf.len()).step_by(page) {
        buf[i] = i as u8;
    }
    let ptrs: Vec<*const u8> = (0..pages).map(|i| buf[i * page..].as_ptr()).collect();
    let first = numaio_sys::move_pages::query_pages(0, &ptrs).expect("move_pages query");
    assert!(
        first.iter().all(|s| s.node().is_some()),
        "pages not resident"
    );
    let t0 = Instant::now();
    for _ in 0..rounds {
        let st = numaio_sys::move_pages::query_pages(0, &ptrs).expect("move_pages query");
        std::hint::black_box(st);
    }
    let ns = t0.elapsed().as_nanos() as f64 / (pages * rounds) as f64;
    println!("numaio-sys query_pages: {ns:.1} ns/page ({pages} pages x {rounds} rounds)");
}
