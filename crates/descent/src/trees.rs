//! Several trees' batches planned at once (a group of a forest writer, one
//! level of its links at a time): every compacted leaf the updates lift
//! shares the lanes, and the trees are split across two threads when
//! there are enough items, as one large batch of one tree would be.

use std::sync::Arc;

use crate::error::PlanError;
use crate::fork::{fork_here, on_two_threads};
use crate::items::Item;
use crate::layout::LayoutKind;
use crate::node::ComputedNode;
use crate::plan::{plan_items, plan_lifted};
use crate::prelift::{LiftMemo, prelift_trees, targets};
use crate::tuning::Tuning;
use crate::{NodeSource, UpdateBatch};

/// One tree's update: where its nodes are read, its root, its items
/// (prepared: sorted, one per key).
pub struct TreeItems<'a, R> {
    /// Where the tree's nodes are read.
    pub source: &'a R,
    /// Its root before the update.
    pub root: ComputedNode,
    /// Its items, prepared ([`prepare`](crate::prepare)).
    pub items: Vec<Item<'a>>,
}

/// Plans every tree's update, in order, as `plan_items` plans one.
pub fn plan_trees<R: NodeSource>(
    layout: LayoutKind,
    trees: &[TreeItems<'_, R>],
    tuning: Tuning,
) -> Vec<Result<UpdateBatch, PlanError>> {
    if let [tree] = trees {
        return vec![plan_items(
            layout,
            tree.source,
            tree.root,
            &tree.items,
            tuning,
        )];
    }
    let lifted: Vec<Option<Arc<LiftMemo>>> = match layout {
        LayoutKind::Compacted => {
            let targets: Vec<_> = trees
                .iter()
                .map(|t| targets(t.source, t.root.hash, &t.items))
                .collect();
            prelift_trees(&targets, tuning)
                .into_iter()
                .map(|memo| Some(Arc::new(memo)))
                .collect()
        }
        LayoutKind::Full => trees.iter().map(|_| None).collect(),
    };
    let plan = |range: std::ops::Range<usize>, forked: bool| -> Vec<_> {
        range
            .map(|i| {
                let t = &trees[i];
                plan_lifted(
                    layout,
                    t.source,
                    t.root,
                    &t.items,
                    lifted[i].clone(),
                    forked,
                    tuning,
                )
            })
            .collect()
    };
    let total: usize = trees.iter().map(|t| t.items.len()).sum();
    if !fork_here(total, false, tuning) {
        return plan(0..trees.len(), false);
    }
    // Two halves of about equal items, each tree whole on one thread.
    let mut seen = 0;
    let mid = trees
        .iter()
        .position(|t| {
            seen += t.items.len();
            seen * 2 >= total
        })
        .map_or(1, |i| i + 1)
        .clamp(1, trees.len() - 1);
    let (mut left, right) = on_two_threads(|| plan(0..mid, true), || plan(mid..trees.len(), true));
    left.extend(right);
    left
}
