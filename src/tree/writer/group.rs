//! A writer's group: planned over the committed trees or over the group
//! in flight, committed in one commit of every tree it reads, and written
//! again on the committed trees when it lost a race.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{Instrument, Span};

use super::answer::Failure;
use super::config::Counters;
use super::handle::Pending;
use super::task::{Joined, Planned, Planning, Task};
use crate::error::TreeError;
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::store::{ForestCommit, ForestStore, TreeStore, TreeUpdate};
use crate::tree::forest::{self, GroupPlan, Writes};
use crate::tree::handle::{EXCLUSIVE_AFTER, backoff};

impl<F, L> Task<F, L>
where
    F: ForestStore + Clone + 'static,
    F::Tree: TreeStore<Error = F::Error> + Clone + 'static,
    L: Layout + Send + Sync + 'static,
{
    /// Reads and plans `group` on the committed trees (`over` is `None`)
    /// or on planned ones whose commit is in flight. With `overlay`, each
    /// tree's plan keeps the nodes it wrote, for a next group to plan on.
    pub(super) async fn plan(
        &self,
        group: &[Pending<F::Tree, F::Error>],
        over: Option<&Planned<F::Tree>>,
        overlay: bool,
    ) -> Planning<F::Tree, F::Error> {
        let start = Instant::now();
        let writes: Vec<&Writes<F::Tree>> = group.iter().map(|p| &p.writes).collect();
        let prove = group.iter().any(|p| p.prove.is_some());
        let over = over.map(|p| forest::overlay_of(&p.plan));
        let planning = forest::read_and_plan(
            &self.forest.store,
            L::KIND,
            &writes,
            over.as_ref(),
            // One submission needs no admission pass: the descents' own
            // overflow checks are the same test, answered as a rejection.
            group.len() > 1,
            overlay || prove,
        )
        .await;
        Counters::time(&self.counters.planning, start);
        match planning {
            forest::Planning::Ready(plan) => Planning::Ready(Planned { plan }),
            forest::Planning::Retry => Planning::Retry,
            forest::Planning::Failed(e) => Planning::Failed(Failure::NotApplied(Arc::new(e))),
        }
    }

    /// `planned`'s commit, timed, in a `commit` span under the group's.
    pub(super) fn commit(
        &self,
        planned: &Planned<F::Tree>,
        span: &Span,
    ) -> impl Future<Output = Result<ForestCommit, F::Error>> + Send + 'static {
        let store = self.forest.store.clone();
        let noop = forest::is_noop(&planned.plan);
        let parts: Vec<_> = planned
            .plan
            .trees
            .iter()
            .map(|t| (t.entry.store.clone(), t.update.clone()))
            .collect();
        let counters = self.counters.clone();
        let commit_span = tracing::trace_span!(target: "ms_smt", parent: span, "commit");
        async move {
            if noop {
                return Ok(ForestCommit::Committed);
            }
            let start = Instant::now();
            let updates: Vec<TreeUpdate<'_, F::Tree>> = parts
                .iter()
                .map(|(tree, batch)| TreeUpdate { tree, batch })
                .collect();
            let outcome = store.commit_trees(&updates).await;
            Counters::time(&counters.committing, start);
            outcome
        }
        .instrument(commit_span)
    }

    /// Answers an in-flight group once its commit has ended; true when it
    /// landed as planned (every tree's root is now its planned root).
    pub(super) async fn complete(
        &self,
        group: Vec<Pending<F::Tree, F::Error>>,
        planned: Planned<F::Tree>,
        joined: Joined<F::Error>,
    ) -> bool {
        match joined {
            Ok(Ok(ForestCommit::Committed)) => {
                self.committed(group, &planned.plan);
                true
            }
            Ok(Ok(ForestCommit::RootMoved { .. })) => {
                Counters::add(&self.counters.lost_races, 1);
                self.write_now(group).await;
                false
            }
            Ok(Err(e)) => match self.landed(e, &planned.plan).await {
                Ok(()) => {
                    self.committed(group, &planned.plan);
                    true
                }
                // Not applied while the store was out of reach: written
                // again now that it answers.
                Err(Failure::NotApplied(e)) if Self::transient(&e) => {
                    self.write_now(group).await;
                    false
                }
                Err(failure) => {
                    self.fail(group, &failure);
                    false
                }
            },
            Err(_) => {
                // The store panicked: the group's submitters get `Stopped`.
                Span::current().record("outcome", "stopped");
                self.counters.group(
                    group.iter().map(|p| p.leaves).sum(),
                    planned.plan.trees.len(),
                );
                drop(group);
                matches!(
                    forest::landed(&self.forest.store, &planned.plan).await,
                    Ok(Some(true))
                )
            }
        }
    }

    /// True when `error` is the store out of reach for a while.
    pub(super) fn transient(error: &TreeError<F::Error>) -> bool {
        matches!(error, TreeError::Store(e) if F::Tree::is_transient(e))
    }

    /// After the commit error `error`: `Ok` when the roots show the commit
    /// landed. When `error` is transient, roots that cannot be read are read
    /// again, with pauses, until the store answers or
    /// [`WriterConfig::recovery_wait`](crate::WriterConfig::recovery_wait)
    /// has passed.
    async fn landed(
        &self,
        error: F::Error,
        plan: &GroupPlan<F::Tree>,
    ) -> Result<(), Failure<F::Error>> {
        let transient = F::Tree::is_transient(&error);
        let error = Arc::new(TreeError::Store(error));
        let deadline = Instant::now() + self.config.recovery_wait;
        let mut pause = 0u32;
        loop {
            let found = forest::landed(&self.forest.store, plan).await;
            if pause > 0 && found.is_ok() {
                Counters::add(&self.counters.recovered, 1);
            }
            match found {
                Ok(Some(true)) => return Ok(()),
                Ok(Some(false)) => return Err(Failure::NotApplied(error)),
                Ok(None) => return Err(Failure::Unknown(error)),
                Err(e) if transient && F::Tree::is_transient(&e) && Instant::now() < deadline => {
                    recovery_pause(&mut pause, deadline).await;
                }
                Err(_) => return Err(Failure::Unknown(error)),
            }
        }
    }

    /// Writes `group` on the committed trees now, retrying lost races
    /// (after a few, a group of one tree under its namespace's write lock)
    /// and, for up to [`WriterConfig::recovery_wait`]
    /// (crate::WriterConfig::recovery_wait), a store out of reach; and
    /// answers it.
    pub(super) async fn write_now(&self, group: Vec<Pending<F::Tree, F::Error>>) {
        let max_attempts = self.forest.max_attempts;
        let prove = group.iter().any(|p| p.prove.is_some());
        let deadline = Instant::now() + self.config.recovery_wait;
        let mut pause = 0u32;
        let mut group = group;
        let mut attempt = 0;
        while attempt < max_attempts {
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
                    attempt += 1;
                    continue;
                }
                Planning::Failed(Failure::NotApplied(e))
                    if Self::transient(&e) && Instant::now() < deadline =>
                {
                    // Out of reach: wait for the store, not an attempt.
                    recovery_pause(&mut pause, deadline).await;
                    continue;
                }
                Planning::Failed(failure) => return self.fail(group, &failure),
            };
            match forest::commit(&self.forest.store, &planned.plan).await {
                Ok(ForestCommit::Committed) => return self.committed(group, &planned.plan),
                Ok(ForestCommit::RootMoved { .. }) => {
                    Counters::add(&self.counters.lost_races, 1);
                    backoff(attempt).await;
                    attempt += 1;
                }
                Err(e) => match self.landed(e, &planned.plan).await {
                    Ok(()) => return self.committed(group, &planned.plan),
                    Err(Failure::NotApplied(e))
                        if Self::transient(&e) && Instant::now() < deadline =>
                    {
                        recovery_pause(&mut pause, deadline).await;
                    }
                    Err(failure) => return self.fail(group, &failure),
                },
            }
        }
        let contention = TreeError::Contention {
            attempts: max_attempts,
        };
        self.fail(group, &Failure::NotApplied(Arc::new(contention)));
    }

    /// The group under its tree's namespace write lock, when it writes one
    /// tree with no parent; gives the group back otherwise, or when the
    /// store has no such lock. If the group as a whole now overflows
    /// (another process wrote meanwhile), each submission is written alone
    /// under the lock, with its own answer.
    async fn write_locked(
        &self,
        group: Vec<Pending<F::Tree, F::Error>>,
    ) -> Result<(), Vec<Pending<F::Tree, F::Error>>> {
        let Some(entry) = group
            .first()
            .and_then(|p| p.writes.first())
            .map(|(e, _)| e.clone())
        else {
            return Err(group);
        };
        let one_tree = entry.parent.is_none()
            && group
                .iter()
                .all(|p| p.writes.iter().all(|(e, _)| e.id == entry.id));
        if !one_tree {
            return Err(group);
        }
        let batch_of = |p: &Pending<F::Tree, F::Error>| -> Vec<(Key, Leaf)> {
            p.writes
                .iter()
                .flat_map(|(_, b)| b.iter().cloned())
                .collect()
        };
        let batch: Vec<(Key, Leaf)> = group.iter().flat_map(batch_of).collect();
        let store = &entry.store;
        let leaves = batch.len();
        let answer = |root: ComputedNode| {
            vec![crate::tree::writer::TreeRoot {
                name: entry.name.clone(),
                root,
            }]
        };
        match store.write_locked(L::KIND, &batch).await {
            Ok(None) => Err(group),
            Ok(Some(root)) => {
                self.counters.group(leaves, 1);
                Span::current().record("outcome", "ok");
                for pending in group {
                    self.acknowledge(pending, answer(root), None, leaves);
                }
                Ok(())
            }
            Err(e) if e.is_overflow() => {
                self.counters.group(leaves, 1);
                for pending in group {
                    match store.write_locked(L::KIND, &batch_of(&pending)).await {
                        Ok(Some(root)) => self.acknowledge(pending, answer(root), None, leaves),
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
}

/// Waits before asking a store out of reach again: 50 ms, doubling up to
/// 1 s, never past `deadline`; `pause` counts the waits.
async fn recovery_pause(pause: &mut u32, deadline: Instant) {
    let wait = Duration::from_millis(50u64 << (*pause).min(4)).min(Duration::from_secs(1));
    *pause = pause.saturating_add(1);
    let left = deadline.saturating_duration_since(Instant::now());
    tokio::time::sleep(wait.min(left)).await;
}
