//! Several independent branch hashes at once: the SHA-NI kernel where the
//! CPU has it, one `sha2` compression pair after another everywhere else.
//!
//! Callers group independent work (the climbs of different compacted
//! leaves above all) into [`branch_hashes`] calls of the width
//! [`hash_lanes`](crate::hash_lanes) names (the [`Tuning`](crate::Tuning)
//! in effect). Every hash counts as one call, as
//! [`branch_hash`](super::branch_hash) does.

use std::sync::LazyLock;

use super::climb::Climb;
use super::schedule::SumSchedule;
use ms_smt_core::add_hash_calls;
use ms_smt_core::hash::{Hash, branch_digest};

/// The inputs of one branch hash: left child, right child, sum.
pub type BranchInput = (Hash, Hash, u64);

#[cfg(target_arch = "x86_64")]
static KERNEL: LazyLock<Option<super::shani::ShaNi>> = LazyLock::new(super::shani::ShaNi::detect);

/// True when this CPU runs the interleaved SHA-NI kernel.
pub fn has_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        KERNEL.is_some()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `N` branch hashes `H(left || right || be64(sum))` at once, counted as
/// `N` calls. Equal to `N` calls of [`branch_hash`](super::branch_hash).
#[inline]
pub fn branch_hashes<const N: usize>(inputs: &[BranchInput; N]) -> [Hash; N] {
    add_hash_calls(N as u64);
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = *KERNEL {
        return kernel.branch_hashes(inputs);
    }
    fallback(inputs)
}

/// `N` branch hashes `H(left || right || be64(sum))` whose sums come with
/// their second block already scheduled ([`SumSchedule`]): the lifts' form,
/// where one sum is hashed at every level. Counted as `N` calls.
#[inline]
pub fn scheduled_hashes<const N: usize>(
    pairs: &[(Hash, Hash); N],
    schedules: &[&SumSchedule; N],
) -> [Hash; N] {
    add_hash_calls(N as u64);
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = *KERNEL {
        return kernel.scheduled_hashes(pairs, schedules);
    }
    std::array::from_fn(|i| branch_digest(&pairs[i].0, &pairs[i].1, schedules[i].sum()))
}

/// Lifts `climb`'s `N` nodes `nodes` up its `steps` levels (see [`Climb`]).
/// Counted as `N × steps` calls; on SHA-NI the state stays in registers
/// between levels.
#[inline]
pub fn climb<const N: usize>(nodes: &mut [Hash; N], climb: &Climb<'_, N>) {
    add_hash_calls((N * climb.steps) as u64);
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = *KERNEL {
        return kernel.climb(nodes, climb);
    }
    climb_fallback(nodes, climb);
}

/// [`climb`]'s portable path: one `sha2` compression pair per level.
pub(crate) fn climb_fallback<const N: usize>(nodes: &mut [Hash; N], climb: &Climb<'_, N>) {
    for (l, node) in nodes.iter_mut().enumerate() {
        let from = climb.from[l];
        for at in (from + 1 - climb.steps..=from).rev() {
            let empty = &climb.empties[at];
            let sum = climb.schedules[l].sum();
            *node = if climb.keys[l].bit(at - 1) {
                branch_digest(empty, node, sum)
            } else {
                branch_digest(node, empty, sum)
            };
        }
    }
}

