//! Page-cache read cost: read(2) throughput of one thread from a cached file whose pages were
//! allocated on a chosen node (the writing thread's memory policy decides where page-cache
//! pages go).

use crate::error::{ModelError, ModelResult};
use numaio_sys::{set_mempolicy, Policy};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A temporary file whose cached pages sit on `node`; removed on drop.
pub struct CachedFile {
    pub path: PathBuf,
    pub len: u64,
}

impl CachedFile {
    /// Writes `len` bytes into a new file in `dir` from a thread bound to `node`.
    pub fn create(dir: &Path, node: u32, len: u64) -> ModelResult<CachedFile> {
        let path = dir.join(format!(".numaio-probe-{}-{node}.tmp", std::process::id()));
        let p2 = path.clone();
        let r: ModelResult<()> = std::thread::scope(|s| {
            s.spawn(move || {
                set_mempolicy(&Policy::bind(&[node]))?;
                let io = |e: std::io::Error| ModelError::Io {
                    path: p2.clone(),
                    what: "write the probe's page-cache file (choose another directory with --dir)"
                        .into(),
                    source: e,
                };
                let mut f = std::fs::File::create(&p2).map_err(io)?;
                let chunk = vec![0x5au8; 1 << 20];
                let mut left = len;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    f.write_all(&chunk[..n]).map_err(io)?;
                    left -= n as u64;
                }
                Ok(())
            })
            .join()
            .expect("page-cache writer panicked")
        });
        let file = CachedFile { path, len };
        r?;
        Ok(file)
    }

    /// MB/s of read(2) in `bs`-byte requests by a thread pinned to `cpu`, for at least `time`.
    pub fn read_rate(&self, cpu: u32, bs: usize, time: Duration) -> ModelResult<f64> {
        let f = std::fs::File::open(&self.path).map_err(|e| ModelError::Io {
            path: self.path.clone(),
            what: "open the probe's page-cache file".into(),
            source: e,
        })?;
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = super::pin::pin_to_cpu(cpu);
                let mut buf = vec![0u8; bs];
                let mut bytes = 0u64;
                let mut off = 0u64;
                // One untimed pass so the buffer and page tables are warm.
                while off < self.len {
                    match f.read_at(&mut buf, off) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => off += n as u64,
                    }
                }
                let t = Instant::now();
                while t.elapsed() < time {
                    off = 0;
                    while off < self.len {
                        let n = f.read_at(&mut buf, off).map_err(|e| ModelError::Io {
                            path: self.path.clone(),
                            what: "read the probe's page-cache file".into(),
                            source: e,
                        })?;
                        if n == 0 {
                            break;
                        }
                        off += n as u64;
                        bytes += n as u64;
                    }
                }
                Ok(bytes as f64 / t.elapsed().as_secs_f64() / 1e6)
            })
            .join()
            .expect("page-cache reader panicked")
        })
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
