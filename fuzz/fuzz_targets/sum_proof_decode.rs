//! Sum proofs: arbitrary bytes, or a real range or prefix proof with
//! arbitrary byte edits → `SumProof::decode`, then `verify_range` against
//! every case's root and range.
//!
//! Never panics; decoded bytes re-encode to themselves; whatever verifies
//! gives the true total. See `src/sum.rs`, `check_sum_proof`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ms_smt_fuzz::sum::{SumStats, check_sum_proof, sum_cases};

fuzz_target!(
    init: {
        let _ = sum_cases();
    },
    |data: &[u8]| {
        let mut stats = SumStats::default();
        check_sum_proof(data, &mut stats);
    }
);
