//! Pieces both SQL stores share: the error type, sum bit-casting, row
//! decoding and the folding of a batch into per-row changes.

use std::sync::{Arc, OnceLock};

use super::strata::StratumHeight;
use super::{Counters, RecentNodes};
use crate::hash::Hash;
use crate::key::Key;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};

/// Errors of the SQLite and Postgres stores.
#[derive(Debug, thiserror::Error)]
pub enum SqlStoreError {
    /// The database driver failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A stored row does not decode into a node (wrong blob lengths, or a
    /// branch with one child missing).
    #[error("node row {hash} in namespace {namespace:?} is malformed: {what}")]
    CorruptRow {
        /// Namespace of the row.
        namespace: String,
        /// Hash column, hex (it may itself be the malformed part).
        hash: String,
        /// What is wrong.
        what: &'static str,
    },
    /// A strata row of the namespace does not decode, or a batch does not
    /// fit the stored rows (a delete of a node that is not stored where
    /// the batch says); nothing was written.
    #[error("namespace {namespace:?}: {source}")]
    Rows {
        /// Namespace.
        namespace: String,
        /// What is wrong.
        #[source]
        source: super::strata::StrataError,
    },
    /// A namespace stored in the hash-keyed schema of earlier versions
    /// could not be moved to the strata layout; its old rows are kept
    /// and nothing of it was written in the new tables.
    #[error("namespace {namespace:?} cannot be migrated: {source}")]
    Migration {
        /// Namespace.
        namespace: String,
        /// Why.
        #[source]
        source: MigrationError,
    },
    /// The store files nodes by position; nodes cannot be read by hash
    /// alone ([`TreeStore::reads_by_position`](super::TreeStore::reads_by_position)).
    #[error("this store reads nodes by position, not by hash")]
    NotByHash,
    /// The stratum height asked for is outside 1..=6.
    #[error("stratum height {0} is outside 1..=6")]
    StratumHeight(i64),
    /// The schema in the database is newer than this crate knows.
    #[error("database schema version {found} is newer than the {supported} this crate supports")]
    SchemaTooNew {
        /// Version found.
        found: i64,
        /// Highest version known.
        supported: i64,
    },
}

/// Why a namespace of the hash-keyed schema could not be migrated.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The old tree is incomplete or malformed (a node missing from the
    /// old table, a node kind that cannot sit where it was found).
    #[error("old tree: {0}")]
    OldTree(#[from] crate::error::PlanError),
    /// The rebuilt tree does not match the old root (or its rows do not fit).
    #[error(transparent)]
    Rebuild(#[from] super::migrate::RebuildError),
    /// The name is already taken in the new tables.
    #[error("the namespace already exists in the strata tables")]
    AlreadyMigrated,
}

/// A namespace's id and stratum height, fixed once it exists.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NsInfo {
    pub id: i64,
    pub height: StratumHeight,
}

/// What every handle on one namespace carries: its name, the height it
/// creates the namespace with, the id once known, counters and memory.
#[derive(Debug)]
pub(crate) struct Space {
    pub name: Arc<str>,
    pub height: StratumHeight,
    pub info: OnceLock<NsInfo>,
    pub counters: Counters,
    pub recent: RecentNodes,
}

impl Space {
    pub fn new(name: &str, height: StratumHeight, recent: usize) -> Arc<Space> {
        Arc::new(Space {
            name: Arc::from(name),
            height,
            info: OnceLock::new(),
            counters: Counters::default(),
            recent: RecentNodes::new(recent),
        })
    }

    pub fn rows_error(&self, source: super::strata::StrataError) -> SqlStoreError {
        SqlStoreError::Rows {
            namespace: self.name.to_string(),
            source,
        }
    }
}

/// The paths a walk from each start reads, as query parameters: per start,
/// the depth of the row holding its level, and two blobs of 32-byte slots,
/// slot `j` the (zero-padded) path of the row at depth `j * height` on the
/// start's key and of that row's sibling. A query cuts the real
/// `(depth + 7) / 8` bytes out of a slot.
pub(crate) struct PathParams {
    /// Start depths.
    pub depths: Vec<usize>,
    /// Per start, the on-path row paths.
    pub paths: Vec<Vec<u8>>,
    /// Per start, the sibling row paths (slot 0 unused).
    pub sibs: Vec<Vec<u8>>,
}

impl PathParams {
    /// Bytes of one start's path blob for `height`.
    pub fn width(height: StratumHeight) -> usize {
        (crate::key::MAX_LEVEL / height.get() + 1) * 32
    }

    pub fn new(height: StratumHeight, starts: &[super::PathStart]) -> PathParams {
        use crate::key::MAX_LEVEL;
        let mut out = PathParams {
            depths: Vec::with_capacity(starts.len()),
            paths: Vec::with_capacity(starts.len()),
            sibs: Vec::with_capacity(starts.len()),
        };
        for start in starts {
            out.depths
                .push(height.row_depth(start.level.min(MAX_LEVEL)));
            let mut paths = Vec::with_capacity(Self::width(height));
            let mut sibs = Vec::with_capacity(Self::width(height));
            for d in (0..=MAX_LEVEL).step_by(height.get()) {
                let mut slot = [0u8; 32];
                let p = super::strata::path_bytes(&start.key, d);
                slot[..p.len()].copy_from_slice(&p);
                paths.extend_from_slice(&slot);
                let mut slot = [0u8; 32];
                if d > 0 {
                    let other = start.key.with_bit(d - 1, !start.key.bit(d - 1));
                    let p = super::strata::path_bytes(&other, d);
                    slot[..p.len()].copy_from_slice(&p);
                }
                sibs.extend_from_slice(&slot);
            }
            out.paths.push(paths);
            out.sibs.push(sibs);
        }
        out
    }
}

