//! The checksum file's header and entry decoders: any bytes give a value or an error, never
//! a panic, and what decodes encodes back to bytes that decode the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_engine::sumfile::{Entry, SumHeader, ENTRY_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = SumHeader::decode(data) {
        assert_eq!(SumHeader::decode(&h.encode()), Ok(h), "round trip of {data:?}");
    }
    for chunk in data.chunks_exact(ENTRY_LEN) {
        let b: &[u8; ENTRY_LEN] = chunk.try_into().expect("exact chunk");
        if let Ok(e) = Entry::decode(b) {
            assert_eq!(Entry::decode(&e.encode()), Ok(e), "round trip of {chunk:?}");
        }
    }
});
