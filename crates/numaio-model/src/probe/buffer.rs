//! Probe buffers: anonymous memory bound to one node (strict `mbind`), faulted in, and
//! verified with `move_pages` queries before any timing.

use crate::error::{ModelError, ModelResult};
use numaio_sys::{query_pages, MbindFlags, PageStatus};

/// Anonymous memory whose pages all sit on `node`.
pub struct NodeBuffer {
    map: numaio_sys::NodeBuffer,
    pub node: u32,
}

impl NodeBuffer {
    /// Maps `len` bytes (rounded up to 2 MiB), binds them to `node`, asks for transparent huge
    /// pages when `huge`, faults every page in and checks a sample of pages' node.
    pub fn new(len: usize, node: u32, huge: bool) -> ModelResult<NodeBuffer> {
        let align = 2 << 20;
        let len = len.div_ceil(align).max(1) * align;
        let mut map = numaio_sys::NodeBuffer::anonymous(len).map_err(|e| {
            ModelError::Probe(format!("cannot map {} MiB for node {node}: {e}", len >> 20))
        })?;
        if huge {
            map.advise_huge();
        }
        map.bind(
            node,
            MbindFlags {
                strict: true,
                ..MbindFlags::default()
            },
        )?;
        map.fault_in();
        let buf = NodeBuffer { map, node };
        buf.verify()?;
        Ok(buf)
    }

    /// Checks that sampled pages sit on the buffer's node.
    fn verify(&self) -> ModelResult<()> {
        let page = numaio_sys::page_size();
        let pages = self.map.len() / page;
        let step = (pages / 256).max(1);
        let addrs: Vec<*const u8> = (0..pages)
            .step_by(step)
            // SAFETY: the offset stays inside the mapping.
            .map(|k| unsafe { self.map.as_ptr().add(k * page) } as *const u8)
            .collect();
        let st = query_pages(0, &addrs)?;
        if let Some(bad) = st.iter().find(|s| **s != PageStatus::Node(self.node)) {
            return Err(ModelError::Probe(format!(
                "a page bound to node {} reports {bad:?}; the binding did not hold",
                self.node
            )));
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }
}
