//! What an SQL database holds, read without writing: its schema version
//! and its namespaces with their roots, versions, stratum heights, pins and
//! leaf counts (for operator tools, which must not create or migrate
//! anything when they only look); and the one-time count of the leaves of
//! namespaces written before the counts existed.
//!
//! A listing costs O(namespaces): one statement reads every namespace row
//! with its pin count and its root row (the row at depth 0), and checks
//! that the root row hashes to the root the namespace row records. The
//! leaf count is the one every commit keeps (`leaves`, see the
//! `LEAF_COUNTS` migrations). A namespace whose row or root row is damaged
//! is listed with what is wrong ([`NamespaceDamage`]) instead of failing
//! the listing.

use sqlx::{AssertSqlSafe, SqlSafeStr};

use super::dialect::{Arg, Dialect, begin_write_by, fetch_optional};
use super::error::{Res, SqlStoreError};
use super::handle::SqlStore;
use super::migrations::MigrationSet;
use super::reads::{PAST_EVERY_PATH, rows_after_on};
use super::reply_wait::ReplyWait;
use super::rows::{ListingRow, NamespaceHead};
use super::schema::{self, SchemaState};
use super::space::{NamespaceState, NsInfo, SCAN_PAGE, decode_root, version_from_sql};
use super::tx::TxConnection;
use crate::hash::Hash;
use crate::node::ComputedNode;
use crate::store::{ReadAt, RecentNodes};
use crate::strata::{Row, Slot, StrataError, StratumHeight};
use ms_smt::{ProgressOperation, ProgressSink};

/// One namespace of an SQL database, as [`SqlStore::namespaces`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceListing {
    /// The namespace's name (an interrupted import's staging namespace is
    /// listed too: its name ends in `"\u{1f}import"`).
    pub name: String,
    /// What its rows say, or what is wrong with them.
    pub summary: Result<NamespaceSummary, NamespaceDamage>,
}

/// A namespace whose row and root row are sound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSummary {
    /// Its current root (the empty root for an empty tree); its sum is the
    /// sum of every leaf.
    pub root: ComputedNode,
    /// Commits it has taken.
    pub version: u64,
    /// Levels per stored row.
    pub stratum_height: StratumHeight,
    /// How many pins it has.
    pub pins: u64,
    /// How many leaves it holds.
    pub leaves: LeafCount,
}

/// A namespace's leaf count, as its commits keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafCount {
    /// The number of leaves.
    Exact(u64),
    /// The namespace held leaves before this crate kept counts (a database
    /// upgraded from an earlier schema) and has not been counted since:
    /// [`SqlStore::count_leaves`] (`ms-smt maintain`) counts it once.
    Uncounted {
        /// The version its counting started at.
        since_version: u64,
    },
}

impl LeafCount {
    /// The count, when it is known.
    pub fn exact(self) -> Option<u64> {
        match self {
            LeafCount::Exact(n) => Some(n),
            LeafCount::Uncounted { .. } => None,
        }
    }
}

/// What is wrong with a namespace, found by a listing (which reads the
/// namespace row and the root row only: [`Tree::audit`](ms_smt::Tree::audit)
/// checks every row).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceDamage {
    /// The root hash column is not 32 bytes.
    #[error("the root hash column holds {len} bytes, not 32")]
    RootColumn {
        /// Its length.
        len: usize,
    },
    /// The stratum height is not 1 to 6.
    #[error("stratum height {0} is out of range")]
    StratumHeight(i64),
    /// The version is negative.
    #[error("version {0} is negative")]
    Version(i64),
    /// The leaf count is negative.
    #[error("leaf count {0} is negative")]
    LeafCount(i64),
    /// The namespace has a root but no row at depth 0.
    #[error("the root row (depth 0) is missing")]
    MissingRootRow,
    /// The namespace is empty but a row at depth 0 exists.
    #[error("the tree is empty but a root row (depth 0) exists")]
    StrayRootRow,
    /// The root row does not decode.
    #[error("the root row does not decode: {0}")]
    RootRow(StrataError),
    /// The root row hashes to another root than the namespace row records.
    #[error(
        "the root row hashes to {found} sum {found_sum}, the namespace row says {stored} sum {stored_sum}"
    )]
    RootMismatch {
        /// The root the namespace row records.
        stored: Hash,
        /// Its sum.
        stored_sum: u64,
        /// The root the root row hashes to.
        found: Hash,
        /// Its sum.
        found_sum: u64,
    },
}

