//! Connections to a tapd database: read-only for import and audit
//! ([`TapdSource`]), writable for export ([`TapdTarget`]), and the
//! per-namespace snapshot a walk reads from.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{
    AssertSqlSafe, Connection, PgPool, Postgres, Sqlite, SqliteConnection, SqlitePool, Transaction,
};

use crate::error::TapdError;
use crate::hash::Hash;
use crate::shape::TapdRow;
use ms_smt_sql::Shared;

/// Hashes per `IN (…)` query on SQLite (well under its variable limit).
const SQLITE_CHUNK: usize = 500;

/// Hashes per `= ANY($2)` query on Postgres.
const PG_CHUNK: usize = 2048;

/// The SQLite row fetch, with [`SQLITE_CHUNK`] hash marks.
static SQLITE_FETCH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT hash_key, l_hash_key, r_hash_key, key, value, sum FROM mssmt_nodes \
         WHERE namespace = ? AND hash_key IN ({})",
        vec!["?"; SQLITE_CHUNK].join(",")
    )
});

/// The read-only SQLite source's page cache, in KiB (a bound on what the
/// walk holds of the file).
const SOURCE_CACHE_KIB: u32 = 64 * 1024;

/// The page cache of a SQLite export target, in KiB.
const TARGET_CACHE_KIB: u32 = 256 * 1024;

/// How much of a read-only SQLite source is read through a memory map
/// (measured at 5 × 10^5 leaves: the walk takes 40 % less time than with
/// read calls).
const SOURCE_MMAP_BYTES: u64 = 1 << 30;

/// A tapd database, by engine.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Pool {
    /// Connects to `src`: a `postgres://` (or `postgresql://`) URL, else a
    /// SQLite path. `writable` opens SQLite read-write (creating the file
    /// when `create`), otherwise read-only, which works while tapd holds
    /// the file open and never creates or writes it.
    async fn connect(src: &str, writable: bool, create: bool) -> Result<Pool, TapdError> {
        if src.starts_with("postgres://") || src.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(src)?;
            let pool = PgPoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await?;
            return Ok(Pool::Postgres(pool));
        }
        let path = Path::new(src);
        if !path.exists() && !create {
            return Err(TapdError::NoSuchFile(path.to_path_buf()));
        }
        let mut options = SqliteConnectOptions::new()
            .filename(path)
            .read_only(!writable)
            .create_if_missing(writable && create);
        if !writable {
            // The walk probes rows by hash, all over the file: a page
            // cache of SOURCE_CACHE_KIB keeps the B-trees' upper levels in
            // process, and the file is read through a read-only map of up
            // to SOURCE_MMAP_BYTES instead of a read call per page (those
            // pages are the kernel's file cache, which it reclaims as it
            // needs; nothing of the file is copied to the heap).
            options = options
                .pragma("cache_size", format!("-{SOURCE_CACHE_KIB}"))
                .pragma("mmap_size", SOURCE_MMAP_BYTES.to_string())
                // A chunk's rows cross from sqlx's worker thread in one go
                // instead of waking this task for every few rows.
                .row_buffer_size(SQLITE_CHUNK);
        } else {
            // An export inserts into tapd's four indexes at hash-random
            // places: a cache that holds them spares each insert re-reading
            // its pages from the file.
            options = options.pragma("cache_size", format!("-{TARGET_CACHE_KIB}"));
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        Ok(Pool::Sqlite(pool))
    }

    /// Whether both tapd tables exist.
    pub(crate) async fn has_schema(&self) -> Result<bool, TapdError> {
        let n: i64 = match self {
            Pool::Sqlite(p) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' \
                     AND name IN ('mssmt_nodes', 'mssmt_roots')",
                )
                .fetch_one(p)
                .await?
            }
            Pool::Postgres(p) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = \
                     current_schema() AND table_name IN ('mssmt_nodes', 'mssmt_roots')",
                )
                .fetch_one(p)
                .await?
            }
        };
        Ok(n == 2)
    }
}

/// A tapd database opened to read its trees, never to write them.
#[derive(Debug, Clone)]
pub struct TapdSource {
    pool: Pool,
}

