//! Many trees of one store: writes of several trees in one commit, parent
//! trees kept in step with their children in that same commit, and nested
//! proofs up the chain.
//!
//! ```text
//!   writes (tree, key, leaf)
//!        │ by tree; every tree above them by the links (its closure)
//!        ▼
//!   read phase  ── one read of the committed roots, one of every path
//!        ▼
//!   plan        ── pure: each submission admitted through its chains,
//!        │         then one descent per tree, children first; a parent's
//!        │         items are its changed children's new roots
//!        ▼
//!   commit      ── store.commit_trees: one atomic commit, guarded by the
//!                  root of every tree read
//! ```

mod group;
mod handle;
mod links;
mod plan;
mod registry;

pub(crate) use group::{Planning, commit, is_noop, landed, overlay_of, read_and_plan};
pub use handle::{Forest, ForestWrite, TreeChange};
pub use links::Link;
pub(crate) use plan::{GroupPlan, Writes, nested_proofs};
pub(crate) use registry::{Entry, TreeId};
