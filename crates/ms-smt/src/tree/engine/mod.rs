//! The one write engine. Every write of the crate goes through it: a
//! tree's `insert_many`, a forest's `insert_many` over several trees and
//! their parents, and the groups of the coalescing writers.
//!
//! ```text
//!   a group: submissions of (tree, key, leaf) writes
//!        │ by tree; every tree above them by the links (the closure)
//!        ▼
//!   read phase ── one read of the committed roots, one of every path
//!        ▼            (read.rs; a writer's next group reads over the
//!        │             group still committing, its overlay)
//!   plan       ── pure (plan.rs): each submission admitted through its
//!        │         chains, one descent per tree, children before parents;
//!        │         proofs as asked (update proofs from the nodes read,
//!        │         nested proofs from the nodes written)
//!   commit     ── ForestStore::commit_trees: one atomic commit guarded by
//!        │         every tree's root
//!        ▼
//!   judge      ── the one decision (judge.rs): landed, lost race, not
//!        │         applied, unknown
//!        ▼
//!   policy     ── the one loop (policy.rs): backoff and a new attempt
//!                  after a lost race, the store's write lock after a few
//!                  (ForestStore::locked: the same read, plan and commit
//!                  on a view bound to the lock), a bounded wait for a
//!                  store out of reach, progress, remembered nodes
//! ```
//!
//! A tree's write is a group of one submission over one tree; a forest's,
//! a group of one submission over several; a writer's, the queued
//! submissions, whose first attempt may be planned while the group before
//! commits and is handed to the loop for judging.

mod entry;
mod judge;
mod phases;
mod plan;
mod policy;
mod read;

pub(crate) use entry::{Entry, TreeId};
pub(crate) use judge::{Ending, may_have_raced};
pub(crate) use plan::{GroupPlan, Want, Writes, closure, nested_leaf_proofs, nested_proofs};
pub use policy::EXCLUSIVE_AFTER;
pub(crate) use policy::{Failure, Job, Policy, Tally, backoff, write};
pub(crate) use read::{Unplanned, is_noop, overlay_of, read_and_plan, read_trees};
