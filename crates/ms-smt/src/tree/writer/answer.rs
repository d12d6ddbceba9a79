//! Answering a group's submissions: acknowledged with their trees' new
//! roots (and nested proofs when asked), rejected alone, or failed with
//! their group.

use std::collections::HashMap;
use std::sync::Arc;

use tracing::Span;

use super::config::Counters;
use super::submission::{ForestReceipt, Pending, SubmitError, TreeRoot};
use super::task::Task;
use crate::NestedProof;
use crate::error::PlanError;
use crate::layout::Layout;
use crate::store::{ForestStore, TreeStore};
use crate::tree::engine::{Failure, GroupPlan, TreeId, nested_proofs};

impl<F, L> Task<F, L>
where
    F: ForestStore + Clone + 'static,
    F::Tree: TreeStore<Error = F::Error> + Clone + 'static,
    L: Layout + Send + Sync + 'static,
{
    /// Answers a group whose plan is committed: rejected submissions with
    /// their error, the others with their trees' new roots.
    pub(super) fn committed(
        &self,
        group: Vec<Pending<F::Tree, F::Error>>,
        plan: &GroupPlan<F::Tree>,
    ) {
        let written = plan.trees.iter().filter(|t| !t.update.is_noop()).count();
        Span::current()
            .record("outcome", "ok")
            .record("trees", written)
            .record(
                "inserts",
                plan.trees
                    .iter()
                    .map(|t| t.update.inserts.len())
                    .sum::<usize>(),
            )
            .record(
                "deletes",
                plan.trees
                    .iter()
                    .map(|t| t.update.deletes.len())
                    .sum::<usize>(),
            )
            .record("rejected", plan.rejected.len());
        let mut rejected = plan.rejected.iter().peekable();
        let leaves: usize = group
            .iter()
            .enumerate()
            .filter(|(i, _)| !plan.rejected.iter().any(|(r, _)| r == i))
            .map(|(_, p)| p.leaves)
            .sum();
        self.counters.group(leaves, written);
        let roots: HashMap<TreeId, _> = plan
            .trees
            .iter()
            .map(|t| (t.entry.id, (t.update.new_root, &t.nodes)))
            .collect();
        for (index, pending) in group.into_iter().enumerate() {
            if let Some((_, error)) = rejected.next_if(|(r, _)| *r == index) {
                self.reject(pending, error.clone());
                continue;
            }
            let mut mine: Vec<TreeRoot> = Vec::new();
            for (entry, _) in &pending.writes {
                for tree in entry.chain() {
                    if mine.iter().any(|t| Arc::ptr_eq(&t.name, &tree.name)) {
                        break;
                    }
                    if let Some((root, _)) = roots.get(&tree.id) {
                        mine.push(TreeRoot {
                            name: tree.name.clone(),
                            root: *root,
                        });
                    }
                }
            }
            let lanes = self.forest.tuning.hash_lanes();
            let proofs = pending.prove.as_ref().and_then(|keys| {
                keys.iter()
                    .map(|(entry, key)| {
                        nested_proofs(&roots, entry, std::slice::from_ref(key), lanes)?.pop()
                    })
                    .collect::<Option<Vec<NestedProof>>>()
            });
            self.acknowledge(pending, mine, proofs, leaves);
        }
    }

    /// Answers every submission of `group` with its failure (one error,
    /// shared): [`SubmitError::Failed`] when nothing was applied,
    /// [`SubmitError::Indeterminate`] when the outcome is unknown.
    pub(super) fn fail(&self, group: Vec<Pending<F::Tree, F::Error>>, failure: Failure<F::Error>) {
        use crate::tree::traced::ErrorKind;
        let (outcome, error, answer): (_, _, fn(_) -> _) = match failure {
            Failure::NotApplied(e) => (e.kind(), Arc::new(e), SubmitError::Failed),
            Failure::Unknown(e) => ("indeterminate", Arc::new(e), SubmitError::Indeterminate),
        };
        Span::current()
            .record("outcome", outcome)
            .record("error", tracing::field::display(&error));
        Counters::add(&self.counters.failed, group.len() as u64);
        for pending in group {
            let _ = pending.reply.send(Err(answer(error.clone())));
        }
    }

    pub(super) fn reject(&self, pending: Pending<F::Tree, F::Error>, error: PlanError) {
        Counters::add(&self.counters.rejected, 1);
        let _ = pending.reply.send(Err(SubmitError::Rejected(error)));
    }

    pub(super) fn acknowledge(
        &self,
        pending: Pending<F::Tree, F::Error>,
        roots: Vec<TreeRoot>,
        proofs: Option<Vec<NestedProof>>,
        group_leaves: usize,
    ) {
        Counters::add(&self.counters.acknowledged, 1);
        Counters::add(&self.counters.leaves, pending.leaves as u64);
        let _ = pending.reply.send(Ok(ForestReceipt {
            roots,
            proofs,
            group_leaves,
        }));
    }
}
