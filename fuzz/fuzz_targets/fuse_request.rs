//! The io_uring transport's request decoder (`numaio_fuse::request::decode`): the first 40
//! bytes are `fuse_in_header`, the next 128 the per-op header area, the rest the payload.
//! Every input decodes or is refused with an errno; what decodes borrows its names and data
//! from the payload (never past it), write data has exactly its stated size, and requests
//! that carry nothing in the payload borrow nothing from it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_fuse::request::{decode, takes_payload, Request};

fuzz_target!(|data: &[u8]| {
    let (header, rest) = data.split_at(data.len().min(40));
    let (op_in, payload) = rest.split_at(rest.len().min(128));
    let opcode = header.get(4..8).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
    let r = match decode(header, op_in, payload) {
        Ok((_, r)) => r,
        Err(e) => {
            assert!(e == libc::EINVAL || e == libc::ENOSYS, "errno {e}");
            return;
        }
    };
    assert!(header.len() == 40);
    let inside = |s: &[u8]| {
        let (p, q) = (payload.as_ptr() as usize, s.as_ptr() as usize);
        s.is_empty() || (q >= p && q + s.len() <= p + payload.len())
    };
    let slices: Vec<&[u8]> = match &r {
        Request::Lookup { name, .. }
        | Request::Unlink { name, .. }
        | Request::Rmdir { name, .. }
        | Request::Removexattr { name, .. }
        | Request::Getxattr { name, .. }
        | Request::Mkdir { name, .. }
        | Request::Mknod { name, .. }
        | Request::Create { name, .. } => vec![name],
        Request::Link { newname, .. } => vec![newname],
        Request::Symlink { name, target, .. } => vec![name, target],
        Request::Rename { name, newname, .. } => vec![name, newname],
        Request::Setxattr { name, value, .. } => vec![name, value],
        Request::Write { data, .. } => {
            let size = u32::from_le_bytes(op_in[16..20].try_into().unwrap());
            assert_eq!(data.len(), size as usize);
            vec![data]
        }
        _ => vec![],
    };
    for s in &slices {
        assert!(inside(s), "{r:?} borrows outside the payload");
    }
    if !takes_payload(opcode) {
        assert!(slices.is_empty(), "{r:?} took the payload");
    }
    // Names end at their NUL: none holds one.
    if let Request::Lookup { name, .. } | Request::Unlink { name, .. } = &r {
        assert!(!name.contains(&0));
    }
});
