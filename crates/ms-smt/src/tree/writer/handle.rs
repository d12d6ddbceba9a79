//! The writers' public side: [`ForestWriter`] (submissions name their
//! trees) and [`Writer`] (one tree) and their tickets.
//! Both queue onto the same task ([`super::task`]).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin as StdPin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot, watch};

use super::config::{Counters, WriterConfig, WriterStats};
use super::submission::{Answer, Pending, Receipt, SubmitError};
use super::task::Task;
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::store::{ForestStore, TreeStore, Writable};
use crate::tree::engine::{Entry, Writes};
use crate::tree::forest::Forest;
use crate::tree::handle::Tree;

/// State shared by a writer's clones.
struct Shared<T, E: std::error::Error + 'static> {
    /// `None` once closed.
    sender: RwLock<Option<mpsc::Sender<Pending<T, E>>>>,
    counters: Arc<Counters>,
    /// True once the writer's task has ended.
    done: watch::Receiver<bool>,
}

impl<T, E: std::error::Error + 'static> Shared<T, E> {
    /// Starts `task` on the current runtime and shares its queue.
    fn start<F, L>(task: Task<F, L>, config: &WriterConfig) -> Arc<Self>
    where
        F: ForestStore<Tree = T, Error = E> + Clone + 'static,
        T: TreeStore<Error = E> + Clone + 'static,
        E: Send + Sync,
        L: Layout + Send + Sync + 'static,
    {
        let (sender, queue) = mpsc::channel(config.queue_bound.max(1));
        let (done_tx, done) = watch::channel(false);
        let counters = task.counters.clone();
        tokio::spawn(async move {
            task.run(queue).await;
            let _ = done_tx.send(true);
        });
        Arc::new(Shared {
            sender: RwLock::new(Some(sender)),
            counters,
            done,
        })
    }

    fn sender(&self) -> Result<mpsc::Sender<Pending<T, E>>, SubmitError<E>> {
        let sender = self
            .sender
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        sender.clone().ok_or(SubmitError::Closed)
    }

    async fn queue(
        &self,
        writes: Writes<T>,
        prove: bool,
    ) -> Result<oneshot::Receiver<Answer<E>>, SubmitError<E>> {
        let sender = self.sender()?;
        let (pending, answer) = Pending::new(writes, prove);
        sender
            .send(pending)
            .await
            .map_err(|_| SubmitError::Closed)?;
        Ok(answer)
    }

    fn try_queue(&self, writes: Writes<T>) -> Result<oneshot::Receiver<Answer<E>>, SubmitError<E>> {
        let sender = self.sender()?;
        let (pending, answer) = Pending::new(writes, false);
        sender.try_send(pending).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SubmitError::Full,
            mpsc::error::TrySendError::Closed(_) => SubmitError::Closed,
        })?;
        Ok(answer)
    }

    async fn close(&self) {
        self.sender
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let mut done = self.done.clone();
        // An error means the task is gone: nothing is left to wait for.
        let _ = done.wait_for(|done| *done).await;
    }
}

/// Polls an answer's receiver: a dropped sender means the task stopped.
fn poll_answer<E: std::error::Error + 'static>(
    reply: &mut oneshot::Receiver<Answer<E>>,
    cx: &mut Context<'_>,
) -> Poll<Answer<E>> {
    StdPin::new(reply)
        .poll(cx)
        .map(|answer| answer.unwrap_or(Err(SubmitError::Stopped)))
}

/// A queued submission's answer (from [`Writer::try_submit`]).
pub struct Ticket<E: std::error::Error + 'static> {
    reply: oneshot::Receiver<Answer<E>>,
}

impl<E: std::error::Error + 'static> std::fmt::Debug for Ticket<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket").finish_non_exhaustive()
    }
}

impl<E: std::error::Error + 'static> Future for Ticket<E> {
    type Output = Result<Receipt, SubmitError<E>>;

    fn poll(mut self: StdPin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_answer(&mut self.reply, cx).map(|a| a.map(Receipt::from))
    }
}

/// A queued submission's answer (from [`ForestWriter::try_submit`]).
pub struct ForestTicket<E: std::error::Error + 'static> {
    reply: oneshot::Receiver<Answer<E>>,
}

impl<E: std::error::Error + 'static> std::fmt::Debug for ForestTicket<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForestTicket").finish_non_exhaustive()
    }
}

impl<E: std::error::Error + 'static> Future for ForestTicket<E> {
    type Output = Answer<E>;

    fn poll(mut self: StdPin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer<E>> {
        poll_answer(&mut self.reply, cx)
    }
}

