//! PostgreSQL store on sqlx: many namespaces per database, position-keyed
//! strata rows ([`crate::strata`]), a constant number of statements per
//! commit.
//!
//! * Tables: `ms_smt_namespaces` (an integer id per namespace name, its
//!   stratum height and current root) and `ms_smt_strata` (one row per
//!   stratum, primary key `(ns, path, depth)`).
//! * Reads: one statement for a whole batch: a bounded recursive query
//!   (at most `256 / height` steps per key) walks each key's rows from
//!   where the handle's remembered nodes ([`RecentNodes`](crate::store::RecentNodes)) end and returns
//!   each row once, with the sibling rows at its boundaries. Every row read
//!   is a fenced primary-key probe (`LATERAL ... OFFSET 0`), so plans do not
//!   depend on statistics.
//! * Writes: one transaction per commit: a per-namespace advisory lock, the
//!   root check, one read of the rows the batch touches, the merge in
//!   process, then ONE statement that upserts the changed rows, deletes the
//!   rows left empty and sets the root (so a cancelled commit is all or
//!   nothing even without a transaction of its own).
//! * Inside a caller's transaction ([`PostgresStore::in_transaction`](super::SqlStore::in_transaction)) the
//!   same statements run directly in it, with no savepoint (sqlx's
//!   savepoints are not safe to cancel; see `write_commits`); the advisory
//!   lock is held until the caller's transaction ends.
//! * The schema is versioned ([`PostgresStore::migrate`](super::SqlStore::migrate)): a database written
//!   by an earlier schema of this release line is upgraded when opened, and
//!   one whose applied migrations differ from this crate's is refused
//!   (checked migrations: `schema.rs`).

mod dialect;
mod replica;
mod snapshot;

pub use replica::{DEFAULT_STANDBY_WAIT, OnLag, ReplicaSet};
pub use snapshot::{ReadSnapshot, ServedBy};

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};

use crate::dialect::Dialect;
use crate::error::Res;
use crate::handle::{SqlHandle, SqlStore, SqlTxStore};
use crate::reply_wait::ReplyWait;
use crate::space::NamespaceState;
use crate::store::RecentNodes;

/// A tree store in a PostgreSQL database, bound to one namespace.
pub type PostgresStore = SqlStore<PgConnection>;

/// A [`PostgresStore`] namespace bound to a caller's open transaction; see
/// [`in_transaction`](PostgresStore::in_transaction).
pub type PostgresTxStore<'c> = SqlTxStore<'c, PgConnection>;

/// The settings of the sessions of a pool this crate makes.
///
/// * `jit = off`: see [`PostgresStore::connect`].
/// * `plan_cache_mode = force_generic_plan`: every statement is prepared
///   once (sqlx caches it per connection), and its plan shape is fixed by
///   the statement itself (primary-key probes fenced with `OFFSET 0`, rows
///   from `UNNEST` of the parameters), yet with the default mode the
///   server plans the path walk again on every call: a plan for the
///   arrays it was given looks cheaper than the generic one. At 10^5
///   leaves, 16 `QueryProof` clients over TLS went from 1,529 to 2,989
///   proofs/s on this machine (the server's CPU had gone to the planner:
///   `expression_tree_walker`, `copyObjectImpl`), and 1,000 one-leaf
///   submitters through the writer from 8,298-8,457 to 8,454-8,523
///   leaves/s (BENCHMARKS.md).
/// * `enable_seqscan = off`: a kept plan is as good as the statistics it
///   was made from. A table vacuumed empty is recorded as 0 pages and 0
///   tuples; a statement first planned then probes it with a sequential
///   scan per row, and keeps doing so as the table grows, until the next
///   ANALYZE: a commit's read of 1,100 rows of a 10^5-leaf tree took
///   14-16 s instead of ~10 ms (`tests/plans.rs` replays it). The crate's
///   statements reach their rows through a key of the table, so this only
///   takes away the plans that an empty table's statistics make look
///   cheap; a statement with no usable index still scans.
pub const SESSION_OPTIONS: [(&str, &str); 3] = [
    ("jit", "off"),
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
];

