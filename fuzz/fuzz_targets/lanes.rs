//! The hashing lanes against `sha2`: up to eight branch preimages from the
//! input, hashed 1, 2, 3 and 4 at a time (plain and with the second block
//! scheduled), must equal SHA-256 of the 72-byte preimages.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ms_smt::Hash;
use ms_smt_descent::hash::BranchInput;
use ms_smt_descent::hash::SumSchedule;
use ms_smt_descent::hash::branch_hashes;
use ms_smt_descent::hash::scheduled_hashes;
use sha2::{Digest, Sha256};

fn reference(input: &BranchInput) -> Hash {
    let mut h = Sha256::new();
    h.update(input.0.0);
    h.update(input.1.0);
    h.update(input.2.to_be_bytes());
    Hash(h.finalize().into())
}

fn check<const N: usize>(inputs: &[BranchInput]) {
    for chunk in inputs.chunks_exact(N) {
        let batch: [BranchInput; N] = std::array::from_fn(|i| chunk[i]);
        let want: [Hash; N] = std::array::from_fn(|i| reference(&batch[i]));
        assert_eq!(branch_hashes(&batch), want, "branch_hashes::<{N}>");
        let pairs: [(Hash, Hash); N] = std::array::from_fn(|i| (batch[i].0, batch[i].1));
        let schedules: [SumSchedule; N] = std::array::from_fn(|i| SumSchedule::new(batch[i].2));
        let refs: [&SumSchedule; N] = std::array::from_fn(|i| &schedules[i]);
        assert_eq!(scheduled_hashes(&pairs, &refs), want, "scheduled_hashes::<{N}>");
    }
}

fuzz_target!(|data: &[u8]| {
    let inputs: Vec<BranchInput> = data
        .chunks_exact(72)
        .take(8)
        .map(|c| {
            let mut left = [0u8; 32];
            let mut right = [0u8; 32];
            let mut sum = [0u8; 8];
            left.copy_from_slice(&c[..32]);
            right.copy_from_slice(&c[32..64]);
            sum.copy_from_slice(&c[64..]);
            (Hash(left), Hash(right), u64::from_be_bytes(sum))
        })
        .collect();
    check::<1>(&inputs);
    check::<2>(&inputs);
    check::<3>(&inputs);
    check::<4>(&inputs);
});
