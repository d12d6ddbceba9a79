//! Planning a group of submissions over several trees, pure and
//! synchronous: admission of each submission through every chain it
//! touches, then one descent per tree, children before parents, each
//! parent taking the new roots of all its children changed in the group
//! at once.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::entry::{Entry, TreeId};
use crate::Tuning;
use crate::descent::{self, NodeCache, TreeItems, UpdateBatch};
use crate::error::{PlanError, SumOverflow};
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::store::hashing;
use crate::tree::walk;
use crate::{LinkSum, NestedLevel, NestedProof, UpdateProof};

/// One submission's writes, by tree, each tree once, in the order named.
pub(crate) type Writes<T> = Vec<(Arc<Entry<T>>, Vec<(Key, Leaf)>)>;

/// What a group's read phase found for one tree: the root it read (or
/// planned on) and the nodes on the paths the group touches.
#[derive(Debug, Clone)]
pub(crate) struct TreeRead {
    pub root: ComputedNode,
    pub nodes: NodeCache,
}

/// The reads a group plans on, by tree.
pub(crate) type Reads = HashMap<TreeId, TreeRead>;

/// One tree's share of a planned group.
#[derive(Debug)]
pub(crate) struct TreePlan<T> {
    pub entry: Arc<Entry<T>>,
    /// Its changes (a no-op for a tree the group only reads, which still
    /// guards the commit).
    pub update: Arc<UpdateBatch>,
    /// The nodes read for it and, with an overlay, the nodes it wrote.
    pub nodes: NodeCache,
    /// With [`Want::update_proofs`]: the proof of its update, from the
    /// nodes it was planned on (its old leaves under its old root).
    pub proof: Option<UpdateProof>,
}

/// What a group's plan keeps beyond each tree's update.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Want {
    /// Admit each submission alone before planning (several submissions:
    /// one that overflows a tree is rejected, the rest go on).
    pub admit_each: bool,
    /// Keep each tree's written nodes beside the ones read: for proofs at
    /// the new roots (nested proofs) and for a next group planned on this
    /// one before it commits.
    pub overlay: bool,
    /// Prove each tree's update from the nodes read ([`UpdateProof`]).
    pub update_proofs: bool,
}

/// A planned group.
#[derive(Debug)]
pub(crate) struct GroupPlan<T> {
    /// Submissions rejected alone (index in the group, why), in order.
    pub rejected: Vec<(usize, PlanError)>,
    /// Every tree of the group's closure, children before parents.
    pub trees: Vec<TreePlan<T>>,
}

/// Every tree `writes` touch and every tree above them, children before
/// parents (deepest first, then in the order met), each once.
pub(crate) fn closure<'w, T: 'w>(
    writes: impl IntoIterator<Item = &'w Writes<T>>,
) -> Vec<Arc<Entry<T>>> {
    let mut trees: BTreeMap<(Reverse<usize>, TreeId), Arc<Entry<T>>> = BTreeMap::new();
    for (entry, _) in writes.into_iter().flatten() {
        for tree in entry.chain() {
            if trees
                .insert((Reverse(tree.level), tree.id), tree.clone())
                .is_some()
            {
                break; // the rest of the chain is in already
            }
        }
    }
    trees.into_values().collect()
}

/// The keys the group reads in each tree of `order` (its closure): the
/// keys written there and the keys of its children in the closure, sorted
/// in tree order; and whether the siblings beside them are read too (for
/// a write of layout `kind`; never for a read, `None`).
pub(crate) fn group_keys<T>(
    kind: Option<LayoutKind>,
    writes: &[&Writes<T>],
    order: &[Arc<Entry<T>>],
) -> HashMap<TreeId, (Vec<Key>, bool)> {
    let mut keys: HashMap<TreeId, (Vec<Key>, bool)> =
        order.iter().map(|e| (e.id, (Vec::new(), false))).collect();
    for (entry, batch) in writes.iter().copied().flatten() {
        if let Some((k, siblings)) = keys.get_mut(&entry.id) {
            k.extend(batch.iter().map(|(key, _)| *key));
            if let Some(kind) = kind {
                *siblings |= descent::reads_siblings(kind, batch.iter().map(|(_, leaf)| leaf));
            }
        }
    }
    for entry in order {
        if let Some((parent, key, _)) = &entry.parent
            && let Some((k, _)) = keys.get_mut(&parent.id)
        {
            k.push(*key);
        }
    }
    for (k, _) in keys.values_mut() {
        *k = descent::sorted_keys(k);
    }
    keys
}