/// What counting one namespace's leaves found
/// ([`SqlStore::count_leaves`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafRecount {
    /// The namespace.
    pub name: String,
    /// Its count, now exact; or why it was left uncounted.
    pub outcome: Result<u64, RecountProblem>,
}

/// Why a namespace's leaves were left uncounted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecountProblem {
    /// A row does not decode (the namespace needs an audit).
    #[error("{0}")]
    Row(StrataError),
    /// The leaves' sums do not add up to the root's sum.
    #[error("the leaves' sums add up to {leaves}, the root's sum is {root}")]
    Sum {
        /// The root's sum.
        root: u64,
        /// The leaves' sums added (wrapping).
        leaves: u64,
    },
    /// The tree was replaced (a clear, copy or import) while it was being
    /// counted; count again.
    #[error("the tree was replaced while it was counted")]
    Replaced,
}

/// The listing's statement; `$1` is the empty path (the root row's).
const LISTING: &str = "SELECT n.name, n.id, CAST(n.height AS BIGINT), n.root_hash, n.root_sum, \
     n.version, (SELECT COUNT(*) FROM ms_smt_pins p WHERE p.ns = n.id), n.leaves, \
     n.leaves_since, (SELECT s.body FROM ms_smt_strata s \
         WHERE s.ns = n.id AND s.path = $1 AND s.depth = 0) \
     FROM ms_smt_namespaces n";

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
        self.schema_state_of(&crate::migrations::TREE_SCHEMA).await
    }

    /// [`schema_state`](Self::schema_state) of another crate's migration
    /// set in this database (the server's access tokens, say).
    pub async fn schema_state_of(&self, set: &MigrationSet) -> Res<SchemaState> {
        let mut conn = self.source.pool.acquire().await?;
        schema::state(&mut *conn, self.space.exchange(), set).await
    }

    /// Every namespace of the database, by name, in one statement whatever
    /// their size: a damaged one is listed with its [`NamespaceDamage`].
    /// Reads only.
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
        let ex = self.space.exchange();
        let mut conn = self.source.pool.acquire().await?;
        let rows: Vec<ListingRow> = match name {
            Some(name) => {
                // Our constant and a placeholder only (the name is bound).
                let sql = AssertSqlSafe(format!("{LISTING} WHERE n.name = $2")).into_sql_str();
                conn.fetch_all(ex, sql, &[Arg::Bytes(&[]), Arg::Text(name)])
                    .await?
            }
            None => {
                let sql = AssertSqlSafe(format!("{LISTING} ORDER BY n.name")).into_sql_str();
                conn.fetch_all(ex, sql, &[Arg::Bytes(&[])]).await?
            }
        };
        Ok(rows.into_iter().map(listed).collect())
    }

    /// Counts, once, the leaves of every namespace whose count is not kept
    /// yet ([`LeafCount::Uncounted`]: it held leaves when its database was
    /// upgraded to the schema with leaf counts), and makes those counts
    /// exact. Each namespace is read in one snapshot (one read transaction)
    /// and never locked: writers go on meanwhile, and what they change
    /// after the snapshot is added to the count when it is written.
    /// `progress` gets the rows read ([`ProgressOperation::CountLeaves`]).
    ///
    /// A namespace whose rows do not decode, or whose leaves' sums do not
    /// add up to its root's sum, is left uncounted and reported; the
    /// others are counted. Returns one entry per namespace it counted.
    pub async fn count_leaves(&self, progress: &ProgressSink) -> Res<Vec<LeafRecount>> {
        let uncounted: Vec<(String,)> = self
            .source
            .pool
            .acquire()
            .await?
            .fetch_all(
                self.space.exchange(),
                "SELECT name FROM ms_smt_namespaces WHERE leaves_since IS NOT NULL ORDER BY name"
                    .into_sql_str(),
                &[],
            )
            .await?;
        let mut meter = progress.meter(ProgressOperation::CountLeaves, None);
        let mut out = Vec::with_capacity(uncounted.len());
        // Counting walks every row once: nothing worth remembering.
        let no_memory = RecentNodes::new(0);
        for (name,) in uncounted {
            let space = NamespaceState::waiting(
                &name,
                StratumHeight::default(),
                &no_memory,
                self.space.reply_wait,
            );
            let outcome = match self.count_one(&space, &mut meter).await? {
                Ok(Some(counted)) => self.apply_count(&space, counted).await?,
                Ok(None) => continue,
                Err(problem) => Err(problem),
            };
            out.push(LeafRecount { name, outcome });
        }
        meter.finish();
        Ok(out)
    }

    /// Counts one namespace's leaves in one read snapshot: `None` when it
    /// no longer exists or is counted already.
    async fn count_one(
        &self,
        space: &NamespaceState,
        meter: &mut ms_smt::Meter,
    ) -> Res<Result<Option<Counted>, RecountProblem>> {
        let ex = self.space.exchange();
        let mut conn = TxConnection::acquire(&self.source.pool).await?;
        let mut tx = C::exchange(ex, conn.conn().begin()).await?;
        if let Some(sql) = C::SNAPSHOT {
            tx.execute(ex, sql.into_sql_str(), &[]).await?;
        }
        let row: Option<CountRow> = fetch_optional(
            &mut *tx,
            ex,
            "SELECT id, CAST(height AS BIGINT), root_hash, root_sum, leaves, leaves_since \
                 FROM ms_smt_namespaces WHERE name = $1"
                .into_sql_str(),
            &[Arg::Text(&space.name)],
        )
        .await?;
        let Some((id, height, hash, sum, changes, Some(since))) = row else {
            C::exchange(ex, tx.commit()).await?;
            conn.release();
            return Ok(Ok(None));
        };
        let height = u8::try_from(height)
            .ok()
            .and_then(StratumHeight::new)
            .ok_or(SqlStoreError::StratumHeight(height))?;
        let root = decode_root(&space.name, hash.zip(sum))?;
        let info = NsInfo { id, height };
        let mut leaves = 0u64;
        let mut total = 0u64;
        let mut after: (Vec<u8>, i64) = (Vec::new(), -1);
        loop {
            let rows = rows_after_on(
                &mut *tx,
                space,
                info,
                ReadAt::Current,
                (&after.0, after.1),
                &PAST_EVERY_PATH,
                SCAN_PAGE,
            )
            .await?;
            let full = rows.len() >= SCAN_PAGE;
            meter.add(rows.len() as u64);
            for (key, body) in &rows {
                let row = match Row::decode(key.depth, height, body) {
                    Ok(row) => row,
                    Err(e) => {
                        C::exchange(ex, tx.commit()).await?;
                        conn.release();
                        return Ok(Err(RecountProblem::Row(e)));
                    }
                };
                for slot in row.slots.iter().flatten() {
                    if let Slot::Compacted { leaf, .. } | Slot::Leaf { leaf, .. } = slot {
                        leaves += 1;
                        total = total.wrapping_add(leaf.sum());
                    }
                }
            }
            match rows.last().filter(|_| full) {
                Some((key, _)) => {
                    after = (
                        key.path.to_vec(),
                        i64::try_from(key.depth).unwrap_or(i64::MAX),
                    )
                }
                None => break,
            }
        }
        C::exchange(ex, tx.commit()).await?;
        conn.release();
        if total != root.sum {
            return Ok(Err(RecountProblem::Sum {
                root: root.sum,
                leaves: total,
            }));
        }
        Ok(Ok(Some(Counted {
            id,
            since,
            changes,
            leaves,
        })))
    }

    /// Writes a count taken at a snapshot: the leaves then, plus what the
    /// commits since then changed (the kept count of changes now, less the
    /// one the snapshot saw), unless the tree was replaced meanwhile (its
    /// counting restarted at another version, or it became exact).
    async fn apply_count(
        &self,
        space: &NamespaceState,
        counted: Counted,
    ) -> Res<Result<u64, RecountProblem>> {
        let ex = self.space.exchange();
        let mut conn = TxConnection::acquire(&self.source.pool).await?;
        let mut tx = begin_write_by(conn.conn(), ex).await?;
        tx.lock_namespace(space).await?;
        let base = i64::try_from(counted.leaves)
            .unwrap_or(i64::MAX)
            .saturating_sub(counted.changes);
        let now: Option<(i64,)> = fetch_optional(
            &mut *tx,
            ex,
            "UPDATE ms_smt_namespaces SET leaves = leaves + $1, leaves_since = NULL \
             WHERE id = $2 AND leaves_since = $3 RETURNING leaves"
                .into_sql_str(),
            &[
                Arg::Int(base),
                Arg::Int(counted.id),
                Arg::Int(counted.since),
            ],
        )
        .await?;
        C::exchange(ex, tx.commit()).await?;
        conn.release();
        Ok(match now {
            Some((n,)) => Ok(u64::try_from(n).unwrap_or(0)),
            None => Err(RecountProblem::Replaced),
        })
    }
}

