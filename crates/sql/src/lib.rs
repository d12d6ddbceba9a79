//! # ms-smt-sql: SQLite and PostgreSQL stores for ms-smt
//!
//! One core generic over the engine (its connection type's `Dialect`),
//! with SQLite and Postgres as its two dialects. The stores keep
//! position-keyed *strata* rows ([`strata`]), read a whole batch's paths
//! in one statement, commit every tree of a write in one transaction, and
//! implement every store trait of [`ms_smt::store`].
//!
//! ```no_run
//! use ms_smt::{CompactedTree, Key, Leaf};
//! use ms_smt_sql::SqliteStore;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteStore::open("assets.db").await?; // migrates itself
//! let tree = CompactedTree::new(store.open_namespace("universe-1"));
//! tree.insert(Key([1; 32]), Leaf::new(b"issuance".to_vec(), 1_000)).await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!(
    "ms-smt-sql needs an engine: its feature `sqlite`, `postgres` or both (the default)"
);

// The vocabulary of the crates below, at the paths the stores have always
// used (`crate::key::Key`, `crate::store::TreeStore`, ...).
use ms_smt::store;
use ms_smt_core::{empty, key, leaf, node, position};
use ms_smt_descent as descent;
use ms_smt_descent::{hash, layout, lift};

mod audit;
mod commit_token;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod database;
mod dialect;
mod error;
// The SQL write path's named faults (feature `failpoints`, tests only).
#[cfg(feature = "failpoints")]
#[doc(hidden)]
pub mod failpoint;
#[cfg(not(feature = "failpoints"))]
mod failpoint;
mod forest;
mod handle;
mod journal;
mod ledger;
mod listing;
mod locked;
mod migrations;
mod namespaces;
mod ops;
#[cfg(feature = "postgres")]
mod postgres;
mod reads;
mod reply_wait;
mod rows;
mod savepoint;
mod schema;
mod several;
mod source;
mod space;
#[cfg(feature = "sqlite")]
mod sqlite;
pub mod strata;
mod tx;

pub use audit::{RowAudit, RowSink};
pub use commit_token::CommitToken;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub use database::{Access, CONNECT_TIMEOUT, Database, DatabaseError, DatabaseSpec};
pub use dialect::{Arg, Dialect, FromPg, FromSqlite, Shared};
pub use error::SqlStoreError;
pub use forest::SqlTxForest;
pub use handle::{SqlHandle, SqlStore, SqlTxStore};
pub use listing::{
    LeafCount, LeafRecount, NamespaceDamage, NamespaceListing, NamespaceSummary, RecountProblem,
};
pub use migrations::{Migration, MigrationSet, Step, TREE_SCHEMA, checksum, hex32};
#[cfg(feature = "postgres")]
pub use postgres::{
    DEFAULT_STANDBY_WAIT, OnLag, PostgresStore, PostgresTxStore, ReadSnapshot, ReplicaSet,
    SESSION_OPTIONS, STALE_CHECK_AFTER, ServedBy,
};
#[cfg(feature = "postgres")]
pub use reply_wait::DEFAULT_POSTGRES_REPLY_WAIT;
pub use reply_wait::{Exchange, ReplyWait};
pub use schema::SchemaState;
pub use source::{CallerTx, Pooled};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, SqliteTxStore};
pub use strata::{DEFAULT_STRATUM_HEIGHT, StrataError, StratumHeight};
