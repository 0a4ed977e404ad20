//! The power-cut workload: what `numaio-powerload` writes in a guest before the lab cuts its
//! power, and how it checks the file after the next boot.
//!
//! A run is fully determined by its [`Layout`] (seed, record count, largest record): the
//! records' sizes, where each one lies in the file (packed end to end, so neighbours share
//! cache blocks and partial blocks are read, modified and written), the random order in
//! which they are written, and every byte of each record. Nothing but the highest
//! acknowledged sequence number has to leave the guest.
//!
//! The writer ([`write`]) opens the file through the numaio engine with O_DIRECT, writes the
//! records with `pwrite` in write order, calls `fsync` after a random 1–16 records and,
//! after each `fsync` returned, prints `ACK <seq>`: every record with a sequence number up to
//! `seq` is durable.
//!
//! The verifier ([`verify`]) reads the file with plain `pread` and classifies every record:
//! a record at or below the acknowledged number must be intact; a later one may be intact,
//! absent (zeros or past the end of the file) or torn, but a torn record whose checksum still
//! matches is corruption the checksum failed to catch, and fails the check like a lost
//! acknowledged record.

use anyhow::{bail, Context};
use serde::Serialize;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

/// First bytes of every record.
pub const MAGIC: &[u8; 8] = b"NUMAIOPL";
/// Header: magic, seq (u64 LE), offset (u64 LE), length (u32 LE), crc32c (u32 LE).
pub const HEADER: usize = 32;
/// Prefix of the line the writer prints after each completed `fsync`.
pub const ACK_PREFIX: &str = "ACK ";
/// First bytes of an acknowledgement block in the ack file.
pub const ACK_MAGIC: &[u8; 8] = b"NUMAIOAK";
/// Size of one acknowledgement block (one per slot of the ack file).
pub const ACK_BLOCK: usize = 4096;

/// Everything that determines a run's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub seed: u64,
    pub records: u64,
    /// Largest record in bytes (at least [`HEADER`]).
    pub max_record: u32,
}

/// One record of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Position in write order (0 is written first).
    pub seq: u64,
    pub offset: u64,
    pub len: u32,
}

impl Layout {
    /// The records in write order. Sizes: half small (up to 4 KiB), a third up to 64 KiB,
    /// the rest up to `max_record`, so single writes touch one to many cache blocks.
    pub fn records(&self) -> anyhow::Result<Vec<Record>> {
        if self.max_record < HEADER as u32 {
            bail!(
                "the largest record ({} bytes) must hold the {HEADER}-byte header",
                self.max_record
            );
        }
        if self.records == 0 || self.records > 10_000_000 {
            bail!("record count {} out of range (1 to 10000000)", self.records);
        }
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let max = self.max_record;
        let size = |rng: &mut fastrand::Rng| -> u32 {
            let cap = |c: u32| c.min(max).max(HEADER as u32);
            match rng.u32(0..6) {
                0..=2 => rng.u32(HEADER as u32..=cap(4096)),
                3 | 4 => rng.u32(HEADER as u32..=cap(64 << 10)),
                _ => rng.u32(HEADER as u32..=max),
            }
        };
        // layout order: packed end to end at unaligned offsets
        let mut placed = Vec::with_capacity(self.records as usize);
        let mut off = 0u64;
        for _ in 0..self.records {
            let len = size(&mut rng);
            placed.push((off, len));
            off += u64::from(len);
        }
        // write order: a random permutation of the layout
        rng.shuffle(&mut placed);
        Ok(placed
            .into_iter()
            .enumerate()
            .map(|(seq, (offset, len))| Record {
                seq: seq as u64,
                offset,
                len,
            })
            .collect())
    }