/// A namespace row as a count reads it: id, stratum height, root hash and
/// sum, the kept count of changes, and the version its counting started at
/// (`leaves_since`, `None` once exact).
type CountRow = (i64, i64, Option<Vec<u8>>, Option<i64>, i64, Option<i64>);

/// A count taken in one snapshot: the namespace's id, the version its
/// counting started at and its kept count of changes then, and its leaves
/// then.
struct Counted {
    id: i64,
    since: i64,
    changes: i64,
    leaves: u64,
}

/// A listed row, checked.
fn listed(row: ListingRow) -> NamespaceListing {
    let name = row.head.name.clone();
    NamespaceListing {
        summary: summary(row),
        name,
    }
}

fn summary(row: ListingRow) -> Result<NamespaceSummary, NamespaceDamage> {
    let ListingRow {
        head:
            NamespaceHead {
                name,
                height,
                root_hash: hash,
                root_sum: sum,
                version,
                ..
            },
        pins,
        leaves,
        leaves_since: since,
        root_row,
    } = row;
    let stratum_height = u8::try_from(height)
        .ok()
        .and_then(StratumHeight::new)
        .ok_or(NamespaceDamage::StratumHeight(height))?;
    let root = decode_root(&name, hash.zip(sum)).map_err(|e| match e {
        SqlStoreError::CorruptRoot { len, .. } => NamespaceDamage::RootColumn { len },
        _ => NamespaceDamage::RootColumn { len: 0 },
    })?;
    let version = version_from_sql(version).map_err(|_| NamespaceDamage::Version(version))?;
    let leaves = match since {
        Some(since) => LeafCount::Uncounted {
            since_version: u64::try_from(since).unwrap_or(0),
        },
        None => {
            LeafCount::Exact(u64::try_from(leaves).map_err(|_| NamespaceDamage::LeafCount(leaves))?)
        }
    };
    check_root_row(&root, stratum_height, root_row.as_deref())?;
    Ok(NamespaceSummary {
        root,
        version,
        stratum_height,
        pins: u64::try_from(pins).unwrap_or(0),
        leaves,
    })
}

