//! Where a handle's statements run: a pool ([`Pooled`], each read on a
//! connection of its own and each write in a transaction of its own) or a
//! caller's open transaction ([`CallerTx`], everything in it). The store
//! traits are implemented once, over [`Source`] (`handle.rs`,
//! `forest.rs`); only how a connection is had, how a write is wrapped and
//! how a forest commits and locks differ.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sqlx::SqlStr;
use tokio::sync::{Mutex, MutexGuard};

use super::dialect::Dialect;
use super::error::Res;
use super::reply_wait::Exchange;
use super::savepoint::Savepoint;
use super::space::NamespaceState;
use super::tx::{self, OwnedTx, Work};

/// How a handle reaches its database (sealed: [`Pooled`] and [`CallerTx`]).
pub trait Source<C: Dialect>: Clone + Send + Sync + private::Sealed {
    /// A connection: one from the pool, or the caller's.
    fn conn(&self) -> impl Future<Output = Res<impl DerefMut<Target = C> + Send + '_>> + Send;

    /// True when every session runs with JIT off (a large walk then needs
    /// no guard).
    fn jit_off(&self) -> bool;

    /// A read transaction: on a pool a transaction of its own, begun (with
    /// `snapshot`, as one read-only snapshot: [`Dialect::SNAPSHOT`]) and
    /// ended by [`end_read`](Self::end_read); in a caller's transaction,
    /// that transaction.
    fn read_tx<'s>(
        &'s self,
        ex: Exchange<'s>,
        snapshot: bool,
    ) -> impl Future<Output = Res<impl ReadTx<C> + 's>> + Send + 's;

    /// Runs `work` as one write: on a pool, in a write transaction of its
    /// own on a task of its own ([`tx::write`]); in a caller's transaction,
    /// there, under a savepoint where the engine writes with one
    /// ([`Dialect::SAVEPOINTS`]).
    fn write<T, W>(
        &self,
        space: &Arc<NamespaceState>,
        work: W,
    ) -> impl Future<Output = Res<T>> + Send
    where
        T: Send + 'static,
        W: for<'a> FnOnce(&'a mut C, &'a NamespaceState) -> Work<'a, T> + Send + 'static;

    /// True when `other` reaches the same database the same way (the same
    /// pool, or the same caller's transaction): one statement sees both.
    fn same(&self, other: &Self) -> bool;
}

/// A read transaction of a [`Source`]: its connection, and its end.
pub trait ReadTx<C>: DerefMut<Target = C> + Send {
    /// Ends it: a pool's is committed (a snapshot) or rolled back (a
    /// guard) and its connection goes back to the pool; a caller's goes on.
    fn end(self, ex: Exchange<'_>, commit: bool) -> impl Future<Output = Res<()>> + Send;
}

impl<C: Dialect> ReadTx<C> for OwnedTx<C> {
    async fn end(self, ex: Exchange<'_>, commit: bool) -> Res<()> {
        if commit {
            self.commit(ex).await
        } else {
            self.rollback(ex).await
        }
    }
}

impl<C: Dialect> ReadTx<C> for CallerConn<'_, '_, C> {
    async fn end(self, _ex: Exchange<'_>, _commit: bool) -> Res<()> {
        Ok(())
    }
}

mod private {
    pub trait Sealed {}
    impl<C: super::Dialect> Sealed for super::Pooled<C> {}
    impl<C: super::Dialect> Sealed for super::CallerTx<'_, C> {}
}

/// A pool: each read on a pooled connection, each write in a transaction
/// of its own.
pub struct Pooled<C: Dialect> {
    pub(crate) pool: sqlx::Pool<C::Database>,
    /// True when the pool's sessions run with JIT off (Postgres pools made
    /// by `connect`), so path walks need no guard.
    pub(crate) jit_off: bool,
}

impl<C: Dialect> Clone for Pooled<C> {
    fn clone(&self) -> Self {
        Pooled {
            pool: self.pool.clone(),
            jit_off: self.jit_off,
        }
    }
}

impl<C: Dialect> std::fmt::Debug for Pooled<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pooled")
            .field("pool", &self.pool)
            .field("jit_off", &self.jit_off)
            .finish()
    }
}

impl<C: Dialect> Source<C> for Pooled<C> {
    async fn conn(&self) -> Res<impl DerefMut<Target = C> + Send + '_> {
        Ok(self.pool.acquire().await?)
    }

    fn jit_off(&self) -> bool {
        self.jit_off
    }

    async fn read_tx<'s>(&'s self, ex: Exchange<'s>, snapshot: bool) -> Res<impl ReadTx<C> + 's> {
        let mut tx = OwnedTx::<C>::begin_read(&self.pool, ex).await?;
        if let Some(sql) = C::SNAPSHOT.filter(|_| snapshot) {
            tx.conn().execute(ex, SqlStr::from_static(sql), &[]).await?;
        }
        Ok(tx)
    }

    async fn write<T, W>(&self, space: &Arc<NamespaceState>, work: W) -> Res<T>
    where
        T: Send + 'static,
        W: for<'a> FnOnce(&'a mut C, &'a NamespaceState) -> Work<'a, T> + Send + 'static,
    {
        tx::write(&self.pool, space, work).await
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.pool.connect_options(), &other.pool.connect_options())
    }
}

/// A caller's open transaction, shared by every namespace handle made on
/// it.
pub struct CallerTx<'c, C: Dialect> {
    pub(crate) conn: Arc<Mutex<&'c mut C>>,
}

impl<C: Dialect> Clone for CallerTx<'_, C> {
    fn clone(&self) -> Self {
        CallerTx {
            conn: self.conn.clone(),
        }
    }
}

impl<C: Dialect> std::fmt::Debug for CallerTx<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerTx").finish_non_exhaustive()
    }
}

/// The caller's connection, locked for one use.
pub struct CallerConn<'s, 'c, C>(MutexGuard<'s, &'c mut C>);

impl<C> Deref for CallerConn<'_, '_, C> {
    type Target = C;
    fn deref(&self) -> &C {
        &self.0
    }
}

impl<C> DerefMut for CallerConn<'_, '_, C> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.0
    }
}

impl<'c, C: Dialect> Source<C> for CallerTx<'c, C> {
    async fn conn(&self) -> Res<impl DerefMut<Target = C> + Send + '_> {
        Ok(CallerConn(self.conn.lock().await))
    }

    /// A caller's session runs with whatever JIT setting it has.
    fn jit_off(&self) -> bool {
        false
    }

    /// The caller's transaction: a walk's guard (JIT off on Postgres) then
    /// lasts until it ends; its isolation is the caller's.
    async fn read_tx<'s>(&'s self, _ex: Exchange<'s>, _snapshot: bool) -> Res<impl ReadTx<C> + 's> {
        Ok(CallerConn(self.conn.lock().await))
    }

    async fn write<T, W>(&self, space: &Arc<NamespaceState>, work: W) -> Res<T>
    where
        T: Send + 'static,
        W: for<'a> FnOnce(&'a mut C, &'a NamespaceState) -> Work<'a, T> + Send + 'static,
    {
        let mut conn = self.conn.lock().await;
        if !C::SAVEPOINTS {
            return work(&mut **conn, space).await;
        }
        let mut savepoint = Savepoint::<C::Database>::begin(&mut **conn).await?;
        let out = work(savepoint.conn(), space).await?;
        savepoint.commit().await?;
        Ok(out)
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.conn, &other.conn)
    }
}
