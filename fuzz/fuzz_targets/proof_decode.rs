//! Arbitrary bytes → `Proof::from_bytes` / `CompressedProof::decode`.
//!
//! Never panics; agrees with a reference strict decoder (value and error);
//! accepted bytes re-encode to themselves (decode → encode, and decompress →
//! compress); whatever Go's lenient decoder accepts re-encodes canonically
//! and decodes strictly. See `src/props.rs`, `check_decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ms_smt_fuzz::props::{Stats, check_decode};

fuzz_target!(|data: &[u8]| {
    let mut stats = Stats::default();
    let _ = check_decode(data, &mut stats);
});
