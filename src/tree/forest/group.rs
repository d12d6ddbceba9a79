//! A group's write over several trees, as the direct path and the writer
//! share it: the read phase of every tree of the group's closure, the
//! plan, and the one commit guarded by every tree's root.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{PlanError, TreeError};
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::node::ComputedNode;
use crate::store::{ForestCommit, ForestStore, TreeUpdate};
use crate::tree::fetch::{TreeFetch, fetch_trees};
use crate::tree::forest::plan::{self, GroupPlan, Reads, TreeRead, Writes};
use crate::tree::forest::registry::{Entry, TreeId};

use crate::descent::NodeCache;

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

/// Planning a group.
pub(crate) enum Planning<T, E: std::error::Error + 'static> {
    Ready(GroupPlan<T>),
    /// The read raced another writer (or, on a planned tree, met anything
    /// unexpected): plan again on the committed trees.
    Retry,
    Failed(TreeError<E>),
}

/// Reads every tree of `group`'s closure (one read of the committed
/// roots, one of all the paths; trees in `over` are read over its planned
/// nodes instead) and plans the group ([`plan::plan_group`]).
pub(crate) async fn read_and_plan<S: ForestStore>(
    store: &S,
    kind: LayoutKind,
    group: &[&Writes<S::Tree>],
    over: Option<&Overlay<'_>>,
    admit_each: bool,
    overlay: bool,
) -> Planning<S::Tree, S::Error> {
    let order = plan::closure(group.iter().copied());
    let reads = match read_trees(store, Some(kind), group, &order, over, true).await {
        Ok(reads) => reads,
        Err(e) => return Planning::Failed(e),
    };
    let roots: Vec<(TreeId, ComputedNode)> = reads.iter().map(|(id, r)| (*id, r.root)).collect();
    match plan::plan_group(kind, group, reads, &order, admit_each, overlay) {
        Ok(plan) => Planning::Ready(plan),
        Err(e) => lost_race(store, &order, &roots, e, over.is_some()).await,
    }
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
    let fetched = fetch_trees(store, &fetches, for_write).await?;
    Ok(order
        .iter()
        .zip(fetched)
        .map(|(entry, (root, nodes))| (entry.id, TreeRead { root, nodes }))
        .collect())
}

/// A descent error: on planned trees, plan again on the committed ones;
/// on the committed trees, a lost race when a node went missing and some
/// root moved since the read, else the group fails.
async fn lost_race<S: ForestStore>(
    store: &S,
    order: &[Arc<Entry<S::Tree>>],
    roots: &[(TreeId, ComputedNode)],
    e: PlanError,
    planned: bool,
) -> Planning<S::Tree, S::Error> {
    if planned {
        return Planning::Retry;
    }
    if !matches!(e, PlanError::MissingNode { .. }) {
        return Planning::Failed(TreeError::Plan(e));
    }
    let trees: Vec<&S::Tree> = order.iter().map(|e| &e.store).collect();
    match store.load_roots(&trees).await {
        Ok(now) => {
            let read: HashMap<TreeId, ComputedNode> = roots.iter().copied().collect();
            let moved = order
                .iter()
                .zip(now)
                .any(|(entry, root)| read.get(&entry.id) != Some(&root));
            if moved {
                Planning::Retry
            } else {
                Planning::Failed(TreeError::Plan(e))
            }
        }
        Err(store) => Planning::Failed(TreeError::Store(store)),
    }
}

/// True when `plan` changes nothing (no commit is needed).
pub(crate) fn is_noop<T>(plan: &GroupPlan<T>) -> bool {
    plan.trees.iter().all(|t| t.update.is_noop())
}

/// Commits `plan` in one commit of every tree it read, guarded by each
/// tree's root; no commit at all when it changes nothing.
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
    store.commit_trees(&updates).await
}

/// Where a failed commit of `plan` left the trees: `Some(true)` when every
/// tree holds its new root (it landed), `Some(false)` when every tree
/// still holds its old root (nothing applied), `None` when neither (other
/// writers moved them); the store's error when the roots cannot be read.
pub(crate) async fn landed<S: ForestStore>(
    store: &S,
    plan: &GroupPlan<S::Tree>,
) -> Result<Option<bool>, S::Error> {
    let trees: Vec<&S::Tree> = plan.trees.iter().map(|t| &t.entry.store).collect();
    let now = store.load_roots(&trees).await?;
    let pairs = || plan.trees.iter().zip(&now);
    Ok(if pairs().all(|(t, root)| *root == t.update.new_root) {
        Some(true)
    } else if pairs().all(|(t, root)| *root == t.update.old_root) {
        Some(false)
    } else {
        None
    })
}
