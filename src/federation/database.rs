//! A SQL database named the way a command line names it: a SQLite file
//! path, or a `postgres://` URL. What the example programs open, serve and
//! sync into, whichever engine it is.

use axum::Router;

use super::client::{HttpPeer, PeerError};
use super::server::{ServerConfig, router};
use crate::store::{PostgresStore, SqlStoreError, SqliteStore};
use crate::tree::CompactedTree;
use crate::universe::{SyncError, SyncReport};

/// An open SQL database of either engine.
#[derive(Debug, Clone)]
pub enum Database {
    /// A SQLite file.
    Sqlite(SqliteStore),
    /// A Postgres database.
    Postgres(PostgresStore),
}

impl Database {
    /// Opens (and migrates) `spec`: a `postgres://` or `postgresql://` URL,
    /// else a SQLite file path (created if missing).
    pub async fn open(spec: &str) -> Result<Self, SqlStoreError> {
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            Ok(Database::Postgres(PostgresStore::connect(spec).await?))
        } else {
            Ok(Database::Sqlite(SqliteStore::open(spec).await?))
        }
    }

    /// The federation router over this database's namespaces.
    pub fn router(&self, config: ServerConfig) -> Router {
        match self {
            Database::Sqlite(s) => router(s.clone(), config),
            Database::Postgres(s) => router(s.clone(), config),
        }
    }

    /// Makes namespace `ns` of this database equal to `peer`'s
    /// ([`HttpPeer::sync_into`]).
    pub async fn sync_from(
        &self,
        ns: &str,
        peer: &HttpPeer,
    ) -> Result<SyncReport, SyncError<SqlStoreError, PeerError>> {
        match self {
            Database::Sqlite(s) => {
                peer.sync_into(&CompactedTree::new(s.open_namespace(ns)))
                    .await
            }
            Database::Postgres(s) => {
                peer.sync_into(&CompactedTree::new(s.open_namespace(ns)))
                    .await
            }
        }
    }
}
