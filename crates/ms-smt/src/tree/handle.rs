//! The tree handle: one namespace's reads, and its writes as groups of one
//! submission through the write engine ([`crate::tree::engine`]).

use std::marker::PhantomData;
use std::time::Duration;

use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::Proof;
use crate::Tuning;
use crate::UpdateProof;
use crate::audit::report::AuditReport;
use crate::descent::{self, NodeCache};
use crate::error::{PlanError, TreeError};
use crate::key::Key;
use crate::layout::{Compacted, Full, Layout};
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::progress::ProgressSink;
use crate::store::{AuditStore, ReadAt, TreeStore, Writable};
use crate::tree::engine::{self, Entry, Job, Policy, Want, Writes};
use crate::tree::fetch;
use crate::tree::traced::Traced;

/// A merkle-sum sparse merkle tree on store `S` with layout `L`.
///
/// Both layouts give identical roots and proofs for the same contents; use
/// [`FullTree`] or [`CompactedTree`]. Every operation is one read phase and
/// at most one store commit. Concurrent writers on one namespace are
/// serialised optimistically: a commit whose root moved is retried from a
/// fresh read, so no update is lost; after a few lost races the write
/// takes the namespace's write lock, where the store has one. Writes need
/// the store's write side ([`ForestStore`](crate::store::ForestStore) over its own handles, which
/// every store of the crate is).
#[derive(Debug)]
pub struct Tree<S, L> {
    pub(crate) store: S,
    pub(crate) max_attempts: u32,
    pub(crate) recovery_wait: Duration,
    pub(crate) progress: ProgressSink,
    pub(crate) tuning: Tuning,
    layout: PhantomData<L>,
}

impl<S: Clone, L> Clone for Tree<S, L> {
    fn clone(&self) -> Self {
        Tree {
            store: self.store.clone(),
            max_attempts: self.max_attempts,
            recovery_wait: self.recovery_wait,
            progress: self.progress.clone(),
            tuning: self.tuning,
            layout: PhantomData,
        }
    }
}

/// The full layout (every branch stored).
pub type FullTree<S> = Tree<S, Full>;
/// The compacted layout (single-leaf subtrees stored as one node).
pub type CompactedTree<S> = Tree<S, Compacted>;

/// A tree operation's result on store `S`.
pub(crate) type Res<T, S> = Result<T, TreeError<<S as TreeStore>::Error>>;

/// Default number of optimistic attempts per write.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 64;

impl<S: TreeStore, L: Layout> Tree<S, L> {
    /// A tree over `store` (one namespace of it).
    pub fn new(store: S) -> Self {
        Tree {
            store,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            recovery_wait: Duration::ZERO,
            progress: ProgressSink::default(),
            tuning: Tuning::new(),
            layout: PhantomData,
        }
    }

    /// This tree reporting the progress of its long operations to `sink`
    /// (see [`ProgressOperation`](crate::ProgressOperation) for what each reports, and in which
    /// unit). Views, imports and syncs of this tree report there too.
    pub fn with_progress(mut self, sink: ProgressSink) -> Self {
        self.progress = sink;
        self
    }

    /// Where this tree reports progress (the default sink drops reports).
    pub fn progress(&self) -> &ProgressSink {
        &self.progress
    }

    /// Sets how many times a write is retried when other writers move the
    /// root between its read and its commit.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets how long a write waits, at most, for a store that went out of
    /// reach ([`StoreError::is_transient`](crate::store::StoreError::is_transient))
    /// before it answers with the store's error: a commit that failed so is
    /// settled by reading the root once the store answers (landed: the
    /// write returns its root), a read that failed so is tried again.
    /// Default zero: the error is returned at once (a failed commit's root
    /// is still read once), as a caller retrying by itself expects; the
    /// coalescing writer waits [`WriterConfig::recovery_wait`](crate::WriterConfig::recovery_wait).
    pub fn with_recovery_wait(mut self, wait: Duration) -> Self {
        self.recovery_wait = wait;
        self
    }

