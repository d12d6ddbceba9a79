//! The one loop every write runs: attempts, backoff after a lost race, the
//! fallback to the store's write lock after a few, and the wait for a
//! store that went out of reach.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tracing::Span;

use super::judge::{Ending, Verdict, judge, rejudge, transient};
use super::phases::{Phase, WritePhases};
use super::plan::{self, GroupPlan, Want, Writes};
use super::read::{commit, plan_read, read_group};
use crate::Tuning;
use crate::error::TreeError;
use crate::layout::LayoutKind;
use crate::progress::ProgressSink;
use crate::store::{ForestStore, LockedWork, TreeStore};

/// Lost optimistic races after which a write takes the write lock of its
/// trees for its read phase and commit ([`ForestStore::locked`]).
pub const EXCLUSIVE_AFTER: u32 = 4;

/// How a write retries: what a tree, a forest or a writer sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Attempts at most (lost races count; waits for the store do not).
    pub max_attempts: u32,
    /// How long a write waits, at most, for a store out of reach before
    /// it answers with the store's error (zero: it answers at once).
    pub recovery_wait: Duration,
}

/// A group's write: what it writes and how.
pub(crate) struct Job<'a, T> {
    pub kind: LayoutKind,
    /// Each submission's writes.
    pub group: &'a [&'a Writes<T>],
    pub want: Want,
    pub policy: Policy,
    pub progress: &'a ProgressSink,
    /// The hash lanes and threads its descents run with.
    pub tuning: Tuning,
}

impl<T> Job<'_, T> {
    fn leaves(&self) -> usize {
        self.group
            .iter()
            .copied()
            .flatten()
            .map(|(_, b)| b.len())
            .sum()
    }
}

/// A write that landed: its plan, and whether it is the plan of the
/// attempt handed in as `first` (a writer's group planned ahead, which the
/// group after it was planned on).
pub(crate) struct Landed<T> {
    pub plan: GroupPlan<T>,
    pub first: bool,
}

/// Why a write was not done.
#[derive(Debug)]
pub(crate) enum Failure<E: std::error::Error + 'static> {
    /// Nothing of it was applied.
    NotApplied(TreeError<E>),
    /// Its commit failed and the outcome is unknown.
    Unknown(TreeError<E>),
}

impl<E: std::error::Error + 'static> Failure<E> {
    /// The error, whichever the outcome.
    pub fn into_error(self) -> TreeError<E> {
        match self {
            Failure::NotApplied(e) | Failure::Unknown(e) => e,
        }
    }
}

/// What a writer counts of its writes; a direct write counts nothing.
pub(crate) trait Tally: Sync {
    /// A commit lost a race to another writer.
    fn lost_race(&self) {}
    /// A store out of reach answered again.
    fn recovered(&self) {}
    /// A read phase and plan took `took`.
    fn planned(&self, took: Duration) {
        let _ = took;
    }
    /// A commit took `took`.
    fn committed(&self, took: Duration) {
        let _ = took;
    }
}

impl Tally for () {}

/// Writes `job` on `store` until it lands: the only write loop of the
/// crate. `first`, when given, is an attempt already made (a writer's
/// pipelined group): it is judged before any new one.
///
/// Each attempt reads, plans and commits; after [`EXCLUSIVE_AFTER`] lost
/// races it does so on the store's locked view, if the store has a lock,
/// so a write that keeps losing (a large batch whose read phase outlasts
/// small writers' commits) ends. A store out of reach is waited for, up to
/// the policy's recovery wait from the first sign of it: a failed commit
/// is judged again once the store answers, a read that failed is tried
/// again. The landed plan's written nodes are remembered by every tree
/// handle that keeps recent nodes.
pub(crate) async fn write<S: ForestStore>(
    store: &S,
    job: &Job<'_, S::Tree>,
    first_ending: Option<Ending<S::Tree, S::Error>>,
    tally: &dyn Tally,
) -> Result<Landed<S::Tree>, Failure<S::Error>> {
    let mut phases = WritePhases::new(job.progress, job.leaves());
    let mut recovery = Recovery::new(job.policy.recovery_wait);
    // A handed-in attempt counts as the first one.
    let mut first = first_ending.is_some();
    let mut next = first_ending;
    let mut attempt: u32 = 0;
    loop {
        let ending = match next.take() {
            Some(ending) => ending,
            None => {
                if attempt >= job.policy.max_attempts {
                    let attempts = job.policy.max_attempts;
                    return Err(Failure::NotApplied(TreeError::Contention { attempts }));
                }
                first = false;
                Span::current().record("attempts", attempt.saturating_add(1));
                let exclusive = attempt >= EXCLUSIVE_AFTER;
                try_once(store, job, exclusive, &mut phases, tally).await
            }
        };
        let mut verdict = judge(store, ending).await;
        while let Verdict::Unknown {
            plan,
            error,
            transient: true,
        } = verdict
        {
            if !recovery.wait().await {
                return Err(Failure::Unknown(error));
            }
            verdict = rejudge(store, plan, error).await;
            if !matches!(
                verdict,
                Verdict::Unknown {
                    transient: true,
                    ..
                }
            ) {
                tally.recovered();
            }
        }
        match verdict {
            Verdict::Landed(plan) => {
                phases.passed(Phase::Commit);
                remember(&plan);
                return Ok(Landed { plan, first });
            }
            Verdict::LostRace => {
                tally.lost_race();
                backoff(attempt).await;
                attempt = attempt.saturating_add(1);
            }
            // Out of reach: wait for the store, not an attempt.
            Verdict::NotApplied(error) if transient(&error) => {
                if !recovery.wait().await {
                    return Err(Failure::NotApplied(error));
                }
            }
            Verdict::NotApplied(error) => return Err(Failure::NotApplied(error)),
            Verdict::Unknown { error, .. } => return Err(Failure::Unknown(error)),
        }
    }
}