/// Plans `group` (each submission's writes) over `reads` (every tree of
/// `order`, the group's closure) as `want` asks: with `admit_each`, each
/// submission is first admitted in order through every chain it touches
/// ([`admit`]); then one descent per tree, children first.
///
/// A lone submission that overflows any tree is answered as rejected with
/// every tree's update a no-op.
pub(crate) fn plan_group<T>(
    kind: LayoutKind,
    group: &[&Writes<T>],
    mut reads: Reads,
    order: &[Arc<Entry<T>>],
    want: Want,
    tuning: Tuning,
) -> Result<GroupPlan<T>, PlanError> {
    let rejected = if want.admit_each {
        admit(group, &reads)?
    } else {
        Vec::new()
    };
    // Each tree's writes, borrowed from the submissions, in order.
    let mut direct: HashMap<TreeId, Vec<&[(Key, Leaf)]>> = HashMap::new();
    for (index, writes) in group.iter().enumerate() {
        if rejected.iter().any(|(r, _)| *r == index) {
            continue;
        }
        for (entry, batch) in writes.iter() {
            direct.entry(entry.id).or_default().push(batch);
        }
    }
    let roots: HashMap<TreeId, ComputedNode> = reads.iter().map(|(id, r)| (*id, r.root)).collect();
    // Each parent's leaves for its children planned so far.
    let mut derived: HashMap<TreeId, Vec<(Key, Leaf)>> = HashMap::new();
    let mut trees = Vec::with_capacity(order.len());
    // One level of the links at a time (children before parents): each
    // level's trees planned together.
    for level in order.chunk_by(|a, b| a.level == b.level) {
        let written: Vec<Vec<&[(Key, Leaf)]>> = level
            .iter()
            .map(|entry| direct.remove(&entry.id).unwrap_or_default())
            .collect();
        let children: Vec<Vec<(Key, Leaf)>> = level
            .iter()
            .map(|entry| derived.remove(&entry.id).unwrap_or_default())
            .collect();
        let pairs = |i: usize| {
            written[i]
                .iter()
                .flat_map(|batch| batch.iter())
                .chain(children[i].iter())
        };
        let mut items = Vec::with_capacity(level.len());
        for (i, entry) in level.iter().enumerate() {
            let read = reads.get(&entry.id).ok_or(unread(entry))?;
            items.push(TreeItems {
                source: &read.nodes,
                root: read.root,
                items: descent::prepare_pairs(pairs(i)),
            });
        }
        let total = items.iter().map(|t| t.items.len()).sum();
        let planned = hashing(total, || descent::plan_trees(kind, &items, tuning));
        drop(items);
        for (i, (entry, planned)) in level.iter().zip(planned).enumerate() {
            let update = match planned {
                Ok(update) => update,
                Err(e @ PlanError::Overflow(_)) if group.len() == 1 => {
                    let trees = order
                        .iter()
                        .map(|e| {
                            let root = roots.get(&e.id).copied();
                            noop(e, root.unwrap_or_else(ComputedNode::empty_root))
                        })
                        .collect();
                    return Ok(GroupPlan {
                        rejected: vec![(0, e)],
                        trees,
                    });
                }
                Err(e) => return Err(e),
            };
            let TreeRead { mut nodes, root } = reads.remove(&entry.id).ok_or(unread(entry))?;
            if let Some((parent, key, sum)) = &entry.parent {
                derived
                    .entry(parent.id)
                    .or_default()
                    .push((*key, sum.leaf(&update.new_root)));
            }
            let proof = want
                .update_proofs
                .then(|| {
                    let batch: Vec<(Key, Leaf)> = pairs(i).cloned().collect();
                    UpdateProof::from_source(&nodes, &root, &batch)
                })
                .transpose()?;
            if want.overlay {
                nodes.extend(update.inserts.iter().map(|(_, h, n)| (*h, n.clone())));
            }
            trees.push(TreePlan {
                entry: entry.clone(),
                update: Arc::new(update),
                nodes,
                proof,
            });
        }
    }
    Ok(GroupPlan { rejected, trees })
}

/// The error for a tree the group's reads left out (a caller's mistake,
/// answered rather than panicked on): the tree's root stands for its
/// missing nodes.
fn unread<T>(entry: &Entry<T>) -> PlanError {
    PlanError::MissingNode {
        hash: crate::hash::Hash([0; 32]),
        level: entry.level,
    }
}

/// A plan that changes nothing in `entry` at `root`.
fn noop<T>(entry: &Arc<Entry<T>>, root: ComputedNode) -> TreePlan<T> {
    TreePlan {
        entry: entry.clone(),
        update: Arc::new(UpdateBatch::noop(root)),
        nodes: NodeCache::new(),
        proof: None,
    }
}

/// A submission's new totals of the trees it moves, deepest first.
type Totals<T> = BTreeMap<(Reverse<usize>, TreeId), (Arc<Entry<T>>, u128)>;