    /// The bytes of one record: header, then payload from the seed and sequence number.
    pub fn bytes(&self, r: &Record) -> Vec<u8> {
        let mut b = vec![0u8; r.len as usize];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&r.seq.to_le_bytes());
        b[16..24].copy_from_slice(&r.offset.to_le_bytes());
        b[24..28].copy_from_slice(&r.len.to_le_bytes());
        let mut rng =
            fastrand::Rng::with_seed(self.seed ^ r.seq.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        rng.fill(&mut b[HEADER..]);
        let crc = checksum(&b);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// crc32c over the record with its checksum field left out.
fn checksum(rec: &[u8]) -> u32 {
    let c = crc32c::crc32c(&rec[..28]);
    crc32c::crc32c_append(c, &rec[HEADER..])
}

/// Whether `rec` carries a checksum that matches its contents (whatever record it is).
pub fn checksum_ok(rec: &[u8]) -> bool {
    rec.len() >= HEADER && u32::from_le_bytes(rec[28..32].try_into().unwrap()) == checksum(rec)
}

/// Settings of the writer.
#[derive(Clone, Debug)]
pub struct WriteOpts {
    pub layout: Layout,
    /// Writer threads on the one file: thread `t` writes the records whose sequence number
    /// is `t` modulo `threads`, in order, and fsyncs after its own records. Neighbouring
    /// records share cache blocks, so threads update the same blocks concurrently.
    pub threads: usize,
    /// Engine cache size; small, so the evictor writes back between fsyncs.
    pub cache_bytes: u64,
    /// Engine I/O with O_DIRECT (else through the guest's page cache).
    pub direct: bool,
    /// Print acknowledgements without calling fsync: a broken writer, to show that the
    /// harness catches lost acknowledged data.
    pub skip_fsync: bool,
    /// Also record each acknowledgement on disk: a block ([`ack_block`]) written with
    /// O_DIRECT | O_DSYNC to this file, preallocated with zeros first. A disk's write log
    /// then shows where in the write stream each acknowledgement happened.
    pub ack_file: Option<std::path::PathBuf>,
}

/// The on-disk acknowledgement of record `seq`: magic, seq, crc32c of both, zeros.
pub fn ack_block(seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; ACK_BLOCK];
    b[..8].copy_from_slice(ACK_MAGIC);
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&b[..16]);
    b[16..20].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The acknowledged sequence numbers found in `data` (any 512-byte-aligned position).
pub fn find_acks(data: &[u8]) -> Vec<u64> {
    data.chunks(512)
        .filter(|c| c.len() >= 20 && &c[..8] == ACK_MAGIC)
        .filter(|c| u32::from_le_bytes(c[16..20].try_into().unwrap()) == crc32c::crc32c(&c[..16]))
        .map(|c| u64::from_le_bytes(c[8..16].try_into().unwrap()))
        .collect()
}

/// The ack file: preallocated with written zeros (not fallocate, whose unwritten extents
/// would turn each acknowledgement into a metadata change), one block per possible ack.
struct AckFile {
    file: std::fs::File,
    next: std::sync::atomic::AtomicU64,
    slots: u64,
    buf: Mutex<AlignedBlock>,
}

/// One O_DIRECT-aligned block.
struct AlignedBlock(Box<[u8]>, usize);

impl AlignedBlock {
    fn new() -> AlignedBlock {
        let raw = vec![0u8; 2 * ACK_BLOCK].into_boxed_slice();
        let pad = raw.as_ptr().align_offset(ACK_BLOCK);
        AlignedBlock(raw, pad)
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.0[self.1..self.1 + ACK_BLOCK]
    }
}

impl AckFile {
    fn create(path: &Path, slots: u64) -> anyhow::Result<AckFile> {
        use std::os::unix::fs::OpenOptionsExt;
        {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .with_context(|| format!("creating the ack file {}", path.display()))?;
            let zeros = vec![0u8; 1 << 20];
            let mut left = slots * ACK_BLOCK as u64;
            let mut w = std::io::BufWriter::new(&f);
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                w.write_all(&zeros[..n])
                    .with_context(|| format!("filling {}", path.display()))?;
                left -= n as u64;
            }
            w.flush()
                .with_context(|| format!("filling {}", path.display()))?;
            drop(w);
            f.sync_all()
                .with_context(|| format!("fsync of {}", path.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
            .open(path)
            .with_context(|| format!("opening {} with O_DIRECT | O_DSYNC", path.display()))?;
        Ok(AckFile {
            file,
            next: std::sync::atomic::AtomicU64::new(0),
            slots,
            buf: Mutex::new(AlignedBlock::new()),
        })
    }

    fn record(&self, seq: u64) -> anyhow::Result<()> {
        let slot = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if slot >= self.slots {
            bail!("the ack file has only {} slots", self.slots);
        }
        let mut b = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        b.get().copy_from_slice(&ack_block(seq));
        self.file
            .write_all_at(b.get(), slot * ACK_BLOCK as u64)
            .with_context(|| format!("writing acknowledgement {seq} to the ack file"))
    }
}

/// Writes the layout's records to `path` (created; it must not exist) through the engine,
/// printing `ACK <seq>` to `out` after each completed fsync: every record of the same
/// writer thread (same `seq % threads`) up to `seq` is durable. Returns the last
/// acknowledged sequence number of each thread.
pub fn write(
    path: &Path,
    opts: &WriteOpts,
    out: &Mutex<dyn Write + Send>,
) -> anyhow::Result<Vec<u64>> {
    use numaio_engine::{Engine, EngineConfig, OpenOptions};
    let layout = opts.layout;
    let records = layout.records()?;
    if opts.threads == 0 || opts.threads as u64 > layout.records.min(64) {
        bail!(
            "{} writer threads: use 1 to {} (at most one per record, 64 at most)",
            opts.threads,
            layout.records.min(64)
        );
    }
    if path.exists() {
        bail!(
            "{} already exists; the workload writes a new file (pick another name)",
            path.display()
        );
    }
    let engine = Engine::new(EngineConfig {
        cache_bytes: opts.cache_bytes,
        direct_io: opts.direct,
        ..EngineConfig::default()
    })
    .context("starting the engine")?;
    let f = engine
        .open(path, OpenOptions::create_rw())
        .with_context(|| format!("opening {} through the engine", path.display()))?;
    if opts.direct && !f.direct() {
        bail!(
            "the engine fell back to buffered I/O for {}: O_DIRECT is needed for this power-cut test (is it on tmpfs?)",
            path.display()
        );
    }
    let ack_file = match &opts.ack_file {
        Some(p) => Some(AckFile::create(p, layout.records)?),
        None => None,
    };
    let say = |line: String| -> anyhow::Result<()> {
        let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(o, "{line}")?;
        o.flush()?;
        Ok(())
    };
    say(format!(
        "POWERLOAD start file={} seed={} records={} max_record={} threads={} direct={} skip_fsync={} backend={} slices={}",
        path.display(),
        layout.seed,
        layout.records,
        layout.max_record,
        opts.threads,
        f.direct(),
        opts.skip_fsync,
        engine.backend_name(),
        engine.slices()
    ))?;
    let n = opts.threads;
    let acked: Vec<anyhow::Result<u64>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..n)
            .map(|t| {
                let (f, records, say, ack_file) = (&f, &records, &say, &ack_file);
                sc.spawn(move || -> anyhow::Result<u64> {
                    let mut rng =
                        fastrand::Rng::with_seed(layout.seed.rotate_left(17) ^ (0x5eed + t as u64));
                    let mine: Vec<&Record> = records.iter().skip(t).step_by(n).collect();
                    let mut until_sync = rng.u32(1..=16);
                    let mut acked = None;
                    for (i, r) in mine.iter().enumerate() {
                        let b = layout.bytes(r);
                        let w = f.pwrite(&b, r.offset).with_context(|| {
                            format!(
                                "pwrite of record {} ({} bytes at {}) to {}",
                                r.seq,
                                r.len,
                                r.offset,
                                path.display()
                            )
                        })?;
                        if w != b.len() {
                            bail!(
                                "short pwrite of record {} to {}: {w} of {} bytes",
                                r.seq,
                                path.display(),
                                b.len()
                            );
                        }
                        until_sync -= 1;
                        if until_sync == 0 || i + 1 == mine.len() {
                            if !opts.skip_fsync {
                                f.fsync().with_context(|| {
                                    format!("fsync of {} after record {}", path.display(), r.seq)
                                })?;
                            }
                            say(format!("{ACK_PREFIX}{}", r.seq))?;
                            if let Some(a) = ack_file {
                                a.record(r.seq)?;
                            }
                            acked = Some(r.seq);
                            until_sync = rng.u32(1..=16);
                        }
                    }
                    acked.context("a writer thread without records")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a writer thread panicked")))
            })
            .collect()
    });
    let acked = acked.into_iter().collect::<anyhow::Result<Vec<u64>>>()?;
    engine.close().context("closing the engine")?;
    say("POWERLOAD done".into())?;
    Ok(acked)
}

/// The highest acknowledged sequence number of each writer thread, from the acknowledged
/// numbers seen in any order (`None`: the thread acknowledged nothing).
pub fn acked_per_thread(acks: &[u64], threads: usize) -> Vec<Option<u64>> {
    let mut out = vec![None; threads.max(1)];
    for &a in acks {
        let t = (a % out.len() as u64) as usize;
        out[t] = out[t].max(Some(a));
    }
    out
}

/// How a verification went.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub file: String,
    pub seed: u64,
    /// Highest acknowledged sequence number of each writer thread (None: nothing).
    pub acked: Vec<Option<u64>>,
    pub file_len: u64,
    /// The file does not exist (every record counts as absent).
    pub file_missing: bool,
    pub acked_intact: u64,
    pub unacked_intact: u64,
    pub unacked_absent: u64,
    pub unacked_torn: u64,
    /// Acknowledged records missing or damaged, and records whose checksum matches
    /// contents that are not theirs (at most 20 listed).
    pub failures: Vec<String>,
    pub failure_count: u64,
}

impl Report {
    fn fail(&mut self, msg: String) {
        self.failure_count += 1;
        if self.failures.len() < 20 {
            self.failures.push(msg);
        }
    }

