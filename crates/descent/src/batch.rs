//! The mutation batch a descent produces and a store applies in one commit.

use std::collections::HashMap;

use crate::hash::Hash;
use crate::key::Key;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::position::Position;

/// What one commit did to one key: its leaf before and after (the empty
/// leaf: absent). The change feed's journal records these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafChange {
    /// The key.
    pub key: Key,
    /// Its leaf before the commit.
    pub old: Leaf,
    /// Its leaf after the commit.
    pub new: Leaf,
}

/// Everything one write changes, produced by the read phase and applied by
/// `ms_smt::store::ForestStore::commit_trees` in one atomic step.
///
/// Every change names its [`Position`] and the node's hash: position-keyed
/// stores (SQL strata) replace what sits at each position; hash-keyed
/// stores (memory) count references instead, one per position: each insert
/// adds one to the node under that hash (creating it if new), each delete
/// drops one (removing it when none remain). The same hash may appear
/// several times; [`UpdateBatch::net_changes`] folds them. A position may
/// appear among the deletes more than once when the batch places a node
/// there and moves it on (a compacted leaf pulled up several levels); the
/// net change per position is what counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateBatch {
    /// The root the batch was planned against; commit refuses to apply it
    /// over any other root.
    pub old_root: ComputedNode,
    /// The root after the batch.
    pub new_root: ComputedNode,
    /// Nodes placed at positions: where, the node's hash, the node.
    pub inserts: Vec<(Position, Hash, Node)>,
    /// Nodes removed from positions: where, and the hash of the node that
    /// was there.
    pub deletes: Vec<(Position, Hash)>,
}

/// The net effect of a batch on one node row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetChange<'a> {
    /// The node hash.
    pub hash: Hash,
    /// References added (positive) or dropped (negative).
    pub delta: i64,
    /// The node's content when the batch inserted it at least once.
    pub node: Option<&'a Node>,
}

impl UpdateBatch {
    /// The batch that changes nothing at `root`.
    pub fn noop(root: ComputedNode) -> Self {
        UpdateBatch {
            old_root: root,
            new_root: root,
            inserts: Vec::new(),
            deletes: Vec::new(),
        }
    }

    /// True when applying the batch would change nothing.
    pub fn is_noop(&self) -> bool {
        self.inserts.is_empty() && self.deletes.is_empty() && self.old_root == self.new_root
    }

    /// The batch folded to one change per hash, zero deltas dropped, in hash
    /// order (a stable order keeps SQL lock acquisition deterministic).
    pub fn net_changes(&self) -> Vec<NetChange<'_>> {
        let mut map: HashMap<Hash, NetChange<'_>, foldhash::fast::RandomState> =
            HashMap::with_capacity_and_hasher(
                self.inserts.len() + self.deletes.len(),
                Default::default(),
            );
        for (_, hash, node) in &self.inserts {
            let e = map.entry(*hash).or_insert(NetChange {
                hash: *hash,
                delta: 0,
                node: None,
            });
            e.delta = e.delta.saturating_add(1);
            e.node = Some(node);
        }
        for (_, hash) in &self.deletes {
            let e = map.entry(*hash).or_insert(NetChange {
                hash: *hash,
                delta: 0,
                node: None,
            });
            e.delta = e.delta.saturating_sub(1);
        }
        let mut out: Vec<_> = map.into_values().filter(|c| c.delta != 0).collect();
        out.sort_unstable_by_key(|c| c.hash);
        out
    }
}
