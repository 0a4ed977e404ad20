//! `/proc/PID/maps`: data files are absolute, not deleted, taken from the text, at most one
//! per mapping line, and none of them is also mapped executable.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_procfs::parse_maps_files;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let files = parse_maps_files(&s);
    assert!(files.len() <= s.lines().count());
    for f in &files {
        let p = f.path.to_string_lossy();
        assert!(
            p.starts_with('/') && !p.ends_with(" (deleted)"),
            "{p:?} from {s:?}"
        );
        assert!(s.contains(p.as_ref()), "{p:?} not in {s:?}");
        assert!(s.contains(f.range.as_str()), "{:?} not in {s:?}", f.range);
        assert!(f.inode != 0);
    }
});
