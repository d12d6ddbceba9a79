//! The one decision every write makes after an attempt: did it land, did
//! it lose a race to another writer, or did it fail (and then: was nothing
//! applied, or is the outcome unknown)?

use std::sync::Arc;

use super::entry::Entry;
use super::plan::GroupPlan;
use super::read::Unplanned;
use crate::error::{PlanError, TreeError};
use crate::node::ComputedNode;
use crate::store::{ForestCommit, ForestStore, StoreError};

/// How an attempt at a group's write ended.
pub(crate) enum Ending<T, E: std::error::Error + 'static> {
    /// It was planned, and its commit returned `result`.
    Committed {
        plan: GroupPlan<T>,
        result: Result<ForestCommit, E>,
    },
    /// Its read phase or plan failed.
    Unplanned(Unplanned<T, E>),
}

/// What an attempt's ending means.
pub(crate) enum Verdict<T, E: std::error::Error + 'static> {
    /// The plan is in the store: every tree holds its planned root.
    Landed(GroupPlan<T>),
    /// Another writer moved a root first: nothing of this attempt was
    /// applied; plan again on the trees as they are now.
    LostRace,
    /// Nothing of it was applied. When the error is transient the store
    /// was out of reach, and the write may be tried again once it answers.
    NotApplied(TreeError<E>),
    /// Its commit failed with `error`, and whether it was applied could not
    /// be read yet: the store did not answer (`transient`, ask again), or
    /// its roots moved to neither the old nor the new ones (final).
    Unknown {
        plan: GroupPlan<T>,
        error: TreeError<E>,
        transient: bool,
    },
}

/// True when `error` says the store was out of reach for a while.
pub(crate) fn transient<E: StoreError>(error: &TreeError<E>) -> bool {
    matches!(error, TreeError::Store(e) if e.is_transient())
}

/// Judges an attempt that ended so. The only place a write is judged:
///
/// * planned and committed: landed;
/// * the commit found a root moved: a lost race;
/// * the commit failed: the roots tell — all new, it landed; all old,
///   nothing was applied; anything else, unknown (see [`rejudge`] for a
///   store that does not answer);
/// * the read phase or plan failed on a missing node: a lost race when a
///   root moved since it was read (a writer removed the node between the
///   reads), else a failure; any other failure is one.
pub(crate) async fn judge<S: ForestStore>(
    store: &S,
    ending: Ending<S::Tree, S::Error>,
) -> Verdict<S::Tree, S::Error> {
    match ending {
        Ending::Committed {
            plan,
            result: Ok(ForestCommit::Committed),
        } => Verdict::Landed(plan),
        Ending::Committed {
            result: Ok(ForestCommit::RootMoved { .. }),
            ..
        } => Verdict::LostRace,
        Ending::Committed {
            plan,
            result: Err(e),
        } => rejudge(store, plan, TreeError::Store(e)).await,
        Ending::Unplanned(Unplanned { error, roots }) => {
            let TreeError::Plan(plan_error) = &error else {
                return Verdict::NotApplied(error);
            };
            if !may_have_raced(plan_error) || roots.is_empty() {
                return Verdict::NotApplied(error);
            }
            match moved(store, &roots).await {
                Ok(true) => Verdict::LostRace,
                Ok(false) => Verdict::NotApplied(error),
                Err(e) => Verdict::NotApplied(TreeError::Store(e)),
            }
        }
    }
}

/// [`judge`]'s reading of a failed commit of `plan`: its trees' roots now
/// (one read). `Unknown` with `transient` when that read fails while
/// `error` itself said the store was out of reach: the caller waits and
/// asks again.
pub(crate) async fn rejudge<S: ForestStore>(
    store: &S,
    plan: GroupPlan<S::Tree>,
    error: TreeError<S::Error>,
) -> Verdict<S::Tree, S::Error> {
    let trees: Vec<&S::Tree> = plan.trees.iter().map(|t| &t.entry.store).collect();
    let now = match store.load_roots(&trees).await {
        Ok(now) => now,
        Err(e) => {
            let transient = transient(&error) && e.is_transient();
            return Verdict::Unknown {
                plan,
                error,
                transient,
            };
        }
    };
    let pairs = || plan.trees.iter().zip(&now);
    if pairs().all(|(t, root)| *root == t.update.new_root) {
        Verdict::Landed(plan)
    } else if pairs().all(|(t, root)| *root == t.update.old_root) {
        Verdict::NotApplied(error)
    } else {
        Verdict::Unknown {
            plan,
            error,
            transient: false,
        }
    }
}

/// True when `error` may be a race rather than a fault: a node missing
/// from the nodes read. Reads are not one snapshot; nodes are
/// content-addressed, so a node that is found is always the right one, and
/// only a missing one can reveal that another writer committed after the
/// root was read (its nodes may be gone). It was a race when a root moved
/// meanwhile ([`moved`]); reads that are not writes
/// ([`Tree`](crate::Tree)'s proofs and gets) judge their own by the same
/// rule.
pub(crate) fn may_have_raced(error: &PlanError) -> bool {
    matches!(error, PlanError::MissingNode { .. })
}

/// True when a tree's root moved away from the one `roots` read: what
/// tells a read that raced a writer from a store that lost a node.
pub(crate) async fn moved<S: ForestStore>(
    store: &S,
    roots: &[(Arc<Entry<S::Tree>>, ComputedNode)],
) -> Result<bool, S::Error> {
    let trees: Vec<&S::Tree> = roots.iter().map(|(e, _)| &e.store).collect();
    let now = store.load_roots(&trees).await?;
    Ok(roots.iter().zip(now).any(|((_, read), now)| *read != now))
}
