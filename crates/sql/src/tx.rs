//! Transactions that survive their caller: a connection that is closed
//! unless its transaction ended cleanly, and writes run on their own task.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use sqlx_core::transaction::TransactionManager;

use super::dialect::{Dialect, begin_write_by};
use super::error::{Res, SqlStoreError};
use super::reply_wait::Exchange;
use super::space::NamespaceState;

/// A pooled connection for one transaction that goes back to the pool
/// only when the transaction ended cleanly ([`release`](Self::release)).
///
/// Dropped any other way (the caller's future cancelled mid-transaction,
/// or an error, `BEGIN` included), it is detached from the pool and
/// closed, so the server rolls the transaction back and no later borrower
/// inherits it. sqlx returns such connections to the pool with the
/// transaction open or half-begun: sqlx 0.8 for a dropped SQLite
/// `begin_with` (#3932), 0.8 and 0.9.0 for a cancelled Postgres `begin`
/// (#4385/#4393: its guard rolls back at depth 0, a no-op, and the pool's
/// release check is only a ping); `tests/cancellation.rs` drops every
/// operation at every await point to check this.
pub struct TxConnection<DB: sqlx::Database> {
    conn: Option<sqlx::pool::PoolConnection<DB>>,
}

impl<DB: sqlx::Database> TxConnection<DB> {
    /// A connection from `pool`.
    pub async fn acquire(pool: &sqlx::Pool<DB>) -> Result<Self, sqlx::Error> {
        Ok(TxConnection {
            conn: Some(pool.acquire().await?),
        })
    }

    /// The connection, to read.
    pub fn get(&self) -> &DB::Connection {
        match self.conn.as_deref() {
            Some(conn) => conn,
            // Only `release` and `drop` take it, and both consume `self`.
            None => unreachable!("a TxConnection is used after release"),
        }
    }

    /// The connection.
    pub fn conn(&mut self) -> &mut DB::Connection {
        match self.conn.as_deref_mut() {
            Some(conn) => conn,
            // Only `release` and `drop` take it, and both consume `self`.
            None => unreachable!("a TxConnection is used after release"),
        }
    }

    /// The transaction ended (committed or rolled back): back to the pool.
    pub fn release(mut self) {
        drop(self.conn.take());
    }
}

impl<DB: sqlx::Database> Drop for TxConnection<DB> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}

/// Set when the caller stopped waiting for a [`detached`] write.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallerGone(Arc<std::sync::atomic::AtomicBool>);