impl TapdSource {
    /// Opens `src` read-only: a SQLite path (`mode=ro`; never created or
    /// written) or a `postgres://` URL. Fails with
    /// [`TapdError::NotTapd`] when the tapd tables are missing.
    pub async fn open(src: &str) -> Result<Self, TapdError> {
        let pool = Pool::connect(src, false, false).await?;
        if !pool.has_schema().await? {
            return Err(TapdError::NotTapd);
        }
        Ok(TapdSource { pool })
    }

    /// Every namespace: those with a root row, and those that only have
    /// node rows (an emptied tree's leftovers, or a damaged one), sorted.
    pub async fn namespaces(&self) -> Result<Vec<String>, TapdError> {
        let sql = "SELECT namespace FROM mssmt_roots UNION \
                   SELECT DISTINCT namespace FROM mssmt_nodes ORDER BY 1";
        Ok(match &self.pool {
            Pool::Sqlite(p) => sqlx::query_scalar(sql).fetch_all(p).await?,
            Pool::Postgres(p) => sqlx::query_scalar(sql).fetch_all(p).await?,
        })
    }

    /// A consistent read of one namespace: a read-only, repeatable-read
    /// transaction on Postgres, a read transaction on SQLite.
    pub(crate) async fn snapshot(&self, namespace: &str) -> Result<Snapshot, TapdError> {
        let tx = match &self.pool {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin().await?, p.connect_options()),
            Pool::Postgres(p) => {
                let mut tx = p.begin().await?;
                sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    .execute(&mut *tx)
                    .await?;
                Tx::Postgres(tx)
            }
        };
        Ok(Snapshot {
            tx,
            namespace: namespace.to_owned(),
        })
    }
}

/// A tapd database opened to write trees into (see
/// [`export_namespace`](crate::export_namespace)).
#[derive(Debug, Clone)]
pub struct TapdTarget {
    pub(crate) pool: Pool,
}

impl TapdTarget {
    /// Opens `dst` for writing: a SQLite path (created when `create` and
    /// missing) or a `postgres://` URL.
    pub async fn open(dst: &str, create: bool) -> Result<Self, TapdError> {
        Ok(TapdTarget {
            pool: Pool::connect(dst, true, create).await?,
        })
    }
}

