//! Storage of the server's access tokens (`ms_smt_tokens`): insert, list,
//! revoke, look up by hash. Storage only: what a token may do (its grants)
//! is text the federation writes and parses ([`access`](crate::access)),
//! and the secret itself is never stored, only its SHA-256 hash.
//!
//! The table is the server's own schema ([`TOKENS_SCHEMA`]), a migration
//! set of its own in the SQL stores' ledger beside the tree schema's. In
//! 0.1 it was the tree schema's version 7 (SQLite) / 6 (Postgres); a
//! database written then keeps its table and its tokens, and this set's
//! version 1 (`CREATE TABLE IF NOT EXISTS`) finds the table there.

use ms_smt::ProgressSink;
use ms_smt_sql::{Arg, Dialect, Migration, MigrationSet, SqlStore, SqlStoreError};
use sqlx::{AssertSqlSafe, SqlSafeStr};

/// The server's schema: its access tokens.
pub const TOKENS_SCHEMA: MigrationSet = MigrationSet {
    name: "ms-smt-server",
    sqlite: &[Migration::sql(
        1,
        "the server's access tokens",
        include_str!("../migrations/sqlite/0001_access_tokens.sql"),
    )],
    postgres: &[Migration::sql(
        1,
        "the server's access tokens",
        include_str!("../migrations/postgres/0001_access_tokens.sql"),
    )],
};

/// One stored access token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// The token's public id (what listings show and revocation names).
    pub id: String,
    /// The SHA-256 hash of the secret: what a presented token is looked up
    /// by.
    pub hash: [u8; 32],
    /// The operator's note on whom or what the token is for.
    pub label: String,
    /// What the token may do, as the federation writes it (e.g.
    /// `read:*,write:assets-*`).
    pub grants: String,
    /// When it was made, in seconds since the Unix epoch.
    pub created_at: i64,
    /// When it stops working, in seconds since the Unix epoch (`None`:
    /// never).
    pub expires_at: Option<i64>,
    /// When it was revoked, in seconds since the Unix epoch (`None`: not
    /// revoked).
    pub revoked_at: Option<i64>,
}

/// A token row as the statements below select it.
type TokenRow = (
    String,
    Vec<u8>,
    String,
    String,
    i64,
    Option<i64>,
    Option<i64>,
);

const SELECT: &str =
    "SELECT id, hash, label, grants, created_at, expires_at, revoked_at FROM ms_smt_tokens";

impl From<TokenRow> for TokenRecord {
    fn from((id, hash, label, grants, created_at, expires_at, revoked_at): TokenRow) -> Self {
        // A stored hash of another length matches no presented token.
        let hash = <[u8; 32]>::try_from(hash.as_slice()).unwrap_or([0; 32]);
        TokenRecord {
            id,
            hash,
            label,
            grants,
            created_at,
            expires_at,
            revoked_at,
        }
    }
}

/// The access tokens of a SQL store's database.
#[derive(Debug, Clone)]
pub struct TokenStore<C: Dialect> {
    store: SqlStore<C>,
}

impl<C: Dialect> TokenStore<C> {
    /// The tokens of `store`'s database, their table created or upgraded
    /// first ([`TOKENS_SCHEMA`]).
    pub async fn open(store: &SqlStore<C>) -> Result<Self, SqlStoreError> {
        store
            .migrate_set(&TOKENS_SCHEMA, &ProgressSink::default())
            .await?;
        Ok(TokenStore {
            store: store.clone(),
        })
    }

    /// Stores `token` (its id and hash must be new).
    pub async fn insert(&self, token: &TokenRecord) -> Result<(), SqlStoreError> {
        let mut conn = self.store.pool().acquire().await?;
        let sql = "INSERT INTO ms_smt_tokens \
                   (id, hash, label, grants, created_at, expires_at, revoked_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7)";
        let args = [
            Arg::Text(&token.id),
            Arg::Bytes(&token.hash),
            Arg::Text(&token.label),
            Arg::Text(&token.grants),
            Arg::Int(token.created_at),
            Arg::OptInt(token.expires_at),
            Arg::OptInt(token.revoked_at),
        ];
        conn.execute(self.store.reply_bound().into(), sql.into_sql_str(), &args)
            .await?;
        Ok(())
    }

    /// Every stored token, revoked and expired ones included, by creation
    /// time then id.
    pub async fn list(&self) -> Result<Vec<TokenRecord>, SqlStoreError> {
        let sql = AssertSqlSafe(format!("{SELECT} ORDER BY created_at, id"));
        let mut conn = self.store.pool().acquire().await?;
        let rows: Vec<TokenRow> = conn
            .fetch_all(self.store.reply_bound().into(), sql.into_sql_str(), &[])
            .await?;
        Ok(rows.into_iter().map(TokenRecord::from).collect())
    }

    /// Marks token `id` revoked at `now` (seconds since the Unix epoch);
    /// false when there is no such token or it was revoked already.
    pub async fn revoke(&self, id: &str, now: i64) -> Result<bool, SqlStoreError> {
        let sql = "UPDATE ms_smt_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL";
        let mut conn = self.store.pool().acquire().await?;
        let changed = conn
            .execute(
                self.store.reply_bound().into(),
                sql.into_sql_str(),
                &[Arg::Text(id), Arg::Int(now)],
            )
            .await?;
        Ok(changed > 0)
    }

    /// The token whose secret hashes to `hash`, revoked or not.
    pub async fn by_hash(&self, hash: &[u8; 32]) -> Result<Option<TokenRecord>, SqlStoreError> {
        let sql = AssertSqlSafe(format!("{SELECT} WHERE hash = $1"));
        let mut conn = self.store.pool().acquire().await?;
        let rows: Vec<TokenRow> = conn
            .fetch_all(
                self.store.reply_bound().into(),
                sql.into_sql_str(),
                &[Arg::Bytes(hash)],
            )
            .await?;
        Ok(rows.into_iter().next().map(TokenRecord::from))
    }
}
