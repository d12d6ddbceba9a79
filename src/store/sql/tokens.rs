//! Storage of the federation server's access tokens (`ms_smt_tokens`):
//! insert, list, revoke, look up by hash. Storage only: what a token may do
//! (its grants) is text the federation writes and parses, and the secret
//! itself is never stored, only its SHA-256 hash.

use sqlx::SqlSafeStr;

use super::dialect::{Arg, Dialect, fetch_optional};
use super::error::Res;
use super::handle::SqlStore;

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

/// A token row: id, hash, label, grants, created, expires, revoked.
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

fn record((id, hash, label, grants, created_at, expires_at, revoked_at): TokenRow) -> TokenRecord {
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

impl<C: Dialect> SqlStore<C> {
    /// Stores `token` (its id and hash must be new).
    pub async fn insert_token(&self, token: &TokenRecord) -> Res<()> {
        let mut conn = self.pool.acquire().await?;
        conn.execute(
            self.space.reply_wait,
            "INSERT INTO ms_smt_tokens \
             (id, hash, label, grants, created_at, expires_at, revoked_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)"
                .into_sql_str(),
            &[
                Arg::Text(&token.id),
                Arg::Bytes(&token.hash),
                Arg::Text(&token.label),
                Arg::Text(&token.grants),
                Arg::Int(token.created_at),
                Arg::OptInt(token.expires_at),
                Arg::OptInt(token.revoked_at),
            ],
        )
        .await?;
        Ok(())
    }

    /// Every stored token, revoked and expired ones included, by creation
    /// time then id.
    pub async fn tokens(&self) -> Res<Vec<TokenRecord>> {
        let mut conn = self.pool.acquire().await?;
        let sql = format!("{SELECT} ORDER BY created_at, id");
        let rows: Vec<TokenRow> = conn
            .fetch_all(
                self.space.reply_wait,
                sqlx::AssertSqlSafe(sql).into_sql_str(),
                &[],
            )
            .await?;
        Ok(rows.into_iter().map(record).collect())
    }

    /// Marks token `id` revoked at `now` (seconds since the Unix epoch);
    /// false when there is no such token or it was revoked already.
    pub async fn revoke_token(&self, id: &str, now: i64) -> Res<bool> {
        let mut conn = self.pool.acquire().await?;
        let changed = conn
            .execute(
                self.space.reply_wait,
                "UPDATE ms_smt_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL"
                    .into_sql_str(),
                &[Arg::Text(id), Arg::Int(now)],
            )
            .await?;
        Ok(changed > 0)
    }

    /// The token whose secret hashes to `hash`, revoked or not.
    pub async fn token_by_hash(&self, hash: &[u8; 32]) -> Res<Option<TokenRecord>> {
        let mut conn = self.pool.acquire().await?;
        let sql = format!("{SELECT} WHERE hash = $1");
        let row: Option<TokenRow> = fetch_optional(
            &mut *conn,
            self.space.reply_wait,
            sqlx::AssertSqlSafe(sql).into_sql_str(),
            &[Arg::Bytes(hash)],
        )
        .await?;
        Ok(row.map(record))
    }
}
