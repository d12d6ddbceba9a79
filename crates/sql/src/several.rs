//! Reads and commits of several namespaces in one statement each: their
//! roots, their path walks, and one commit of all their batches on a task
//! of its own. What the pool store, its lock's view and the caller's
//! transaction share (`forest.rs`, `locked.rs`).

use std::future::Future;
use std::sync::Arc;

use super::dialect::{Dialect, PathWalk};
use super::error::Res;
use super::namespaces;
use super::ops::{self, CommitPart};
use super::space::NamespaceState;
use super::tx::{CallerGone, OwnedTx, detached_store};
use crate::descent::UpdateBatch;
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::{ForestCommit, PathRead, PathStart, TreeUpdate};

/// One namespace's walks, owned, for a walk of several namespaces.
pub(crate) type OwnedWalk = (Arc<NamespaceState>, Vec<PathStart>, bool);

/// The roots of `spaces` (one statement), learning their ids on the way.
pub(crate) async fn roots_on<C: Dialect>(
    conn: &mut C,
    spaces: &[&NamespaceState],
) -> Res<Vec<ComputedNode>> {
    Ok(namespaces::load_states(conn, spaces)
        .await?
        .into_iter()
        .map(|s| s.map_or_else(ComputedNode::empty_root, |s| s.root))
        .collect())
}

/// Walks the paths of several namespaces in one statement (after the
/// engine's guard when `guard`); namespaces that do not exist read
/// nothing.
pub(crate) async fn walk_on<C: Dialect>(
    conn: &mut C,
    walks: &[OwnedWalk],
    guard: bool,
) -> Res<Vec<Vec<(Hash, Node)>>> {
    let mut found = Vec::with_capacity(walks.len());
    for (space, starts, siblings) in walks {
        if let Some(info) = namespaces::namespace(conn, space).await? {
            found.push(PathWalk {
                space,
                info,
                starts,
                siblings: *siblings,
            });
        }
    }
    let mut out: Vec<Vec<(Hash, Node)>> = walks.iter().map(|_| Vec::new()).collect();
    if let Some(first) = found.first().filter(|_| guard) {
        conn.guard_walk(first.space).await?;
    }
    let mut walked = conn.walk_paths(&found).await?.into_iter();
    for (slot, (space, _, _)) in out.iter_mut().zip(walks) {
        if space.info.get().is_some() {
            *slot = walked.next().unwrap_or_default();
        }
    }
    Ok(out)
}

/// The walks of `reads`, owned.
pub(crate) fn owned_walks<'a, T: 'a>(
    reads: &[PathRead<'a, T>],
    space: impl Fn(&T) -> &Arc<NamespaceState>,
) -> Vec<OwnedWalk> {
    reads
        .iter()
        .map(|r| (space(r.tree).clone(), r.starts.clone(), r.siblings))
        .collect()
}

/// The parts of a commit, owned (for a commit on a task of its own).
pub(crate) fn owned_parts<T>(
    updates: &[TreeUpdate<'_, T>],
    space: impl Fn(&T) -> &Arc<NamespaceState>,
) -> Vec<(Arc<NamespaceState>, UpdateBatch)> {
    updates
        .iter()
        .map(|u| (space(u.tree).clone(), u.batch.clone()))
        .collect()
}

fn parts(owned: &[(Arc<NamespaceState>, UpdateBatch)]) -> Vec<CommitPart<'_>> {
    owned
        .iter()
        .map(|(space, batch)| CommitPart { space, batch })
        .collect()
}

/// The parts of a commit, owned, with the namespace whose counters count
/// the commit's round trips.
pub(crate) type OwnedCommit = (Arc<NamespaceState>, Vec<(Arc<NamespaceState>, UpdateBatch)>);

/// Commits `owned` in `tx`, on a task of its own (see [`detached_store`]):
/// every part checked and applied in the transaction, then COMMIT, unless
/// a root moved or the caller left before COMMIT (then ROLLBACK). The one
/// commit of the pool store and of its lock's view.
pub(crate) async fn commit_in<C: Dialect>(
    tx: impl Future<Output = Res<OwnedTx<C>>> + Send + 'static,
    (counted, owned): OwnedCommit,
) -> Res<ForestCommit> {
    detached_store(move |caller_gone: CallerGone| async move {
        let mut tx = tx.await?;
        for (space, _) in &owned {
            space.fail("begin")?;
        }
        let outcome = ops::commit_many_on(tx.conn(), &parts(&owned)).await?;
        match outcome {
            ForestCommit::Committed if !caller_gone.get() => {
                for (space, _) in &owned {
                    space.fail("before_commit")?;
                }
                tx.commit(counted.exchange()).await?;
                for (space, _) in &owned {
                    space.fail("after_commit")?;
                }
            }
            _ => tx.rollback(counted.exchange()).await?,
        }
        Ok(outcome)
    })
    .await
}
