//! The reads every SQL handle does the same way, written once.
//!
//! There are four SQL handles: SQLite and Postgres, each over a pool
//! (`SqliteStore`, `PostgresStore`) or over the caller's transaction
//! (`SqliteTxStore`, `PostgresTxStore`). They differ in how they write
//! (which `BEGIN`, whether a savepoint guards the caller's transaction, the
//! JIT guard on Postgres path reads) but not in how they read positions,
//! rows in tree order, the root or pins: those take one connection and call
//! the engine's row queries. [`handle_reads!`] stamps those methods into
//! each handle's trait impls, so a change to a read is made once.
//!
//! A handle borrows its connection one of two ways, named in the
//! invocation: `pool` (`self.pool.acquire()`) or `caller` (`self.conn`,
//! the caller's transaction behind a mutex).

/// Stamps out shared read methods inside an `impl` block:
///
/// * `handle_reads!(tree, pool|caller, ConnType)` inside
///   `impl TreeStore`: the error type, `read_positions`,
///   `read_in_order`, `load_root`, `stats`,
///   `recent_nodes`;
/// * `handle_reads!(pins, pool|caller, ConnType)` inside `impl PinStore`:
///   `pinned` and `pins`.
///
/// The invoking module provides `load_root`, `pinned_on` and `pins_on`
/// (from `namespace_ops!`), `row_reads`, and the types named here.
macro_rules! handle_reads {
    // The handle's connection as `&mut $conn`, held by `$guard`.
    (@borrow pool, $self:ident, $guard:ident) => {
        let mut $guard = $self.pool.acquire().await?;
    };
    (@borrow caller, $self:ident, $guard:ident) => {
        let mut $guard = $self.conn.lock().await;
    };

    (tree, $how:ident, $conn:ty) => {
        type Error = SqlStoreError;

        async fn read_positions(
            &self,
            at: ReadAt,
            nodes: &[(Position, Hash)],
        ) -> Res<Vec<(Hash, Node)>> {
            $crate::store::sql_handle::handle_reads!(@borrow $how, self, guard);
            let conn: &mut $conn = &mut guard;
            row_reads::positions(conn, &self.space, at, nodes).await
        }

        async fn read_in_order(
            &self,
            at: ReadAt,
            (from, _): (Position, Hash),
            probe: Key,
            until: Option<Key>,
            limit: usize,
        ) -> Res<Vec<(Hash, Node)>> {
            $crate::store::sql_handle::handle_reads!(@borrow $how, self, guard);
            let conn: &mut $conn = &mut guard;
            row_reads::in_order(conn, &self.space, at, from, probe, until, limit).await
        }

        async fn load_root(&self) -> Res<ComputedNode> {
            $crate::store::sql_handle::handle_reads!(@borrow $how, self, guard);
            load_root(&mut guard, &self.space).await
        }

        fn stats(&self) -> StoreStats {
            self.space.counters.snapshot_with(&self.space.recent)
        }

        // A write's commit merges into the rows its path read brings, so
        // a write reads every row from the store.
        fn recent_nodes(&self, for_write: bool) -> Option<&RecentNodes> {
            (!for_write).then_some(&self.space.recent)
        }
    };

    (pins, $how:ident, $conn:ty) => {
        async fn pinned(&self, name: &str) -> Res<Option<Pin>> {
            $crate::store::sql_handle::handle_reads!(@borrow $how, self, guard);
            pinned_on(&mut guard, &self.space, name).await
        }

        async fn pins(&self) -> Res<Vec<Pin>> {
            $crate::store::sql_handle::handle_reads!(@borrow $how, self, guard);
            pins_on(&mut guard, &self.space).await
        }
    };
}

pub(crate) use handle_reads;
