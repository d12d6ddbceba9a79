//! The coalescing writer: many small submissions from many tasks become one
//! read phase, one descent and one durable commit per group.
//!
//! A single task owns the tree's write side. Submissions queue on a bounded
//! channel; the task takes the first one, then everything else already
//! queued (up to [`WriterConfig::max_group_leaves`]), and writes the group.
//! While a group commits, the next one gathers, so the group size follows
//! the load: one leaf when nobody else is waiting (no added wait by
//! default, and the commit runs on the writer's own task), hundreds when
//! hundreds of tasks submit at once (then a group planned during a commit
//! takes about half of what waits, so planning and committing stay even).

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin as StdPin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use tokio::task::{JoinError, JoinHandle};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::descent::{self, NodeCache, UpdateBatch};
use crate::error::{PlanError, SumOverflow, TreeError};
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::proof::single::Proof;
use crate::store::{CommitOutcome, TreeStore, hashing};
use crate::tree::handle::{EXCLUSIVE_AFTER, Target, Tree, backoff};
use crate::tree::traced::ErrorKind;
use crate::tree::{fetch, walk};

/// How a [`Writer`] forms its groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterConfig {
    /// Leaves at most in one group (default 8,192). A submission larger
    /// than this is never split: it forms a group of its own.
    pub max_group_leaves: usize,
    /// How long the writer waits for more submissions once it has one
    /// (default zero: a group is whatever is queued when the previous
    /// commit ends, so a lone submitter pays no added latency).
    pub max_wait: Duration,
    /// Submissions queued at most (default 16,384). [`Writer::submit`]
    /// waits while the queue is full; [`Writer::try_submit`] refuses.
    pub queue_bound: usize,
}

/// Default [`WriterConfig::max_group_leaves`].
pub const DEFAULT_MAX_GROUP_LEAVES: usize = 8_192;
/// Default [`WriterConfig::queue_bound`].
pub const DEFAULT_QUEUE_BOUND: usize = 16_384;

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_group_leaves: DEFAULT_MAX_GROUP_LEAVES,
            max_wait: Duration::ZERO,
            queue_bound: DEFAULT_QUEUE_BOUND,
        }
    }
}

/// What an acknowledged submission gets: its leaves are durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The root the submission's group committed: it contains this
    /// submission and every submission acknowledged before it.
    pub root: ComputedNode,
    /// With [`Writer::submit_with_proofs`]: a proof at `root` for each of
    /// the submission's keys, in the order submitted.
    pub proofs: Option<Vec<Proof>>,
    /// Leaves in the group this submission committed with.
    pub group_leaves: usize,
}

/// Why a submission was not acknowledged. Nothing of it was written,
/// except where [`SubmitError::Indeterminate`] says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError<E: std::error::Error + 'static> {
    /// This submission alone was rejected (its leaves would overflow the
    /// u64 root sum, given the submissions applied before it); the rest of
    /// its group committed.
    #[error("submission rejected: {0}")]
    Rejected(#[source] PlanError),
    /// The group's write failed and the store's root shows it was not
    /// applied; the submission can be sent again.
    #[error("the group's write failed: {0}")]
    Failed(#[source] Arc<TreeError<E>>),
    /// The group's commit failed and the store's root has since moved to a
    /// root that is neither the group's old nor its new one (another
    /// process wrote meanwhile): whether this submission was applied is
    /// unknown. Read its keys to find out.
    #[error("the group's commit failed and its outcome is unknown: {0}")]
    Indeterminate(#[source] Arc<TreeError<E>>),
    /// The writer was closed before the submission was queued.
    #[error("the writer is closed")]
    Closed,
    /// [`Writer::try_submit`] only: the queue is full.
    #[error("the writer's queue is full")]
    Full,
    /// The writer's task ended, or panicked inside the store, while this
    /// submission was queued or being written: whether it was applied is
    /// unknown (read its keys to find out).
    #[error("the writer stopped before answering; the outcome is unknown")]
    Stopped,
}

/// The answer to one submission.
type Answer<E> = Result<Receipt, SubmitError<E>>;

/// One queued submission.
struct Pending<E: std::error::Error + 'static> {
    batch: Vec<(Key, Leaf)>,
    prove: bool,
    reply: oneshot::Sender<Answer<E>>,
}

/// Counts of what a writer did since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Groups written (each one descent and at most one commit).
    pub groups: u64,
    /// Submissions acknowledged.
    pub acknowledged: u64,
    /// Leaves in acknowledged submissions.
    pub leaves: u64,
    /// Submissions rejected alone ([`SubmitError::Rejected`]).
    pub rejected: u64,
    /// Submissions failed with their group.
    pub failed: u64,
    /// Submissions dropped by their submitter before their group sealed.
    pub abandoned: u64,
    /// Commits lost to another writer's (retried).
    pub lost_races: u64,
    /// Groups committed on a plan made while the previous group's commit
    /// was in flight (pipelined).
    pub planned_ahead: u64,
    /// Time spent reading and planning groups (the read phase, the
    /// admission and the descent).
    pub planning: Duration,
    /// Time groups' commits took, from their start to their end.
    pub committing: Duration,
    /// Time the writer had a planned group ready and waited for the
    /// previous group's commit to end (where commits, not planning, are
    /// the bottleneck).
    pub waiting: Duration,
    /// The largest group, in leaves.
    pub largest_group: u64,
    /// Groups by size: entry `i` counts groups of `2^i ..= 2^(i+1) - 1`
    /// leaves (the last entry: 32,768 and more).
    pub group_sizes: [u64; 16],
}

