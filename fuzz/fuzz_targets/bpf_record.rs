//! The collector's map entries (`numaio_bpf::record::decode_*`): bytes the kernel wrote into
//! a BPF map. The first input byte picks the map, the second the key's length; the rest is
//! key then value. An entry decodes only with the map's exact key and value sizes, every
//! field reads back from its bytes, devices convert to the `st_dev` whose major and minor
//! are the kernel's, and `since` never invents counts. Also the program statistics the
//! kernel fills (`recursion_misses_of`: the first byte's fourth choice, the second byte the
//! length the kernel says it filled) and the misses' interval arithmetic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_bpf::collector::recursion_misses_of;
use numaio_bpf::record::{
    cache_key, decode_cache, decode_fault, decode_io, Missed, Snapshot, CACHE_KEY_LEN,
    CACHE_VAL_LEN, FAULT_KEY_LEN, FAULT_VAL_LEN, IO_KEY_LEN, IO_VAL_LEN,
};

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn check_dev(kdev: u64, dev: u64) {
    assert_eq!(u64::from(libc::major(dev)), (kdev >> 20) & 0xfff, "{kdev:#x}");
    assert_eq!(u64::from(libc::minor(dev)), kdev & 0xf_ffff, "{kdev:#x}");
}

fuzz_target!(|data: &[u8]| {
    let [which, klen, rest @ ..] = data else {
        return;
    };
    let klen = usize::from(*klen).min(rest.len());
    let (key, val) = rest.split_at(klen);
    if which % 4 == 3 {
        // The kernel reports how much of `struct bpf_prog_info` it filled, in bytes.
        let filled = usize::from(data[1]) * 2;
        let r = recursion_misses_of(rest, filled);
        assert_eq!(r.is_some(), filled >= 216 && rest.len() >= 216);
        let Some(n) = r else { return };
        assert_eq!(n, u64_at(rest, 208));
        let then = Missed {
            counted_runs: true,
            program_runs: [("p".to_string(), n / 2)].into_iter().collect(),
            io_events: n / 3,
            cache_events: 0,
        };
        let now = Missed {
            program_runs: [("p".to_string(), n)].into_iter().collect(),
            io_events: n,
            ..then.clone()
        };
        let d = now.since(&then);
        assert_eq!(d.runs(), n - n / 2);
        assert_eq!(d.io_reason().is_some(), n > 0);
        assert_eq!(now.since(&now).io_reason(), None);
        return;
    }
    match which % 4 {
        0 => {
            let r = decode_io(key, val);
            let shaped = key.len() == IO_KEY_LEN && val.len() == IO_VAL_LEN;
            if !shaped {
                assert!(r.is_none());
                return;
            }
            let pids_ok = u32_at(key, 0) <= i32::MAX as u32 && u32_at(key, 4) <= i32::MAX as u32;
            assert_eq!(r.is_some(), pids_ok);
            let Some(r) = r else { return };
            assert_eq!(r.pid as u32, u32_at(key, 0));
            assert_eq!(r.tid as u32, u32_at(key, 4));
            check_dev(u64_at(key, 8), r.dev);
            assert_eq!(r.ino, u64_at(key, 16));
            assert_eq!((r.data_node, r.cpu_node), (u32_at(key, 24), u32_at(key, 28)));
            assert_eq!((r.read_bytes, r.write_bytes), (u64_at(val, 0), u64_at(val, 8)));
            // Against itself and against nothing: no change, then everything.
            let s = Snapshot {
                io: vec![r],
                ..Default::default()
            };
            assert!(s.since(&s).io.is_empty());
            let all = s.since(&Snapshot::default());
            assert_eq!(all.io.len(), usize::from(r.read_bytes > 0 || r.write_bytes > 0));
            assert!(all.io.iter().all(|d| *d == r));
        }
        1 => {
            let r = decode_cache(key, val);
            if key.len() != CACHE_KEY_LEN || val.len() != CACHE_VAL_LEN {
                assert!(r.is_none());
                return;
            }
            let r = r.expect("a cache entry of the right size always decodes");
            check_dev(u64_at(key, 0), r.dev);
            assert_eq!((r.ino, r.node), (u64_at(key, 8), u32_at(key, 16)));
            assert_eq!(
                (r.inserted_pages, r.removed_pages, r.migrated_in_pages, r.migrated_out_pages),
                (u64_at(val, 0), u64_at(val, 8), u64_at(val, 16), u64_at(val, 24))
            );
            // The key the residency lookups build names the same counters (the device bits
            // the kernel's s_dev can hold, padding zero).
            if u64_at(key, 0) >> 32 == 0 && u32_at(key, 20) == 0 {
                assert_eq!(cache_key(r.dev, r.ino, r.node).as_slice(), key);
            }
            // The net change is bounded by what was gained and what was lost.
            let net = i128::from(r.net_pages());
            let gained = i128::from(r.inserted_pages) + i128::from(r.migrated_in_pages);
            let lost = i128::from(r.removed_pages) + i128::from(r.migrated_out_pages);
            assert!(net <= gained && -net <= lost, "{r:?}");
            assert_eq!(net, (gained - lost).clamp(-i128::from(i64::MAX), i128::from(i64::MAX)));
            let s = Snapshot {
                cache: vec![r],
                ..Default::default()
            };
            assert!(s.since(&s).cache.is_empty());
        }
        _ => {
            let r = decode_fault(key, val);
            if key.len() != FAULT_KEY_LEN || val.len() != FAULT_VAL_LEN {
                assert!(r.is_none());
                return;
            }
            assert_eq!(r.is_some(), u32_at(key, 0) <= i32::MAX as u32);
            let Some(r) = r else { return };
            check_dev(u64_at(key, 8), r.dev);
            assert_eq!((r.ino, r.faults), (u64_at(key, 16), u64_at(val, 0)));
            assert_eq!((r.data_node, r.cpu_node), (u32_at(key, 24), u32_at(key, 28)));
        }
    }
});