impl PostgresStore {
    /// Connects to `url` (e.g. `postgres://user@host/db`), runs the
    /// migrations, and binds the namespace `"default"`.
    ///
    /// The pool's sessions run with [`SESSION_OPTIONS`]: `jit = off` (the
    /// recursive path walk's row estimates are guesses that can cross
    /// `jit_above_cost`, and compiling the plan then costs ~200 ms for a
    /// ~20 ms query; on a host's pool, [`from_pool`](Self::from_pool), large
    /// walks turn JIT off for themselves only, at three extra round trips)
    /// `plan_cache_mode = force_generic_plan` (PostgreSQL 12 or later) and
    /// `enable_seqscan = off`.
    ///
    /// A pooled connection that sat idle for [`STALE_CHECK_AFTER`] or more
    /// is checked (one `ping` round trip, under the reply wait) before a
    /// call gets it, and replaced when it is dead: after a restart of the
    /// server (or a failover behind a proxy) no call fails on a connection
    /// the pool held across it. Connections in steady use are not checked,
    /// so a loaded store pays no extra round trip.
    ///
    /// A connection gives its buffers back when it returns to the pool
    /// (`shrink_buffers`): they grow to the largest message it carried (a
    /// batch of 50,000 leaves), and without this each pooled connection
    /// kept that size until sqlx replaced it (30 minutes; BENCHMARKS.md,
    /// "What the RSS holds"). On a host's pool this is the host's choice.
    pub async fn connect(url: &str) -> Res<Self> {
        let options: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .test_before_acquire(false)
            .before_acquire(|conn, meta| Box::pin(check_idle(conn, meta)))
            .after_release(|conn, _meta| {
                conn.shrink_buffers();
                Box::pin(std::future::ready(Ok(true)))
            })
            .max_connections(16)
            .connect_with(options.options(SESSION_OPTIONS))
            .await?;
        Self::opened(pool, true).await
    }

    /// This handle bounding each of its round trips (every statement,
    /// `BEGIN`, `COMMIT` and `ROLLBACK`) by `wait` for the server's reply
    /// (`None`: without bound, as sqlx); past it the round trip fails with
    /// [`SqlStoreError::NoReply`](super::SqlStoreError::NoReply) and the
    /// connection is closed (a server that stops answering without closing
    /// its connections would leave a statement waiting forever). Without it
    /// a handle waits [`DEFAULT_POSTGRES_REPLY_WAIT`].
    ///
    /// Like the other builders it makes a handle of its own (its own
    /// counters and remembered nodes); its clones, the handles made from it
    /// with [`open_namespace`](Self::open_namespace), its transactions'
    /// stores ([`in_transaction`](Self::in_transaction)) and its
    /// standbys ([`with_standbys`](Self::with_standbys)) share the wait.
    /// [`connect`](Self::connect) migrates with the default; a handle on
    /// [`from_pool`](Self::from_pool) given a wait first migrates with it.
    ///
    /// [`DEFAULT_POSTGRES_REPLY_WAIT`]: crate::DEFAULT_POSTGRES_REPLY_WAIT
    pub fn with_reply_wait(self, wait: Option<Duration>) -> Self {
        let space = NamespaceState::waiting(
            &self.space.name,
            self.space.height,
            &RecentNodes::new(self.space.recent.capacity()),
            ReplyWait::Own(wait),
        );
        SqlHandle::on(self.source, space)
    }

    /// How long this handle's round trips wait for the server's reply now
    /// (its own [`with_reply_wait`](Self::with_reply_wait), else
    /// [`DEFAULT_POSTGRES_REPLY_WAIT`](crate::DEFAULT_POSTGRES_REPLY_WAIT)).
    pub fn reply_wait(&self) -> Option<Duration> {
        self.space.reply_wait.get()
    }
}

/// How long a pooled connection of [`PostgresStore::connect`] may sit idle
/// before it is checked when next handed out (1 s).
///
/// A restart of the server (a fast shutdown and a start, or a failover to
/// a new primary) takes longer than that, so every connection the pool
/// held across one is checked; one used within the last second is not.
pub const STALE_CHECK_AFTER: Duration = Duration::from_secs(1);

/// The pool's check of an idle connection: `Ok(false)` (the pool closes it
/// and hands out another, or a new one) when it does not answer a ping.
async fn check_idle(
    conn: &mut PgConnection,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> Result<bool, sqlx::Error> {
    if meta.idle_for < STALE_CHECK_AFTER {
        return Ok(true);
    }
    Ok(
        PgConnection::exchange(ReplyWait::Default.into(), conn.ping())
            .await
            .is_ok(),
    )
}
