//! # ms-smt-core: the verify side of merkle-sum sparse merkle trees
//!
//! The pure, `no_std` (with `alloc`) half of [ms-smt](https://docs.rs/ms-smt):
//! what a holder of a root needs to check what a Taproot Assets MS-SMT
//! says, bit-identical to the Go reference (taproot-assets `mssmt`).
//!
//! * [`Hash`](struct@Hash), [`leaf_hash`] and [`branch_hash`] (SHA-256 through `sha2`),
//!   the empty-subtree table ([`empty_hash`]).
//! * [`Key`], [`Leaf`], [`ComputedNode`] and the stored [`Node`] kinds,
//!   [`Position`], checked sums ([`SumOverflow`]).
//!
//! No store, no I/O, no threads: trees and their stores live in `ms-smt`,
//! which re-exports everything here at the same paths.
//!
//! ```
//! use ms_smt_core::{ComputedNode, Key, Leaf, compacted_hash, empty_hash};
//!
//! // The root of a tree holding one leaf is that leaf lifted to level 0.
//! let leaf = Leaf::new(b"a".to_vec(), 1);
//! let root = ComputedNode::new(compacted_hash(0, &Key([0; 32]), &leaf), leaf.sum());
//! assert_eq!(
//!     root.hash.to_hex(),
//!     "1688022a7c33dccbfe8f11968800b1294266d1b76f453b8e6117727406a5e867"
//! );
//! assert_eq!(ComputedNode::empty_root().hash, empty_hash(0));
//! ```
//!
//! ## Features
//!
//! * `std` (off): a per-thread count of SHA-256 evaluations
//!   (`hash_calls`, for ms-smt's tests and benches) and `std::error::Error`
//!   sources for hex errors. Without it the crate uses `core` and `alloc` alone.
#![no_std]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod count;
pub mod empty;
pub mod error;
pub mod hash;
pub mod key;
pub mod leaf;
pub mod node;
pub mod position;
pub mod sum;

#[cfg(feature = "std")]
pub use count::{add_hash_calls, hash_calls};
pub use empty::{empty_hash, is_empty_hash};
pub use error::SumOverflow;
pub use hash::{Hash, branch_hash, leaf_hash};
pub use key::{Key, KeyParseError, MAX_LEVEL};
pub use leaf::Leaf;
pub use node::{ComputedNode, Node, compacted_hash};
pub use position::Position;
