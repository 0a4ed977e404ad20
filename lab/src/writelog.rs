//! The write log of a guest's disk, in the dm-log-writes format that QEMU's `blklogwrites`
//! block driver writes (enable it with [`crate::Scenario::write_log`]): every write,
//! discard and flush the guest sent, in the order QEMU handled them. Replaying a prefix of
//! the log onto a copy of the image as it was before the boot gives the disk as a power
//! cut at that moment would have left it (a disk that lost everything after the prefix).
//!
//! Layout (little endian): a superblock in sector 0 (magic, version, number of entries,
//! sector size), then per entry one sector holding `sector, nr_sectors, flags, data_len`
//! followed, for writes, by `nr_sectors` sectors of data. The superblock's entry count is
//! updated at each flush, so the log ends at the last flush the guest sent.

use crate::error::{LabError, LabResult};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: u64 = 0x006a_7366_7773_6872;
const VERSION: u64 = 1;
pub const FLUSH: u64 = 1;
pub const FUA: u64 = 1 << 1;
pub const DISCARD: u64 = 1 << 2;
pub const MARK: u64 = 1 << 3;

/// One logged request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub index: u64,
    /// Byte offset on the disk and length (0 for a flush).
    pub offset: u64,
    pub len: u64,
    pub flags: u64,
    /// Where the written data starts in the log file (writes only).
    data_at: u64,
}

impl LogEntry {
    pub fn is_flush(&self) -> bool {
        self.flags & FLUSH != 0
    }
    pub fn is_discard(&self) -> bool {
        self.flags & DISCARD != 0
    }
    pub fn is_mark(&self) -> bool {
        self.flags & MARK != 0
    }
}

/// An opened write log.
pub struct WriteLog {
    path: PathBuf,
    file: std::fs::File,
    sector: u64,
    entries: Vec<LogEntry>,
}

fn bad(path: &Path, what: String) -> LabError {
    LabError::BadDisk(format!("write log {}: {what}", path.display()))
}

impl WriteLog {
    /// Opens a log and reads its entry headers.
    pub fn open(path: impl Into<PathBuf>) -> LabResult<WriteLog> {
        let path = path.into();
        let file = std::fs::File::open(&path).map_err(LabError::io(format!(
            "opening the write log {}",
            path.display()
        )))?;
        let log_len = file
            .metadata()
            .map_err(LabError::io(format!("stat {}", path.display())))?
            .len();
        let mut sb = [0u8; 28];
        file.read_exact_at(&mut sb, 0).map_err(|e| {
            bad(
                &path,
                format!("no superblock ({e}); did the guest send no flush?"),
            )
        })?;
        let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        if u64_at(&sb, 0) != MAGIC || u64_at(&sb, 8) != VERSION {
            return Err(bad(
                &path,
                "not a dm-log-writes log (bad magic or version)".into(),
            ));
        }
        let count = u64_at(&sb, 16);
        let sector = u64::from(u32::from_le_bytes(sb[24..28].try_into().unwrap()));
        if !sector.is_power_of_two() || !(512..=1 << 20).contains(&sector) {
            return Err(bad(&path, format!("sector size {sector} out of range")));
        }
        let mut entries = Vec::new();
        let mut pos = sector;
        let mut hdr = [0u8; 32];
        for index in 0..count {
            file.read_exact_at(&mut hdr, pos)
                .map_err(|e| bad(&path, format!("entry {index} at byte {pos}: {e}")))?;
            let (s, n, flags) = (u64_at(&hdr, 0), u64_at(&hdr, 8), u64_at(&hdr, 16));
            if flags & !(FLUSH | FUA | DISCARD | MARK) != 0 {
                return Err(bad(
                    &path,
                    format!("entry {index}: unknown flags {flags:#x}"),
                ));
            }
            let data_at = pos + sector;
            let (offset, len) = (s.checked_mul(sector), n.checked_mul(sector));
            let (Some(offset), Some(len)) = (offset, len) else {
                return Err(bad(
                    &path,
                    format!("entry {index}: sector {s} + {n} overflows"),
                ));
            };
            pos = data_at;
            if flags & (DISCARD | MARK) == 0 {
                pos += len;
            } else if flags & MARK != 0 {
                pos += u64_at(&hdr, 24).div_ceil(sector) * sector;
            }
            if pos > log_len {
                return Err(bad(
                    &path,
                    format!("entry {index} runs past the end of the log"),
                ));
            }
            entries.push(LogEntry {
                index,
                offset,
                len,
                flags,
                data_at,
            });
        }
        Ok(WriteLog {
            path,
            file,
            sector,
            entries,
        })
    }