#[derive(Default)]
struct Counters {
    groups: AtomicU64,
    acknowledged: AtomicU64,
    leaves: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    abandoned: AtomicU64,
    lost_races: AtomicU64,
    planned_ahead: AtomicU64,
    planning: AtomicU64,
    committing: AtomicU64,
    waiting: AtomicU64,
    largest_group: AtomicU64,
    group_sizes: [AtomicU64; 16],
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds the time since `start` to `counter`, in microseconds.
    fn time(counter: &AtomicU64, start: Instant) {
        let micros = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        counter.fetch_add(micros, Ordering::Relaxed);
    }

    fn group(&self, leaves: usize) {
        let leaves = leaves as u64;
        Self::add(&self.groups, 1);
        self.largest_group.fetch_max(leaves, Ordering::Relaxed);
        let bucket = (leaves.max(1).ilog2() as usize).min(self.group_sizes.len() - 1);
        Self::add(&self.group_sizes[bucket], 1);
    }

    fn snapshot(&self) -> WriterStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WriterStats {
            groups: get(&self.groups),
            acknowledged: get(&self.acknowledged),
            leaves: get(&self.leaves),
            rejected: get(&self.rejected),
            failed: get(&self.failed),
            abandoned: get(&self.abandoned),
            lost_races: get(&self.lost_races),
            planned_ahead: get(&self.planned_ahead),
            planning: Duration::from_micros(get(&self.planning)),
            committing: Duration::from_micros(get(&self.committing)),
            waiting: Duration::from_micros(get(&self.waiting)),
            largest_group: get(&self.largest_group),
            group_sizes: std::array::from_fn(|i| get(&self.group_sizes[i])),
        }
    }
}

/// State shared by a writer's clones.
struct Shared<E: std::error::Error + 'static> {
    /// `None` once closed.
    sender: RwLock<Option<mpsc::Sender<Pending<E>>>>,
    counters: Arc<Counters>,
    /// True once the writer's task has ended.
    done: watch::Receiver<bool>,
}

/// A coalescing writer for one tree: cheap to clone and share across tasks.
///
/// Each [`submit`](Self::submit) hands over a batch (one leaf or many) and
/// resolves once the batch is durable. Submissions that queue while a
/// commit is in flight are written together, with one read phase, one
/// descent and one commit, so many small writers share each durable
/// commit. Guarantees, each tested:
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
    shared: Arc<Shared<S::Error>>,
    layout: PhantomData<fn() -> L>,
}

impl<S: TreeStore, L> Clone for Writer<S, L> {
    fn clone(&self) -> Self {
        Writer {
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
    type Output = Answer<E>;

    fn poll(mut self: StdPin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer<E>> {
        StdPin::new(&mut self.reply)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(SubmitError::Stopped)))
    }
}

impl<S, L> Tree<S, L>
where
    S: TreeStore + Clone + 'static,
    L: Layout + Send + Sync + 'static,
{
    /// A coalescing [`Writer`] for this tree, with its own task on the
    /// current Tokio runtime (call from inside one: like `tokio::spawn`, it
    /// panics outside a runtime).
    pub fn writer(&self, config: WriterConfig) -> Writer<S, L> {
        let (sender, queue) = mpsc::channel(config.queue_bound.max(1));
        let (done_tx, done) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let task = Task {
            tree: Tree::<S, L>::new(self.store.clone()).with_max_attempts(self.max_attempts),
            config,
            counters: counters.clone(),
        };
        tokio::spawn(async move {
            task.run(queue).await;
            let _ = done_tx.send(true);
        });
        Writer {
            shared: Arc::new(Shared {
                sender: RwLock::new(Some(sender)),
                counters,
                done,
            }),
            layout: PhantomData,
        }
    }
}

impl<S: TreeStore, L> Writer<S, L> {
    /// Writes `batch` with the submissions queued beside it; resolves once
    /// it is durable. Waits while the queue is full.
    pub async fn submit<I>(&self, batch: I) -> Answer<S::Error>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        self.queue(batch, false).await?.await
    }

