//! Reads on Postgres hot standbys with read-your-writes: a primary for
//! writes, standbys for read snapshots, and commit tokens that make a
//! standby read wait (bounded) for a write.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres};

use super::PostgresStore;
use super::snapshot::{ReadSnapshot, ServedBy};
use crate::commit_token::CommitToken;
use crate::dialect::Dialect;
use crate::error::{Res, SqlStoreError};
use crate::tx::TxConnection;

/// How long a read given a token waits for a standby by default.
pub const DEFAULT_STANDBY_WAIT: Duration = Duration::from_secs(2);

/// How long a read waits for a connection to a standby before passing it
/// over (sqlx's pools otherwise retry a refused connection for 30 s).
const STANDBY_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest pause between two polls of a standby's replay position.
const MAX_POLL_PAUSE: Duration = Duration::from_millis(20);

/// The insert position of the primary's WAL, with the server's WAL page and
/// segment sizes (see [`ReplicaSet::commit_token`]).
const INSERT_LSN: &str = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8, \
     current_setting('wal_block_size')::int8, \
     (SELECT setting::int8 FROM pg_settings WHERE name = 'wal_segment_size')";

/// The header that opens every WAL page but a segment's first
/// (`SizeOfXLogShortPHD` on 64-bit builds).
const PAGE_HEADER: u64 = 24;

/// The header that opens a WAL segment's first page (`SizeOfXLogLongPHD`).
const SEGMENT_HEADER: u64 = 40;

/// Whether a server is a standby, and how far it has replayed.
const REPLAY_LSN: &str =
    "SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8";

/// What a read given a token does when its standby has not replayed the
/// token within the wait bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLag {
    /// Read on the primary, which holds every committed write (the
    /// default). Also where reads go when no standby answers at all.
    #[default]
    Primary,
    /// Fail with [`SqlStoreError::StandbyBehind`] (or, when no standby
    /// answers, with the last standby's error).
    Error,
}

/// A Postgres primary and its streaming hot standbys, for one namespace:
/// writes go to [`primary`](Self::primary); [`read`](Self::read) opens a
/// [`ReadSnapshot`] on a standby (round robin), at a root that holds
/// every write whose [`commit_token`](Self::commit_token) it is given.
///
/// Cloning is cheap and shares the pools and the round robin.
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    primary: PostgresStore,
    standbys: Vec<PostgresStore>,
    next: Arc<AtomicUsize>,
    wait: Duration,
    on_lag: OnLag,
}

impl PostgresStore {
    /// This store (the primary) with hot standbys of its database on
    /// `pools`, for the same namespace and settings.
    pub fn with_standbys(self, pools: Vec<PgPool>) -> ReplicaSet {
        let standbys = pools
            .into_iter()
            .map(|pool| self.on_pool(pool, false))
            .collect();
        ReplicaSet {
            primary: self,
            standbys,
            next: Arc::default(),
            wait: DEFAULT_STANDBY_WAIT,
            on_lag: OnLag::default(),
        }
    }
}

impl ReplicaSet {
    /// Connects to the primary at `primary` (running the migrations there)
    /// and to the standbys at `standbys`, with the pool settings of
    /// [`PostgresStore::connect`] (a standby's pool gives up on a
    /// connection after 1 s, so a down standby is passed over quickly), on
    /// namespace `"default"`.
    pub async fn connect(primary: &str, standbys: &[&str]) -> Res<Self> {
        let mut set = PostgresStore::connect(primary)
            .await?
            .with_standbys(Vec::new());
        for url in standbys {
            let options: PgConnectOptions = url.parse()?;
            let pool = PgPoolOptions::new()
                .test_before_acquire(false)
                .max_connections(16)
                .acquire_timeout(STANDBY_ACQUIRE_TIMEOUT)
                .connect_lazy_with(options.options(super::SESSION_OPTIONS));
            set.standbys.push(set.primary.on_pool(pool, true));
        }
        Ok(set)
    }

