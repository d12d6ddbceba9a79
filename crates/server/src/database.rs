//! What the server does with a SQL database of either engine: serve it,
//! mint and revoke its tokens, sync into it.

use axum::Router;

use super::access::{AccessError, Grants, IssuedToken, issue_token, unix_now};
use super::client::{HttpPeer, PeerError};
use super::server::{ServerConfig, router};
use crate::tokens::{TokenRecord, TokenStore};
use ms_smt::CompactedTree;
use ms_smt::{SyncError, SyncReport};
use ms_smt_sql::{Database, SqlStoreError};
use std::future::Future;

/// What the server does with a database of either engine
/// ([`ms_smt_sql::Database`], opened from the spec the operator gives).
pub trait DatabaseExt {
    /// The federation router over this database's namespaces.
    fn router(&self, config: ServerConfig) -> Router;

    /// Makes a token with `grants` in this database ([`issue_token`]).
    fn issue_token(
        &self,
        label: &str,
        grants: &Grants,
        expires_at: Option<i64>,
    ) -> impl Future<Output = Result<IssuedToken, AccessError>> + Send;

    /// Every token, revoked and expired ones included (never a secret).
    fn tokens(&self) -> impl Future<Output = Result<Vec<TokenRecord>, SqlStoreError>> + Send;

    /// Revokes token `id` now; false when there is no such token or it
    /// was revoked already.
    fn revoke_token(&self, id: &str) -> impl Future<Output = Result<bool, SqlStoreError>> + Send;

    /// Makes namespace `ns` of this database equal to `peer`'s
    /// ([`HttpPeer::sync_into`]).
    fn sync_from(
        &self,
        ns: &str,
        peer: &HttpPeer,
    ) -> impl Future<Output = Result<SyncReport, SyncError<SqlStoreError, PeerError>>> + Send;
}

impl DatabaseExt for Database {
    fn router(&self, config: ServerConfig) -> Router {
        match self {
            Database::Sqlite(s) => router(s.clone(), config),
            Database::Postgres(s) => router(s.clone(), config),
        }
    }

    async fn issue_token(
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

    async fn tokens(&self) -> Result<Vec<TokenRecord>, SqlStoreError> {
        match self {
            Database::Sqlite(s) => TokenStore::open(s).await?.list().await,
            Database::Postgres(s) => TokenStore::open(s).await?.list().await,
        }
    }

    async fn revoke_token(&self, id: &str) -> Result<bool, SqlStoreError> {
        match self {
            Database::Sqlite(s) => TokenStore::open(s).await?.revoke(id, unix_now()).await,
            Database::Postgres(s) => TokenStore::open(s).await?.revoke(id, unix_now()).await,
        }
    }

    async fn sync_from(
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
