//! Read-only views of a tree: the current tree, or a pinned root.
//!
//! Every read of the crate goes through a [`View`]. [`Tree::view`] reads
//! the current tree (each operation loads the root it reads, and retries
//! when writers remove nodes under it); [`Tree::at_pin`] reads a pinned
//! root, which stays readable while writers move the tree on.

use std::ops::RangeBounds;

use tracing::field::Empty;

use crate::MultiProof;
use crate::Proof;
use crate::SumProof;
use crate::descent::Subtree;
use crate::error::{PlanError, TreeError};
use crate::key::{Key, MAX_LEVEL};
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::pin::Pin;
use crate::position::Position;
use crate::store::{PinStore, ReadAt, TreeStore};
use crate::tree::handle::Res;
use crate::tree::traced::Traced;
use crate::tree::{Target, Tree, walk};

/// A read-only view of a tree: the current tree ([`Tree::view`]) or a
/// pinned root ([`Tree::at_pin`]). Cheap to copy.
#[derive(Debug)]
pub struct View<'t, S, L> {
    pub(crate) tree: &'t Tree<S, L>,
    pub(crate) target: Target,
}

impl<S, L> Clone for View<'_, S, L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S, L> Copy for View<'_, S, L> {}

impl<S: TreeStore, L: Layout> Tree<S, L> {
    /// A view of the current tree: each read loads the root it reads.
    pub fn view(&self) -> View<'_, S, L> {
        View {
            tree: self,
            target: Target::CURRENT,
        }
    }
}

impl<S: TreeStore, L: Layout> Tree<S, L> {
    /// The current tree's subtree under `prefix` (see [`View::subtree`]).
    pub async fn subtree(&self, prefix: Position) -> Res<Subtree, S> {
        self.view().subtree(prefix).await
    }

    /// A sum proof of the leaves under `prefix` in the current tree (see
    /// [`View::prefix_sum_proof`]).
    pub async fn prefix_sum_proof(
        &self,
        prefix: Position,
    ) -> Res<(ComputedNode, u64, SumProof), S> {
        self.view().prefix_sum_proof(prefix).await
    }

    /// A sum proof of the leaves with keys in `range` in the current tree
    /// (see [`View::range_sum_proof`]).
    pub async fn range_sum_proof(
        &self,
        range: impl RangeBounds<Key>,
    ) -> Res<(ComputedNode, u64, SumProof), S> {
        self.view().range_sum_proof(range).await
    }
}

impl<S: PinStore, L: Layout> Tree<S, L> {
    /// Pins the current root under `name` (replacing a pin of that name):
    /// reads through [`at_pin`](Self::at_pin) see it until it is unpinned,
    /// whatever writers do. A pin keeps only what later writes replace:
    /// the nodes (memory) or rows (SQL) of its tree that the current tree
    /// no longer has.
    pub async fn pin(&self, name: &str) -> Res<Pin, S> {
        self.store.pin(name).await.map_err(TreeError::Store)
    }

    /// Removes the pin `name` and frees what only it kept. False when
    /// there was no such pin.
    pub async fn unpin(&self, name: &str) -> Res<bool, S> {
        self.store.unpin(name).await.map_err(TreeError::Store)
    }

    /// Every pin of this tree's namespace, oldest first.
    pub async fn pins(&self) -> Res<Vec<Pin>, S> {
        self.store.pins().await.map_err(TreeError::Store)
    }

    /// A view of the root pinned as `name`.
    pub async fn at_pin(&self, name: &str) -> Res<View<'_, S, L>, S> {
        let pin = self
            .store
            .pinned(name)
            .await
            .map_err(TreeError::Store)?
            .ok_or_else(|| TreeError::NoSuchPin {
                name: name.to_owned(),
            })?;
        Ok(self.at(&pin))
    }

    /// A view of the root `pin` holds.
    pub fn at(&self, pin: &Pin) -> View<'_, S, L> {
        View {
            tree: self,
            target: Target {
                at: ReadAt::Version(pin.version),
                root: Some(pin.root),
            },
        }
    }
}

