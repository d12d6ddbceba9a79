//! A savepoint inside a caller's transaction that is rolled back only if it
//! was really made.

use sqlx::Database;
use sqlx_core::transaction::TransactionManager;

/// A savepoint begun by [`Savepoint::begin`]: released by
/// [`commit`](Self::commit), rolled back by [`rollback`](Self::rollback) or
/// when dropped before either.
///
/// Not `sqlx::Transaction`: since sqlx 0.9.0 its `begin` builds the
/// transaction (which rolls back on drop) *before* awaiting the
/// `SAVEPOINT`, so a `begin` dropped mid-flight rolls back once more than it
/// began. At the caller's depth 1 that extra rollback is `ROLLBACK`: the
/// caller's whole transaction, the host's own writes with it, gone
/// (`tests/cancellation.rs`). Here the guard exists only once the
/// savepoint does (sqlx 0.8.6's order).
pub(crate) struct Savepoint<'c, DB: Database> {
    conn: &'c mut DB::Connection,
    open: bool,
}

impl<'c, DB: Database> Savepoint<'c, DB> {
    /// Makes a savepoint in `conn`'s open transaction.
    ///
    /// Only for a driver whose `begin`, dropped, leaves nothing behind. The
    /// SQLite worker does: it answers through a rendezvous channel, so either
    /// this future takes the answer, and returns in that same poll with the
    /// guard built (no await in between), or the answer is refused and the
    /// worker rolls its `SAVEPOINT` back itself. No window remains where the
    /// savepoint exists without a guard or a guard without the savepoint; a
    /// depth check before and after would only re-read what the worker
    /// already settled. Postgres's `begin`, dropped, rolls back at the depth
    /// it had not yet raised (the caller's transaction), which is why
    /// Postgres writes in a caller's transaction without savepoints
    /// (`Dialect::SAVEPOINTS`).
    pub async fn begin(conn: &'c mut DB::Connection) -> Result<Self, sqlx::Error> {
        DB::TransactionManager::begin(conn, None).await?;
        Ok(Savepoint { conn, open: true })
    }

    /// The connection, inside the savepoint.
    pub fn conn(&mut self) -> &mut DB::Connection {
        self.conn
    }

    /// Releases the savepoint (its writes join the caller's transaction).
    ///
    /// Dropped after the worker released it but before the answer, the
    /// guard's rollback is skipped by the worker (it remembers an
    /// unacknowledged `RELEASE`).
    pub async fn commit(mut self) -> Result<(), sqlx::Error> {
        DB::TransactionManager::commit(self.conn).await?;
        self.open = false;
        Ok(())
    }

    /// Rolls back to the savepoint and releases it from this guard.
    pub async fn rollback(mut self) -> Result<(), sqlx::Error> {
        DB::TransactionManager::rollback(self.conn).await?;
        self.open = false;
        Ok(())
    }
}

impl<DB: Database> Drop for Savepoint<'_, DB> {
    fn drop(&mut self) {
        if self.open {
            DB::TransactionManager::start_rollback(self.conn);
        }
    }
}