    /// This set waiting at most `bound` for a standby to replay a read's
    /// token (default [`DEFAULT_STANDBY_WAIT`]).
    pub fn with_wait(mut self, bound: Duration) -> Self {
        self.wait = bound;
        self
    }

    /// This set bounding every round trip to its servers, the primary's
    /// and the standbys', by `wait` for the reply
    /// ([`PostgresStore::with_reply_wait`]; by default each store's own,
    /// which is [`DEFAULT_POSTGRES_REPLY_WAIT`](crate::DEFAULT_POSTGRES_REPLY_WAIT)
    /// unless set).
    pub fn with_reply_wait(self, wait: Option<Duration>) -> Self {
        ReplicaSet {
            primary: self.primary.with_reply_wait(wait),
            standbys: self
                .standbys
                .into_iter()
                .map(|s| s.with_reply_wait(wait))
                .collect(),
            ..self
        }
    }

    /// This set answering a standby that lags past the wait bound with
    /// `on_lag` (default [`OnLag::Primary`]).
    pub fn on_lag(mut self, on_lag: OnLag) -> Self {
        self.on_lag = on_lag;
        self
    }

    /// The same servers, another namespace.
    pub fn open_namespace(&self, name: &str) -> Self {
        ReplicaSet {
            primary: self.primary.open_namespace(name),
            standbys: self
                .standbys
                .iter()
                .map(|s| s.open_namespace(name))
                .collect(),
            next: self.next.clone(),
            wait: self.wait,
            on_lag: self.on_lag,
        }
    }

    /// The primary's store: every write goes through it.
    pub fn primary(&self) -> &PostgresStore {
        &self.primary
    }

    /// The standbys' stores, in index order ([`ServedBy::Standby`]).
    pub fn standbys(&self) -> &[PostgresStore] {
        &self.standbys
    }

    /// A token covering every write that committed on the primary before
    /// this call: the primary's WAL *insert* position
    /// (`pg_current_wal_insert_lsn()`), read after the write returned.
    ///
    /// Not `pg_current_wal_lsn()`: that is how far the WAL has been
    /// written out, which with `synchronous_commit = off` can still be
    /// short of a commit that has returned. The insert position is past
    /// the end of every commit record already made, whatever the commit
    /// settings; it may also cover later writes, which a standby replays
    /// once they are flushed (a record written after the commit and not yet
    /// flushed, such as another session's vacuum, can hold a read until the
    /// next flush; the wait bound and [`OnLag`] cap that).
    ///
    /// When the last record ends exactly at a WAL page's end, Postgres
    /// reports the insert position past the next page's header, where
    /// nothing is written yet; a standby's replay position stops at the
    /// page's end and would never reach it. The token is that page end.
    pub async fn commit_token(&self) -> Res<CommitToken> {
        let (lsn, block, segment): (i64, i64, i64) = PgConnection::exchange(
            self.primary.space.exchange(),
            sqlx::query_as(INSERT_LSN).fetch_one(self.primary.pool()),
        )
        .await?;
        let [lsn, block, segment] = [lsn, block, segment].map(|v| u64::try_from(v).unwrap_or(0));
        Ok(CommitToken::from_lsn(last_record_end(lsn, block, segment)))
    }

    /// A read snapshot on the next standby; with `after`, on a standby
    /// that has replayed it, so every write it covers is in the
    /// snapshot's root. The standby is polled (1 ms, doubling to 20 ms)
    /// for up to the wait bound; past it the set does what
    /// [`on_lag`](Self::on_lag) says. A standby that fails (down,
    /// restarting) is passed over for the next; when none answers the read
    /// goes to the primary (or, with [`OnLag::Error`], fails). With no
    /// standbys every read is the primary's.
    pub async fn read(&self, after: Option<CommitToken>) -> Res<ReadSnapshot> {
        let count = self.standbys.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let mut failed = None;
        for i in 0..count {
            let index = first.wrapping_add(i) % count;
            match self.read_standby(index, after).await {
                Ok(snapshot) => return Ok(snapshot),
                Err(lag @ SqlStoreError::StandbyBehind { .. }) => {
                    return match self.on_lag {
                        OnLag::Primary => self.read_primary().await,
                        OnLag::Error => Err(lag),
                    };
                }
                Err(e) => failed = Some(e),
            }
        }
        match (self.on_lag, failed) {
            (OnLag::Error, Some(e)) => Err(e),
            _ => self.read_primary().await,
        }
    }

