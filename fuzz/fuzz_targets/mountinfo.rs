//! The mount table (`numaio_sys::mountinfo`), read by mkfs, umount and the FUSE server:
//! at most one mount per line, each from a line that holds its `MAJ:MIN` and the `-`
//! separator, paths never longer than their escaped text, and the topmost mount at a
//! point is one of the mounts there.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_sys::mountinfo::{parse, topmost, unescape};

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let mounts = parse(&s);
    assert!(mounts.len() <= s.lines().count());
    for m in &mounts {
        let dev_of = |l: &str| {
            let (a, b) = l.split(' ').nth(2)?.split_once(':')?;
            Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?))
        };
        // Several lines may name the same device: one of them is this mount's.
        assert!(
            s.lines().any(|l| dev_of(l) == Some((m.major, m.minor))
                && l.contains(" - ")
                && m.point.as_os_str().len() <= l.len()
                && m.source.as_os_str().len() <= l.len()),
            "{m:?} from no line of {s:?}"
        );
        assert!(!m.fs_type.contains(' '));
        let top = topmost(&mounts, &m.point).expect("a mount at its own point");
        assert_eq!(top.point, m.point);
    }
    // Decoding escapes never makes text longer.
    assert!(unescape(&s).len() <= s.len());
});
