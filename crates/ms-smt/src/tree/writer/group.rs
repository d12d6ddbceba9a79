//! A writer's group: planned over the committed trees or over the group
//! in flight, committed in one commit of every tree it reads, and handed
//! to the write engine's loop ([`engine::write`]) to be judged, retried or
//! failed.

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::{Instrument, Span};

use super::config::Counters;
use super::submission::Pending;
use super::task::{Joined, Planned, Task};
use crate::layout::Layout;
use crate::store::{ForestCommit, ForestStore, TreeStore, TreeUpdate};
use crate::tree::engine::{self, Ending, Job, Policy, Tally, Unplanned, Want, Writes};

impl<F, L> Task<F, L>
where
    F: ForestStore + Clone + 'static,
    F::Tree: TreeStore<Error = F::Error> + Clone + 'static,
    L: Layout + Send + Sync + 'static,
{
    /// What the engine keeps of `group`'s plan: with several submissions
    /// each is admitted alone (one submission needs no admission pass: the
    /// descents' own overflow checks are the same test, answered as a
    /// rejection); with `overlay` or proofs asked for, the written nodes.
    fn want(group: &[Pending<F::Tree, F::Error>], overlay: bool) -> Want {
        Want {
            admit_each: group.len() > 1,
            overlay: overlay || group.iter().any(|p| p.prove.is_some()),
            update_proofs: false,
        }
    }

    /// Reads and plans `group` on the committed trees (`over` is `None`)
    /// or on planned ones whose commit is in flight. With `overlay`, each
    /// tree's plan keeps the nodes it wrote, for a next group to plan on.
    pub(super) async fn plan(
        &self,
        group: &[Pending<F::Tree, F::Error>],
        over: Option<&Planned<F::Tree>>,
        overlay: bool,
    ) -> Result<Planned<F::Tree>, Unplanned<F::Tree, F::Error>> {
        let start = Instant::now();
        let writes: Vec<&Writes<F::Tree>> = group.iter().map(|p| &p.writes).collect();
        let over = over.map(|p| engine::overlay_of(&p.plan));
        let planning = engine::read_and_plan(
            &self.forest.store,
            L::KIND,
            &writes,
            over.as_ref(),
            Self::want(group, overlay),
            self.forest.tuning,
        )
        .await;
        Counters::time(&self.counters.planning, start);
        planning.map(|plan| Planned { plan })
    }

    /// `planned`'s commit, timed, in a `commit` span under the group's.
    pub(super) fn commit(
        &self,
        planned: &Planned<F::Tree>,
        span: &Span,
    ) -> impl Future<Output = Result<ForestCommit, F::Error>> + Send + 'static {
        let store = self.forest.store.clone();
        let noop = engine::is_noop(&planned.plan);
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
    /// landed as planned (every tree's root is now its planned root), so a
    /// group planned on it may commit.
    pub(super) async fn complete(
        &self,
        group: Vec<Pending<F::Tree, F::Error>>,
        planned: Planned<F::Tree>,
        joined: Joined<F::Error>,
    ) -> bool {
        match joined {
            Ok(result) => {
                let ending = Ending::Committed {
                    plan: planned.plan,
                    result,
                };
                self.write_now(group, Some(ending)).await
            }
            Err(_) => {
                // The store panicked: the group's submitters get `Stopped`,
                // and the next group plans on the committed trees.
                Span::current().record("outcome", "stopped");
                self.counters.group(
                    group.iter().map(|p| p.leaves).sum(),
                    planned.plan.trees.len(),
                );
                drop(group);
                false
            }
        }
    }

    /// Writes `group` through the engine's loop and answers it: `first`,
    /// when given, is the group's attempt so far (planned ahead, or
    /// committed), judged before any new one. True when `first` landed.
    pub(super) async fn write_now(
        &self,
        group: Vec<Pending<F::Tree, F::Error>>,
        first: Option<Ending<F::Tree, F::Error>>,
    ) -> bool {
        let writes: Vec<&Writes<F::Tree>> = group.iter().map(|p| &p.writes).collect();
        let job = Job {
            kind: L::KIND,
            group: &writes,
            want: Self::want(&group, false),
            policy: Policy {
                max_attempts: self.forest.max_attempts,
                recovery_wait: self.config.recovery_wait,
            },
            progress: &self.forest.progress,
            tuning: self.forest.tuning,
        };
        let written = engine::write(&self.forest.store, &job, first, &*self.counters).await;
        drop(writes);
        match written {
            Ok(landed) => {
                self.committed(group, &landed.plan);
                landed.first
            }
            Err(failure) => {
                self.fail(group, failure);
                false
            }
        }
    }
}

/// A writer's counts of what its groups' writes met.
impl Tally for Counters {
    fn lost_race(&self) {
        Counters::add(&self.lost_races, 1);
    }

    fn recovered(&self) {
        Counters::add(&self.recovered, 1);
    }

    fn planned(&self, took: Duration) {
        Counters::add_time(&self.planning, took);
    }

    fn committed(&self, took: Duration) {
        Counters::add_time(&self.committing, took);
    }
}