    /// [`submit`](Self::submit), with a proof at the receipt's root for each
    /// key of `batch` ([`Receipt::proofs`]).
    pub async fn submit_with_proofs<I>(&self, batch: I) -> Answer<S::Error>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        self.queue(batch, true).await?.await
    }

    /// Queues `batch` without waiting: [`SubmitError::Full`] when the queue
    /// is full. The [`Ticket`] resolves as [`submit`](Self::submit) does;
    /// dropping it before the group is sealed leaves the batch out.
    pub fn try_submit<I>(&self, batch: I) -> Result<Ticket<S::Error>, SubmitError<S::Error>>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        let sender = self.sender()?;
        let (pending, ticket) = pending(batch, false);
        sender.try_send(pending).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SubmitError::Full,
            mpsc::error::TrySendError::Closed(_) => SubmitError::Closed,
        })?;
        Ok(ticket)
    }

    async fn queue<I>(
        &self,
        batch: I,
        prove: bool,
    ) -> Result<Ticket<S::Error>, SubmitError<S::Error>>
    where
        I: IntoIterator<Item = (Key, Leaf)>,
    {
        let sender = self.sender()?;
        let (pending, ticket) = pending(batch, prove);
        sender
            .send(pending)
            .await
            .map_err(|_| SubmitError::Closed)?;
        Ok(ticket)
    }

    fn sender(&self) -> Result<mpsc::Sender<Pending<S::Error>>, SubmitError<S::Error>> {
        let sender = self
            .shared
            .sender
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        sender.clone().ok_or(SubmitError::Closed)
    }

    /// Refuses new submissions, writes (or fails) every queued one, and
    /// returns once the writer's task has ended. Every clone is closed.
    pub async fn close(&self) {
        self.shared
            .sender
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let mut done = self.shared.done.clone();
        // An error means the task is gone: nothing is left to wait for.
        let _ = done.wait_for(|done| *done).await;
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> WriterStats {
        self.shared.counters.snapshot()
    }
}

fn pending<E, I>(batch: I, prove: bool) -> (Pending<E>, Ticket<E>)
where
    E: std::error::Error + 'static,
    I: IntoIterator<Item = (Key, Leaf)>,
{
    let (reply, answer) = oneshot::channel();
    let pending = Pending {
        batch: batch.into_iter().collect(),
        prove,
        reply,
    };
    (pending, Ticket { reply: answer })
}

/// The writer's task.
struct Task<S, L> {
    tree: Tree<S, L>,
    config: WriterConfig,
    counters: Arc<Counters>,
}

/// A group's write, planned: the descent's result over the tree at `root`.
struct Planned {
    /// The root the group was planned on.
    root: ComputedNode,
    update: Arc<UpdateBatch>,
    /// Submissions rejected alone (index in the group, why).
    rejected: Vec<(usize, PlanError)>,
    /// Every node read for the plan and, unless the group was planned to
    /// commit alone with no proofs, every node it wrote: the overlay the
    /// next group plans on before this one commits, and the source of the
    /// proofs at the new root.
    nodes: NodeCache,
}

/// Planning a group.
enum Planning<E: std::error::Error + 'static> {
    Ready(Planned),
    /// The read raced another writer (or, on a planned tree, met anything
    /// unexpected): plan again on the committed tree.
    Retry,
    Failed(Failure<E>),
}

/// A group whose commit runs on its own task.
struct InFlight<E: std::error::Error + 'static> {
    group: Vec<Pending<E>>,
    planned: Planned,
    commit: JoinHandle<Result<CommitOutcome, E>>,
    /// The group's span.
    span: Span,
}

