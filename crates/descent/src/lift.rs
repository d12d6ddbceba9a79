//! Many lifts in lockstep: nodes climbing through one-child branches whose
//! other side is empty, hashed a few at a time on the lanes.
//!
//! A compacted leaf's hash is its leaf hash lifted from level 256 to the
//! level where it is stored, about 240 branch hashes for a random key in a
//! tree of 10^4 leaves, each depending on the one before. Different leaves'
//! lifts are independent, so [`lift_on`] climbs a lane count of them
//! together in the climb kernel (`hash::climb`): the same hashes, in fewer
//! nanoseconds, and the same count.

use crate::empty::empty_table;
use crate::hash::{Climb, Hash, SumSchedule, climb};
use crate::key::Key;
use crate::node;

/// One node on its way up: `hash` sits at level `from` on `key`'s path
/// and is lifted to level `to` (`to <= from`). Every branch on the way has
/// the node's sum, so the second block of their hashes is scheduled once.
#[derive(Clone, Copy, Debug)]
pub struct Lift {
    /// The node's hash, at level `from` until lifted, then at `to`.
    pub hash: Hash,
    /// The key whose path it climbs.
    pub key: Key,
    /// The level it starts at.
    pub from: usize,
    /// The level it is lifted to.
    pub to: usize,
    schedule: SumSchedule,
}

impl Lift {
    /// `hash` (with `sum`) at level `from` on `key`'s path, to be lifted to
    /// level `to`.
    pub fn new(hash: Hash, sum: u64, key: Key, from: usize, to: usize) -> Self {
        Lift {
            hash,
            key,
            from,
            to,
            schedule: SumSchedule::new(sum),
        }
    }

    /// The sum of every branch on the way.
    pub fn sum(&self) -> u64 {
        self.schedule.sum()
    }

    fn pending(&self) -> bool {
        self.from > self.to
    }
}

/// Lifts gathered per batch where a caller must bound its memory (the
/// audits): enough to keep the lanes full.
pub const LIFT_BATCH: usize = 4096;

/// Lifts the `pending` lifts together and hands each back with its tag:
/// for callers that gather lifts while walking and use them afterwards.
pub fn lift_tagged<T>(pending: Vec<(T, Lift)>, lanes: usize) -> impl Iterator<Item = (T, Lift)> {
    let (tags, mut lifts): (Vec<T>, Vec<Lift>) = pending.into_iter().unzip();
    lift_on(&mut lifts, lanes);
    tags.into_iter().zip(lifts)
}

/// Lifts every entry of `lifts` to its `to` level on `lanes` lanes (1, 2
/// or 4; [`Tuning::hash_lanes`](crate::Tuning::hash_lanes) says how many
/// the machine and a tree's setting give); afterwards each `hash` is the
/// node at `to` and `from == to`. Hashes exactly what lifting them one by
/// one would, in the same count.
pub fn lift_on(lifts: &mut [Lift], lanes: usize) {
    match lanes {
        4 => {
            lockstep::<4>(lifts);
            lockstep::<2>(lifts);
        }
        2 => lockstep::<2>(lifts),
        _ => {}
    }
    for lift in lifts.iter_mut().filter(|lift| lift.pending()) {
        lift.hash = node::lift(lift.hash, lift.sum(), &lift.key, lift.from, lift.to);
        lift.from = lift.to;
    }
}

/// Advances `N` pending lifts together while `N` remain, as many levels
/// at a time as the nearest to its end still needs; leaves the last
/// fewer-than-`N` for a narrower pass.
fn lockstep<const N: usize>(lifts: &mut [Lift]) {
    let mut lanes = [0usize; N];
    let mut busy = 0;
    let mut next = 0;
    let empties = empty_table();
    loop {
        while busy < N && next < lifts.len() {
            if lifts[next].pending() {
                lanes[busy] = next;
                busy += 1;
            }
            next += 1;
        }
        if busy < N {
            return;
        }
        let steps = lanes
            .iter()
            .map(|&i| lifts[i].from - lifts[i].to)
            .min()
            .unwrap_or(0);
        let mut nodes: [Hash; N] = std::array::from_fn(|i| lifts[lanes[i]].hash);
        let together = Climb {
            keys: std::array::from_fn(|i| &lifts[lanes[i]].key),
            from: std::array::from_fn(|i| lifts[lanes[i]].from),
            steps,
            schedules: std::array::from_fn(|i| &lifts[lanes[i]].schedule),
            empties,
        };
        climb(&mut nodes, &together);
        for (&lane, hash) in lanes.iter().zip(nodes) {
            let lift = &mut lifts[lane];
            lift.hash = hash;
            lift.from -= steps;
        }
        let mut i = 0;
        while i < busy {
            if lifts[lanes[i]].pending() {
                i += 1;
            } else {
                busy -= 1;
                lanes[i] = lanes[busy];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash_calls;
    use crate::leaf::Leaf;
    use crate::node::compacted_hash;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Lockstep lifts at every lane count equal one-by-one lifts of
        /// compacted leaves, hash for hash and count for count.
        #[test]
        fn lockstep_equals_one_by_one(
            leaves in proptest::collection::vec((any::<[u8; 32]>(), 0usize..=256, any::<u64>()), 0..12),
        ) {
            let want: Vec<Hash> = leaves
                .iter()
                .map(|(k, to, sum)| compacted_hash(*to, &Key(*k), &Leaf::new(k.to_vec(), *sum)))
                .collect();
            for lanes in [1, 2, 4] {
                let mut lifts: Vec<Lift> = leaves
                    .iter()
                    .map(|(k, to, sum)| {
                        Lift::new(Leaf::new(k.to_vec(), *sum).hash(), *sum, Key(*k), 256, *to)
                    })
                    .collect();
                let before = hash_calls();
                lift_on(&mut lifts, lanes);
                let calls = hash_calls() - before;
                let got: Vec<Hash> = lifts.iter().map(|l| l.hash).collect();
                prop_assert_eq!(&got, &want, "lanes {}", lanes);
                let expected: u64 = leaves.iter().map(|(_, to, _)| (256 - to) as u64).sum();
                prop_assert_eq!(calls, expected);
                prop_assert!(lifts.iter().all(|l| l.from == l.to));
            }
        }
    }
}
