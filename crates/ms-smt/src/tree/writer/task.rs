//! The writer's task: gathers queued submissions into groups, plans each
//! group while the previous one commits, and answers each submission.

use std::future::Future;
use std::pin::Pin as StdPin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::config::{Counters, WriterConfig};
use super::submission::Pending;
use crate::descent;
use crate::layout::Layout;
use crate::store::{ForestCommit, ForestStore, TreeStore};
use crate::tree::engine::{Ending, GroupPlan};
use crate::tree::forest::Forest;

/// The writer's task.
pub(crate) struct Task<F: ForestStore, L> {
    pub(super) forest: Forest<F, L>,
    pub(super) config: WriterConfig,
    pub(super) counters: Arc<Counters>,
}

/// A group's write, planned: the descents' result over the trees read.
pub(super) struct Planned<T> {
    pub plan: GroupPlan<T>,
}

/// A group whose commit runs on its own task.
pub(super) struct InFlight<T, E: std::error::Error + 'static> {
    pub group: Vec<Pending<T, E>>,
    pub planned: Planned<T>,
    pub commit: JoinHandle<Result<ForestCommit, E>>,
    /// The group's span.
    pub span: Span,
}

impl<F, L> Task<F, L>
where
    F: ForestStore + Clone + 'static,
    F::Tree: TreeStore<Error = F::Error> + Clone + 'static,
    L: Layout + Send + Sync + 'static,
{
    /// A task writing `forest`'s trees.
    pub(crate) fn new(forest: Forest<F, L>, config: WriterConfig) -> Self {
        Task {
            forest,
            config,
            counters: Arc::default(),
        }
    }

    /// Writes groups until the queue is closed and empty, one commit in
    /// flight at a time: while group k commits, group k+1 gathers and is
    /// planned on group k's planned (not yet committed) trees; it commits
    /// once group k has, or is planned again on the committed trees if
    /// group k did not land as planned. A lone submission (nothing in
    /// flight, nothing queued) commits on this task, so it pays what a
    /// direct `insert_many` does plus two hand-offs.
    pub(crate) async fn run(self, mut queue: mpsc::Receiver<Pending<F::Tree, F::Error>>) {
        let mut inflight: Option<InFlight<F::Tree, F::Error>> = None;
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
                        (Ok(Ok(ForestCommit::Committed)), Ok(planned)) => {
                            landed = Some(f);
                            Some(planned)
                        }
                        (joined, ahead) => match (self.complete_in_span(f, joined).await, ahead) {
                            (true, Ok(planned)) => Some(planned),
                            // Planned on a group that did not land as
                            // planned, or not at all: plan again on the
                            // committed trees.
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
                    Ok(planned) => planned,
                    // The engine judges it: a lost race or a store out of
                    // reach is written again, anything else fails.
                    Err(unplanned) => {
                        let first = Some(Ending::Unplanned(unplanned));
                        self.write_now(group, first).instrument(span).await;
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
                self.complete_in_span(f, Ok(Ok(ForestCommit::Committed)))
                    .await;
                settle(&queue).await;
            }
        }
        if let Some(mut f) = inflight.take() {
            let joined = (&mut f.commit).await.map_err(Panicked::from);
            self.complete_in_span(f, joined).await;
        }
    }

    /// The span of one group (DEBUG): its size, the trees its submissions
    /// name (`namespace`: the first one's), whether it was planned while
    /// the previous group committed, its attempts (more than 1 when it was
    /// written again on the committed trees after a lost race), what its
    /// plan changed, and its outcome (`ok`, or why it failed; the
    /// submissions rejected alone in `rejected`). Its counters are not the
    /// store's: the next group's reads overlap this group's commit.
    fn group_span(&self, group: &[Pending<F::Tree, F::Error>]) -> Span {
        let first = group
            .first()
            .and_then(|p| p.writes.first())
            .map(|(entry, _)| &*entry.name);
        tracing::debug_span!(
            target: "ms_smt",
            "writer_group",
            namespace = first,
            trees = Empty,
            submissions = group.len(),
            leaves = group.iter().map(|p| p.leaves).sum::<usize>(),
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
    async fn complete_in_span(
        &self,
        f: InFlight<F::Tree, F::Error>,
        joined: Joined<F::Error>,
    ) -> bool {
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
        first: Pending<F::Tree, F::Error>,
        queue: &mut mpsc::Receiver<Pending<F::Tree, F::Error>>,
        most: usize,
    ) -> Vec<Pending<F::Tree, F::Error>> {
        let max = self.config.max_group_leaves.max(1);
        let mut leaves = first.leaves;
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
            leaves += next.leaves;
            group.push(next);
        }
        group
    }

    /// Seals `group`: leaves out submissions nobody waits for any more, and
    /// rejects those whose own leaves overflow a tree (whatever the tree
    /// holds).
    fn seal(&self, group: Vec<Pending<F::Tree, F::Error>>) -> Vec<Pending<F::Tree, F::Error>> {
        let mut sealed = Vec::with_capacity(group.len());
        for pending in group {
            if pending.reply.is_closed() {
                Counters::add(&self.counters.abandoned, 1);
                continue;
            }
            let overflow = pending.writes.iter().find_map(|(_, batch)| {
                descent::leaves_sum(batch.iter().map(|(_, leaf)| leaf)).err()
            });
            match overflow {
                None => sealed.push(pending),
                Some(e) => self.reject(pending, e),
            }
        }
        sealed
    }

    /// Starts `planned`'s commit on a task of its own, so the next group
    /// gathers and plans meanwhile (a panic inside the store answers its
    /// group [`SubmitError::Stopped`](crate::SubmitError::Stopped) and the
    /// writer goes on).
    fn dispatch(
        &self,
        group: Vec<Pending<F::Tree, F::Error>>,
        planned: Planned<F::Tree>,
        span: Span,
    ) -> InFlight<F::Tree, F::Error> {
        let commit = tokio::spawn(self.commit(&planned, &span));
        InFlight {
            group,
            planned,
            commit,
            span,
        }
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
pub(super) type Joined<E> = Result<Result<ForestCommit, E>, Panicked>;

/// The store panicked during a commit.
pub(super) struct Panicked;

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