    /// This tree's descents keeping `lanes` branch hashes in flight on one
    /// core (see [`Tuning::with_hash_lanes`]; default:
    /// [`DEFAULT_HASH_LANES`](crate::DEFAULT_HASH_LANES)). Its writers and
    /// views take it too.
    pub fn with_hash_lanes(mut self, lanes: usize) -> Self {
        self.tuning = self.tuning.with_hash_lanes(lanes);
        self
    }

    /// This tree's descents hashing on at most `threads` threads (see
    /// [`Tuning::with_descent_threads`]; default: two where the machine
    /// has two or more cores).
    pub fn with_descent_threads(mut self, threads: usize) -> Self {
        self.tuning = self.tuning.with_descent_threads(threads);
        self
    }

    /// This tree with `tuning`'s hash lanes and descent threads.
    pub fn with_tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// This tree's hash lanes and descent threads.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// How the write engine retries this tree's writes.
    pub(crate) fn policy(&self) -> Policy {
        Policy {
            max_attempts: self.max_attempts,
            recovery_wait: self.recovery_wait,
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The current root hash and sum; the empty root for an empty tree.
    pub async fn root(&self) -> Res<ComputedNode, S> {
        self.store.load_root().await.map_err(TreeError::Store)
    }

    /// The leaf at `key`; the empty leaf when absent.
    pub async fn get(&self, key: &Key) -> Res<Leaf, S> {
        Ok(self.get_many(std::slice::from_ref(key)).await?.remove(0))
    }

    /// The leaves at `keys`, in order, read in one level-batched descent.
    pub async fn get_many(&self, keys: &[Key]) -> Res<Vec<Leaf>, S> {
        self.view().get_many(keys).await
    }

    /// The merkle proof for `key` (inclusion or exclusion).
    pub async fn merkle_proof(&self, key: &Key) -> Res<Proof, S> {
        Ok(self
            .merkle_proofs(std::slice::from_ref(key))
            .await?
            .remove(0))
    }

    /// Proofs for `keys`, in order, read in one level-batched descent.
    pub async fn merkle_proofs(&self, keys: &[Key]) -> Res<Vec<Proof>, S> {
        self.view().merkle_proofs(keys).await
    }

    /// Removes every node and the root of this tree's namespace.
    pub async fn delete_all(&self) -> Res<(), S> {
        self.store.delete_all().await.map_err(TreeError::Store)
    }

    /// Reads the root of `target` and the nodes on the paths of `keys`
    /// (`for_write`: the read phase of a write). `None` when a concurrent
    /// writer removed a node between the two (retry).
    pub(crate) async fn read(
        &self,
        target: Target,
        keys: &[Key],
        siblings: bool,
        for_write: bool,
    ) -> Res<Option<(ComputedNode, NodeCache)>, S> {
        let span = tracing::trace_span!(target: "ms_smt", "read", keys = keys.len(), for_write);
        let read = async {
            let root = self.root_of(target).await?;
            let sorted = descent::sorted_keys(keys);
            let fetched =
                fetch::fetch_paths(&self.store, target.at, &root, &sorted, siblings, for_write)
                    .await;
            match fetched {
                Ok(cache) => Ok(Some((root, cache))),
                Err(TreeError::Plan(e)) if self.lost_race(target, &e, &root).await? => Ok(None),
                Err(e) => Err(e),
            }
        };
        if span.is_disabled() {
            return read.await;
        }
        read.instrument(span).await
    }

    /// The root `target` reads: its fixed root, or the current one.
    pub(crate) async fn root_of(&self, target: Target) -> Res<ComputedNode, S> {
        match target.root {
            Some(root) => Ok(root),
            None => self.root().await,
        }
    }

    /// True when the read of `root` that failed with `err` raced a writer
    /// (the write engine's rule, [`engine::may_have_raced`], and the root
    /// moved since): the read retries from a fresh one. A pinned tree does
    /// not move: a node missing from it is an error.
    pub(crate) async fn lost_race(
        &self,
        target: Target,
        err: &PlanError,
        root: &ComputedNode,
    ) -> Res<bool, S> {
        Ok(target.root.is_none() && engine::may_have_raced(err) && self.root().await? != *root)
    }

    pub(crate) async fn read_each<T>(
        &self,
        target: Target,
        keys: &[Key],
        siblings: bool,
        f: impl Fn(&NodeCache, &ComputedNode, &Key) -> Result<T, PlanError>,
    ) -> Res<Vec<T>, S> {
        self.read_all(target, keys, siblings, |cache, root| {
            keys.iter().map(|k| f(cache, root, k)).collect()
        })
        .await
    }

    /// Reads the paths of `keys` in `target` and hands them to `f` once,
    /// retrying while concurrent writers move the current tree under it.
    pub(crate) async fn read_all<T>(
        &self,
        target: Target,
        keys: &[Key],
        siblings: bool,
        f: impl Fn(&NodeCache, &ComputedNode) -> Result<T, PlanError>,
    ) -> Res<T, S> {
        let f = &f;
        self.retrying(move || async move {
            let Some((root, cache)) = self.read(target, keys, siblings, false).await? else {
                return Ok(None);
            };
            let walked = tracing::trace_span!(target: "ms_smt", "descent", keys = keys.len())
                .in_scope(|| f(&cache, &root));
            match walked {
                Err(e) if self.lost_race(target, &e, &root).await? => Ok(None),
                other => other.map(Some).map_err(TreeError::Plan),
            }
        })
        .await
    }

    /// Runs `attempt` until it gives a value, an error, or up to
    /// `max_attempts` times `None` (it lost a race to a writer that moved
    /// the current tree under it), pausing briefly between attempts.
    pub(crate) async fn retrying<T, F, Fut>(&self, mut attempt: F) -> Res<T, S>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Res<Option<T>, S>>,
    {
        for n in 0..self.max_attempts {
            Span::current().record("attempts", n.saturating_add(1));
            if let Some(value) = attempt().await? {
                return Ok(value);
            }
            engine::backoff(n).await;
        }
        Err(TreeError::Contention {
            attempts: self.max_attempts,
        })
    }
}

/// Writes: groups of one submission through the write engine, on the
/// store's write side.
impl<S: Writable, L: Layout> Tree<S, L> {
    /// Writes `leaf` at `key` (an empty leaf deletes). Returns the new root.
    pub async fn insert(&self, key: Key, leaf: Leaf) -> Res<ComputedNode, S> {
        self.insert_many([(key, leaf)]).await
    }

    /// Deletes the leaf at `key`; deleting an absent key changes nothing.
    pub async fn delete(&self, key: Key) -> Res<ComputedNode, S> {
        self.insert_many([(key, Leaf::empty())]).await
    }

    /// Writes a whole batch in one descent and one store commit; returns the
    /// new root.
    ///
    /// Empty leaves delete. When a key occurs more than once the **last**
    /// pair wins. The batch is rejected, with nothing written, iff the
    /// tree's final total sum would exceed `u64::MAX` (replaced leaves'
    /// sums count as removed). An empty batch does nothing.
    pub async fn insert_many<I>(&self, batch: I) -> Res<ComputedNode, S>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        let batch: Vec<(Key, Leaf)> = batch.into_iter().collect();
        Ok(self.write(batch, false).await?.new_root)
    }

    /// [`insert_many`](Self::insert_many), also proving the transition: the
    /// [`UpdateProof`] is taken from the very nodes the write was planned
    /// on (under the namespace's write lock too, when the write falls back
    /// to it), so a verifier holding only the old root and the batch can
    /// check the new root with it.
    pub async fn insert_many_with_proof<I>(&self, batch: I) -> Res<ProvenWrite, S>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        let batch: Vec<(Key, Leaf)> = batch.into_iter().collect();
        self.write(batch, true).await
    }

