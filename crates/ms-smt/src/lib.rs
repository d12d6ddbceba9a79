//! # ms-smt: merkle-sum sparse merkle trees
//!
//! The tree behind Taproot Assets universes and supply commitments, with
//! roots and proofs bit-identical to the Go reference (taproot-assets
//! `mssmt`).
//!
//! * [`FullTree`] and [`CompactedTree`]: the same roots and proofs.
//! * [`Tree::insert_many`]: one descent for a whole batch, one store commit.
//! * [`Writer`] ([`Tree::writer`]): many small concurrent writes coalesced
//!   into pipelined groups, one descent and one durable commit per group.
//! * [`Proof`]: verification, compression, and the Go wire format.
//! * [`store`]: the async store boundary and an in-memory store.
//! * [`Tree::audit`]: recompute and check everything a namespace stores.
//! * One write engine for every write (a tree's, a forest's over several
//!   trees and their parents, the writers' groups): read, pure plan, one
//!   commit, one judge of the outcome, one loop of retries that falls back
//!   to the store's write lock ([`store::ForestStore::locked`]).
//! * Hashing at the machine's limit: independent climbs of compacted leaves
//!   run several at a time on one core's SHA-NI unit and a large batch is
//!   split across two threads, as a tree's [`Tuning`] says
//!   ([`Tree::with_hash_lanes`], [`Tree::with_descent_threads`]); the only
//!   `unsafe` code is that SHA-NI kernel, checked against `sha2`.
//! * What universe servers need beyond insert and prove, on every store and
//!   both layouts: ordered, resumable iteration ([`View::leaves`]), diff of
//!   two roots ([`View::diff`]), self-checking subtree reads and sync
//!   ([`View::children`], [`Tree::sync_from`]), multi-key and update proofs
//!   ([`MultiProof`], [`Tree::insert_many_with_proof`]), pinned roots
//!   ([`Tree::pin`], [`Tree::at_pin`]), copy and filtered copy
//!   ([`View::copy_to`], [`View::copy_filter_to`]), verifiable export and
//!   import ([`View::export_trunk`], [`Tree::import`]), subtree sums
//!   ([`View::subtree`]) and proofs of them for a holder of the root alone
//!   ([`SumProof`]: a prefix, or a key range).
//! * tapd's universe layout ([`multiverse`]): universes named and keyed as
//!   tapd names and keys them, the issuance and transfer multiverses over
//!   their roots in the same commit, paged listings and proofs up to the
//!   multiverse root ([`Multiverse`]).
//!
//! The SQL stores are `ms-smt-sql`'s; federation over HTTP, access tokens
//! and metrics are `ms-smt-server`'s; tapd interop is `ms-smt-tapd`'s; the
//! pure descent is `ms-smt-descent`'s and the verify side `ms-smt-core`'s
//! (re-exported here at the same paths).
//!
//! ```
//! use ms_smt::{CompactedTree, Key, Leaf, store::MemoryStore};
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let tree = CompactedTree::new(MemoryStore::new());
//! let key = Key([1; 32]);
//! let root = tree
//!     .insert_many([(key, Leaf::new(b"asset".to_vec(), 100))])
//!     .await?;
//! let proof = tree.merkle_proof(&key).await?;
//! assert!(proof.verify(&key, &Leaf::new(b"asset".to_vec(), 100), &root));
//! assert_eq!(root.sum, 100);
//! # Ok::<_, ms_smt::TreeError<ms_smt::store::MemoryError>>(())
//! # }).unwrap();
//! ```
//!
//! ## Tracing and progress
//!
//! The crate emits [`tracing`](https://docs.rs/tracing) spans and events,
//! never prints or logs otherwise; with no subscriber installed (or one
//! that filters them out) a disabled span costs a callsite check, and no
//! field is computed or formatted. Target `ms_smt`:
//!
//! * **DEBUG**, one span per operation: `insert_many` (also `insert`,
//!   `delete`, `insert_many_with_proof`), `get_many`, `merkle_proofs`,
//!   `audit`, `copy` (`filter` tells copy from copy_filter), `diff` (per
//!   page), `sync_from`, `export_trunk`, `export_chunk`, `import` (`step`:
//!   start, add, finish) and `writer_group` (one per coalesced group:
//!   `submissions`, `leaves`, `planned_ahead`, `inserts`, `deletes`,
//!   `rejected`, `outcome`, `error`). Operation spans carry `namespace`
//!   ([`TreeStore::namespace`](store::TreeStore::namespace)), their sizes
//!   and `attempts` where writers can race them, and close with one
//!   `finished` event: `outcome` (`ok`, or a short error kind such as
//!   `store`, `contention`, `overflow`, with the error itself in `error`)
//!   and the store's counter deltas (`round_trips`, `nodes_read`,
//!   `nodes_written`). A group's span records its outcome itself: its
//!   counters are not the store's, as the next group reads meanwhile.
//! * **INFO**: `schema_upgrade` (a SQL store's migration runner:
//!   `found`, `newest`, `steps`, `applied`; its `finished` event has the
//!   `outcome`), rare and worth keeping.
//! * **TRACE**, per-phase detail: `read` (the read phase), `descent`, and
//!   `commit`, children of their operation, and `write_locked` (an attempt
//!   on the write lock of its trees, after a few lost races).
//!
//! Long operations report progress to a [`ProgressSink`] attached with
//! [`Tree::with_progress`]: [`Progress`] values counting what
//! [`ProgressOperation`] names (leaves, rows or nodes, subtrees, chunks,
//! levels, steps), throttled to about a hundred reports per operation,
//! monotone, and ending with `done == total`. [`ProgressSink::watch`] hands
//! them to async code on a `tokio::sync::watch` channel. Each report is
//! also a DEBUG event with target `ms_smt::progress`, so a subscriber sees
//! progress without any sink.
#![warn(missing_docs)]

