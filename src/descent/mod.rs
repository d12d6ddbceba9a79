//! The pure core: a synchronous descent that plans a whole batch against
//! the nodes one read phase fetched ([`NodeSource`]) and returns every
//! change as one [`UpdateBatch`]. Nothing here is async or names a store.

mod batch;
mod chains;
mod compacted;
mod fate;
mod full;
mod items;
mod plan;
mod prelift;
mod source;
mod subtree;
mod trees;

pub use batch::{LeafChange, NetChange, UpdateBatch};
pub use plan::{PARALLEL_MIN_ITEMS, plan_insert_many};
pub use source::{NodeCache, NodeSource};
pub use subtree::Subtree;

pub(crate) use items::{batch_sum, prepare, prepare_pairs, reads_siblings, sorted_keys};
pub(crate) use plan::{fork_here, on_two_threads};
pub(crate) use source::sibling_sum;
pub(crate) use trees::{TreeItems, plan_trees};