    pub fn ok(&self) -> bool {
        self.failure_count == 0
    }
}

/// Checks `path` against the layout, given the highest acknowledged sequence number of each
/// writer thread (see [`acked_per_thread`]; one entry for a single writer).
pub fn verify(path: &Path, layout: &Layout, acked: &[Option<u64>]) -> anyhow::Result<Report> {
    let records = layout.records()?;
    if acked.is_empty() {
        bail!("give the acknowledged sequence number of at least one writer thread");
    }
    // a file that did not survive is checked as an empty one: its acknowledged records are lost
    let file = match std::fs::File::open(path) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(e).with_context(|| format!("opening {} for verification", path.display()))
        }
    };
    let file_len = match &file {
        Some(f) => f
            .metadata()
            .with_context(|| format!("stat {}", path.display()))?
            .len(),
        None => 0,
    };
    let mut rep = Report {
        file: path.display().to_string(),
        seed: layout.seed,
        acked: acked.to_vec(),
        file_len,
        file_missing: file.is_none(),
        ..Report::default()
    };
    let mut buf = Vec::new();
    for r in &records {
        let want = layout.bytes(r);
        buf.resize(want.len(), 0);
        let mut got = 0;
        while let Some(file) = file.as_ref().filter(|_| got < buf.len()) {
            match file.read_at(&mut buf[got..], r.offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "reading record {} at {} of {}",
                            r.seq,
                            r.offset,
                            path.display()
                        )
                    })
                }
            }
        }
        let is_acked = acked[(r.seq % acked.len() as u64) as usize].is_some_and(|a| r.seq <= a);
        let intact = got == want.len() && buf == want;
        if intact {
            if is_acked {
                rep.acked_intact += 1;
            } else {
                rep.unacked_intact += 1;
            }
            continue;
        }
        let present = &buf[..got];
        let what = if got < want.len() {
            format!("only {got} of {} bytes before the end of file", want.len())
        } else {
            let first = present
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            let wrong = present.iter().zip(&want).filter(|(a, b)| a != b).count();
            format!("{wrong} bytes differ, the first at record byte {first}")
        };
        if is_acked {
            rep.fail(format!(
                "acknowledged record {} ({} bytes at offset {}) lost: {what}",
                r.seq, r.len, r.offset
            ));
        } else if got == want.len() && checksum_ok(present) {
            rep.fail(format!(
                    "record {} ({} bytes at offset {}) holds other contents with a valid checksum: {what}",
                    r.seq, r.len, r.offset
                ),
            );
        } else if present.iter().all(|&b| b == 0) {
            rep.unacked_absent += 1;
        } else {
            rep.unacked_torn += 1;
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            seed: 42,
            records: 300,
            max_record: 200_000,
        }
    }

    #[test]
    fn layout_packs_records_and_is_deterministic() {
        let l = layout();
        let a = l.records().unwrap();
        assert_eq!(a, l.records().unwrap());
        let mut by_off = a.clone();
        by_off.sort_by_key(|r| r.offset);
        let mut end = 0;
        for r in &by_off {
            assert_eq!(r.offset, end, "records are packed end to end");
            assert!(r.len as usize >= HEADER && r.len <= l.max_record);
            end += u64::from(r.len);
        }
        // written in a shuffled order, at unaligned offsets
        assert!(a.windows(2).any(|w| w[1].offset < w[0].offset));
        assert!(a.iter().any(|r| r.offset % 512 != 0));
        let b = l.bytes(&a[7]);
        assert!(checksum_ok(&b));
        assert_eq!(&b[..8], MAGIC);
        let mut c = b.clone();
        c[HEADER + 1] ^= 1;
        assert!(!checksum_ok(&c));
        assert!(Layout { max_record: 8, ..l }.records().is_err());
    }

    /// The verifier's classification, on a file written without the engine: a prefix of
    /// records, one torn, one forged with a valid checksum, one acknowledged record lost.
    #[test]
    fn verifier_classifies_records() {
        let l = layout();
        let recs = l.records().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = std::fs::File::create(&path).unwrap();
        for r in &recs[..200] {
            f.write_all_at(&l.bytes(r), r.offset).unwrap();
        }
        let rep = verify(&path, &l, &[Some(149)]).unwrap();
        assert!(rep.ok(), "{rep:?}");
        assert_eq!(rep.acked_intact, 150);
        assert_eq!(rep.unacked_intact, 50);
        assert_eq!(rep.unacked_absent + rep.unacked_torn, 100);

        // a torn unacknowledged record is fine
        let t = recs[210];
        let mut b = l.bytes(&t);
        b.truncate(HEADER + (b.len() - HEADER) / 2);
        f.write_all_at(&b, t.offset).unwrap();
        let rep = verify(&path, &l, &[Some(149)]).unwrap();
        assert!(rep.ok(), "{rep:?}");

        // record 220's header with other payload and a recomputed checksum: contents the
        // checksum cannot tell from the real ones
        let victim = recs[220];
        let mut forged = l.bytes(&victim);
        forged[HEADER] ^= 0x55;
        let crc = checksum(&forged);
        forged[28..32].copy_from_slice(&crc.to_le_bytes());
        assert!(checksum_ok(&forged));
        f.write_all_at(&forged, victim.offset).unwrap();
        let rep = verify(&path, &l, &[Some(149)]).unwrap();
        assert_eq!(rep.failure_count, 1, "{rep:?}");
        assert!(rep.failures[0].contains("valid checksum"), "{rep:?}");
        f.write_all_at(&vec![0u8; forged.len()], victim.offset)
            .unwrap();

        // an acknowledged record damaged by one byte
        let a = recs[3];
        f.write_all_at(&[0xff], a.offset + u64::from(a.len) - 1)
            .unwrap();
        let rep = verify(&path, &l, &[Some(149)]).unwrap();
        assert_eq!(rep.failure_count, 1, "{rep:?}");
        assert!(
            rep.failures[0].contains("acknowledged record 3 "),
            "{rep:?}"
        );
    }

    #[test]
    fn ack_blocks_are_found_at_sector_boundaries() {
        let mut data = vec![7u8; 3 * 512];
        data.extend(ack_block(41));
        data.extend(vec![0u8; 512]);
        assert_eq!(find_acks(&data), vec![41]);
        let mut bad = ack_block(3);
        bad[9] ^= 1;
        assert!(find_acks(&bad).is_empty());
    }

    fn write_and_verify(threads: usize, cache_bytes: u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w");
        let opts = WriteOpts {
            layout: Layout {
                seed: 7 + threads as u64,
                records: 120,
                max_record: 100_000,
            },
            threads,
            cache_bytes,
            direct: false,
            skip_fsync: false,
            ack_file: Some(dir.path().join("acks")),
        };
        let out = Mutex::new(Vec::new());
        let last = write(&path, &opts, &out).unwrap();
        assert_eq!(last.len(), threads);
        let text = String::from_utf8(out.into_inner().unwrap()).unwrap();
        let acks: Vec<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix(ACK_PREFIX))
            .map(|s| s.parse().unwrap())
            .collect();
        assert!(acks.len() >= 120 / 16, "{text}");
        let per = acked_per_thread(&acks, threads);
        assert_eq!(per, last.iter().map(|&a| Some(a)).collect::<Vec<_>>());
        assert_eq!(per.iter().flatten().max(), Some(&119));
        let rep = verify(&path, &opts.layout, &per).unwrap();
        assert!(rep.ok(), "{rep:?}");
        assert_eq!(rep.acked_intact, 120);
        let mut on_disk = find_acks(&std::fs::read(dir.path().join("acks")).unwrap());
        on_disk.sort();
        let mut printed = acks.clone();
        printed.sort();
        assert_eq!(on_disk, printed);
        // the writer refuses to reuse a file
        assert!(write(&path, &opts, &Mutex::new(Vec::new())).is_err());
    }

    /// The writer through the engine on the host's file system; the file verifies with every
    /// record acknowledged.
    #[test]
    fn engine_writer_round_trip() {
        write_and_verify(1, 2 << 20);
    }

    #[test]
    fn acks_per_thread() {
        assert_eq!(
            acked_per_thread(&[0, 3, 1, 5, 4], 2),
            vec![Some(4), Some(5)]
        );
        assert_eq!(acked_per_thread(&[2], 3), vec![None, None, Some(2)]);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        assert!(verify(&p, &layout(), &[]).is_err());
    }
}
