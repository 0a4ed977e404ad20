//! Page-cache placement targets as `warm`/`move` build them from their flags: weights
//! (`N:W,...`), interleave node lists and stripe specs (`NODES` + chunk size). Accepted
//! targets map every page to one of their nodes, and runs are maximal and bounded.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_pagecache::Target;
use numaio_sys::{cpulist, topology::parse_size};

const PAGE: u64 = 4096;

fn check(t: &Target) {
    let nodes = t.nodes();
    // Files end below 2^63 bytes, so page indexes stay below 2^51.
    for i in (0..48u64).chain([(1u64 << 51) - 1, (1u64 << 51) - 64]) {
        let n = t.node_for_page(i, PAGE);
        assert!(
            nodes.contains(&n),
            "page {i} -> node {n} not in {nodes:?} for {t:?}"
        );
        let len = t.run_len(i, PAGE, 64);
        assert!(
            (1..=64).contains(&len),
            "run_len {len} for page {i} of {t:?}"
        );
        if i < 48 {
            for j in 0..len {
                assert_eq!(
                    t.node_for_page(i + j, PAGE),
                    n,
                    "run of {len} at {i} in {t:?}"
                );
            }
            if len < 64 {
                assert_ne!(
                    t.node_for_page(i + len, PAGE),
                    n,
                    "run at {i} not maximal: {t:?}"
                );
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let s = String::from_utf8_lossy(rest);
    match mode % 3 {
        0 => {
            let Ok(t) = Target::parse_weights(&s) else {
                return;
            };
            let Target::Weights(w) = &t else {
                panic!("parse_weights gave {t:?}");
            };
            assert!(!w.is_empty());
            let shown = t.to_string();
            let again = Target::parse_weights(shown.trim_start_matches("weights "));
            assert_eq!(again.ok(), Some(t.clone()), "{s:?} shown as {shown:?}");
            if w.iter().any(|p| p.1 > 0) {
                check(&t);
            }
        }
        1 => {
            if let Ok(nodes) = cpulist::parse(&s) {
                if !nodes.is_empty() {
                    check(&Target::Interleave(nodes));
                }
            }
        }
        _ => {
            let (list, chunk) = s.split_once('/').unwrap_or((&s, "1M"));
            let (Ok(nodes), Some(chunk)) = (cpulist::parse(list), parse_size(chunk)) else {
                return;
            };
            if !nodes.is_empty() && chunk != 0 && chunk % PAGE == 0 {
                check(&Target::Stripe { nodes, chunk });
            }
        }
    }
});