impl<S, L> Task<S, L>
where
    S: TreeStore + Clone + 'static,
    L: Layout + Send + Sync + 'static,
{
    /// Writes groups until the queue is closed and empty, one commit in
    /// flight at a time: while group k commits, group k+1 gathers and is
    /// planned on group k's planned (not yet committed) tree; it commits
    /// once group k has, or is planned again on the committed tree if group
    /// k did not land as planned. A lone submission (nothing in flight,
    /// nothing queued) commits on this task, so it pays what a direct
    /// `insert_many` does plus two hand-offs.
    async fn run(self, mut queue: mpsc::Receiver<Pending<S::Error>>) {
        let mut inflight: Option<InFlight<S::Error>> = None;
        loop {
            let first = match inflight.as_mut() {
                None => match queue.recv().await {
                    Some(first) => first,
                    None => break,
                },
                Some(f) => tokio::select! {
                    biased;
                    joined = &mut f.commit => {
                        if let Some(f) = inflight.take() {
                            self.complete_in_span(f, joined.map_err(Panicked::from)).await;
                        }
                        continue;
                    }
                    next = queue.recv() => match next {
                        Some(first) => first,
                        None => break,
                    },
                },
            };
            let most = inflight
                .as_ref()
                .map_or(usize::MAX, |f| balanced(f.group.len(), queue.len() + 1));
            let group = self.seal(self.gather(first, &mut queue, most).await);
            if group.is_empty() {
                continue;
            }
            let span = self.group_span(&group);
            // A lone submission with nothing in flight or behind it commits
            // on this task rather than on one of its own (two task hand-offs
            // saved, no overlap lost), and keeps no overlay for a next group.
            let lone = inflight.is_none() && group.len() == 1 && queue.is_empty();
            // The group before, when it landed as planned and this one was
            // planned on it: answered only once this group's commit has
            // started, so commits run back to back.
            let mut landed = None;
            let ahead = match inflight.take() {
                Some(mut f) => {
                    let ahead = self
                        .plan(&group, Some(&f.planned), true)
                        .instrument(span.clone())
                        .await;
                    let waited = Instant::now();
                    let joined = (&mut f.commit).await.map_err(Panicked::from);
                    Counters::time(&self.counters.waiting, waited);
                    match (joined, ahead) {
                        (Ok(Ok(CommitOutcome::Committed)), Planning::Ready(planned)) => {
                            landed = Some(f);
                            Some(planned)
                        }
                        (joined, ahead) => match (self.complete_in_span(f, joined).await, ahead) {
                            (true, Planning::Ready(planned)) => Some(planned),
                            _ => None,
                        },
                    }
                }
                None => None,
            };
            let planned = match ahead {
                Some(planned) => {
                    Counters::add(&self.counters.planned_ahead, 1);
                    span.record("planned_ahead", true);
                    planned
                }
                None => match self
                    .plan(&group, None, !lone)
                    .instrument(span.clone())
                    .await
                {
                    Planning::Ready(planned) => planned,
                    Planning::Retry => {
                        self.write_now(group).instrument(span).await;
                        continue;
                    }
                    Planning::Failed(failure) => {
                        span.in_scope(|| self.fail(group, &failure));
                        continue;
                    }
                },
            };
            if lone {
                let joined = CatchPanic(std::pin::pin!(self.commit(&planned, &span))).await;
                self.complete(group, planned, joined).instrument(span).await;
                continue;
            }
            inflight = Some(self.dispatch(group, planned, span));
            if let Some(f) = landed {
                self.complete_in_span(f, Ok(Ok(CommitOutcome::Committed)))
                    .await;
                settle(&queue).await;
            }
        }
        if let Some(mut f) = inflight.take() {
            let joined = (&mut f.commit).await.map_err(Panicked::from);
            self.complete_in_span(f, joined).await;
        }
    }

    /// The span of one group (DEBUG): its size, whether it was planned
    /// while the previous group committed, its attempts (more than 1 when
    /// it was written again on the committed tree after a lost race), what
    /// its plan changed, and its outcome (`ok`, or why it failed; the
    /// submissions rejected alone in `rejected`). Its counters are not the
    /// store's: the next group's reads overlap this group's commit.
    fn group_span(&self, group: &[Pending<S::Error>]) -> Span {
        tracing::debug_span!(
            target: "ms_smt",
            "writer_group",
            namespace = self.tree.store().namespace(),
            submissions = group.len(),
            leaves = group.iter().map(|p| p.batch.len()).sum::<usize>(),
            planned_ahead = false,
            attempts = 1,
            inserts = Empty,
            deletes = Empty,
            rejected = Empty,
            outcome = Empty,
            error = Empty,
        )
    }

    /// [`complete`](Self::complete) inside the in-flight group's span.
    async fn complete_in_span(&self, f: InFlight<S::Error>, joined: Joined<S::Error>) -> bool {
        let InFlight {
            group,
            planned,
            span,
            ..
        } = f;
        self.complete(group, planned, joined).instrument(span).await
    }

    /// The group that starts with `first`: what is already queued, and
    /// what arrives within `max_wait`, up to `max_group_leaves` and `most`
    /// submissions.
    async fn gather(
        &self,
        first: Pending<S::Error>,
        queue: &mut mpsc::Receiver<Pending<S::Error>>,
        most: usize,
    ) -> Vec<Pending<S::Error>> {
        let max = self.config.max_group_leaves.max(1);
        let mut leaves = first.batch.len();
        let mut group = vec![first];
        let deadline = tokio::time::Instant::now() + self.config.max_wait;
        while leaves < max && group.len() < most {
            let next = match queue.try_recv() {
                Ok(next) => next,
                Err(_) if self.config.max_wait.is_zero() => break,
                Err(_) => match tokio::time::timeout_at(deadline, queue.recv()).await {
                    Ok(Some(next)) => next,
                    _ => break,
                },
            };
            leaves += next.batch.len();
            group.push(next);
        }
        group
    }

    /// Seals `group`: leaves out submissions nobody waits for any more, and
    /// rejects those whose own leaves overflow (whatever the tree holds).
    fn seal(&self, group: Vec<Pending<S::Error>>) -> Vec<Pending<S::Error>> {
        let mut sealed = Vec::with_capacity(group.len());
        for pending in group {
            if pending.reply.is_closed() {
                Counters::add(&self.counters.abandoned, 1);
                continue;
            }
            match descent::batch_sum(&descent::prepare(&pending.batch)) {
                Ok(_) => sealed.push(pending),
                Err(e) => self.reject(pending, e),
            }
        }
        sealed
    }

    /// Reads and plans `group` on the committed tree (`over` is `None`) or
    /// on a planned one whose commit is in flight. With `overlay`, the
    /// plan's nodes join the ones read, for a next group to plan on.
    async fn plan(
        &self,
        group: &[Pending<S::Error>],
        over: Option<&Planned>,
        overlay: bool,
    ) -> Planning<S::Error> {
        let start = Instant::now();
        let planning = self.plan_timed(group, over, overlay).await;
        Counters::time(&self.counters.planning, start);
        planning
    }

    async fn plan_timed(
        &self,
        group: &[Pending<S::Error>],
        over: Option<&Planned>,
        overlay: bool,
    ) -> Planning<S::Error> {
        let keys: Vec<Key> = group
            .iter()
            .flat_map(|p| p.batch.iter().map(|(k, _)| *k))
            .collect();
        let siblings = descent::reads_siblings(
            L::KIND,
            group
                .iter()
                .flat_map(|p| p.batch.iter().map(|(_, leaf)| leaf)),
        );
        let (root, mut nodes) = match over {
            None => match self.tree.read(Target::CURRENT, &keys, siblings, true).await {
                Ok(Some(read)) => read,
                Ok(None) => return Planning::Retry,
                Err(e) => return Planning::Failed(Failure::NotApplied(Arc::new(e))),
            },
            Some(planned) => {
                let root = planned.update.new_root;
                let sorted = descent::sorted_keys(&keys);
                match fetch::fetch_paths_over(
                    self.tree.store(),
                    &planned.nodes,
                    &root,
                    &sorted,
                    siblings,
                )
                .await
                {
                    Ok(nodes) => (root, nodes),
                    Err(_) => return Planning::Retry,
                }
            }
        };
        // One submission needs no admission pass: the descent's own
        // overflow check is the same test (no subtree's sum can pass
        // u64::MAX unless the root's does), answered below as a rejection.
        let rejected = match group {
            [_] => Vec::new(),
            _ => match admit(&nodes, &root, group) {
                Ok(rejected) => rejected,
                Err(e) => return self.plan_error(e, &root, over.is_some()).await,
            },
        };
        let batch: Vec<(Key, Leaf)> = group
            .iter()
            .enumerate()
            .filter(|(i, _)| !rejected.iter().any(|(r, _)| r == i))
            .flat_map(|(_, p)| p.batch.iter().cloned())
            .collect();
        let items = descent::prepare(&batch);
        let update = match hashing(items.len(), || {
            descent::plan_items(L::KIND, &nodes, root, &items)
        }) {
            Ok(update) => update,
            Err(e @ PlanError::Overflow(_)) if group.len() == 1 => {
                return Planning::Ready(Planned {
                    root,
                    update: Arc::new(UpdateBatch::noop(root)),
                    rejected: vec![(0, e)],
                    nodes,
                });
            }
            Err(e) => return self.plan_error(e, &root, over.is_some()).await,
        };
        if overlay || group.iter().any(|p| p.prove) {
            nodes.extend(update.inserts.iter().map(|(_, h, n)| (*h, n.clone())));
        }
        Planning::Ready(Planned {
            root,
            update: Arc::new(update),
            rejected,
            nodes,
        })
    }

    /// A descent error: on a planned tree, plan again on the committed one;
    /// on the committed tree, a lost race when the root moved (a node went
    /// missing under it), else the group fails.
    async fn plan_error(
        &self,
        e: PlanError,
        root: &ComputedNode,
        planned: bool,
    ) -> Planning<S::Error> {
        if planned {
            return Planning::Retry;
        }
        match self.tree.lost_race(Target::CURRENT, &e, root).await {
            Ok(true) => Planning::Retry,
            Ok(false) => Planning::Failed(Failure::NotApplied(Arc::new(TreeError::Plan(e)))),
            Err(store) => Planning::Failed(Failure::NotApplied(Arc::new(store))),
        }
    }

    /// `planned`'s commit, timed, in a `commit` span under the group's.
    fn commit(
        &self,
        planned: &Planned,
        span: &Span,
    ) -> impl Future<Output = Result<CommitOutcome, S::Error>> + Send + 'static {
        let (store, update) = (self.tree.store().clone(), planned.update.clone());
        let counters = self.counters.clone();
        let commit_span = tracing::trace_span!(target: "ms_smt", parent: span, "commit");
        async move {
            if update.is_noop() {
                return Ok(CommitOutcome::Committed);
            }
            let start = Instant::now();
            let outcome = store.commit(&update).await;
            Counters::time(&counters.committing, start);
            outcome
        }
        .instrument(commit_span)
    }

    /// Starts `planned`'s commit on a task of its own, so the next group
    /// gathers and plans meanwhile (a panic inside the store answers its
    /// group [`SubmitError::Stopped`] and the writer goes on).
    fn dispatch(
        &self,
        group: Vec<Pending<S::Error>>,
        planned: Planned,
        span: Span,
    ) -> InFlight<S::Error> {
        let commit = tokio::spawn(self.commit(&planned, &span));
        InFlight {
            group,
            planned,
            commit,
            span,
        }
    }

    /// Answers an in-flight group once its commit has ended; true when it
    /// landed as planned (the tree's root is now its planned root).
    async fn complete(
        &self,
        group: Vec<Pending<S::Error>>,
        planned: Planned,
        joined: Joined<S::Error>,
    ) -> bool {
        let new_root = planned.update.new_root;
        match joined {
            Ok(Ok(CommitOutcome::Committed)) => {
                self.committed(group, &planned);
                true
            }
            Ok(Ok(CommitOutcome::RootMoved { .. })) => {
                Counters::add(&self.counters.lost_races, 1);
                self.write_now(group).await;
                false
            }
            Ok(Err(e)) => match self.landed(TreeError::Store(e), &planned).await {
                Ok(()) => {
                    self.committed(group, &planned);
                    true
                }
                Err(failure) => {
                    self.fail(group, &failure);
                    false
                }
            },
            Err(_) => {
                // The store panicked: the group's submitters get `Stopped`.
                Span::current().record("outcome", "stopped");
                self.counters
                    .group(group.iter().map(|p| p.batch.len()).sum());
                drop(group);
                self.tree.root().await.is_ok_and(|root| root == new_root)
            }
        }
    }

    /// After a commit error: `Ok` when the root shows the commit landed.
    async fn landed(
        &self,
        error: TreeError<S::Error>,
        planned: &Planned,
    ) -> Result<(), Failure<S::Error>> {
        let error = Arc::new(error);
        match self.tree.root().await {
            Ok(now) if now == planned.update.new_root => Ok(()),
            Ok(now) if now == planned.root => Err(Failure::NotApplied(error)),
            _ => Err(Failure::Unknown(error)),
        }
    }

    /// Writes `group` on the committed tree now, retrying lost races (after
    /// a few, under the namespace's write lock), and answers it.
    async fn write_now(&self, group: Vec<Pending<S::Error>>) {
        let max_attempts = self.tree.max_attempts;
        let prove = group.iter().any(|p| p.prove);
        let mut group = group;
        for attempt in 0..max_attempts {
            Span::current().record("attempts", attempt.saturating_add(1));
            if attempt >= EXCLUSIVE_AFTER && !prove {
                match self.write_locked(group).await {
                    Ok(()) => return,
                    Err(back) => group = back,
                }
            }
            let planned = match self.plan(&group, None, false).await {
                Planning::Ready(planned) => planned,
                Planning::Retry => {
                    Counters::add(&self.counters.lost_races, 1);
                    backoff(attempt).await;
                    continue;
                }
                Planning::Failed(failure) => return self.fail(group, &failure),
            };
            if planned.update.is_noop() {
                return self.committed(group, &planned);
            }
            match self.tree.store().commit(&planned.update).await {
                Ok(CommitOutcome::Committed) => return self.committed(group, &planned),
                Ok(CommitOutcome::RootMoved { .. }) => {
                    Counters::add(&self.counters.lost_races, 1);
                    backoff(attempt).await;
                }
                Err(e) => {
                    return match self.landed(TreeError::Store(e), &planned).await {
                        Ok(()) => self.committed(group, &planned),
                        Err(failure) => self.fail(group, &failure),
                    };
                }
            }
        }
        let contention = TreeError::Contention {
            attempts: max_attempts,
        };
        self.fail(group, &Failure::NotApplied(Arc::new(contention)));
    }

    /// The group under the namespace's write lock; gives the group back
    /// when the store has no such lock. If the group as a whole now
    /// overflows (another process wrote meanwhile), each submission is
    /// written alone under the lock, with its own answer.
    async fn write_locked(
        &self,
        group: Vec<Pending<S::Error>>,
    ) -> Result<(), Vec<Pending<S::Error>>> {
        let batch: Vec<(Key, Leaf)> = group.iter().flat_map(|p| p.batch.iter().cloned()).collect();
        let store = self.tree.store();
        let leaves = batch.len();
        match store.write_locked(L::KIND, &batch).await {
            Ok(None) => Err(group),
            Ok(Some(root)) => {
                self.counters.group(leaves);
                Span::current().record("outcome", "ok");
                for pending in group {
                    self.acknowledge(pending, root, None, leaves);
                }
                Ok(())
            }
            Err(e) if e.is_overflow() => {
                self.counters.group(leaves);
                for pending in group {
                    match store.write_locked(L::KIND, &pending.batch).await {
                        Ok(Some(root)) => self.acknowledge(pending, root, None, leaves),
                        Err(TreeError::Plan(e)) => self.reject(pending, e),
                        Ok(None) => self.fail(vec![pending], &Failure::unsupported()),
                        Err(e) => self.fail(vec![pending], &Failure::NotApplied(Arc::new(e))),
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.fail(group, &Failure::NotApplied(Arc::new(e)));
                Ok(())
            }
        }
    }

    /// Answers a group whose plan is committed: rejected submissions with
    /// their error, the others with the new root.
    fn committed(&self, group: Vec<Pending<S::Error>>, planned: &Planned) {
        if let Some(recent) = self.tree.store().recent_nodes(false) {
            recent.remember_written(&planned.update.inserts);
        }
        Span::current()
            .record("outcome", "ok")
            .record("inserts", planned.update.inserts.len())
            .record("deletes", planned.update.deletes.len())
            .record("rejected", planned.rejected.len());
        let mut rejected = planned.rejected.iter().peekable();
        let leaves: usize = group
            .iter()
            .enumerate()
            .filter(|(i, _)| !planned.rejected.iter().any(|(r, _)| r == i))
            .map(|(_, p)| p.batch.len())
            .sum();
        self.counters.group(leaves);
        for (index, pending) in group.into_iter().enumerate() {
            match rejected.next_if(|(r, _)| *r == index) {
                Some((_, error)) => self.reject(pending, error.clone()),
                None => self.acknowledge(
                    pending,
                    planned.update.new_root,
                    Some(&planned.nodes),
                    leaves,
                ),
            }
        }
    }

    fn fail(&self, group: Vec<Pending<S::Error>>, failure: &Failure<S::Error>) {
        let (Failure::NotApplied(error) | Failure::Unknown(error)) = failure;
        let outcome = match failure {
            Failure::NotApplied(_) => error.kind(),
            Failure::Unknown(_) => "indeterminate",
        };
        Span::current()
            .record("outcome", outcome)
            .record("error", tracing::field::display(error));
        Counters::add(&self.counters.failed, group.len() as u64);
        for pending in group {
            let _ = pending.reply.send(Err(failure.answer()));
        }
    }

    fn reject(&self, pending: Pending<S::Error>, error: PlanError) {
        Counters::add(&self.counters.rejected, 1);
        let _ = pending.reply.send(Err(SubmitError::Rejected(error)));
    }

    fn acknowledge(
        &self,
        pending: Pending<S::Error>,
        root: ComputedNode,
        nodes: Option<&NodeCache>,
        group_leaves: usize,
    ) {
        Counters::add(&self.counters.acknowledged, 1);
        Counters::add(&self.counters.leaves, pending.batch.len() as u64);
        let proofs = match (pending.prove, nodes) {
            (true, Some(nodes)) => {
                let keys: Vec<Key> = pending.batch.iter().map(|(key, _)| *key).collect();
                walk::proofs(nodes, &root, &keys).ok()
            }
            _ => None,
        };
        let _ = pending.reply.send(Ok(Receipt {
            root,
            proofs,
            group_leaves,
        }));
    }
}

/// The most submissions a group planned while another is in flight takes:
/// half of the two together, or as many as in flight. Submitters answered
/// together come back together, so without it the groups settle into
/// pairs as uneven as 999 and 1, where the big group's plan outlasts the
/// small group's commit and the pipeline stalls; halves keep the plan of
/// one group about as long as the commit it overlaps.
fn balanced(in_flight: usize, queued: usize) -> usize {
    in_flight.max(in_flight.saturating_add(queued).div_ceil(2))
}

/// Lets the submitters just answered queue their next submissions before
/// the next group gathers: yields while the queue still grows (a few
/// microseconds when nobody comes back).
async fn settle<T>(queue: &mpsc::Receiver<T>) {
    const MAX_YIELDS: usize = 8;
    let mut queued = queue.len();
    for _ in 0..MAX_YIELDS {
        tokio::task::yield_now().await;
        let now = queue.len();
        if now == queued {
            break;
        }
        queued = now;
    }
}

/// A commit's outcome, or [`Panicked`] when the store panicked inside it.
type Joined<E> = Result<Result<CommitOutcome, E>, Panicked>;

/// The store panicked during a commit.
struct Panicked;

impl From<JoinError> for Panicked {
    fn from(_: JoinError) -> Self {
        Panicked
    }
}

/// A future polled with panics caught: a commit run on the writer's own
/// task answers a panic inside the store as a spawned one does.
struct CatchPanic<F>(F);

impl<F: Future + Unpin> Future for CatchPanic<F> {
    type Output = Result<F::Output, Panicked>;

    fn poll(mut self: StdPin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            StdPin::new(&mut *inner).poll(cx)
        })) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(Panicked)),
        }
    }
}

