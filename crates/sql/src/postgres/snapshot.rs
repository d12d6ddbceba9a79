//! A read snapshot: one REPEATABLE READ, READ ONLY transaction on one
//! Postgres server (a standby, or the primary), holding one root.

use sqlx::{PgConnection, Postgres};

use super::{PostgresStore, PostgresTxStore};
use crate::dialect::Dialect;
use crate::error::Res;
use crate::handle::SqlStore;
use crate::namespaces;
use crate::node::ComputedNode;
use crate::tx::TxConnection;

/// Which server of a [`ReplicaSet`](crate::ReplicaSet) answers a
/// [`ReadSnapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedBy {
    /// The standby at this index of the set.
    Standby(usize),
    /// The primary (no standby was asked for, or none could answer).
    Primary,
}

/// Every read of one namespace at one root, on one server: an open
/// `REPEATABLE READ, READ ONLY` transaction whose snapshot was taken when
/// [`root`](Self::root) was read, so every read through
/// [`store`](Self::store) (proofs, leaves, multi-proofs, iteration, diff,
/// children, export) answers at that root and a client verifies against
/// it. A standby replaying WAL meanwhile changes nothing the snapshot sees.
///
/// Keep snapshots short: a standby holds replay of conflicting WAL for up
/// to `max_standby_streaming_delay` and then cancels the snapshot's query
/// (`hot_standby_feedback = on` avoids most conflicts). End it with
/// [`finish`](Self::finish); dropped unfinished, its connection is closed
/// instead of going back to the pool.
pub struct ReadSnapshot {
    conn: TxConnection<Postgres>,
    store: PostgresStore,
    root: ComputedNode,
    served_by: ServedBy,
}

impl std::fmt::Debug for ReadSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadSnapshot")
            .field("store", &self.store)
            .field("root", &self.root)
            .field("served_by", &self.served_by)
            .finish_non_exhaustive()
    }
}

impl ReadSnapshot {
    /// Opens the snapshot on `conn` (a connection of `store`'s pool) and
    /// reads its root, which fixes the snapshot.
    pub(super) async fn begin(
        mut conn: TxConnection<Postgres>,
        store: &PostgresStore,
        served_by: ServedBy,
    ) -> Res<Self> {
        PgConnection::exchange(
            store.space.exchange(),
            sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *conn.conn()),
        )
        .await?;
        let root = namespaces::load_root::<PgConnection>(conn.conn(), &store.space).await?;
        Ok(ReadSnapshot {
            conn,
            store: store.clone(),
            root,
            served_by,
        })
    }

    /// The root every read of this snapshot answers at.
    pub fn root(&self) -> ComputedNode {
        self.root
    }

    /// The server the snapshot reads.
    pub fn served_by(&self) -> ServedBy {
        self.served_by
    }

    /// A store reading this snapshot, for a [`Tree`](ms_smt::Tree) (its
    /// writes fail: the transaction is read-only).
    pub fn store(&mut self) -> PostgresTxStore<'_> {
        SqlStore::in_transaction(&self.store, self.conn.conn())
    }

    /// Ends the read-only transaction and returns the connection to the
    /// pool.
    pub async fn finish(mut self) -> Res<()> {
        PgConnection::exchange(
            self.store.space.exchange(),
            sqlx::query("COMMIT").execute(&mut *self.conn.conn()),
        )
        .await?;
        self.conn.release();
        Ok(())
    }
}
