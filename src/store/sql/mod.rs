//! The SQL stores: one core generic over the engine ([`Dialect`]), with
//! SQLite and Postgres as its two dialects.

mod dialect;
mod error;
mod forest;
mod handle;
mod journal;
mod listing;
mod locked;
mod ops;
#[cfg(feature = "sqlite")]
mod packed;
#[cfg(feature = "postgres")]
mod postgres;
mod reads;
#[cfg(feature = "postgres")]
mod replica;
mod reply_wait;
mod savepoint;
mod schema;
#[cfg(feature = "postgres")]
mod snapshot;
mod space;
#[cfg(feature = "sqlite")]
mod sqlite;
mod token;
mod tokens;
mod tx;

#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub(crate) use dialect::{Arg, Dialect, Shared};
pub use error::SqlStoreError;
pub use forest::SqlTxForest;
pub use handle::{SqlStore, SqlTxStore};
pub use listing::{
    LeafCount, LeafRecount, NamespaceDamage, NamespaceListing, NamespaceSummary, RecountProblem,
    SchemaState,
};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, PostgresTxStore, STALE_CHECK_AFTER};
#[cfg(feature = "postgres")]
pub use replica::{DEFAULT_STANDBY_WAIT, OnLag, ReplicaSet};
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub(crate) use reply_wait::ReplyWait;
#[cfg(feature = "postgres")]
pub use reply_wait::{DEFAULT_POSTGRES_REPLY_WAIT, postgres_reply_wait, set_postgres_reply_wait};
#[cfg(feature = "postgres")]
pub use snapshot::{ReadSnapshot, ServedBy};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, SqliteTxStore};
pub use token::CommitToken;
pub use tokens::TokenRecord;
