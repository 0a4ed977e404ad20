//! `/proc/PID/maps`: data files are absolute, distinct, not deleted, and none of them is
//! also mapped executable.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_proc::procfs::parse_maps_files;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let files = parse_maps_files(&s);
    for (i, f) in files.iter().enumerate() {
        let p = f.to_string_lossy();
        assert!(
            p.starts_with('/') && !p.ends_with(" (deleted)"),
            "{p:?} from {s:?}"
        );
        assert!(s.contains(p.as_ref()), "{p:?} not in {s:?}");
        assert!(!files[..i].contains(f), "{p:?} twice");
    }
});
