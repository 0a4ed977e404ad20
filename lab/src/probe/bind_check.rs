//! `numaio-probe bind-check --node N --mib M`: maps private anonymous memory, binds it to
//! node N with our `mbind` wrapper, faults it in, and checks every page's node with our
//! `move_pages` query. Prints `{"node":N,"pages":P,"on_node":{"N":P},"not_present":0}`;
//! exits 1 unless every page is on N.

use anyhow::{bail, Context};
use numaio_sys::{query_pages, MbindFlags, PageStatus};
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

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.mib == 0 {
        bail!("--mib must be at least 1");
    }
    let page = numaio_sys::page_size();
    let len = a.mib * 1024 * 1024;
    let mut map =
        numaio_sys::NodeBuffer::anonymous(len).with_context(|| format!("mapping {} MiB", a.mib))?;
    map.bind(a.node, MbindFlags::default())
        .with_context(|| format!("binding {} MiB to node {}", a.mib, a.node))?;
    let addr = map.as_ptr();
    let pages: Vec<*const u8> = (0..len / page)
        .map(|i| {
            // SAFETY: inside the mapping; writing faults the page in under the policy.
            unsafe {
                let p = addr.add(i * page);
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
