//! The forest handle: many trees of one store, their links, and writes of
//! several trees (and their parents) in one commit.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;
use tracing::field::Empty;

use super::ProvenLeaf;
use crate::NestedProof;
use crate::Tuning;
use crate::descent;
use crate::error::TreeError;
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::progress::ProgressSink;
use crate::store::ForestStore;
use crate::tree::engine::{self, Entry, Job, Policy, TreeId, Want, Writes};
use crate::tree::forest::links::{Link, Links};
use crate::tree::forest::registry::Registry;
use crate::tree::handle::{DEFAULT_MAX_ATTEMPTS, Tree};

/// A forest operation's result on store `S`.
type Res<T, S> = Result<T, TreeError<<S as ForestStore>::Error>>;

/// Many trees of one store (a database, or the memory store), one per
/// namespace, and the links that make some of them parent trees of others.
///
/// A write of several trees ([`insert_many`](Self::insert_many)) is one
/// read phase, one descent per tree and ONE durable commit, guarded by
/// every tree's root: all of it lands or none. Every parent tree above a
/// changed tree gets its leaf for that tree (`(child root hash, child root
/// sum)`, or the link's fixed sum) in the same commit, each parent's
/// descent taking all its children changed at once; links may stack. A
/// tree emptied keeps its leaf in its parent, with the empty tree's root
/// and sum 0 (or the link's fixed sum). tapd does otherwise for its
/// multiverse: deleting a universe's last leaf deletes the universe's
/// multiverse leaf (taproot-assets `tapdb/multiverse.go`,
/// `DeleteProofLeaf`).
///
/// Many small concurrent writers share commits through a
/// [`ForestWriter`](crate::ForestWriter) ([`writer`](Self::writer)).
///
/// Links are declared once, before the forest is used
/// ([`with_link`](Self::with_link)), the same in every process that
/// writes the children: a write that goes around them (a
/// [`Tree::insert_many`] on a child namespace) leaves the parent behind,
/// which [`audit_links`](Self::audit_links) reports.
pub struct Forest<S: ForestStore, L> {
    pub(crate) store: S,
    pub(crate) registry: Arc<Registry<S::Tree>>,
    pub(crate) max_attempts: u32,
    pub(crate) recovery_wait: Duration,
    pub(crate) progress: ProgressSink,
    pub(crate) tuning: Tuning,
    layout: PhantomData<fn() -> L>,
}

impl<S: ForestStore + Clone, L> Clone for Forest<S, L> {
    fn clone(&self) -> Self {
        Forest {
            store: self.store.clone(),
            registry: self.registry.clone(),
            max_attempts: self.max_attempts,
            recovery_wait: self.recovery_wait,
            progress: self.progress.clone(),
            tuning: self.tuning,
            layout: PhantomData,
        }
    }
}

impl<S: ForestStore + std::fmt::Debug, L> std::fmt::Debug for Forest<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forest")
            .field("store", &self.store)
            .field("links", &self.registry.links().all())
            .finish_non_exhaustive()
    }
}

/// One tree a forest write changed (or guarded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    /// Its namespace.
    pub name: Arc<str>,
    /// Its root before the write.
    pub old_root: ComputedNode,
    /// Its root after it.
    pub new_root: ComputedNode,
}

/// What [`Forest::insert_many`] did: every tree written and every tree
/// above them, children before parents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForestWrite {
    /// The trees, children before parents.
    pub trees: Vec<TreeChange>,
}

impl ForestWrite {
    /// The new root of tree `name`, if the write touched it.
    pub fn root(&self, name: &str) -> Option<ComputedNode> {
        self.trees
            .iter()
            .find(|t| &*t.name == name)
            .map(|t| t.new_root)
    }
}

impl<S: ForestStore, L: Layout> Forest<S, L> {
    /// A forest over `store`'s namespaces, with no links.
    pub fn new(store: S) -> Self {
        Forest {
            store,
            registry: Arc::new(Registry::new(Links::default())),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            recovery_wait: Duration::ZERO,
            progress: ProgressSink::default(),
            tuning: Tuning::new(),
            layout: PhantomData,
        }
    }

    /// This forest with `link` declared too. Declare every link before
    /// the forest (or a clone) reads or writes.
    pub fn with_link(self, link: Link) -> Self {
        let links = self.registry.links().with(link);
        Forest {
            registry: Arc::new(Registry::new(links)),
            ..self
        }
    }

    /// Sets how many times a write is retried when other writers move a
    /// root between its read and its commit.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets how long a write waits, at most, for a store that went out of
    /// reach before it answers with the store's error (default zero; see
    /// [`Tree::with_recovery_wait`]).
    pub fn with_recovery_wait(mut self, wait: Duration) -> Self {
        self.recovery_wait = wait;
        self
    }