    /// One batched write, in its `insert_many` span; with `prove`, its
    /// update proof too.
    async fn write(&self, batch: Vec<(Key, Leaf)>, prove: bool) -> Res<ProvenWrite, S> {
        let span = tracing::debug_span!(
            target: "ms_smt",
            "insert_many",
            namespace = self.store.namespace(),
            batch = batch.len(),
            prove,
            attempts = Empty,
        );
        if span.is_disabled() {
            return self.write_group(batch, prove).await;
        }
        Traced::new(span, &self.store)
            .run(&self.store, self.write_group(batch, prove))
            .await
    }

    /// The write as a group of one submission over this one tree.
    /// The batch is sorted and deduplicated here, once: the engine's
    /// passes then meet it in order.
    async fn write_group(&self, mut batch: Vec<(Key, Leaf)>, prove: bool) -> Res<ProvenWrite, S> {
        descent::normalize(&mut batch);
        if batch.is_empty() && !prove {
            let root = self.root().await?;
            return Ok(ProvenWrite {
                old_root: root,
                new_root: root,
                proof: None,
            });
        }
        descent::leaves_sum(batch.iter().map(|(_, leaf)| leaf))?;
        let name = self.store.namespace().unwrap_or("default");
        let writes: Writes<S> = vec![(Entry::alone(name, self.store.clone()), batch)];
        let job = Job {
            kind: L::KIND,
            group: &[&writes],
            want: Want {
                update_proofs: prove,
                ..Want::default()
            },
            policy: self.policy(),
            progress: &self.progress,
            tuning: self.tuning,
        };
        let mut plan = engine::write(self.store.forest(), &job, None, &())
            .await
            .map_err(engine::Failure::into_error)?
            .plan;
        if let Some((_, e)) = plan.rejected.pop() {
            return Err(TreeError::Plan(e));
        }
        let tree = plan.trees.pop().ok_or(TreeError::Unsupported {
            operation: "insert_many",
        })?;
        Ok(ProvenWrite {
            old_root: tree.update.old_root,
            new_root: tree.update.new_root,
            proof: tree.proof,
        })
    }
}