/// A coalescing writer for a whole store: cheap to clone and share across
/// tasks, each submission naming its trees.
///
/// Each [`submit`](Self::submit) hands over `(tree, key, leaf)` writes
/// (one or many, one tree or several) and resolves once they are durable.
/// Submissions that queue while a commit is in flight are written
/// together, whatever trees they name: one read of every touched tree's
/// root, one read of every path, one descent per tree and ONE durable
/// commit for the whole group, every parent tree above a changed tree
/// written in that same commit. The guarantees of [`Writer`] hold across
/// trees:
///
/// * **Order.** Submissions apply in the order queued; for one key of one
///   tree the later one wins; every root in a receipt contains its
///   submission and every one acknowledged before it.
/// * **Atomic, isolated submissions.** A submission is applied whole, in
///   every tree it names and every parent above them, or not at all. One
///   that would overflow the u64 sum of any of those trees is rejected
///   alone ([`SubmitError::Rejected`]); the rest of its group commits.
/// * **Failures, backpressure, cancellation, shutdown, other processes**:
///   as [`Writer`], with every tree of a group guarded by its root in the
///   one commit.
///
/// A submission naming a parent tree is refused
/// ([`SubmitError::Refused`]): a parent's leaves follow its children.
pub struct ForestWriter<S: ForestStore, L> {
    forest: Forest<S, L>,
    shared: Arc<Shared<S::Tree, S::Error>>,
}

impl<S: ForestStore + Clone, L> Clone for ForestWriter<S, L> {
    fn clone(&self) -> Self {
        ForestWriter {
            forest: self.forest.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: ForestStore, L> std::fmt::Debug for ForestWriter<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForestWriter")
            .field("stats", &self.shared.counters.snapshot())
            .finish_non_exhaustive()
    }
}

impl<S, L> Forest<S, L>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + 'static,
    L: Layout + Send + Sync + 'static,
{
    /// A coalescing [`ForestWriter`] for this forest's trees, with its own
    /// task on the current Tokio runtime (call from inside one: like
    /// `tokio::spawn`, it panics outside a runtime).
    pub fn writer(&self, config: WriterConfig) -> ForestWriter<S, L> {
        let task = Task::new(self.clone(), config);
        ForestWriter {
            forest: self.clone(),
            shared: Shared::start(task, &config),
        }
    }
}

impl<S: ForestStore + Clone, L: Layout> ForestWriter<S, L> {
    /// Writes `writes` (`(tree, key, leaf)`) with the submissions queued
    /// beside it; resolves once it is durable. Waits while the queue is
    /// full.
    pub async fn submit<N, I>(&self, writes: I) -> Answer<S::Error>
    where
        N: AsRef<str>,
        I: IntoIterator<Item = (N, Key, Leaf)>,
    {
        let writes = self.forest.writes(writes).map_err(SubmitError::Refused)?;
        self.shared
            .queue(writes, false)
            .await?
            .await
            .unwrap_or(Err(SubmitError::Stopped))
    }

    /// [`submit`](Self::submit), with each write's nested proof at the
    /// receipt's roots ([`ForestReceipt::proofs`](crate::ForestReceipt::proofs)).
    pub async fn submit_with_proofs<N, I>(&self, writes: I) -> Answer<S::Error>
    where
        N: AsRef<str>,
        I: IntoIterator<Item = (N, Key, Leaf)>,
    {
        let writes = self.forest.writes(writes).map_err(SubmitError::Refused)?;
        self.shared
            .queue(writes, true)
            .await?
            .await
            .unwrap_or(Err(SubmitError::Stopped))
    }

    /// Queues `writes` without waiting: [`SubmitError::Full`] when the
    /// queue is full. The [`ForestTicket`] resolves as
    /// [`submit`](Self::submit) does; dropping it before the group is
    /// sealed leaves the writes out.
    pub fn try_submit<N, I>(
        &self,
        writes: I,
    ) -> Result<ForestTicket<S::Error>, SubmitError<S::Error>>
    where
        N: AsRef<str>,
        I: IntoIterator<Item = (N, Key, Leaf)>,
    {
        let writes = self.forest.writes(writes).map_err(SubmitError::Refused)?;
        let reply = self.shared.try_queue(writes)?;
        Ok(ForestTicket { reply })
    }

