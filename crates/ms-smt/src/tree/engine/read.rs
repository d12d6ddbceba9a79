//! A group's read phase and plan: one read of the roots of every tree of
//! the group's closure, one read of every path, then the pure plan
//! ([`plan::plan_group`]); and the one commit of what was planned.

use std::collections::HashMap;
use std::sync::Arc;

use super::entry::{Entry, TreeId};
use super::plan::{self, GroupPlan, Reads, TreeRead, Want, Writes};
use crate::Tuning;
use crate::descent::NodeCache;
use crate::error::TreeError;
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::node::ComputedNode;
use crate::store::{ForestCommit, ForestStore, TreeUpdate};
use crate::tree::fetch::{TreeFetch, fetch_trees};

/// A planned group's trees to plan a next group on before it commits:
/// each tree's planned root and its read and written nodes.
pub(crate) type Overlay<'a> = HashMap<TreeId, (ComputedNode, &'a NodeCache)>;

/// The overlay of `plan` (its nodes must include what it wrote).
pub(crate) fn overlay_of<T>(plan: &GroupPlan<T>) -> Overlay<'_> {
    plan.trees
        .iter()
        .map(|t| (t.entry.id, (t.update.new_root, &t.nodes)))
        .collect()
}

/// A group that could not be planned: why, and the roots its read phase
/// found (empty when it failed before they were read), for
/// [`judge`](super::judge::judge) to tell a lost race from a failure.
#[derive(Debug)]
pub(crate) struct Unplanned<T, E: std::error::Error + 'static> {
    pub error: TreeError<E>,
    pub roots: Vec<(Arc<Entry<T>>, ComputedNode)>,
}

impl<T, E: std::error::Error + 'static> From<TreeError<E>> for Unplanned<T, E> {
    fn from(error: TreeError<E>) -> Self {
        Unplanned {
            error,
            roots: Vec::new(),
        }
    }
}

/// Reads every tree of `group`'s closure (one read of the committed
/// roots, one of all the paths; trees in `over` are read over its planned
/// nodes instead) and plans the group as `want` asks.
pub(crate) async fn read_and_plan<S: ForestStore>(
    store: &S,
    kind: LayoutKind,
    group: &[&Writes<S::Tree>],
    over: Option<&Overlay<'_>>,
    want: Want,
    tuning: Tuning,
) -> Result<GroupPlan<S::Tree>, Unplanned<S::Tree, S::Error>> {
    let read = read_group(store, kind, group, over).await?;
    plan_read(kind, group, read, want, tuning)
}

/// A group's read phase: its closure, and what was read of each tree.
pub(crate) struct GroupRead<T> {
    order: Vec<Arc<Entry<T>>>,
    reads: Reads,
}

/// The read phase of [`read_and_plan`].
pub(crate) async fn read_group<S: ForestStore>(
    store: &S,
    kind: LayoutKind,
    group: &[&Writes<S::Tree>],
    over: Option<&Overlay<'_>>,
) -> Result<GroupRead<S::Tree>, TreeError<S::Error>> {
    let order = plan::closure(group.iter().copied());
    let reads = read_trees(store, Some(kind), group, &order, over, true).await?;
    Ok(GroupRead { order, reads })
}

/// The plan of [`read_and_plan`], pure, with `tuning` in effect.
pub(crate) fn plan_read<T, E: std::error::Error + 'static>(
    kind: LayoutKind,
    group: &[&Writes<T>],
    GroupRead { order, reads }: GroupRead<T>,
    want: Want,
    tuning: Tuning,
) -> Result<GroupPlan<T>, Unplanned<T, E>> {
    let roots: Vec<(Arc<Entry<T>>, ComputedNode)> = order
        .iter()
        .filter_map(|e| reads.get(&e.id).map(|r| (e.clone(), r.root)))
        .collect();
    let span = tracing::trace_span!(
        target: "ms_smt",
        "descent",
        leaves = group.iter().copied().flatten().map(|(_, b)| b.len()).sum::<usize>(),
    );
    span.in_scope(|| plan::plan_group(kind, group, reads, &order, want, tuning))
        .map_err(|e| Unplanned {
            error: TreeError::Plan(e),
            roots,
        })
}

/// The read phase of a group over `order` (its closure): the keys each
/// tree is written or read at, and each child's key in its parent; with
/// the layout `kind` of a write, also the siblings its deletes need.
pub(crate) async fn read_trees<S: ForestStore>(
    store: &S,
    kind: Option<LayoutKind>,
    group: &[&Writes<S::Tree>],
    order: &[Arc<Entry<S::Tree>>],
    over: Option<&Overlay<'_>>,
    for_write: bool,
) -> Result<Reads, TreeError<S::Error>> {
    let keys = plan::group_keys(kind, group, order);
    let empty: (Vec<Key>, bool) = (Vec::new(), false);
    let fetches: Vec<TreeFetch<'_, S::Tree>> = order
        .iter()
        .map(|entry| {
            let (keys, siblings) = keys.get(&entry.id).unwrap_or(&empty);
            TreeFetch {
                tree: &entry.store,
                keys,
                siblings: *siblings,
                over: over.and_then(|o| o.get(&entry.id).copied()),
            }
        })
        .collect();
    let span = tracing::trace_span!(
        target: "ms_smt",
        "read",
        trees = order.len(),
        keys = fetches.iter().map(|f| f.keys.len()).sum::<usize>(),
        for_write,
    );
    let fetched =
        tracing::Instrument::instrument(fetch_trees(store, &fetches, for_write), span).await?;
    Ok(order
        .iter()
        .zip(fetched)
        .map(|(entry, (root, nodes))| (entry.id, TreeRead { root, nodes }))
        .collect())
}

/// True when `plan` changes nothing (no commit is needed).
pub(crate) fn is_noop<T>(plan: &GroupPlan<T>) -> bool {
    plan.trees.iter().all(|t| t.update.is_noop())
}

/// Commits `plan` in one commit of every tree it read, guarded by each
/// tree's root; no commit at all when it changes nothing. In a `commit`
/// span (TRACE) with what it writes.
pub(crate) async fn commit<S: ForestStore>(
    store: &S,
    plan: &GroupPlan<S::Tree>,
) -> Result<ForestCommit, S::Error> {
    if is_noop(plan) {
        return Ok(ForestCommit::Committed);
    }
    let updates: Vec<TreeUpdate<'_, S::Tree>> = plan
        .trees
        .iter()
        .map(|t| TreeUpdate {
            tree: &t.entry.store,
            batch: &t.update,
        })
        .collect();
    let span = tracing::trace_span!(
        target: "ms_smt",
        "commit",
        trees = updates.iter().filter(|u| !u.batch.is_noop()).count(),
        inserts = plan.trees.iter().map(|t| t.update.inserts.len()).sum::<usize>(),
        deletes = plan.trees.iter().map(|t| t.update.deletes.len()).sum::<usize>(),
    );
    tracing::Instrument::instrument(store.commit_trees(&updates), span).await
}