/// The portable path: one `sha2` compression pair per input.
#[inline]
pub(crate) fn fallback<const N: usize>(inputs: &[BranchInput; N]) -> [Hash; N] {
    std::array::from_fn(|i| {
        let (left, right, sum) = &inputs[i];
        branch_digest(left, right, *sum)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{branch_hash, hash_calls, sha256};
    use crate::key::Key;
    use proptest::prelude::*;

    /// The branch preimage hashed the slow, obvious way.
    fn reference(input: &BranchInput) -> Hash {
        let mut pre = Vec::with_capacity(72);
        pre.extend_from_slice(&input.0.0);
        pre.extend_from_slice(&input.1.0);
        pre.extend_from_slice(&input.2.to_be_bytes());
        sha256(&pre)
    }

    fn input() -> impl Strategy<Value = BranchInput> {
        (any::<[u8; 32]>(), any::<[u8; 32]>(), any::<u64>())
            .prop_map(|(l, r, s)| (Hash(l), Hash(r), s))
    }

    fn check<const N: usize>(inputs: &[BranchInput]) {
        let inputs: [BranchInput; N] = std::array::from_fn(|i| inputs[i]);
        let want: Vec<Hash> = inputs.iter().map(reference).collect();
        assert_eq!(branch_hashes(&inputs).to_vec(), want, "lanes = {N}");
        assert_eq!(fallback(&inputs).to_vec(), want, "fallback, {N}");
        let pairs: [(Hash, Hash); N] = std::array::from_fn(|i| (inputs[i].0, inputs[i].1));
        let schedules: [SumSchedule; N] = std::array::from_fn(|i| SumSchedule::new(inputs[i].2));
        let refs: [&SumSchedule; N] = std::array::from_fn(|i| &schedules[i]);
        assert_eq!(
            scheduled_hashes(&pairs, &refs).to_vec(),
            want,
            "scheduled, {N}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn every_lane_count_matches_sha2(inputs in proptest::collection::vec(input(), 4)) {
            check::<1>(&inputs);
            check::<2>(&inputs);
            check::<3>(&inputs);
            check::<4>(&inputs);
            check::<8>(&[inputs.clone(), inputs.clone()].concat());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// The climb (kernel where present) equals the portable climb, and
        /// both equal branch hashes one level at a time.
        #[test]
        fn climbs_match_one_level_at_a_time(
            start in proptest::collection::vec((any::<[u8; 32]>(), any::<[u8; 32]>(), any::<u64>(), 0usize..40), 2),
            steps in 0usize..40,
        ) {
            let empties: [Hash; 257] = std::array::from_fn(|i| Hash([i as u8; 32]));
            let keys: [Key; 2] = std::array::from_fn(|l| Key(start[l].1));
            let key_refs: [&Key; 2] = [&keys[0], &keys[1]];
            let from: [usize; 2] = std::array::from_fn(|l| 256 - start[l].3);
            let schedules: [SumSchedule; 2] = std::array::from_fn(|l| SumSchedule::new(start[l].2));
            let schedule_refs: [&SumSchedule; 2] = [&schedules[0], &schedules[1]];
            let mut want: [Hash; 2] = std::array::from_fn(|l| Hash(start[l].0));
            for l in 0..2 {
                for at in (from[l] + 1 - steps..=from[l]).rev() {
                    want[l] = if keys[l].bit(at - 1) {
                        reference(&(empties[at], want[l], start[l].2))
                    } else {
                        reference(&(want[l], empties[at], start[l].2))
                    };
                }
            }
            let climb_in = Climb {
                keys: key_refs,
                from,
                steps,
                schedules: schedule_refs,
                empties: &empties,
            };
            let mut got: [Hash; 2] = std::array::from_fn(|l| Hash(start[l].0));
            let before = hash_calls();
            climb(&mut got, &climb_in);
            prop_assert_eq!(hash_calls() - before, 2 * steps as u64);
            prop_assert_eq!(got, want);
            let mut portable: [Hash; 2] = std::array::from_fn(|l| Hash(start[l].0));
            climb_fallback(&mut portable, &climb_in);
            prop_assert_eq!(portable, want);
        }
    }

    #[test]
    fn edge_inputs_match_sha2() {
        let ones = Hash([0xff; 32]);
        let zero = Hash::default();
        let cases = [
            (zero, zero, 0),
            (ones, ones, u64::MAX),
            (zero, ones, 1 << 63),
            (ones, zero, 0x8000_0000),
        ];
        check::<4>(&cases);
        for c in &cases {
            assert_eq!(branch_hash(&c.0, &c.1, c.2), reference(c));
        }
    }

    #[test]
    fn lanes_count_one_call_per_hash() {
        let before = hash_calls();
        let _ = branch_hashes(&[(Hash::default(), Hash::default(), 0); 4]);
        assert_eq!(hash_calls() - before, 4);
    }

    #[test]
    fn the_kernel_runs_where_the_cpu_has_sha_ni() {
        // On x86-64 with SHA-NI the lanes must not silently fall back.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            has_kernel(),
            std::arch::is_x86_feature_detected!("sha")
                && std::arch::is_x86_feature_detected!("sse4.1")
        );
    }
}