/// Why a group was not written (the error is shared by every submission
/// of the group).
enum Failure<E: std::error::Error + 'static> {
    /// Nothing of it was applied.
    NotApplied(Arc<TreeError<E>>),
    /// Its commit failed and the outcome is unknown.
    Unknown(Arc<TreeError<E>>),
}

impl<E: std::error::Error + 'static> Failure<E> {
    /// A store that locked the group's write but not a single submission's
    /// (not possible for one store; answered, not panicked on).
    fn unsupported() -> Self {
        Failure::NotApplied(Arc::new(TreeError::Unsupported {
            operation: "write_locked",
        }))
    }

    fn answer(&self) -> SubmitError<E> {
        match self {
            Failure::NotApplied(e) => SubmitError::Failed(e.clone()),
            Failure::Unknown(e) => SubmitError::Indeterminate(e.clone()),
        }
    }
}

/// Admits the submissions in order against the tree read at `root`: each
/// one is applied to a running total (its leaves replace the ones before
/// them, from the tree or from earlier submissions) and rejected when the
/// total would pass `u64::MAX`. Returns the rejected ones (index, error),
/// in order; a missing node (the read raced a writer) is an error.
fn admit<E: std::error::Error + 'static>(
    nodes: &NodeCache,
    root: &ComputedNode,
    group: &[Pending<E>],
) -> Result<Vec<(usize, PlanError)>, PlanError> {
    let mut current: HashMap<Key, u64> = HashMap::new();
    let mut total = u128::from(root.sum);
    let mut rejected = Vec::new();
    for (index, pending) in group.iter().enumerate() {
        let items = descent::prepare(&pending.batch);
        let mut next = total;
        for item in &items {
            let old = match current.get(&item.key) {
                Some(sum) => *sum,
                None => walk::walk(nodes, root, &item.key, None)?.sum(),
            };
            next = next - u128::from(old) + u128::from(item.leaf.sum());
        }
        if next > u128::from(u64::MAX) {
            rejected.push((index, PlanError::Overflow(SumOverflow { level: 0 })));
            continue;
        }
        total = next;
        current.extend(items.iter().map(|it| (it.key, it.leaf.sum())));
    }
    Ok(rejected)
}

#[cfg(test)]
mod tests {
    use super::balanced;

    #[test]
    fn planned_ahead_groups_take_half() {
        // A cohort of 999 behind a group of 1 splits in halves.
        assert_eq!(balanced(1, 999), 500);
        // Never fewer than the group in flight, so a lone queue drains.
        assert_eq!(balanced(500, 10), 500);
        assert_eq!(balanced(459, 541), 500);
        assert_eq!(balanced(0, 1), 1);
        assert_eq!(balanced(usize::MAX, 5), usize::MAX);
    }
}