    /// Refuses new submissions, writes (or fails) every queued one, and
    /// returns once the writer's task has ended. Every clone is closed.
    pub async fn close(&self) {
        self.shared.close().await;
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> WriterStats {
        self.shared.counters.snapshot()
    }
}

/// A coalescing writer for one tree: cheap to clone and share across tasks.
///
/// Each [`submit`](Self::submit) hands over a batch (one leaf or many) and
/// resolves once the batch is durable. Submissions that queue while a
/// commit is in flight are written together, with one read phase, one
/// descent and one commit, so many small writers share each durable
/// commit. It is the one-tree case of [`ForestWriter`] (the same task).
/// Guarantees, each tested:
///
/// * **Order.** Submissions apply in the order they were queued: for one
///   key the later submission wins, and a receipt's root contains its
///   submission and every one acknowledged before it.
/// * **Atomic, isolated submissions.** A submission is applied whole or
///   not at all. One whose leaves would overflow the u64 root sum (counting
///   the leaves it replaces, after the submissions before it) is rejected
///   alone with [`SubmitError::Rejected`]; the rest of its group commits.
/// * **Failures.** A commit that loses a race to another process is
///   retried from a fresh read (after a few losses, under the namespace's
///   write lock). A commit that fails is never acknowledged: after an
///   error the writer reads the root and acknowledges the group only if it
///   is the group's new root; otherwise every submission of the group gets
///   [`SubmitError::Failed`] (the root is still the old one: nothing was
///   applied) or [`SubmitError::Indeterminate`].
/// * **Backpressure.** The queue holds at most
///   [`WriterConfig::queue_bound`] submissions; `submit` waits while it is
///   full and [`try_submit`](Self::try_submit) refuses with
///   [`SubmitError::Full`].
/// * **Cancellation.** A submitter that drops its future before its group
///   is sealed is left out of the group. Once the group is sealed (the
///   writer has started its read phase), its leaves are written whether or
///   not anyone still waits.
/// * **Shutdown.** [`close`](Self::close) refuses new submissions, then
///   writes or fails every queued one and returns when the writer's task
///   has ended. Dropping every clone does the same in the background.
/// * **Other processes.** Commits stay guarded by the store's root
///   compare-and-swap, so several writers (in several processes) on one
///   namespace stay correct.
///
/// The writer is the fast path for many small writes; a direct
/// [`Tree::insert_many`] from other tasks stays correct beside it (the two
/// race optimistically like any two writers).
pub struct Writer<S: TreeStore, L> {
    entry: Arc<Entry<S>>,
    shared: Arc<Shared<S, <S as TreeStore>::Error>>,
    layout: PhantomData<fn() -> L>,
}

impl<S: TreeStore, L> Clone for Writer<S, L> {
    fn clone(&self) -> Self {
        Writer {
            entry: self.entry.clone(),
            shared: self.shared.clone(),
            layout: PhantomData,
        }
    }
}

impl<S: TreeStore, L> std::fmt::Debug for Writer<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<S, L> Tree<S, L>
where
    S: Writable + 'static,
    L: Layout + Send + Sync + 'static,
{
    /// A coalescing [`Writer`] for this tree, with its own task on the
    /// current Tokio runtime (call from inside one: like `tokio::spawn`, it
    /// panics outside a runtime). Its groups report progress to this
    /// tree's sink and remember the nodes they write in this tree's handle.
    pub fn writer(&self, config: WriterConfig) -> Writer<S, L> {
        let mut forest = Forest::<S::Forest, L>::new(self.store.forest().clone())
            .with_max_attempts(self.max_attempts)
            .with_progress(self.progress.clone());
        forest.tuning = self.tuning;
        let name = self.store.namespace().unwrap_or("default");
        let entry = Entry::alone(name, self.store.clone());
        let task = Task::new(forest, config);
        Writer {
            entry,
            shared: Shared::start(task, &config),
            layout: PhantomData,
        }
    }
}

impl<S: TreeStore, L> Writer<S, L> {
    fn writes<I>(&self, batch: I) -> Writes<S>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        vec![(self.entry.clone(), batch.into_iter().collect())]
    }

    /// Writes `batch` with the submissions queued beside it; resolves once
    /// it is durable. Waits while the queue is full.
    pub async fn submit<I>(&self, batch: I) -> Result<Receipt, SubmitError<S::Error>>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        let reply = self.shared.queue(self.writes(batch), false).await?;
        Ticket { reply }.await
    }

    /// [`submit`](Self::submit), with a proof at the receipt's root for each
    /// key of `batch` ([`Receipt::proofs`]).
    pub async fn submit_with_proofs<I>(&self, batch: I) -> Result<Receipt, SubmitError<S::Error>>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        let reply = self.shared.queue(self.writes(batch), true).await?;
        Ticket { reply }.await
    }

    /// Queues `batch` without waiting: [`SubmitError::Full`] when the queue
    /// is full. The [`Ticket`] resolves as [`submit`](Self::submit) does;
    /// dropping it before the group is sealed leaves the batch out.
    pub fn try_submit<I>(&self, batch: I) -> Result<Ticket<S::Error>, SubmitError<S::Error>>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        let reply = self.shared.try_queue(self.writes(batch))?;
        Ok(Ticket { reply })
    }

    /// Refuses new submissions, writes (or fails) every queued one, and
    /// returns once the writer's task has ended. Every clone is closed.
    pub async fn close(&self) {
        self.shared.close().await;
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> WriterStats {
        self.shared.counters.snapshot()
    }
}