    pub fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    pub fn sector_size(&self) -> u64 {
        self.sector
    }

    /// The data a write entry wrote (empty for flushes, discards and marks).
    pub fn data(&self, e: &LogEntry) -> LabResult<Vec<u8>> {
        if e.flags & (DISCARD | MARK) != 0 || e.len == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; e.len as usize];
        self.file
            .read_exact_at(&mut buf, e.data_at)
            .map_err(LabError::io(format!(
                "reading entry {} of {}",
                e.index,
                self.path.display()
            )))?;
        Ok(buf)
    }

    /// Applies one entry to a disk image: writes its data, zeros a discarded range.
    pub fn apply(&self, e: &LogEntry, data: &[u8], disk: &std::fs::File) -> LabResult<()> {
        let ctx = || format!("replaying entry {} of {}", e.index, self.path.display());
        if e.is_discard() {
            // what a discarded range reads back as is undefined; zeros are one answer
            let zeros = vec![0u8; e.len.min(1 << 20) as usize];
            let mut off = 0;
            while off < e.len {
                let n = (e.len - off).min(zeros.len() as u64) as usize;
                disk.write_all_at(&zeros[..n], e.offset + off)
                    .map_err(LabError::io(ctx()))?;
                off += n as u64;
            }
        } else if !data.is_empty() {
            disk.write_all_at(data, e.offset)
                .map_err(LabError::io(ctx()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(sector: u64, n: u64, flags: u64, data_len: u64) -> Vec<u8> {
        let mut e = vec![0u8; 512];
        for (i, v) in [sector, n, flags, data_len].into_iter().enumerate() {
            e[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        e
    }

    #[test]
    fn reads_and_replays_a_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut log = vec![0u8; 512];
        log[..8].copy_from_slice(&MAGIC.to_le_bytes());
        log[8..16].copy_from_slice(&VERSION.to_le_bytes());
        log[16..24].copy_from_slice(&4u64.to_le_bytes());
        log[24..28].copy_from_slice(&512u32.to_le_bytes());
        log.extend(entry(2, 2, 0, 0));
        log.extend(vec![0xab; 1024]);
        log.extend(entry(0, 0, FLUSH, 0));
        log.extend(entry(3, 1, DISCARD, 0));
        log.extend(entry(0, 1, FUA, 0));
        log.extend(vec![0xcd; 512]);
        std::fs::write(&path, &log).unwrap();
        let wl = WriteLog::open(&path).unwrap();
        let e = wl.entries();
        assert_eq!(e.len(), 4);
        assert_eq!((e[0].offset, e[0].len), (1024, 1024));
        assert!(e[1].is_flush() && e[2].is_discard());
        let disk_path = dir.path().join("disk");
        std::fs::write(&disk_path, vec![0x11u8; 4096]).unwrap();
        let disk = std::fs::OpenOptions::new()
            .write(true)
            .open(&disk_path)
            .unwrap();
        for x in e {
            wl.apply(x, &wl.data(x).unwrap(), &disk).unwrap();
        }
        let d = std::fs::read(&disk_path).unwrap();
        assert!(d[..512].iter().all(|&b| b == 0xcd));
        assert!(d[512..1024].iter().all(|&b| b == 0x11));
        assert!(d[1024..1536].iter().all(|&b| b == 0xab));
        assert!(d[1536..2048].iter().all(|&b| b == 0), "discarded");
        // a truncated log is an error, not a panic
        std::fs::write(&path, &log[..log.len() - 100]).unwrap();
        assert!(WriteLog::open(&path).is_err());
        std::fs::write(&path, b"short").unwrap();
        assert!(WriteLog::open(&path).is_err());
    }
}