    /// A read snapshot on the primary, which holds every committed write.
    pub async fn read_primary(&self) -> Res<ReadSnapshot> {
        let conn = TxConnection::acquire(self.primary.pool()).await?;
        ReadSnapshot::begin(conn, &self.primary, ServedBy::Primary).await
    }

    /// A snapshot on standby `index`, once it has replayed `after`.
    async fn read_standby(&self, index: usize, after: Option<CommitToken>) -> Res<ReadSnapshot> {
        let standby = &self.standbys[index];
        let mut conn = TxConnection::acquire(standby.pool()).await?;
        if let Some(token) = after {
            wait_for(&mut conn, standby, index, token, self.wait).await?;
        }
        ReadSnapshot::begin(conn, standby, ServedBy::Standby(index)).await
    }
}

/// Polls the server on `conn` until it has replayed `token` (or is not a
/// standby: a promoted standby holds everything it replayed); after
/// `bound`, [`SqlStoreError::StandbyBehind`].
async fn wait_for(
    conn: &mut TxConnection<Postgres>,
    standby: &PostgresStore,
    index: usize,
    token: CommitToken,
    bound: Duration,
) -> Res<()> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let (recovering, replayed): (bool, Option<i64>) = PgConnection::exchange(
            standby.space.exchange(),
            sqlx::query_as(REPLAY_LSN).fetch_one(&mut *conn.conn()),
        )
        .await?;
        let replayed = replayed.map_or(CommitToken::from_lsn(0), self::token);
        if !recovering || replayed >= token {
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= bound {
            return Err(SqlStoreError::StandbyBehind {
                standby: index,
                token,
                replayed,
                waited,
            });
        }
        tokio::time::sleep(pause.min(bound - waited)).await;
        pause = (pause * 2).min(MAX_POLL_PAUSE);
    }
}

/// Where the last record inserted into the WAL ends, given the insert
/// position `insert` and the WAL's page (`block`) and `segment` sizes: the
/// insert position, except right after a page (or segment) header, where
/// it is the page's start. No record ends there: a record that runs onto
/// a page leaves at least one aligned word of itself past the header.
fn last_record_end(insert: u64, block: u64, segment: u64) -> u64 {
    let at = |size: u64, header: u64| size > header && insert % size == header;
    if at(segment, SEGMENT_HEADER) {
        insert - SEGMENT_HEADER
    } else if at(block, PAGE_HEADER) {
        insert - PAGE_HEADER
    } else {
        insert
    }
}

/// A WAL position from SQL's int8 (never negative: the log would have to
/// pass 8 EiB).
fn token(lsn: i64) -> CommitToken {
    CommitToken::from_lsn(u64::try_from(lsn).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::last_record_end;

    const BLOCK: u64 = 8192;
    const SEGMENT: u64 = 16 << 20;

    #[test]
    fn a_position_past_a_page_header_is_the_page_start() {
        assert_eq!(
            last_record_end(21_608 * BLOCK + 24, BLOCK, SEGMENT),
            21_608 * BLOCK
        );
        assert_eq!(
            last_record_end(3 * SEGMENT + 40, BLOCK, SEGMENT),
            3 * SEGMENT
        );
    }

    #[test]
    fn other_positions_are_kept() {
        for insert in [0, 8, 21_608 * BLOCK, 21_608 * BLOCK + 32, 5 * SEGMENT + 48] {
            assert_eq!(last_record_end(insert, BLOCK, SEGMENT), insert);
        }
        // Sizes the server did not give (0) change nothing.
        assert_eq!(last_record_end(BLOCK + 24, 0, 0), BLOCK + 24);
    }
}
