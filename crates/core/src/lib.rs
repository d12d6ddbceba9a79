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
//! * [`Proof`] and [`CompressedProof`]: verification, compression, the Go
//!   wire format and strict decoding ([`proof::DecodeError`]);
//!   [`NestedProof`] up a chain of parent trees; [`MultiProof`] and
//!   [`UpdateProof`] for batches of keys; [`SumProof`] of the leaves under a
//!   prefix or in a key range.
//! * Proof construction from any [`NodeSource`] (nodes by hash, such as a
//!   `BTreeMap<Hash, Node>`).
//!
//! No store, no I/O, no threads: trees, their stores and the batch descent
//! live in `ms-smt`, which re-exports everything here at the same paths.
//!
//! ```
//! use ms_smt_core::{ComputedNode, Key, Leaf, Proof};
//!
//! // In an empty tree every proof is all empty siblings; the root a proof
//! // yields for a leaf is the root of the tree holding that leaf alone.
//! let key = Key([1; 32]);
//! let leaf = Leaf::new(b"asset".to_vec(), 100);
//! let proof = Proof::empty();
//! let root = proof.root(&key, &leaf)?;
//! assert_eq!(root.sum, 100);
//! assert!(proof.verify(&key, &leaf, &root));
//! assert!(proof.verify(&key, &Leaf::empty(), &ComputedNode::empty_root()));
//!
//! // The Go wire format, decoded strictly.
//! let bytes = proof.to_bytes();
//! assert_eq!(Proof::from_bytes(&bytes)?, proof);
//! # Ok::<_, Box<dyn core::error::Error>>(())
//! ```
//!
//! ## Features
//!
//! * `std` (off): `std::error::Error` sources for hex errors, and
//!   `hash_calls`/`add_hash_calls`. Without it the crate uses `core` and
//!   `alloc` alone.
//! * `hash-count` (off; implies `std`): the per-thread count of SHA-256
//!   evaluations that `hash_calls` reads (0 without it), for ms-smt's tests
//!   and benches. Test instrumentation: leave it off in production builds.
#![no_std]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod batch;
mod count;
pub mod empty;
pub mod error;
pub mod hash;
pub mod key;
pub mod leaf;
pub mod node;
pub mod position;
pub mod proof;
pub mod source;
pub mod sum;

#[cfg(feature = "std")]
pub use count::{add_hash_calls, hash_calls};
pub use empty::{empty_hash, is_empty_hash};
pub use error::{PlanError, SumOverflow};
pub use hash::{Hash, branch_hash, leaf_hash};
pub use key::{Key, KeyParseError, MAX_LEVEL};
pub use leaf::Leaf;
pub use node::{ComputedNode, Node, compacted_hash};
pub use position::Position;
pub use proof::compressed::CompressedProof;
pub use proof::multi::MultiProof;
pub use proof::nested::{LinkSum, NestedLevel, NestedProof};
pub use proof::single::{Proof, verify_merkle_proof};
pub use proof::sum::SumProof;
pub use proof::update::UpdateProof;
pub use source::NodeSource;
