//! A real proof from the official vectors (or one built from a vector
//! tree), mutated: proof bytes, nodes, bitmap, sums, key and leaf.
//!
//! Checks decoding as `proof_decode` does, then verification of whatever
//! decodes (strictly, or else as Go would) against the tree's root: equal
//! to a reference walk (hash, sum, overflow level), true for the seed,
//! false whenever the key is unchanged but the leaf or the proof differ, and
//! true only for the leaf the tree really holds at that key. See
//! `src/props.rs`, `run_case`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ms_smt_fuzz::props::{Stats, run_case};
use ms_smt_fuzz::{corpus, parse_verify};

fuzz_target!(
    init: {
        let _ = corpus();
    },
    |data: &[u8]| {
        let (case, ops) = parse_verify(data);
        let mut stats = Stats::default();
        run_case(corpus(), case, &ops, &mut stats);
    }
);