/// One attempt: on the store's locked view when `exclusive` and the store
/// has a lock, else optimistically.
async fn try_once<S: ForestStore>(
    store: &S,
    job: &Job<'_, S::Tree>,
    exclusive: bool,
    phases: &mut WritePhases,
    tally: &dyn Tally,
) -> Ending<S::Tree, S::Error> {
    if exclusive {
        let order = plan::closure(job.group.iter().copied());
        let trees: Vec<&S::Tree> = order.iter().map(|e| &e.store).collect();
        let attempt = Attempt { job, phases, tally };
        let span = tracing::trace_span!(target: "ms_smt", "write_locked", trees = trees.len());
        // Boxed as a `Send` future here, where `S` is generic: a caller's
        // future that holds the store's opaque `locked` future would make
        // the compiler prove that future's bounds again for every lifetime
        // of the store's type when it checks the caller for `Send`, which a
        // store borrowing the caller's transaction cannot satisfy
        // (rust-lang/rust#110338). The locked path is the rare one.
        let locked: Pin<Box<dyn Future<Output = _> + Send + '_>> =
            Box::pin(store.locked(&trees, attempt));
        let locked = tracing::Instrument::instrument(locked, span).await;
        match locked {
            Ok(Some(ending)) => return ending,
            // No lock: on optimistically.
            Ok(None) => {}
            Err(e) => return Ending::Unplanned(TreeError::Store(e).into()),
        }
    }
    plan_and_commit(store, job, phases, tally).await
}

/// An attempt's read phase, plan and commit on `forest` (the store, or
/// its locked view).
async fn plan_and_commit<F: ForestStore>(
    forest: &F,
    job: &Job<'_, F::Tree>,
    phases: &mut WritePhases,
    tally: &dyn Tally,
) -> Ending<F::Tree, F::Error> {
    let start = Instant::now();
    let planned = match read_group(forest, job.kind, job.group, None).await {
        Ok(read) => {
            phases.passed(Phase::Read);
            plan_read(job.kind, job.group, read, job.want, job.tuning)
        }
        Err(error) => Err(error.into()),
    };
    tally.planned(start.elapsed());
    let plan = match planned {
        Ok(plan) => plan,
        Err(unplanned) => return Ending::Unplanned(unplanned),
    };
    phases.passed(Phase::Descent);
    let start = Instant::now();
    let result = commit(forest, &plan).await;
    tally.committed(start.elapsed());
    Ending::Committed { plan, result }
}

/// An attempt run on a store's locked view ([`ForestStore::locked`]).
struct Attempt<'a, 'j, T> {
    job: &'a Job<'j, T>,
    phases: &'a mut WritePhases,
    tally: &'a dyn Tally,
}

impl<T: TreeStore> LockedWork<T> for Attempt<'_, '_, T> {
    type Output = Ending<T, T::Error>;

    async fn run<F>(self, forest: &F) -> Ending<T, T::Error>
    where
        F: ForestStore<Tree = T, Error = T::Error>,
    {
        plan_and_commit(forest, self.job, self.phases, self.tally).await
    }
}

/// Hands a landed plan's written nodes to the tree handles that remember
/// recent nodes, so the next reads find them in memory.
fn remember<T: TreeStore>(plan: &GroupPlan<T>) {
    for tree in plan.trees.iter().filter(|t| !t.update.is_noop()) {
        if let Some(recent) = tree.entry.store.recent_nodes(false) {
            recent.remember_written(&tree.update.inserts);
        }
    }
}

/// A write's wait for a store out of reach: 50 ms, doubling up to 1 s,
/// never past the recovery wait counted from the first pause.
struct Recovery {
    wait: Duration,
    deadline: Option<Instant>,
    pauses: u32,
}

impl Recovery {
    fn new(wait: Duration) -> Self {
        Recovery {
            wait,
            deadline: None,
            pauses: 0,
        }
    }

    /// Pauses before the store is asked again; false (without pausing)
    /// when the recovery wait has run out.
    async fn wait(&mut self) -> bool {
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + self.wait);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let pause = Duration::from_millis(50u64 << self.pauses.min(4)).min(Duration::from_secs(1));
        self.pauses = self.pauses.saturating_add(1);
        tokio::time::sleep(pause.min(left)).await;
        true
    }
}

/// Short randomised pause before retrying a write that lost a race.
pub(crate) async fn backoff(attempt: u32) {
    let spread = u64::from(attempt.min(8)) + 1;
    let jitter = u64::from(std::process::id() ^ attempt.wrapping_mul(2_654_435_761)) % 500;
    tokio::time::sleep(Duration::from_micros(spread * 200 + jitter)).await;
}
