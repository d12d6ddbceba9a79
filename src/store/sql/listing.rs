//! What an SQL database holds, read without writing: its schema version
//! and its namespaces with their roots, versions, stratum heights and
//! pins (for operator tools, which must not create or migrate anything
//! when they only look).

use sqlx::{AssertSqlSafe, SqlSafeStr};

use super::dialect::{Arg, Dialect, fetch_optional};
use super::error::{Res, SqlStoreError};
use super::handle::SqlStore;
use super::ops::version_from_sql;
use super::reply_wait::ReplyWait;
use super::schema;
use super::space::decode_root;
use crate::node::ComputedNode;
use crate::strata::StratumHeight;

/// One namespace of an SQL database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceListing {
    /// The namespace's name (an interrupted import's staging namespace is
    /// listed too: its name ends in `"\u{1f}import"`).
    pub name: String,
    /// Its current root (the empty root for an empty tree).
    pub root: ComputedNode,
    /// Commits it has taken.
    pub version: u64,
    /// Levels per stored row.
    pub stratum_height: StratumHeight,
    /// How many pins it has.
    pub pins: u64,
}

/// How a database's schema stands against the one this crate writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaState {
    /// No `ms_smt_migrations` ledger: this crate never migrated it.
    Missing,
    /// Migrated to `found`, older than this crate's (a
    /// [`migrate`](SqlStore::migrate) upgrades it).
    Older {
        /// The newest version applied.
        found: i64,
    },
    /// The schema this crate writes.
    Current,
    /// Migrated by a newer release than this crate.
    Newer {
        /// The newest version applied.
        found: i64,
    },
}

/// A namespace row as listed: name, height, root hash and sum, version,
/// pin count.
type ListingRow = (String, i64, Option<Vec<u8>>, Option<i64>, i64, i64);

impl<C: Dialect> SqlStore<C> {
    /// The database's schema against this crate's, read without writing
    /// (works on a read-only connection).
    ///
    /// A version applied with other SQL than this crate's (its recorded
    /// checksum differs) fails with [`SqlStoreError::MigrationChanged`],
    /// as [`migrate`](SqlStore::migrate) does; a database at a newer
    /// version is [`SchemaState::Newer`] without that check. A ledger
    /// written before checksums has none to compare (the next migrate
    /// records them).
    pub async fn schema_state(&self) -> Res<SchemaState> {
        let wait = self.space.reply_wait;
        let mut conn = self.pool.acquire().await?;
        let ledger: Option<(i64,)> =
            fetch_optional(&mut *conn, wait, C::HAS_LEDGER.into_sql_str(), &[]).await?;
        if ledger.is_none() {
            return Ok(SchemaState::Missing);
        }
        let newest: Option<(Option<i64>,)> = fetch_optional(
            &mut *conn,
            wait,
            "SELECT MAX(version) FROM ms_smt_migrations".into_sql_str(),
            &[],
        )
        .await?;
        let supported = C::MIGRATIONS.last().map_or(0, |m| m.0);
        let state = match newest.and_then(|(v,)| v) {
            None => SchemaState::Missing,
            Some(found) if found < supported => SchemaState::Older { found },
            Some(found) if found > supported => SchemaState::Newer { found },
            Some(_) => SchemaState::Current,
        };
        if matches!(state, SchemaState::Older { .. } | SchemaState::Current)
            && schema::has_checksums(&mut *conn, wait).await?
        {
            schema::verify::<C>(&schema::ledger(&mut *conn, wait).await?)?;
        }
        Ok(state)
    }

    /// Every namespace of the database, by name. Reads only.
    pub async fn namespaces(&self) -> Res<Vec<NamespaceListing>> {
        self.list(None).await
    }

    /// The namespace `name`, `None` when the database has no such
    /// namespace (a tree reads an absent namespace as empty; this tells
    /// the two apart). Reads only.
    pub async fn namespace_listing(&self, name: &str) -> Res<Option<NamespaceListing>> {
        Ok(self.list(Some(name)).await?.into_iter().next())
    }

    async fn list(&self, name: Option<&str>) -> Res<Vec<NamespaceListing>> {
        const SELECT: &str = "SELECT n.name, CAST(n.height AS BIGINT), n.root_hash, n.root_sum, \
            n.version, (SELECT COUNT(*) FROM ms_smt_pins p WHERE p.ns = n.id) \
            FROM ms_smt_namespaces n";
        let wait = self.space.reply_wait;
        let mut conn = self.pool.acquire().await?;
        let rows: Vec<ListingRow> = match name {
            Some(name) => {
                // Our constant and a placeholder only (the name is bound).
                let sql = AssertSqlSafe(format!("{SELECT} WHERE n.name = $1")).into_sql_str();
                conn.fetch_all(wait, sql, &[Arg::Text(name)]).await?
            }
            None => {
                let sql = AssertSqlSafe(format!("{SELECT} ORDER BY n.name")).into_sql_str();
                conn.fetch_all(wait, sql, &[]).await?
            }
        };
        rows.into_iter()
            .map(|(name, height, hash, sum, version, pins)| {
                let stratum_height = u8::try_from(height)
                    .ok()
                    .and_then(StratumHeight::new)
                    .ok_or(SqlStoreError::StratumHeight(height))?;
                Ok(NamespaceListing {
                    root: decode_root(&name, hash.zip(sum))?,
                    version: version_from_sql(version)?,
                    stratum_height,
                    pins: u64::try_from(pins).unwrap_or(0),
                    name,
                })
            })
            .collect()
    }
}

/// The names of every namespace of the database on `conn`, sorted (a
/// caller's-transaction forest's: the process default's reply wait).
pub(crate) async fn names_on<C: Dialect>(conn: &mut C) -> Res<Vec<String>> {
    let rows: Vec<(String,)> = conn
        .fetch_all(
            ReplyWait::Default,
            "SELECT name FROM ms_smt_namespaces ORDER BY name".into_sql_str(),
            &[],
        )
        .await?;
    Ok(rows.into_iter().map(|(name,)| name).collect())
}
