//! Moving a tree from the hash-keyed schema (one row per node hash, crate
//! versions before the strata layout) to strata rows: the pure half. The
//! SQL stores read the old rows level by level through [`OldTreeWalk`] and
//! write what [`strata_rows`] returns, in one transaction per namespace.

use crate::empty::is_empty_hash;
use crate::error::PlanError;
use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::position::Position;
use crate::store::NodeSource;
use crate::store::sql::MigrationError;
use crate::store::strata::{self, RowChange, StrataError, StratumHeight};
use crate::tree::{LayoutKind, NodeCache, plan_insert_many};

/// Walks an old tree from its root one level at a time, collecting its
/// leaves with their full keys (a shared old row's compacted key carries
/// another position's high bits; the walk takes them from the path).
#[derive(Debug)]
pub(crate) struct OldTreeWalk {
    frontier: Vec<(Hash, Position)>,
    leaves: Vec<(Key, Leaf)>,
    kind: Option<LayoutKind>,
}

impl OldTreeWalk {
    /// A walk of the tree whose root is `root`.
    pub fn new(root: &ComputedNode) -> Self {
        let frontier = if is_empty_hash(0, &root.hash) {
            Vec::new()
        } else {
            vec![(root.hash, Position::ROOT)]
        };
        OldTreeWalk {
            frontier,
            leaves: Vec::new(),
            kind: None,
        }
    }

    /// The hashes to read next; empty when the walk is done.
    pub fn wanted(&self) -> Vec<Hash> {
        let mut out: Vec<Hash> = self.frontier.iter().map(|(h, _)| *h).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Takes the nodes read for [`wanted`](Self::wanted) and steps one
    /// level down (memory holds one level at a time).
    pub fn advance(&mut self, nodes: Vec<(Hash, Node)>) -> Result<(), PlanError> {
        let mut cache = NodeCache::new();
        cache.extend(nodes);
        let mut next = Vec::new();
        for (hash, pos) in std::mem::take(&mut self.frontier) {
            let level = pos.level();
            let node = cache
                .node(&hash)
                .ok_or(PlanError::MissingNode { hash, level })?;
            match node {
                Node::Branch { left, right, .. } if level < MAX_LEVEL => {
                    for (child, right_side) in [(*left, false), (*right, true)] {
                        if !is_empty_hash(level + 1, &child) {
                            next.push((child, pos.child(right_side)));
                        }
                    }
                }
                Node::Compacted { key, leaf } => {
                    self.kind = Some(LayoutKind::Compacted);
                    self.leaves
                        .push((key.under_path(pos.path(), level), leaf.clone()));
                }
                Node::Leaf(leaf) if level == MAX_LEVEL => {
                    self.kind.get_or_insert(LayoutKind::Full);
                    self.leaves.push((*pos.path(), leaf.clone()));
                }
                other => {
                    return Err(PlanError::UnexpectedNode {
                        hash,
                        level,
                        found: other.kind_name(),
                    });
                }
            }
        }
        self.frontier = next;
        Ok(())
    }

    /// True when every path has been followed to its leaf.
    pub fn is_done(&self) -> bool {
        self.frontier.is_empty()
    }

    /// The layout found (compacted when any compacted leaf was met) and the leaves.
    pub fn finish(self) -> (LayoutKind, Vec<(Key, Leaf)>) {
        (self.kind.unwrap_or(LayoutKind::Compacted), self.leaves)
    }
}

/// Why a tree could not be rebuilt in the new layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RebuildError {
    /// The leaves do not form a tree (sums overflow).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The new rows do not fit together.
    #[error(transparent)]
    Rows(#[from] StrataError),
    /// The rebuilt root differs from the stored one.
    #[error("rebuilt root {rebuilt:?} differs from the stored root {stored:?}")]
    RootMismatch {
        /// The stored root.
        stored: ComputedNode,
        /// The root of the rebuilt tree.
        rebuilt: ComputedNode,
    },
}

/// Walks the old tree whose root is `root`, reading each level's nodes
/// with `fetch` (one call per level), and returns its strata rows at
/// `height`, checked to reproduce `root`.
pub(crate) async fn rebuild<E, F>(
    root: &ComputedNode,
    height: StratumHeight,
    mut fetch: F,
) -> Result<Result<Vec<RowChange>, MigrationError>, E>
where
    F: AsyncFnMut(Vec<Hash>) -> Result<Vec<(Hash, Node)>, E>,
{
    let mut walk = OldTreeWalk::new(root);
    while !walk.is_done() {
        let nodes = fetch(walk.wanted()).await?;
        if let Err(e) = walk.advance(nodes) {
            return Ok(Err(MigrationError::OldTree(e)));
        }
    }
    let (layout, leaves) = walk.finish();
    Ok(strata_rows(layout, &leaves, height, root).map_err(MigrationError::Rebuild))
}

/// The strata rows of the tree holding `leaves` in `layout`, checked to
/// have the root `expected`.
fn strata_rows(
    layout: LayoutKind,
    leaves: &[(Key, Leaf)],
    height: StratumHeight,
    expected: &ComputedNode,
) -> Result<Vec<RowChange>, RebuildError> {
    let batch = plan_insert_many(
        layout,
        &NodeCache::new(),
        ComputedNode::empty_root(),
        leaves,
    )?;
    if batch.new_root != *expected {
        return Err(RebuildError::RootMismatch {
            stored: *expected,
            rebuilt: batch.new_root,
        });
    }
    Ok(strata::apply(&batch, height, Default::default())?)
}