impl CallerGone {
    /// True once the caller's future was dropped: a write that has not
    /// sent COMMIT yet rolls back instead.
    pub fn get(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Marks the caller gone when the awaiting future is dropped.
struct OnDrop(CallerGone);

impl Drop for OnDrop {
    fn drop(&mut self) {
        (self.0).0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Runs a write transaction on its own task and waits for it.
///
/// A caller's future may be dropped at any await point (a timeout, a
/// `select!`, a client going away). Dropping sqlx futures in the middle
/// of a transaction is where its connection bugs live (sqlx #3932,
/// #4385, #4393), and on SQLite a dropped `delete_all` was seen to land
/// after later writes. On its own task the transaction always runs to its
/// end: it commits, or, when the caller is gone before COMMIT, rolls back.
/// A panic inside is re-raised in the caller.
pub(crate) async fn detached<R, F>(
    work: impl FnOnce(CallerGone) -> F,
    shutdown: impl FnOnce() -> R,
) -> R
where
    R: Send + 'static,
    F: Future<Output = R> + Send + 'static,
{
    let gone = CallerGone::default();
    let handle = tokio::spawn(work(gone.clone()));
    let _mark = OnDrop(gone);
    match handle.await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => shutdown(),
    }
}

/// [`detached`] for store operations.
pub(crate) async fn detached_store<T, F>(work: impl FnOnce(CallerGone) -> F) -> Res<T>
where
    T: Send + 'static,
    F: Future<Output = Res<T>> + Send + 'static,
{
    detached(work, || Err(SqlStoreError::RuntimeShutdown)).await
}

/// The work of a [`write`], borrowing the transaction and the namespace.
pub(crate) type Work<'a, T> = Pin<Box<dyn Future<Output = Res<T>> + Send + 'a>>;

/// Runs `work` in a write transaction of its own on its own task (see
/// [`detached`]): committed unless it failed or the caller left before it
/// finished.
pub(crate) async fn write<C, T, W>(
    pool: &sqlx::Pool<C::Database>,
    space: &Arc<NamespaceState>,
    work: W,
) -> Res<T>
where
    C: Dialect,
    T: Send + 'static,
    W: for<'a> FnOnce(&'a mut C, &'a NamespaceState) -> Work<'a, T> + Send + 'static,
{
    let (pool, space) = (pool.clone(), space.clone());
    detached_store(move |caller_gone| async move {
        let mut conn = TxConnection::acquire(&pool).await?;
        let mut tx = begin_write_by(conn.conn(), space.exchange()).await?;
        let out = work(&mut *tx, &space).await?;
        if caller_gone.get() {
            C::exchange(space.exchange(), tx.rollback()).await?;
        } else {
            C::exchange(space.exchange(), tx.commit()).await?;
        }
        conn.release();
        Ok(out)
    })
    .await
}

/// The transaction manager of engine `C`.
type Manager<C> = <<C as sqlx::Connection>::Database as sqlx::Database>::TransactionManager;

/// A write transaction on a pooled connection, owned rather than borrowed
/// from it, so that it can be held across a lock's whole write and move
/// into a [`detached`] task for its commit.
///
/// Dropped before [`commit`](Self::commit) or [`rollback`](Self::rollback)
/// (a cancelled caller, an error), its [`TxConnection`] is closed: the
/// server rolls the transaction back and the pool never sees it.
pub struct OwnedTx<C: Dialect> {
    conn: TxConnection<C::Database>,
}

impl<C: Dialect> OwnedTx<C> {
    /// A connection from `pool` with a write transaction begun on it
    /// (`BEGIN IMMEDIATE` on SQLite: the database's write lock from the
    /// start), the `BEGIN` sent as `ex`.
    pub async fn begin(pool: &sqlx::Pool<C::Database>, ex: Exchange<'_>) -> Res<Self> {
        let mut conn = TxConnection::acquire(pool).await?;
        let begin = C::BEGIN_WRITE.map(sqlx::SqlStr::from_static);
        C::exchange(ex, Manager::<C>::begin(conn.conn(), begin)).await?;
        Ok(OwnedTx { conn })
    }

    /// A connection from `pool` with a read transaction begun on it (a
    /// plain `BEGIN`, sent as `ex`).
    pub async fn begin_read(pool: &sqlx::Pool<C::Database>, ex: Exchange<'_>) -> Res<Self> {
        let mut conn = TxConnection::acquire(pool).await?;
        C::exchange(ex, Manager::<C>::begin(conn.conn(), None)).await?;
        Ok(OwnedTx { conn })
    }

    /// The connection, inside the transaction.
    pub fn conn(&mut self) -> &mut C {
        self.conn.conn()
    }

    /// Commits (sent as `ex`), and gives the connection back to the pool.
    pub async fn commit(self, ex: Exchange<'_>) -> Res<()> {
        self.end(ex, true).await
    }

    /// Rolls back (sent as `ex`), and gives the connection back to the pool.
    pub async fn rollback(self, ex: Exchange<'_>) -> Res<()> {
        self.end(ex, false).await
    }

    /// COMMIT (`commit`) or ROLLBACK, then the connection back to the pool.
    async fn end(mut self, ex: Exchange<'_>, commit: bool) -> Res<()> {
        let conn = self.conn.conn();
        if commit {
            C::exchange(ex, Manager::<C>::commit(conn)).await?;
        } else {
            C::exchange(ex, Manager::<C>::rollback(conn)).await?;
        }
        self.conn.release();
        Ok(())
    }
}

impl<C: Dialect> std::ops::Deref for OwnedTx<C> {
    type Target = C;
    fn deref(&self) -> &C {
        self.conn.get()
    }
}

impl<C: Dialect> std::ops::DerefMut for OwnedTx<C> {
    fn deref_mut(&mut self) -> &mut C {
        self.conn.conn()
    }
}
