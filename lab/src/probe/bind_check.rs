//! `numaio-probe bind-check --node N --mib M`: maps private anonymous memory, binds it to
//! node N with our `mbind` wrapper, faults it in, and checks every page's node with our
//! `move_pages` query. Prints `{"node":N,"pages":P,"on_node":{"N":P},"not_present":0}`;
//! exits 1 unless every page is on N.

use anyhow::{bail, Context};
use numaio_sys::{mbind, query_pages, MbindFlags, PageStatus, Policy};
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Node to bind to.
    #[arg(long)]
    node: u32,
    /// Size of the mapping in MiB.
    #[arg(long, default_value_t = 16)]
    mib: usize,
}

/// A private anonymous mapping, unmapped on drop.
struct Mapping {
    addr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> anyhow::Result<Mapping> {
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!(
                "mmap of {len} bytes failed: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Mapping {
            addr: p as *mut u8,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.mib == 0 {
        bail!("--mib must be at least 1");
    }
    let page = numaio_sys::page_size();
    let len = a.mib * 1024 * 1024;
    let map = Mapping::new(len)?;
    // SAFETY: the range is our own fresh mapping, nothing else uses it.
    unsafe {
        mbind(
            map.addr,
            len,
            &Policy::bind(&[a.node]),
            MbindFlags::default(),
        )
    }
    .with_context(|| format!("binding {} MiB to node {}", a.mib, a.node))?;
    let pages: Vec<*const u8> = (0..len / page)
        .map(|i| {
            // SAFETY: inside the mapping; writing faults the page in under the policy.
            unsafe {
                let p = map.addr.add(i * page);
                p.write_volatile(1);
                p as *const u8
            }
        })
        .collect();
    let status = query_pages(0, &pages).context("querying page nodes with move_pages")?;
    let mut on_node: BTreeMap<String, usize> = BTreeMap::new();
    let mut other = 0usize;
    for s in &status {
        match s {
            PageStatus::Node(n) => *on_node.entry(n.to_string()).or_default() += 1,
            _ => other += 1,
        }
    }
    let on_target = on_node.get(&a.node.to_string()).copied().unwrap_or(0);
    println!(
        "{}",
        serde_json::json!({
            "node": a.node,
            "pages": pages.len(),
            "on_node": on_node,
            "not_on_any_node": other,
        })
    );
    Ok(if on_target == pages.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