    /// This forest reporting the progress of its writes (each phase of
    /// each write: [`ProgressOperation::InsertRead`](crate::ProgressOperation::InsertRead)
    /// and the next two) to `sink`; its writers' groups report there too.
    pub fn with_progress(mut self, sink: ProgressSink) -> Self {
        self.progress = sink;
        self
    }

    /// This forest's descents (and its writers' and trees') keeping `lanes`
    /// branch hashes in flight on one core ([`Tree::with_hash_lanes`]).
    pub fn with_hash_lanes(mut self, lanes: usize) -> Self {
        self.tuning = self.tuning.with_hash_lanes(lanes);
        self
    }

    /// This forest's descents hashing on at most `threads` threads
    /// ([`Tree::with_descent_threads`]).
    pub fn with_descent_threads(mut self, threads: usize) -> Self {
        self.tuning = self.tuning.with_descent_threads(threads);
        self
    }

    /// How the write engine retries this forest's writes.
    pub(crate) fn policy(&self) -> Policy {
        Policy {
            max_attempts: self.max_attempts,
            recovery_wait: self.recovery_wait,
        }
    }

    /// The links declared.
    pub fn links(&self) -> &[Link] {
        self.registry.links().all()
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The tree `name`, on the forest's handle of its namespace (shared
    /// with the forest's reads). Its reads and proofs are the tree's own;
    /// write through the forest, which keeps the parents in step.
    pub fn tree(&self, name: &str) -> Res<Tree<S::Tree, L>, S>
    where
        S::Tree: Clone,
    {
        let entry = self.registry.resolve(&self.store, name)?;
        Ok(Tree::new(entry.store.clone())
            .with_max_attempts(self.max_attempts)
            .with_recovery_wait(self.recovery_wait)
            .with_progress(self.progress.clone())
            .with_tuning(self.tuning))
    }

    /// The current roots of the trees `names`, in order, in one read.
    pub async fn roots<N: AsRef<str>>(&self, names: &[N]) -> Res<Vec<ComputedNode>, S> {
        let entries = names
            .iter()
            .map(|n| self.registry.resolve(&self.store, n.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let trees: Vec<&S::Tree> = entries.iter().map(|e| &e.store).collect();
        self.store
            .load_roots(&trees)
            .await
            .map_err(TreeError::Store)
    }

    /// The writes of one submission, by tree, each tree once (in the order
    /// first named), parent trees refused.
    pub(crate) fn writes<N: AsRef<str>>(
        &self,
        writes: impl IntoIterator<Item = (N, Key, Leaf)>,
    ) -> Res<Writes<S::Tree>, S> {
        let mut out: Writes<S::Tree> = Vec::new();
        let mut index: HashMap<TreeId, usize> = HashMap::new();
        let mut last: Option<(String, usize)> = None;
        for (name, key, leaf) in writes {
            let name = name.as_ref();
            let slot = match &last {
                Some((n, slot)) if n == name => *slot,
                _ => {
                    let entry = self.registry.resolve_write(&self.store, name)?;
                    let slot = *index.entry(entry.id).or_insert_with(|| {
                        out.push((entry.clone(), Vec::new()));
                        out.len() - 1
                    });
                    last = Some((name.to_owned(), slot));
                    slot
                }
            };
            out[slot].1.push((key, leaf));
        }
        Ok(out)
    }

    /// Writes `(tree, key, leaf)` triples to their trees, and every parent
    /// above them, in ONE commit; returns every tree's old and new root.
    ///
    /// Per tree, as [`Tree::insert_many`]: empty leaves delete, the last
    /// pair of a key wins, and the write is rejected (nothing written) iff
    /// some tree's total, parents included, would exceed `u64::MAX`. A
    /// write naming a parent tree is refused
    /// ([`LinkError::ParentWrite`](crate::LinkError::ParentWrite)).
    pub async fn insert_many<N: AsRef<str>>(
        &self,
        writes: impl IntoIterator<Item = (N, Key, Leaf)>,
    ) -> Res<ForestWrite, S> {
        let mut writes = self.writes(writes)?;
        // Sorted and deduplicated once: the engine's passes meet it in order.
        for (_, batch) in &mut writes {
            descent::normalize(batch);
        }
        let span = tracing::debug_span!(
            target: "ms_smt",
            "forest_insert_many",
            trees = writes.len(),
            leaves = writes.iter().map(|(_, b)| b.len()).sum::<usize>(),
            attempts = Empty,
        );
        self.write_group(&writes).instrument(span).await
    }

    /// The write as a group of one submission through the write engine.
    async fn write_group(&self, writes: &Writes<S::Tree>) -> Res<ForestWrite, S> {
        let job = Job {
            kind: L::KIND,
            group: &[writes],
            want: Want::default(),
            policy: self.policy(),
            progress: &self.progress,
            tuning: self.tuning,
        };
        let mut plan = engine::write(&self.store, &job, None, &())
            .await
            .map_err(engine::Failure::into_error)?
            .plan;
        if let Some((_, e)) = plan.rejected.pop() {
            return Err(TreeError::Plan(e));
        }
        let trees = plan
            .trees
            .iter()
            .map(|t| TreeChange {
                name: t.entry.name.clone(),
                old_root: t.update.old_root,
                new_root: t.update.new_root,
            })
            .collect();
        Ok(ForestWrite { trees })
    }

    /// The nested proof of `key` in tree `name`: its proof there and its
    /// tree's leaf proof in each parent up the chain, all at one snapshot.
    pub async fn nested_proof(&self, name: &str, key: &Key) -> Res<NestedProof, S> {
        let mut proofs = self.nested_proofs(&[(name, *key)]).await?;
        proofs.pop().ok_or(TreeError::Unsupported {
            operation: "nested_proof",
        })
    }

    /// [`nested_proof`](Self::nested_proof) of each `(tree, key)`, in
    /// order: one read of every root on the chains (one snapshot of all
    /// of them: a commit of several trees is atomic, so each parent's leaf
    /// matches its child's root as read) and one read of every path.
    pub async fn nested_proofs<N: AsRef<str>>(
        &self,
        keys: &[(N, Key)],
    ) -> Res<Vec<NestedProof>, S> {
        Ok(self
            .proven_leaves(keys)
            .await?
            .into_iter()
            .map(|proven| proven.proof)
            .collect())
    }

    /// The leaf at `key` in tree `name` (the empty leaf when absent) with
    /// its [`nested_proof`](Self::nested_proof) and the roots of the chain
    /// they were read at: one read of the roots and one of the paths, as
    /// [`nested_proofs`](Self::nested_proofs) makes. Nothing is hashed to
    /// tie them: the paths are walked by hash from those roots.
    pub async fn proven_leaf(&self, name: &str, key: &Key) -> Res<ProvenLeaf, S> {
        let mut found = self.proven_leaves(&[(name, *key)]).await?;
        found.pop().ok_or(TreeError::Unsupported {
            operation: "proven_leaf",
        })
    }

    /// [`proven_leaf`](Self::proven_leaf) of each `(tree, key)`, in order,
    /// in one read.
    pub async fn proven_leaves<N: AsRef<str>>(&self, keys: &[(N, Key)]) -> Res<Vec<ProvenLeaf>, S> {
        let mut reads: Writes<S::Tree> = Vec::new();
        let mut wanted: Vec<(Arc<Entry<S::Tree>>, Key)> = Vec::with_capacity(keys.len());
        for (name, key) in keys {
            let entry = self.registry.resolve(&self.store, name.as_ref())?;
            match reads.iter_mut().find(|(e, _)| e.id == entry.id) {
                Some((_, batch)) => batch.push((*key, Leaf::empty())),
                None => reads.push((entry.clone(), vec![(*key, Leaf::empty())])),
            }
            wanted.push((entry, *key));
        }
        let group = [&reads];
        let order = engine::closure(group.iter().copied());
        for attempt in 0..self.max_attempts {
            // Proofs read the paths alone (no layout: no delete is planned).
            let found = engine::read_trees(&self.store, None, &group, &order, None, false).await?;
            let plans: HashMap<TreeId, _> = found
                .iter()
                .map(|(id, r)| (*id, (r.root, &r.nodes)))
                .collect();
            let lanes = self.tuning.hash_lanes();
            let proofs: Option<Vec<ProvenLeaf>> = wanted
                .iter()
                .map(|(entry, key)| {
                    let (leaf, proof) = engine::nested_leaf_proofs(
                        &plans,
                        entry,
                        std::slice::from_ref(key),
                        lanes,
                    )?
                    .pop()?;
                    let roots = entry
                        .chain()
                        .map(|tree| plans.get(&tree.id).map(|(root, _)| *root))
                        .collect::<Option<Vec<ComputedNode>>>()?;
                    debug_assert_eq!(
                        proof.roots(key, &leaf).ok().as_ref(),
                        Some(&roots),
                        "a path walked by hash proves its leaf under the roots read"
                    );
                    Some(ProvenLeaf { leaf, proof, roots })
                })
                .collect();
            match proofs {
                Some(proofs) => return Ok(proofs),
                // A node went missing: a writer moved a tree meanwhile.
                None => engine::backoff(attempt).await,
            }
        }
        Err(TreeError::Contention {
            attempts: self.max_attempts,
        })
    }
}
