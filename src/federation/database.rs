//! A SQL database named the way a command line names it: a SQLite file
//! path, or a `postgres://` URL. What the example programs open, serve and
//! sync into, whichever engine it is.

use axum::Router;

use super::access::{AccessError, Grants, IssuedToken, issue_token, unix_now};
use super::client::{HttpPeer, PeerError};
use super::server::{ServerConfig, router};
use crate::store::{NamespaceListing, PostgresStore, SqlStoreError, SqliteStore, TokenRecord};
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

    /// Makes a token with `grants` in this database
    /// ([`issue_token`]).
    pub async fn issue_token(
        &self,
        label: &str,
        grants: &Grants,
        expires_at: Option<i64>,
    ) -> Result<IssuedToken, AccessError> {
        match self {
            Database::Sqlite(s) => issue_token(s, label, grants, expires_at).await,
            Database::Postgres(s) => issue_token(s, label, grants, expires_at).await,
        }
    }

    /// Every token, revoked and expired ones included (never a secret).
    pub async fn tokens(&self) -> Result<Vec<TokenRecord>, SqlStoreError> {
        match self {
            Database::Sqlite(s) => s.tokens().await,
            Database::Postgres(s) => s.tokens().await,
        }
    }

    /// Every namespace, by name.
    pub async fn namespaces(&self) -> Result<Vec<NamespaceListing>, SqlStoreError> {
        match self {
            Database::Sqlite(s) => s.namespaces().await,
            Database::Postgres(s) => s.namespaces().await,
        }
    }

    /// Revokes token `id` now; false when there is no such token or it
    /// was revoked already.
    pub async fn revoke_token(&self, id: &str) -> Result<bool, SqlStoreError> {
        match self {
            Database::Sqlite(s) => s.revoke_token(id, unix_now()).await,
            Database::Postgres(s) => s.revoke_token(id, unix_now()).await,
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