/// The root row (depth 0) must exist exactly when the tree is not empty,
/// and hash to its root.
fn check_root_row(
    root: &ComputedNode,
    height: StratumHeight,
    body: Option<&[u8]>,
) -> Result<(), NamespaceDamage> {
    let empty = *root == ComputedNode::empty_root();
    let body = match (body, empty) {
        (None, true) => return Ok(()),
        (Some(_), true) => return Err(NamespaceDamage::StrayRootRow),
        (None, false) => return Err(NamespaceDamage::MissingRootRow),
        (Some(body), false) => body,
    };
    let (found, _) = Row::decode(0, height, body)
        .and_then(|mut row| row.nodes())
        .map_err(NamespaceDamage::RootRow)?;
    if found != *root {
        return Err(NamespaceDamage::RootMismatch {
            stored: root.hash,
            stored_sum: root.sum,
            found: found.hash,
            found_sum: found.sum,
        });
    }
    Ok(())
}

/// The names of every namespace of the database on `conn`, sorted (a
/// caller's-transaction forest's: the default reply ex).
pub(crate) async fn names_on<C: Dialect>(conn: &mut C) -> Res<Vec<String>> {
    let rows: Vec<(String,)> = conn
        .fetch_all(
            ReplyWait::Default.into(),
            "SELECT name FROM ms_smt_namespaces ORDER BY name".into_sql_str(),
            &[],
        )
        .await?;
    Ok(rows.into_iter().map(|(name,)| name).collect())
}