impl<'t, S: TreeStore, L: Layout> View<'t, S, L> {
    /// The tree the view reads.
    pub fn tree(&self) -> &'t Tree<S, L> {
        self.tree
    }

    /// True for a pinned root, false for the current tree.
    pub fn is_pinned(&self) -> bool {
        self.target.root.is_some()
    }

    /// The root this view reads: the pinned root, or the current one.
    pub async fn root(&self) -> Res<ComputedNode, S> {
        self.tree.root_of(self.target).await
    }

    /// The leaf at `key`; the empty leaf when absent.
    pub async fn get(&self, key: &Key) -> Res<Leaf, S> {
        Ok(self.get_many(std::slice::from_ref(key)).await?.remove(0))
    }

    /// The leaves at `keys`, in order, read in one descent.
    pub async fn get_many(&self, keys: &[Key]) -> Res<Vec<Leaf>, S> {
        let span = tracing::debug_span!(
            target: "ms_smt",
            "get_many",
            namespace = self.tree.store.namespace(),
            keys = keys.len(),
            pinned = self.is_pinned(),
            attempts = Empty,
        );
        let read = self
            .tree
            .read_each(self.target, keys, false, |cache, root, key| {
                walk::walk(cache, root, key, None)
            });
        if span.is_disabled() {
            // Bare: each wrapper layer moves the read's future once more.
            return read.await;
        }
        Traced::new(span, &self.tree.store)
            .run(&self.tree.store, read)
            .await
    }

    /// The merkle proof for `key` (inclusion or exclusion).
    pub async fn merkle_proof(&self, key: &Key) -> Res<Proof, S> {
        Ok(self
            .merkle_proofs(std::slice::from_ref(key))
            .await?
            .remove(0))
    }

    /// The root, the leaf at `key` (the empty leaf when absent) and its
    /// proof, from one read: the three always belong together, whatever
    /// writers do meanwhile.
    pub async fn leaf_with_proof(&self, key: &Key) -> Res<(ComputedNode, Leaf, Proof), S> {
        self.tree
            .read_all(
                self.target,
                std::slice::from_ref(key),
                false,
                |cache, root| {
                    let mut proof = Proof::empty();
                    let leaf = walk::walk(cache, root, key, Some(&mut proof))?;
                    Ok((*root, leaf, proof))
                },
            )
            .await
    }

    /// Proofs for `keys`, in order, read in one descent.
    pub async fn merkle_proofs(&self, keys: &[Key]) -> Res<Vec<Proof>, S> {
        let span = tracing::debug_span!(
            target: "ms_smt",
            "merkle_proofs",
            namespace = self.tree.store.namespace(),
            keys = keys.len(),
            pinned = self.is_pinned(),
            attempts = Empty,
        );
        // A sibling's sum is its parent's minus the path child's: the path
        // alone is read.
        let read = self.tree.read_all(self.target, keys, false, |cache, root| {
            walk::proofs(cache, root, keys, self.tree.tuning().hash_lanes())
        });
        if span.is_disabled() {
            // Bare: each wrapper layer moves the read's future once more.
            return read.await;
        }
        Traced::new(span, &self.tree.store)
            .run(&self.tree.store, read)
            .await
    }

    /// One proof for all of `keys` (present and absent mixed) with every
    /// shared node once, and the leaf at each distinct key in tree order
    /// (the empty leaf when absent), read in one descent.
    pub async fn multi_proof(
        &self,
        keys: &[Key],
    ) -> Res<(ComputedNode, MultiProof, Vec<(Key, Leaf)>), S> {
        self.tree
            .read_all(self.target, keys, false, |cache, root| {
                let (proof, leaves) = MultiProof::from_source_with_leaves(cache, root, keys)?;
                Ok((*root, proof, leaves))
            })
            .await
    }

    /// The subtree under `prefix`: its (hash, sum), or its one leaf. The
    /// sum of a key prefix (the number of leaves under it, where every
    /// leaf has sum 1) is `view.subtree(prefix).await?.sum()`. Reads the
    /// prefix's path only: O(depth) nodes, one round trip.
    pub async fn subtree(&self, prefix: Position) -> Res<Subtree, S> {
        Ok(self.subtrees(&[prefix]).await?.remove(0))
    }

    /// [`subtree`](Self::subtree) of many prefixes in one read.
    pub async fn subtrees(&self, prefixes: &[Position]) -> Res<Vec<Subtree>, S> {
        let probes: Vec<Key> = prefixes.iter().map(|p| *p.path()).collect();
        self.tree
            .read_all(self.target, &probes, false, |cache, root| {
                prefixes
                    .iter()
                    .map(|p| walk::subtree_at(cache, root, p))
                    .collect::<Result<Vec<_>, PlanError>>()
            })
            .await
    }

    /// The root, the total of the leaves under `prefix`, and the
    /// [`SumProof`] of that total ([`SumProof::verify_prefix`]), from one
    /// read of the prefix's first and last keys' paths: one round trip.
    pub async fn prefix_sum_proof(
        &self,
        prefix: Position,
    ) -> Res<(ComputedNode, u64, SumProof), S> {
        self.range_sum_proof(*prefix.path()..=prefix.last_key())
            .await
    }

    /// The root, the total of the leaves with keys in `range` (tree order,
    /// as [`Key`]'s `Ord`; `a..b` is `[a, b)`), and the [`SumProof`] of
    /// that total ([`SumProof::verify_range`]), from one read of the
    /// range's first and last keys' paths: one round trip.
    pub async fn range_sum_proof(
        &self,
        range: impl RangeBounds<Key>,
    ) -> Res<(ComputedNode, u64, SumProof), S> {
        let probes = SumProof::boundary_keys(&range);
        let probes = probes.as_ref().map_or(&[][..], |p| &p[..]);
        self.tree
            .read_all(self.target, probes, false, |cache, root| {
                let (proof, total) = SumProof::range_from_source(
                    cache,
                    root,
                    (range.start_bound().cloned(), range.end_bound().cloned()),
                )?;
                Ok((*root, total, proof))
            })
            .await
    }

    /// The two children of the subtree under each of `prefixes`, in one
    /// read, from the tree whose root is `root` (a peer answering sync
    /// requests serves a pinned root; a current view whose root moved
    /// answers [`TreeError::RootMoved`]). The caller checks each pair
    /// against the parent it holds with [`Subtree::check_children`].
    pub async fn children(
        &self,
        root: &ComputedNode,
        prefixes: &[Position],
    ) -> Res<Vec<[Subtree; 2]>, S> {
        if let Some(at) = prefixes.iter().find(|p| p.level() >= MAX_LEVEL) {
            return Err(TreeError::NoChildren { position: *at });
        }
        let halves: Vec<Position> = prefixes
            .iter()
            .flat_map(|p| [p.child(false), p.child(true)])
            .collect();
        let probes: Vec<Key> = halves.iter().map(|p| *p.path()).collect();
        let target = Target {
            at: self.target.at,
            root: Some(*root),
        };
        if self.target.root.is_none() {
            // The current tree: the root must still be the caller's.
            let current = self.tree.root().await?;
            if current != *root {
                return Err(TreeError::RootMoved {
                    expected: *root,
                    current,
                });
            }
        } else if self.target.root != Some(*root) {
            return Err(TreeError::RootMoved {
                expected: *root,
                current: self.root().await?,
            });
        }
        let read = self
            .tree
            .read_all(target, &probes, false, |cache, root| {
                halves
                    .iter()
                    .map(|p| walk::subtree_at(cache, root, p))
                    .collect::<Result<Vec<_>, PlanError>>()
            })
            .await;
        let subtrees = match read {
            // The current tree moved on while its nodes were read.
            Err(TreeError::Plan(PlanError::MissingNode { .. })) if self.target.root.is_none() => {
                let current = self.tree.root().await?;
                if current != *root {
                    return Err(TreeError::RootMoved {
                        expected: *root,
                        current,
                    });
                }
                read?
            }
            other => other?,
        };
        let mut out = Vec::with_capacity(prefixes.len());
        let mut it = subtrees.into_iter();
        while let (Some(l), Some(r)) = (it.next(), it.next()) {
            out.push([l, r]);
        }
        Ok(out)
    }
}
