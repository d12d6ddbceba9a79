//! An arbitrary 256-sibling proof (bitmap, explicit nodes including
//! empty-subtree hashes of the wrong or the right level, sums up to
//! `u64::MAX`), a key and a leaf.
//!
//! Checks that `to_bytes` is the canonical encoding and decodes strictly
//! back to the proof (empty-hash siblings' sums dropped), that root/verify
//! agree with a reference walk, that no other leaf or root verifies, and
//! that a key with flipped bits verifies exactly when the flipped levels'
//! children hash alike. See `src/props.rs`, `check_roundtrip`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ms_smt_fuzz::parse_roundtrip;
use ms_smt_fuzz::props::{Stats, check_roundtrip};

fuzz_target!(|data: &[u8]| {
    if let Ok(input) = parse_roundtrip(data) {
        let mut stats = Stats::default();
        check_roundtrip(&input, &mut stats);
    }
});