/// Decodes rows read by a path walk into the nodes they hold.
pub(crate) fn path_nodes<'r>(
    space: &Space,
    height: StratumHeight,
    rows: impl IntoIterator<Item = (i64, &'r [u8])>,
) -> Result<Vec<(Hash, Node)>, SqlStoreError> {
    let mut out = Vec::new();
    for (depth, body) in rows {
        let depth = usize::try_from(depth).unwrap_or(usize::MAX);
        let (_, nodes) = super::strata::Row::decode(depth, height, body)
            .and_then(|r| r.nodes())
            .map_err(|e| space.rows_error(e))?;
        space.counters.read(nodes.len() as u64);
        out.extend(nodes);
    }
    Ok(out)
}

/// Merges `batch` into the `stored` rows it touches (read inside the
/// commit's transaction) and returns the row changes to write.
pub(crate) fn merge(
    space: &Space,
    height: StratumHeight,
    batch: &super::UpdateBatch,
    stored: Vec<(super::strata::RowKey, Vec<u8>)>,
) -> Result<Vec<super::strata::RowChange>, SqlStoreError> {
    let rows = stored
        .into_iter()
        .map(|(key, body)| {
            super::strata::Row::decode(key.depth, height, &body)
                .map(|row| (key, row))
                .map_err(|e| space.rows_error(e))
        })
        .collect::<Result<_, _>>()?;
    super::strata::apply(batch, height, rows).map_err(|e| space.rows_error(e))
}

/// A u64 sum as the i64 with the same bits (SQL has only signed 64-bit
/// integers). Sums are never compared or added in SQL.
pub(crate) fn sum_to_sql(sum: u64) -> i64 {
    i64::from_ne_bytes(sum.to_ne_bytes())
}

/// The inverse of [`sum_to_sql`].
pub(crate) fn sum_from_sql(sum: i64) -> u64 {
    u64::from_ne_bytes(sum.to_ne_bytes())
}

fn bytes32(
    namespace: &str,
    hash: &[u8],
    blob: &[u8],
    what: &'static str,
) -> Result<[u8; 32], SqlStoreError> {
    blob.try_into().map_err(|_| SqlStoreError::CorruptRow {
        namespace: namespace.to_owned(),
        hash: hex::encode(hash),
        what,
    })
}

/// Decodes fetched node rows (columns in SELECT order: hash, l_hash,
/// r_hash, leaf_key, value, sum), reading the blobs in place from the
/// driver's row buffers instead of copying each column into its own
/// `Vec` first.
pub(crate) fn decode_rows<R>(ns: &str, rows: &[R]) -> Result<Vec<(Hash, Node)>, SqlStoreError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> &'r [u8]: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    rows.iter()
        .map(|row| {
            NodeRow {
                hash: row.try_get(0)?,
                l_hash: row.try_get(1)?,
                r_hash: row.try_get(2)?,
                leaf_key: row.try_get(3)?,
                value: row.try_get(4)?,
                sum: row.try_get(5)?,
            }
            .decode(ns)
        })
        .collect()
}

/// One node row as read from SQL, borrowing the driver's buffers.
struct NodeRow<'r> {
    hash: &'r [u8],
    l_hash: Option<&'r [u8]>,
    r_hash: Option<&'r [u8]>,
    leaf_key: Option<&'r [u8]>,
    value: Option<&'r [u8]>,
    sum: i64,
}

impl NodeRow<'_> {
    /// Decodes the row: both child hashes make a branch, a key makes a
    /// compacted leaf, neither makes a plain leaf.
    fn decode(self, namespace: &str) -> Result<(Hash, Node), SqlStoreError> {
        let hash = Hash(bytes32(
            namespace,
            self.hash,
            self.hash,
            "hash is not 32 bytes",
        )?);
        let sum = sum_from_sql(self.sum);
        let value = || self.value.unwrap_or_default().to_vec();
        let node = match (self.l_hash, self.r_hash, self.leaf_key) {
            (Some(l), Some(r), None) => Node::Branch {
                left: Hash(bytes32(
                    namespace,
                    self.hash,
                    l,
                    "left hash is not 32 bytes",
                )?),
                right: Hash(bytes32(
                    namespace,
                    self.hash,
                    r,
                    "right hash is not 32 bytes",
                )?),
                sum,
            },
            (None, None, Some(key)) => Node::Compacted {
                key: Key(bytes32(namespace, self.hash, key, "key is not 32 bytes")?),
                leaf: Leaf::new(value(), sum),
            },
            (None, None, None) => Node::Leaf(Leaf::new(value(), sum)),
            _ => {
                return Err(SqlStoreError::CorruptRow {
                    namespace: namespace.to_owned(),
                    hash: hex::encode(self.hash),
                    what: "row mixes branch and leaf columns",
                });
            }
        };
        Ok((hash, node))
    }
}

/// Decodes a root row.
pub(crate) fn decode_root(
    namespace: &str,
    row: Option<(Vec<u8>, i64)>,
) -> Result<ComputedNode, SqlStoreError> {
    match row {
        None => Ok(ComputedNode::empty_root()),
        Some((hash, sum)) => Ok(ComputedNode::new(
            Hash(bytes32(
                namespace,
                &hash,
                &hash,
                "root hash is not 32 bytes",
            )?),
            sum_from_sql(sum),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_round_trip_through_i64() {
        for s in [0, 1, (1u64 << 63) + 7, u64::MAX] {
            assert_eq!(sum_from_sql(sum_to_sql(s)), s);
        }
        assert_eq!(sum_to_sql((1u64 << 63) + 7), -9223372036854775801);
    }
}
