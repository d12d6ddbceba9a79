//! A submission and what it gets back: the queued [`Pending`] the task
//! takes, the receipts of an acknowledged one and the errors of the others.
//! The handles ([`super::handle`]) make them, the task ([`super::task`])
//! and its answers ([`super::answer`]) consume them.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::NestedProof;
use crate::Proof;
use crate::error::{PlanError, TreeError};
use crate::key::Key;
use crate::node::ComputedNode;
use crate::tree::engine::{Entry, Writes};

/// What an acknowledged submission to a [`Writer`](super::Writer) gets: its leaves are
/// durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The root the submission's group committed: it contains this
    /// submission and every submission acknowledged before it.
    pub root: ComputedNode,
    /// With [`Writer::submit_with_proofs`](super::Writer::submit_with_proofs): a proof at `root` for each of
    /// the submission's keys, in the order submitted.
    pub proofs: Option<Vec<Proof>>,
    /// Leaves in the group this submission committed with.
    pub group_leaves: usize,
}

/// A tree's root in a [`ForestReceipt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRoot {
    /// The tree's namespace.
    pub name: Arc<str>,
    /// Its root after the submission's group.
    pub root: ComputedNode,
}

/// What an acknowledged submission to a [`ForestWriter`](super::ForestWriter) gets: its leaves,
/// and every parent leaf above them, are durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForestReceipt {
    /// The roots the submission's group committed for every tree the
    /// submission wrote and every tree above them, children before
    /// parents: each contains this submission and every submission
    /// acknowledged before it.
    pub roots: Vec<TreeRoot>,
    /// With [`ForestWriter::submit_with_proofs`](super::ForestWriter::submit_with_proofs): for each write, in the
    /// order submitted, its nested proof at these roots (its proof in its
    /// tree, then its tree's leaf proof in each parent).
    pub proofs: Option<Vec<NestedProof>>,
    /// Leaves in the group this submission committed with.
    pub group_leaves: usize,
}

impl ForestReceipt {
    /// The root of tree `name` after the submission's group, if the
    /// submission touched it (or a tree under it).
    pub fn root(&self, name: &str) -> Option<ComputedNode> {
        self.roots.iter().find(|t| &*t.name == name).map(|t| t.root)
    }
}

impl From<ForestReceipt> for Receipt {
    /// The first tree's root and each proof's first level: a one-tree
    /// writer's receipt.
    fn from(receipt: ForestReceipt) -> Receipt {
        Receipt {
            root: receipt
                .roots
                .first()
                .map_or_else(ComputedNode::empty_root, |t| t.root),
            proofs: receipt
                .proofs
                .map(|p| p.into_iter().map(|n| n.proof().clone()).collect()),
            group_leaves: receipt.group_leaves,
        }
    }
}

/// Why a submission was not acknowledged. Nothing of it was written,
/// except where [`SubmitError::Indeterminate`] says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError<E: std::error::Error + 'static> {
    /// This submission alone was rejected (its leaves would overflow the
    /// u64 root sum of a tree it writes, or of a parent above it, given the
    /// submissions applied before it); the rest of its group committed.
    #[error("submission rejected: {0}")]
    Rejected(#[source] PlanError),
    /// The submission was refused before it was queued: a tree it names
    /// cannot be written (a parent tree, a cycle of links) or opened.
    #[error("submission refused: {0}")]
    Refused(#[source] TreeError<E>),
    /// The group's write failed and the store's roots show it was not
    /// applied; the submission can be sent again.
    #[error("the group's write failed: {0}")]
    Failed(#[source] Arc<TreeError<E>>),
    /// The group's commit failed and the store's roots have since moved to
    /// roots that are neither the group's old nor its new ones (another
    /// process wrote meanwhile): whether this submission was applied is
    /// unknown. Read its keys to find out.
    #[error("the group's commit failed and its outcome is unknown: {0}")]
    Indeterminate(#[source] Arc<TreeError<E>>),
    /// The writer was closed before the submission was queued.
    #[error("the writer is closed")]
    Closed,
    /// [`Writer::try_submit`](super::Writer::try_submit) only: the queue is full.
    #[error("the writer's queue is full")]
    Full,
    /// The writer's task ended, or panicked inside the store, while this
    /// submission was queued or being written: whether it was applied is
    /// unknown (read its keys to find out).
    #[error("the writer stopped before answering; the outcome is unknown")]
    Stopped,
}

/// The task's answer to one submission.
pub(super) type Answer<E> = Result<ForestReceipt, SubmitError<E>>;

/// One queued submission.
pub(super) struct Pending<T, E: std::error::Error + 'static> {
    /// Its writes, by tree.
    pub writes: Writes<T>,
    /// Its leaves.
    pub leaves: usize,
    /// With proofs: every write's tree and key, in the order submitted.
    pub prove: Option<Vec<(Arc<Entry<T>>, Key)>>,
    pub reply: oneshot::Sender<Answer<E>>,
}

impl<T, E: std::error::Error + 'static> Pending<T, E> {
    /// A submission of `writes` and the receiver of its answer.
    /// Each tree's batch is sorted and deduplicated here, on the
    /// submitter's task, once (after the keys to prove are taken in the
    /// order submitted): the writer's task then meets it in order.
    pub(super) fn new(mut writes: Writes<T>, prove: bool) -> (Self, oneshot::Receiver<Answer<E>>) {
        let (reply, answer) = oneshot::channel();
        let prove = prove.then(|| {
            writes
                .iter()
                .flat_map(|(entry, batch)| batch.iter().map(move |(key, _)| (entry.clone(), *key)))
                .collect()
        });
        let leaves = writes.iter().map(|(_, b)| b.len()).sum();
        for (_, batch) in &mut writes {
            crate::descent::normalize(batch);
        }
        let pending = Pending {
            writes,
            leaves,
            prove,
            reply,
        };
        (pending, answer)
    }
}
