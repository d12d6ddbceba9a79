//! The descent's entry: one batch planned on one tree ([`plan_insert_many`]),
//! dispatched to its layout's descent over a [`Planner`].
#![deny(clippy::arithmetic_side_effects)]

use std::sync::Arc;

use crate::error::PlanError;
use crate::items::{Item, batch_sum, prepare};
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::planner::Planner;
use crate::prelift::{LiftMemo, prelift};
use crate::tuning::Tuning;
use crate::{NodeSource, UpdateBatch};
use crate::{compacted, full};

/// Plans one batched write without touching any store: the pure half of
/// `ms_smt::Tree::insert_many`.
///
/// `source` must hold every node on the batch's paths and their siblings
/// (what the level-batched fetch brings). The batch may mix inserts and
/// deletes (an empty leaf deletes); when a key appears twice, the last pair
/// wins. Returns the batch to commit; nothing is planned when the sums
/// overflow, so a rejected batch writes nothing.
pub fn plan_insert_many<R: NodeSource>(
    layout: LayoutKind,
    source: &R,
    root: ComputedNode,
    batch: &[(Key, Leaf)],
    tuning: Tuning,
) -> Result<UpdateBatch, PlanError> {
    let items = prepare(batch);
    plan_items(layout, source, root, &items, tuning)
}

