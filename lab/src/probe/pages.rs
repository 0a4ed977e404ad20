//! `numaio-probe pages`: reads a whole file once, with read(2) or through a shared mmap, and
//! prints one line `sum=<hex> bytes=<n> nodes=<json>`: a checksum (FNV-1a, 64 bits) of the
//! bytes read, so a test compares what a program sees with the original, and, for mmap,
//! the node of every page the read touched (`move_pages` queries of the mapping), so a test
//! checks that a program's own accesses were node-local. With read(2) `nodes` is `{}`.

use anyhow::Context;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The file to read.
    #[arg(long)]
    file: PathBuf,
    /// `read` (read(2) in 1 MiB pieces) or `mmap` (a shared read-only mapping, every page
    /// touched in order).
    #[arg(long, default_value = "read")]
    mode: String,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let mut f = std::fs::File::open(&a.file)
        .with_context(|| format!("cannot open {}", a.file.display()))?;
    let len = f.metadata()?.len() as usize;
    let mut h = FNV_OFFSET;
    let mut nodes: BTreeMap<String, u64> = BTreeMap::new();
    match a.mode.as_str() {
        "read" => {
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                h = fnv(h, &buf[..n]);
            }
        }
        "mmap" if len > 0 => {
            // SAFETY: a fresh read-only shared mapping of an open file; no other mapping
            // aliases it mutably, and it is unmapped below before `f` is closed.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                anyhow::bail!(
                    "mmap of {}: {}",
                    a.file.display(),
                    std::io::Error::last_os_error()
                );
            }
            // SAFETY: the mapping is `len` readable bytes until the munmap below.
            let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
            h = fnv(h, bytes);
            let page = numaio_sys::page_size();
            let pages: Vec<*const u8> = (0..len.div_ceil(page))
                .map(|i| bytes.as_ptr().wrapping_add(i * page))
                .collect();
            let status = numaio_sys::query_pages(0, &pages);
            // SAFETY: unmaps exactly the mapping made above; `bytes` is not used after.
            unsafe { libc::munmap(p, len) };
            for s in status.context("move_pages query of the mapping")? {
                let key = match s {
                    numaio_sys::PageStatus::Node(n) => n.to_string(),
                    other => format!("{other:?}"),
                };
                *nodes.entry(key).or_default() += 1;
            }
        }
        "mmap" => {}
        m => anyhow::bail!("--mode {m:?}: use read or mmap"),
    }
    println!(
        "sum={h:016x} bytes={len} nodes={}",
        serde_json::to_string(&nodes)?
    );
    Ok(ExitCode::SUCCESS)
}
