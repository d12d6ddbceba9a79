//! # ms-smt-descent: the pure algorithm of ms-smt
//!
//! A synchronous descent that plans a whole batch against the nodes one
//! read phase fetched ([`NodeSource`]) and returns every change as one
//! [`UpdateBatch`]; the lifts of compacted leaves; and the hash lanes they
//! run on (the SHA-NI kernel where the CPU has it, `sha2` elsewhere).
//! Nothing here is async, does I/O or names a store: `ms-smt` runs it
//! between a store's read and its commit.
#![warn(missing_docs)]

// The verify side's vocabulary, at the paths the descent has always used.
use ms_smt_core::{empty, error, key, leaf, node, position, sum};

mod batch;

mod chains;
mod compacted;
mod fate;
mod fork;
mod full;
mod items;
mod plan;
mod planner;
mod prelift;
mod source;
mod subtree;
mod trees;

pub mod hash;
pub mod layout;
pub mod lift;
mod tuning;

pub use batch::{LeafChange, NetChange, UpdateBatch};
pub use plan::plan_insert_many;
pub use source::{NodeCache, NodeSource};
pub use subtree::Subtree;

pub use fork::{PARALLEL_MIN_ITEMS, fork_here, on_two_threads};
pub use items::{
    batch_sum, leaves_sum, normalize, prepare, prepare_pairs, reads_siblings, sorted_keys,
};
pub use layout::{Compacted, Full, Layout, LayoutKind};
pub use source::sibling_sum;
pub use trees::{TreeItems, plan_trees};
pub use tuning::{DEFAULT_HASH_LANES, Tuning};
