//! Many trees of one store: their names resolved to handles and places in
//! the links (parent trees kept in step with their children), writes of
//! several trees in one commit through the write engine
//! ([`crate::tree::engine`]), and nested proofs up the chain.

mod handle;
mod links;
mod proven;
mod registry;

pub use handle::{Forest, ForestWrite, TreeChange};
pub use links::Link;
pub use proven::ProvenLeaf;