/// Admits the submissions in order against the trees read: each one is
/// applied to running totals (its leaves replace the ones before them,
/// from the trees or from earlier submissions), every changed tree's new
/// total carried up its chain as its leaf in its parent, and it is
/// rejected when any tree's total would pass `u64::MAX`. Returns the
/// rejected ones (index, error), in order; a missing node (the read raced
/// a writer) is an error.
fn admit<T>(group: &[&Writes<T>], reads: &Reads) -> Result<Vec<(usize, PlanError)>, PlanError> {
    let mut totals: HashMap<TreeId, u128> = reads
        .iter()
        .map(|(id, r)| (*id, u128::from(r.root.sum)))
        .collect();
    let mut current: HashMap<(TreeId, Key), u64> = HashMap::new();
    let leaf_sum = |current: &HashMap<(TreeId, Key), u64>, id: TreeId, key: &Key| match current
        .get(&(id, *key))
    {
        Some(sum) => Ok(*sum),
        None => {
            let read = reads.get(&id).ok_or(PlanError::MissingNode {
                hash: crate::hash::Hash([0; 32]),
                level: 0,
            })?;
            Ok::<u64, PlanError>(walk::walk(&read.nodes, &read.root, key, None)?.sum())
        }
    };
    let mut rejected = Vec::new();
    for (index, writes) in group.iter().enumerate() {
        let mut next: Totals<T> = BTreeMap::new();
        let mut changes: Vec<(TreeId, Key, u64)> = Vec::new();
        for (entry, batch) in writes.iter() {
            let total = totals.get(&entry.id).copied().unwrap_or(0);
            let slot = next
                .entry((Reverse(entry.level), entry.id))
                .or_insert_with(|| (entry.clone(), total));
            for item in descent::prepare(batch) {
                let old = leaf_sum(&current, entry.id, &item.key)?;
                slot.1 = slot.1.saturating_sub(u128::from(old)) + u128::from(item.leaf.sum());
                changes.push((entry.id, item.key, item.leaf.sum()));
            }
        }
        // Deepest first: a tree's total is final before it moves its
        // parent's.
        let mut done: Vec<(TreeId, u128)> = Vec::new();
        let mut overflow = false;
        while let Some(((_, id), (entry, total))) = next.pop_first() {
            done.push((id, total));
            overflow |= total > u128::from(u64::MAX);
            let Some((parent, key, sum)) = &entry.parent else {
                continue;
            };
            let new = match sum {
                LinkSum::ChildRoot => total,
                LinkSum::Fixed(fixed) => u128::from(*fixed),
            };
            let old = leaf_sum(&current, parent.id, key)?;
            let base = totals.get(&parent.id).copied().unwrap_or(0);
            let slot = next
                .entry((Reverse(parent.level), parent.id))
                .or_insert_with(|| (parent.clone(), base));
            slot.1 = slot.1.saturating_sub(u128::from(old)) + new;
            changes.push((parent.id, *key, u64::try_from(new).unwrap_or(u64::MAX)));
        }
        if overflow {
            rejected.push((index, PlanError::Overflow(SumOverflow { level: 0 })));
            continue;
        }
        totals.extend(done);
        current.extend(changes.into_iter().map(|(id, key, sum)| ((id, key), sum)));
    }
    Ok(rejected)
}

/// The nested proof of each of `keys` (in tree `entry`) at the group's new
/// roots, up `entry`'s chain; `plans` must hold the written nodes
/// (an overlay). `None` when a node is missing.
pub(crate) fn nested_proofs<T>(
    plans: &HashMap<TreeId, (ComputedNode, &NodeCache)>,
    entry: &Arc<Entry<T>>,
    keys: &[Key],
    lanes: usize,
) -> Option<Vec<NestedProof>> {
    Some(
        nested_leaf_proofs(plans, entry, keys, lanes)?
            .into_iter()
            .map(|(_, proof)| proof)
            .collect(),
    )
}

/// [`nested_proofs`], each with the leaf found at its key (the empty leaf
/// when absent), of the same nodes.
pub(crate) fn nested_leaf_proofs<T>(
    plans: &HashMap<TreeId, (ComputedNode, &NodeCache)>,
    entry: &Arc<Entry<T>>,
    keys: &[Key],
    lanes: usize,
) -> Option<Vec<(Leaf, NestedProof)>> {
    let (root, nodes) = plans.get(&entry.id)?;
    let proofs = walk::leaves_and_proofs(*nodes, root, keys, lanes).ok()?;
    let mut levels = Vec::new();
    for tree in entry.chain() {
        let Some((parent, key, sum)) = &tree.parent else {
            break;
        };
        let (root, nodes) = plans.get(&parent.id)?;
        let proof = walk::proofs(*nodes, root, std::slice::from_ref(key), lanes)
            .ok()?
            .pop()?;
        levels.push(NestedLevel {
            key: *key,
            sum: *sum,
            proof,
        });
    }
    Some(
        proofs
            .into_iter()
            .map(|(leaf, p)| (leaf, NestedProof::new(p, levels.clone())))
            .collect(),
    )
}
