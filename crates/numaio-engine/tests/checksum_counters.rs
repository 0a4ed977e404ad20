//! The Prometheus counters `checksum_verified` / `checksum_error` count the checks the engine
//! makes when it loads blocks from the device, with checksums wired from options as the CLI
//! does (`numa::apply`, here through `EngineBuilder::with_numa`).

use numaio_engine::integrity::IntegrityConfig;
use numaio_engine::numa::NumaOptions;
use numaio_engine::{Engine, EngineError, OpenOptions, PolicyKind};
use std::os::unix::fs::FileExt;

const BS: usize = 4096;

/// The value of the `events` counter with `kind="<kind>"` in Prometheus text.
fn event(text: &str, kind: &str) -> u64 {
    let label = format!("kind=\"{kind}\"");
    text.lines()
        .find(|l| !l.starts_with('#') && l.contains(&label))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no {kind} counter in:\n{text}"))
}

#[test]
fn checksum_counters_count_verified_and_corrupted_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let opts = NumaOptions {
        checksums: Some(IntegrityConfig::default()),
        ..Default::default()
    };
    let (builder, parts) = Engine::builder()
        .with_cache_bytes((64 * BS) as u64)
        .with_slices(1)
        .with_policy(PolicyKind::Clock)
        .with_queue_depth(8)
        .with_numa(&opts)
        .unwrap();
    let acc = parts.accounting.clone();
    let data: Vec<u8> = (0..16 * BS).map(|i| (i * 13 / 5) as u8).collect();
    {
        let e = builder.clone().build().unwrap();
        let f = e.open(&path, OpenOptions::create_rw()).unwrap();
        f.pwrite(&data, 0).unwrap();
        f.fsync().unwrap();
        e.close().unwrap();
    }
    let before = acc.snapshot().to_prometheus();
    assert_eq!(event(&before, "checksum_verified"), 0, "{before}");
    assert_eq!(event(&before, "checksum_error"), 0, "{before}");

    // Corrupt block 9 on the device, behind the engine's back.
    let raw = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    raw.write_all_at(&[data[9 * BS + 7] ^ 0x5A], (9 * BS + 7) as u64)
        .unwrap();
    drop(raw);

    // A fresh cache: every read below loads from the device and is checked.
    let e = builder.build().unwrap();
    let f = e.open(&path, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; 4 * BS];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), 4 * BS);
    assert!(buf == data[..4 * BS]);
    let mut one = vec![0u8; BS];
    let err = f.pread(&mut one, 9 * BS as u64).unwrap_err();
    assert!(
        matches!(&err, EngineError::Checksum { offset, .. } if *offset == 9 * BS as u64),
        "{err:?}"
    );
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(numaio_engine::os_error(&err), Some(libc::EIO));
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );

    let after = acc.snapshot().to_prometheus();
    assert_eq!(event(&after, "checksum_verified"), 4, "{after}");
    assert_eq!(event(&after, "checksum_error"), 1, "{after}");
    let totals = acc.totals();
    assert_eq!((totals.checksums_verified, totals.checksum_errors), (4, 1));
}