pub mod audit;
// The pure, no_std half lives in ms-smt-core and the pure algorithm in
// ms-smt-descent; the crate's own paths to them (`crate::key::Key`,
// `crate::descent::UpdateBatch`, ...) stay as they were.
use ms_smt_core::{empty, key, leaf, node, position};
use ms_smt_descent as descent;
use ms_smt_descent::{hash, layout, lift};
mod error;
pub mod multiverse;
mod pin;
mod progress;
pub mod proof;
pub mod store;
mod tree;
mod universe;

pub use audit::links::{LinkAudit, LinkProblem};
pub use audit::report::{AuditReport, Problem};
pub use descent::{NodeCache, NodeSource, PARALLEL_MIN_ITEMS, Subtree, plan_insert_many};
pub use error::{LinkError, PlanError, SumOverflow, TreeError};
pub use hash::Hash;
pub use key::Key;
pub use layout::{Compacted, Full, Layout, LayoutKind};
pub use leaf::Leaf;
pub use ms_smt_core::{
    CompressedProof, LinkSum, MultiProof, NestedLevel, NestedProof, Proof, SumProof, UpdateProof,
    verify_merkle_proof,
};
pub use ms_smt_descent::{DEFAULT_HASH_LANES, Tuning};
pub use multiverse::Multiverse;
pub use node::{ComputedNode, Node};
pub use position::Position;
pub use progress::{Meter, Progress, ProgressOperation, ProgressSink};
pub use tree::engine::EXCLUSIVE_AFTER;
pub use tree::{
    CompactedTree, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_GROUP_LEAVES, DEFAULT_QUEUE_BOUND,
    DEFAULT_RECOVERY_WAIT, Forest, ForestReceipt, ForestTicket, ForestWrite, ForestWriter,
    FullTree, Link, ProvenLeaf, ProvenWrite, Receipt, SubmitError, Ticket, Tree, TreeChange,
    TreeRoot, View, Writer, WriterConfig, WriterStats,
};
pub use universe::{
    Chunk, CopyError, CopyReport, DEFAULT_FEED_PAGE, DEFAULT_PAGE, Diff, DiffEntry, ExportError,
    FollowError, FollowReport, Import, ImportError, LeafEntry, Leaves, PageError, ProvenPage,
    SyncError, SyncPeer, SyncReport, Trunk,
};
