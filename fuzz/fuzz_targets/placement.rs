//! Placement policy words (`writer-local`, `stripe:K[:CHUNK]`, `fixed:NODE`, ...): an accepted
//! word prints back to a word that parses to the same policy, a refused one names itself in
//! the error, and every answer of an accepted policy lies among the places it is given.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_numa::placement::{BlockRef, PlacementPolicy, FORMS};

fuzz_target!(|data: &[u8]| {
    let (head, text) = data.split_at(data.len().min(17));
    let s = String::from_utf8_lossy(text);
    match s.parse::<PlacementPolicy>() {
        Ok(p) => {
            let back = p.to_string();
            assert_eq!(back.parse::<PlacementPolicy>().as_ref(), Ok(&p), "{s:?}");
            let mut b = [0u8; 17];
            b[..head.len()].copy_from_slice(head);
            let places: Vec<u32> = b[..(b[0] % 6) as usize]
                .iter()
                .map(|x| u32::from(x % 4))
                .collect();
            let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
            let at = BlockRef {
                seed: word(1),
                block: word(9),
                home: (b[2] & 1 == 1).then_some(u32::from(b[3] % 4)),
                caller: (b[4] & 1 == 1).then_some(u32::from(b[5] % 8)),
            };
            let block_size = 1u64 << (b[6] % 24);
            let got = p.place(&places, block_size, &at);
            assert!(got.run >= 1, "{s:?}");
            if let Some(i) = got.place {
                assert_eq!(places[i], got.node, "{s:?}");
            }
            if p.validate(&places).is_ok() {
                if let PlacementPolicy::Fixed(n) = p {
                    assert_eq!(got.node, n);
                    assert!(got.place.is_some());
                }
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(FORMS), "{msg}");
            assert!(msg.len() < 1024, "{msg}");
        }
    }
});
