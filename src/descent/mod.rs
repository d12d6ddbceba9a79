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
pub use plan::{PARALLEL_MIN_ITEMS, plan_insert_many, set_descent_threads};
pub use source::{NodeCache, NodeSource};
pub use subtree::Subtree;

pub(crate) use items::{Item, batch_sum, prepare, reads_siblings, sorted_keys};
pub(crate) use plan::{fork_here, on_two_threads, plan_items};
pub(crate) use source::sibling_sum;
pub(crate) use trees::{TreeItems, plan_trees};