pub(crate) fn plan_items<R: NodeSource>(
    layout: LayoutKind,
    source: &R,
    root: ComputedNode,
    items: &[Item<'_>],
    tuning: Tuning,
) -> Result<UpdateBatch, PlanError> {
    // One key makes at most two lifts, which its build pairs itself.
    let lifted = (layout == LayoutKind::Compacted && items.len() > 1)
        .then(|| Arc::new(prelift(source, root.hash, items, tuning)));
    plan_lifted(layout, source, root, items, lifted, false, tuning)
}

/// [`plan_items`] with the compacted leaves' lifts already made
/// (`lifted`; `None`: in place), inside a split descent when `forked`.
pub(crate) fn plan_lifted<R: NodeSource>(
    layout: LayoutKind,
    source: &R,
    root: ComputedNode,
    items: &[Item<'_>],
    lifted: Option<Arc<LiftMemo>>,
    forked: bool,
    tuning: Tuning,
) -> Result<UpdateBatch, PlanError> {
    let added = batch_sum(items)?;
    let mut planner = Planner::new(source, tuning);
    planner.forked = forked;
    if let Some(lifted) = lifted {
        planner.lifted = lifted;
    }
    let new_root = if items.is_empty() {
        root
    } else {
        match layout {
            LayoutKind::Full => full::update(&mut planner, 0, root.hash, items)?,
            LayoutKind::Compacted => compacted::update(&mut planner, 0, root.hash, items)?,
        }
        .computed(0)
    };
    // The replacement-aware overflow rule (spec §3.6): the new total is the
    // old one minus the replaced leaves plus the batch. Checked arithmetic
    // on the way up already rejected overflow; this cross-checks the store.
    let expected = u128::from(root.sum)
        .checked_add(u128::from(added))
        .and_then(|t| t.checked_sub(planner.replaced))
        .ok_or(PlanError::SumMismatch {
            expected: 0,
            computed: new_root.sum,
        })?;
    if expected > u128::from(u64::MAX) {
        return Err(crate::error::SumOverflow { level: 0 }.into());
    }
    if expected != u128::from(new_root.sum) {
        return Err(PlanError::SumMismatch {
            expected,
            computed: new_root.sum,
        });
    }
    Ok(UpdateBatch {
        old_root: root,
        new_root,
        inserts: planner.inserts,
        deletes: planner.deletes,
    })
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::NodeCache;
    use crate::fork::PARALLEL_MIN_ITEMS;
    use crate::hash::hash_calls;
    use crate::tuning::Tuning;

    fn random_batch(rng: &mut StdRng, n: usize, delete_from: &[(Key, Leaf)]) -> Vec<(Key, Leaf)> {
        let mut batch: Vec<(Key, Leaf)> = (0..n)
            .map(|_| {
                let mut key = [0u8; 32];
                rng.fill(&mut key);
                let value: Vec<u8> = (0..rng.gen_range(1..40)).map(|_| rng.r#gen()).collect();
                (Key(key), Leaf::new(value, rng.gen_range(1..1_000_000)))
            })
            .collect();
        // Deletes and replacements of existing keys, mixed in.
        for (key, _) in delete_from.iter().step_by(7) {
            let leaf = if rng.gen_bool(0.5) {
                Leaf::empty()
            } else {
                Leaf::new(vec![1], 3)
            };
            batch.push((*key, leaf));
        }
        batch
    }

    /// The plan on `threads` threads (and `lanes` lanes: 0, the default),
    /// as a tree with that tuning plans it, and its hash count.
    fn plan_on_lanes(
        threads: usize,
        lanes: usize,
        kind: LayoutKind,
        source: &NodeCache,
        root: ComputedNode,
        batch: &[(Key, Leaf)],
    ) -> (UpdateBatch, u64) {
        let tuning = Tuning::new()
            .with_descent_threads(threads)
            .with_hash_lanes(lanes);
        let before = hash_calls();
        let update = plan_insert_many(kind, source, root, batch, tuning).expect("plan");
        (update, hash_calls().wrapping_sub(before))
    }

    fn plan_on(
        threads: usize,
        kind: LayoutKind,
        source: &NodeCache,
        root: ComputedNode,
        batch: &[(Key, Leaf)],
    ) -> (UpdateBatch, u64) {
        plan_on_lanes(threads, 0, kind, source, root, batch)
    }

    /// The split descent plans exactly what one thread plans: the same
    /// roots, the same inserts and deletes in the same order, the same
    /// hash count, for builds from empty and updates of existing trees
    /// (inserts, replacements and deletes), on both layouts.
    #[test]
    fn two_threads_plan_what_one_does() {
        let mut rng = StdRng::seed_from_u64(0x7468_7265_6164);
        for kind in [LayoutKind::Compacted, LayoutKind::Full] {
            for size in [PARALLEL_MIN_ITEMS, 700, 2_000] {
                let empty = NodeCache::new();
                let seed = random_batch(&mut rng, size, &[]);
                let (one, calls_one) = plan_on(1, kind, &empty, ComputedNode::empty_root(), &seed);
                let (two, calls_two) = plan_on(2, kind, &empty, ComputedNode::empty_root(), &seed);
                assert_eq!(one.new_root, two.new_root);
                assert_eq!(one.inserts, two.inserts);
                assert_eq!(one.deletes, two.deletes);
                assert_eq!(calls_one, calls_two);

                let mut tree = NodeCache::new();
                tree.extend(one.inserts.iter().map(|(_, h, n)| (*h, n.clone())));
                let batch = random_batch(&mut rng, size, &seed);
                let (one, calls_one) = plan_on(1, kind, &tree, one.new_root, &batch);
                let (two, calls_two) = plan_on(2, kind, &tree, two.new_root, &batch);
                assert_eq!(one.new_root, two.new_root);
                assert_eq!(one.inserts, two.inserts);
                assert_eq!(one.deletes, two.deletes);
                assert_eq!(calls_one, calls_two);
            }
        }
    }

    /// A full build climbing its leaves' lone branches a few at a time on
    /// the lanes ([`Chains`](crate::chains::Chains)) plans exactly
    /// what one lane does: the same root, the same inserts in the same
    /// order, the same hash count, on one thread and two; with deletes of
    /// absent keys among the items and two keys apart only in their last
    /// bit.
    #[test]
    fn full_builds_on_lanes_plan_what_one_lane_does() {
        let mut rng = StdRng::seed_from_u64(0x6675_6c6c);
        let empty = NodeCache::new();
        for size in [2, 3, 9, 300, 2_000] {
            let mut batch = random_batch(&mut rng, size, &[]);
            for i in (0..size).step_by(5) {
                let mut key = batch[i].0;
                key.0[31] ^= 1;
                let leaf = if i % 2 == 0 {
                    Leaf::empty()
                } else {
                    Leaf::new(vec![7], 7)
                };
                batch.push((key, leaf));
            }
            let (want, calls) = plan_on_lanes(
                1,
                1,
                LayoutKind::Full,
                &empty,
                ComputedNode::empty_root(),
                &batch,
            );
            for (threads, lanes) in [(1, 2), (1, 4), (2, 4), (2, 2)] {
                let (got, got_calls) = plan_on_lanes(
                    threads,
                    lanes,
                    LayoutKind::Full,
                    &empty,
                    ComputedNode::empty_root(),
                    &batch,
                );
                assert_eq!(
                    got.new_root, want.new_root,
                    "{size} keys, {threads}t{lanes}l"
                );
                assert_eq!(got.inserts, want.inserts, "{size} keys, {threads}t{lanes}l");
                assert_eq!(got_calls, calls, "{size} keys, {threads}t{lanes}l");
            }
        }
    }

    /// Lifting every leaf of an update beforehand ([`prelift`], on the
    /// lanes) plans exactly what lifting each build's leaves in place does:
    /// the same root, rows in the same order, and the same hash count, for
    /// builds from empty and for inserts, replacements and deletes into a
    /// populated tree, batches of 2 to 2,000 keys.
    #[test]
    fn lifting_beforehand_plans_what_lifting_in_place_does() {
        let mut rng = StdRng::seed_from_u64(0x6c69_6674);
        let in_place = |source: &NodeCache, root: ComputedNode, batch: &[(Key, Leaf)]| {
            let items = prepare(batch);
            let mut planner = Planner::new(source, Tuning::default());
            planner.forked = true;
            let before = hash_calls();
            let new = compacted::update(&mut planner, 0, root.hash, &items).expect("plan");
            let calls = hash_calls().wrapping_sub(before);
            (new.computed(0), planner.inserts, planner.deletes, calls)
        };
        for size in [2, 9, 300, 2_000] {
            let empty = NodeCache::new();
            let seed = random_batch(&mut rng, size, &[]);
            let (planned, calls) = plan_on(
                1,
                LayoutKind::Compacted,
                &empty,
                ComputedNode::empty_root(),
                &seed,
            );
            let (root, inserts, deletes, calls_in_place) =
                in_place(&empty, ComputedNode::empty_root(), &seed);
            assert_eq!(
                (planned.new_root, &planned.inserts, &planned.deletes),
                (root, &inserts, &deletes)
            );
            assert_eq!(calls, calls_in_place, "build of {size}");

            let mut tree = NodeCache::new();
            tree.extend(inserts.iter().map(|(_, h, n)| (*h, n.clone())));
            let batch = random_batch(&mut rng, size, &seed);
            let (planned, calls) = plan_on(1, LayoutKind::Compacted, &tree, root, &batch);
            let (new_root, inserts, deletes, calls_in_place) = in_place(&tree, root, &batch);
            assert_eq!(
                (planned.new_root, &planned.inserts, &planned.deletes),
                (new_root, &inserts, &deletes)
            );
            assert_eq!(calls, calls_in_place, "update with {size}");
        }
    }
}