/// The audit, on stores that check themselves.
impl<S: AuditStore, L: Layout> Tree<S, L> {
    /// Checks everything the store keeps for this namespace: recomputes
    /// every hash and sum from the stored root down, checks the shape this
    /// layout writes (a compacted tree's leaves sit as high as they can),
    /// and reports children that are missing and stored things no position
    /// reaches. Pinned roots are checked the same way, down to the rows a
    /// read at their version sees (on SQL stores each pin gets its own
    /// report in [`AuditReport::pinned`]). Reads one consistent snapshot;
    /// repairs nothing.
    ///
    /// On SQL stores the rows stream through in key order, so memory stays
    /// bounded; every compacted leaf costs up to 256 hashes to recheck.
    pub async fn audit(&self) -> Res<AuditReport, S> {
        let span = tracing::debug_span!(
            target: "ms_smt",
            "audit",
            namespace = self.store.namespace(),
            layout = ?L::KIND,
            nodes = Empty,
            problems = Empty,
        );
        let traced = Traced::new(span, &self.store);
        traced
            .run(&self.store, async {
                let report = self
                    .store
                    .audit(L::KIND, &self.progress)
                    .await
                    .map_err(TreeError::Store)?;
                let problems = (report.problems.len() as u64).saturating_add(report.more_problems);
                Span::current()
                    .record("nodes", report.stored_items)
                    .record("problems", problems);
                Ok(report)
            })
            .await
    }
}

/// A committed write with the roots it moved between and, from
/// [`Tree::insert_many_with_proof`], the proof of that move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenWrite {
    /// The root the batch was applied to.
    pub old_root: ComputedNode,
    /// The root after it.
    pub new_root: ComputedNode,
    /// The old leaves at the batch's keys and their multi-key proof under
    /// `old_root` (`None` from plain writes).
    pub proof: Option<UpdateProof>,
}

/// The tree a read looks at: the current one (each read loads its root),
/// or a fixed root at a pinned version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    /// What the store reads.
    pub at: ReadAt,
    /// The fixed root, for pinned trees.
    pub root: Option<ComputedNode>,
}

impl Target {
    /// The current tree.
    pub const CURRENT: Target = Target {
        at: ReadAt::Current,
        root: None,
    };
}