enum Tx {
    /// The snapshot's transaction, and how to open side readers (see
    /// [`Snapshot::side_readers`]).
    Sqlite(Transaction<'static, Sqlite>, Arc<SqliteConnectOptions>),
    Postgres(Transaction<'static, Postgres>),
}

/// A row as selected: hash_key, l_hash_key, r_hash_key, key, value, sum.
type RawRow = (
    Vec<u8>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
);

/// One namespace read inside one transaction.
pub(crate) struct Snapshot {
    tx: Tx,
    namespace: String,
}

impl Snapshot {
    /// The namespace read.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The root hash `mssmt_roots` holds, if any. A value that is not 32
    /// bytes is reported as a root pointing nowhere by the walk (as the
    /// zero hash).
    pub(crate) async fn root(&mut self) -> Result<Option<Hash>, TapdError> {
        let got: Option<(Vec<u8>,)> = self
            .row("SELECT root_hash FROM mssmt_roots WHERE namespace = $1")
            .await?;
        Ok(got.map(|(b,)| hash_of(&b).unwrap_or(Hash([0; 32]))))
    }

    /// How many node rows the namespace holds.
    pub(crate) async fn count_rows(&mut self) -> Result<u64, TapdError> {
        let n: Option<(i64,)> = self
            .row("SELECT COUNT(*) FROM mssmt_nodes WHERE namespace = $1")
            .await?;
        Ok(n.map_or(0, |(n,)| u64::try_from(n).unwrap_or(0)))
    }

    /// The first row of `sql`, whose one parameter `$1` (a form both
    /// engines take) is the namespace, read in the snapshot.
    async fn row<T: Shared>(&mut self, sql: &'static str) -> Result<Option<T>, TapdError> {
        let namespace = &self.namespace;
        Ok(match &mut self.tx {
            Tx::Sqlite(tx, _) => {
                sqlx::query_as(sql)
                    .bind(namespace)
                    .fetch_optional(&mut **tx)
                    .await?
            }
            Tx::Postgres(tx) => {
                sqlx::query_as(sql)
                    .bind(namespace)
                    .fetch_optional(&mut **tx)
                    .await?
            }
        })
    }

    /// `count` connections of their own that read the namespace beside
    /// the snapshot, so several chunks are read at once (SQLite only: a
    /// Postgres snapshot has none). Each query of a side reader reads the
    /// newest state: a running tapd may have written since the snapshot
    /// began. Rows are content-addressed, so a row a side reader finds is
    /// the row the snapshot holds under that hash, and a hash it misses is
    /// asked of the snapshot itself; but a row the snapshot lacks may be
    /// found there. So only imports use them (their rebuilt root proves
    /// every leaf); audits, which must report exactly what the snapshot
    /// holds, do not.
    pub(crate) async fn side_readers(&self, count: usize) -> Result<Vec<SideReader>, TapdError> {
        let Tx::Sqlite(_, options) = &self.tx else {
            return Ok(Vec::new());
        };
        let namespace: Arc<str> = Arc::from(self.namespace.as_str());
        let mut readers = Vec::with_capacity(count);
        for _ in 0..count {
            readers.push(SideReader {
                conn: SqliteConnection::connect_with(options).await?,
                namespace: namespace.clone(),
            });
        }
        Ok(readers)
    }

    /// Hashes per [`fetch`](Self::fetch) query, and per side reader's.
    pub(crate) fn chunk(&self) -> usize {
        match &self.tx {
            Tx::Sqlite(..) => SQLITE_CHUNK,
            Tx::Postgres(_) => PG_CHUNK,
        }
    }

    /// The rows with these hash keys (those that exist), one query per
    /// [`chunk`](Self::chunk) of hashes. Rows whose hash key is not 32
    /// bytes are skipped (no parent can point at them).
    pub(crate) async fn fetch(
        &mut self,
        hashes: Vec<Hash>,
    ) -> Result<HashMap<Hash, TapdRow>, TapdError> {
        let mut raw: Vec<RawRow> = Vec::with_capacity(hashes.len());
        match &mut self.tx {
            Tx::Sqlite(tx, _) => raw = sqlite_rows(tx, &self.namespace, &hashes).await?,
            Tx::Postgres(tx) => {
                for chunk in hashes.chunks(PG_CHUNK) {
                    let keys: Vec<Vec<u8>> = chunk.iter().map(|h| h.0.to_vec()).collect();
                    raw.extend(
                        sqlx::query_as::<_, RawRow>(
                            "SELECT hash_key, l_hash_key, r_hash_key, key, value, sum FROM \
                             mssmt_nodes WHERE namespace = $1 AND hash_key = ANY($2)",
                        )
                        .bind(&self.namespace)
                        .bind(keys)
                        .fetch_all(&mut **tx)
                        .await?,
                    );
                }
            }
        }
        Ok(by_hash(raw))
    }
}

/// A read-only SQLite connection that reads a namespace's rows outside the
/// snapshot (see [`Snapshot::side_readers`]). It is moved into the task
/// that reads with it and handed back with the rows.
pub(crate) struct SideReader {
    conn: SqliteConnection,
    namespace: Arc<str>,
}

/// What a side reader found: the rows, and the hashes it did not find
/// (for the snapshot to answer).
pub(crate) type SideRows = (HashMap<Hash, TapdRow>, Vec<Hash>);

impl SideReader {
    /// The rows with these hash keys that this reader finds, and the
    /// hashes it misses; the reader comes back with them.
    pub(crate) async fn fetch(mut self, hashes: Vec<Hash>) -> (Self, Result<SideRows, TapdError>) {
        let got = sqlite_rows(&mut self.conn, &self.namespace, &hashes)
            .await
            .map(|raw| {
                let rows = by_hash(raw);
                let missed = hashes.into_iter().filter(|h| !rows.contains_key(h));
                let missed = missed.collect();
                (rows, missed)
            });
        (self, got)
    }
}

/// Rows by their hash key; rows whose hash key is not 32 bytes are
/// skipped (no parent can point at them).
fn by_hash(raw: Vec<RawRow>) -> HashMap<Hash, TapdRow> {
    raw.into_iter()
        .filter_map(|(h, l, r, key, value, sum)| {
            let hash = hash_of(&h)?;
            Some((
                hash,
                TapdRow {
                    hash,
                    left: l,
                    right: r,
                    key,
                    value,
                    sum: sum as u64,
                },
            ))
        })
        .collect()
}

/// The rows of `namespace` with these hash keys, [`SQLITE_CHUNK`] per
/// query: always that many marks (a short chunk repeats its first hash),
/// so every query reuses one prepared statement. Its text is ours alone
/// (`?` marks).
async fn sqlite_rows(
    conn: &mut SqliteConnection,
    namespace: &str,
    hashes: &[Hash],
) -> Result<Vec<RawRow>, TapdError> {
    let mut raw = Vec::with_capacity(hashes.len());
    for chunk in hashes.chunks(SQLITE_CHUNK) {
        let mut q =
            sqlx::query_as::<_, RawRow>(AssertSqlSafe(SQLITE_FETCH.as_str())).bind(namespace);
        for i in 0..SQLITE_CHUNK {
            q = q.bind(chunk.get(i).unwrap_or(&chunk[0]).0.to_vec());
        }
        raw.extend(q.fetch_all(&mut *conn).await?);
    }
    Ok(raw)
}

/// A 32-byte column as a hash.
pub(crate) fn hash_of(bytes: &[u8]) -> Option<Hash> {
    Some(Hash(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A side reader has no snapshot: rows deleted after the snapshot
    /// began are gone for it, it names them as missed, and the snapshot
    /// itself answers them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn side_reader_misses_fall_back_to_the_snapshot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tapd.db");
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let mut writer = SqliteConnection::connect_with(&options)
            .await
            .expect("create");
        sqlx::raw_sql(
            "CREATE TABLE mssmt_nodes (hash_key BLOB NOT NULL, l_hash_key BLOB, r_hash_key BLOB, \
             key BLOB, value BLOB, sum BIGINT NOT NULL, namespace VARCHAR NOT NULL, \
             PRIMARY KEY (hash_key, namespace));
             CREATE TABLE mssmt_roots (namespace VARCHAR NOT NULL PRIMARY KEY, root_hash BLOB NOT NULL);",
        )
        .execute(&mut writer)
        .await
        .expect("schema");
        let hashes: Vec<Hash> = (0..1_200u32)
            .map(|i| crate::hash::sha256(&i.to_le_bytes()))
            .collect();
        put_rows(&mut writer, &hashes).await;
        let source = TapdSource::open(&path.to_string_lossy())
            .await
            .expect("open");
        let mut snapshot = source.snapshot("ns").await.expect("snapshot");
        assert_eq!(snapshot.count_rows().await.expect("count"), 1_200);
        let mut readers = snapshot.side_readers(2).await.expect("side readers");
        assert_eq!(readers.len(), 2);
        // Half the rows go after the snapshot began.
        sqlx::query("DELETE FROM mssmt_nodes WHERE rowid % 2 = 0")
            .execute(&mut writer)
            .await
            .expect("delete");
        let reader = readers.pop().expect("reader");
        let (_reader, got) = reader.fetch(hashes.clone()).await;
        let (mut rows, missed) = got.expect("side fetch");
        assert_eq!((rows.len(), missed.len()), (600, 600));
        assert!(missed.iter().all(|h| !rows.contains_key(h)));
        rows.extend(snapshot.fetch(missed).await.expect("snapshot fetch"));
        assert_eq!(rows.len(), 1_200);
        assert!(
            hashes
                .iter()
                .all(|h| rows.get(h).is_some_and(|r| r.hash == *h))
        );
        // The snapshot alone still holds every row.
        assert_eq!(snapshot.fetch(hashes).await.expect("fetch").len(), 1_200);
    }

    /// A leaf-like row per hash in namespace `ns` (kept where present).
    async fn put_rows(writer: &mut SqliteConnection, hashes: &[Hash]) {
        for h in hashes {
            sqlx::query("INSERT OR IGNORE INTO mssmt_nodes VALUES (?, NULL, NULL, ?, ?, 1, 'ns')")
                .bind(&h.0[..])
                .bind(&h.0[..])
                .bind(&b"v"[..])
                .execute(&mut *writer)
                .await
                .expect("insert");
        }
    }
}
