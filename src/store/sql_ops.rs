//! Namespace, pin and whole-tree operations, written once for both SQL
//! engines.
//!
//! Their statements are the same text on SQLite and Postgres (`$N`
//! placeholders, which sqlx binds by number on both; integers read back as
//! `BIGINT`), so [`namespace_ops!`] stamps the functions out for each
//! engine's connection type inside `sqlite.rs` and `postgres.rs`. What
//! differs stays with the engine, which defines:
//!
//! * `lock_namespace(conn, space)`: serialises the namespace's writers until
//!   the transaction ends (Postgres: an advisory lock; SQLite: nothing, a
//!   write transaction there holds the database's write lock already);
//! * `create_namespace(conn, space)`: inserts the namespace row if missing.

/// Stamps out the shared operations for connection type `$conn` (see the
/// module docs). The invoking module provides `lock_namespace` and
/// `create_namespace`.
macro_rules! namespace_ops {
    ($conn:ty) => {
        /// The operations shared with the other SQL engine (`sql_ops`).
        mod ops {
            use super::*;
            use $crate::store::sql::{
                NsInfo, NsState, SCAN_PAGE, Space, SqlStoreError, decode_root, sum_to_sql,
            };

            /// A namespace row: id, height, root hash and sum (both NULL when
            /// empty), version, and the newest pinned version.
            pub(super) type NamespaceRow =
                (i64, i64, Option<Vec<u8>>, Option<i64>, i64, Option<i64>);

            /// The namespace's row (`None` when it does not exist), refreshing
            /// the handle's id and height.
            pub(super) async fn load_state(
                conn: &mut $conn,
                space: &Space,
            ) -> Res<Option<NsState>> {
                space.counters.round_trip(1);
                let row: Option<NamespaceRow> = sqlx::query_as(
                    "SELECT id, CAST(height AS BIGINT), root_hash, root_sum, version, \
                        (SELECT MAX(p.version) FROM ms_smt_pins p WHERE p.ns = n.id) \
                 FROM ms_smt_namespaces n WHERE name = $1",
                )
                .bind(&*space.name)
                .fetch_optional(&mut *conn)
                .await?;
                let Some((id, height, hash, sum, version, max_pin)) = row else {
                    space.info.set(None);
                    return Ok(None);
                };
                let height = u8::try_from(height)
                    .ok()
                    .and_then(StratumHeight::new)
                    .ok_or(SqlStoreError::StratumHeight(height))?;
                let info = NsInfo { id, height };
                space.info.set(Some(info));
                Ok(Some(NsState {
                    info,
                    root: decode_root(&space.name, hash.zip(sum))?,
                    version,
                    max_pin,
                }))
            }

            /// The namespace's root, learning its id and height on the way.
            pub(super) async fn load_root(conn: &mut $conn, space: &Space) -> Res<ComputedNode> {
                Ok(load_state(conn, space)
                    .await?
                    .map_or_else(ComputedNode::empty_root, |s| s.root))
            }

            /// The namespace's id and height for a read (the handle's last
            /// sight of it, else its row); `None` when it does not exist.
            pub(super) async fn namespace(conn: &mut $conn, space: &Space) -> Res<Option<NsInfo>> {
                match space.info.get() {
                    Some(info) => Ok(Some(info)),
                    None => Ok(load_state(conn, space).await?.map(|s| s.info)),
                }
            }

            /// The namespace's row inside a write transaction, created if
            /// missing.
            pub(super) async fn state_for_write(conn: &mut $conn, space: &Space) -> Res<NsState> {
                if let Some(state) = load_state(conn, space).await? {
                    return Ok(state);
                }
                create_namespace(conn, space).await?;
                load_state(conn, space)
                    .await?
                    .ok_or(SqlStoreError::NamespaceVanished)
            }

            /// A pin row: name, version, root hash and sum (NULL for an empty
            /// tree).
            pub(super) type PinRow = (String, i64, Option<Vec<u8>>, Option<i64>);

            pub(super) fn decode_pin(
                space: &Space,
                (name, version, hash, sum): PinRow,
            ) -> Res<Pin> {
                Ok(Pin {
                    name,
                    root: decode_root(&space.name, hash.zip(sum))?,
                    version: version_from_sql(version)?,
                })
            }

            /// A version as SQL's signed integer (versions count commits; they
            /// never reach 2^63).
            pub(super) fn version_to_sql(v: u64) -> i64 {
                i64::try_from(v).unwrap_or(i64::MAX)
            }

            pub(super) fn version_from_sql(v: i64) -> Res<u64> {
                u64::try_from(v).map_err(|_| SqlStoreError::BadVersion(v))
            }

            /// Pins the current root under `name` inside a write transaction.
            pub(super) async fn pin_on(conn: &mut $conn, space: &Space, name: &str) -> Res<Pin> {
                lock_namespace(conn, space).await?;
                let state = state_for_write(conn, space).await?;
                let id = state.info.id;
                space.counters.round_trip(2);
                let replaced: Option<i64> = sqlx::query_scalar(
                    "SELECT version FROM ms_smt_pins WHERE ns = $1 AND name = $2",
                )
                .bind(id)
                .bind(name)
                .fetch_optional(&mut *conn)
                .await?;
                let root = (state.root != ComputedNode::empty_root())
                    .then(|| (state.root.hash.0.to_vec(), sum_to_sql(state.root.sum)));
                let (hash, sum) = root.unzip();
                sqlx::query(
                    "INSERT INTO ms_smt_pins (ns, name, version, root_hash, root_sum) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (ns, name) DO UPDATE SET version = excluded.version, \
                     root_hash = excluded.root_hash, root_sum = excluded.root_sum",
                )
                .bind(id)
                .bind(name)
                .bind(state.version)
                .bind(hash)
                .bind(sum)
                .execute(&mut *conn)
                .await?;
                if let Some(old) = replaced.filter(|v| *v != state.version) {
                    release_version(conn, space, id, old).await?;
                }
                Ok(Pin {
                    name: name.to_owned(),
                    root: state.root,
                    version: version_from_sql(state.version)?,
                })
            }

            /// Removes the pin `name` inside a write transaction; false when
            /// none.
            pub(super) async fn unpin_on(conn: &mut $conn, space: &Space, name: &str) -> Res<bool> {
                lock_namespace(conn, space).await?;
                let Some(info) = load_state(conn, space).await?.map(|s| s.info) else {
                    return Ok(false);
                };
                space.counters.round_trip(1);
                let removed: Option<i64> = sqlx::query_scalar(
                    "DELETE FROM ms_smt_pins WHERE ns = $1 AND name = $2 RETURNING version",
                )
                .bind(info.id)
                .bind(name)
                .fetch_optional(&mut *conn)
                .await?;
                match removed {
                    Some(version) => release_version(conn, space, info.id, version)
                        .await
                        .map(|()| true),
                    None => Ok(false),
                }
            }

            /// Deletes the kept rows that only version `version` (no longer
            /// pinned) could read: those current at it that no remaining pin
            /// reads.
            pub(super) async fn release_version(
                conn: &mut $conn,
                space: &Space,
                ns: i64,
                version: i64,
            ) -> Res<()> {
                space.counters.round_trip(1);
                sqlx::query(
                    "DELETE FROM ms_smt_history AS h WHERE h.ns = $1 \
                   AND h.from_version <= $2 AND h.to_version > $2 \
                   AND NOT EXISTS (SELECT 1 FROM ms_smt_pins p WHERE p.ns = $1 \
                       AND p.version >= h.from_version AND p.version < h.to_version)",
                )
                .bind(ns)
                .bind(version)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            /// The pin `name`, if any.
            pub(super) async fn pinned_on(
                conn: &mut $conn,
                space: &Space,
                name: &str,
            ) -> Res<Option<Pin>> {
                space.counters.round_trip(1);
                let row: Option<PinRow> = sqlx::query_as(
                    "SELECT p.name, p.version, p.root_hash, p.root_sum FROM ms_smt_pins p \
                 JOIN ms_smt_namespaces n ON n.id = p.ns WHERE n.name = $1 AND p.name = $2",
                )
                .bind(&*space.name)
                .bind(name)
                .fetch_optional(&mut *conn)
                .await?;
                row.map(|r| decode_pin(space, r)).transpose()
            }

            /// Every pin of the namespace, oldest version first.
            pub(super) async fn pins_on(conn: &mut $conn, space: &Space) -> Res<Vec<Pin>> {
                space.counters.round_trip(1);
                let rows: Vec<PinRow> = sqlx::query_as(
                    "SELECT p.name, p.version, p.root_hash, p.root_sum FROM ms_smt_pins p \
                 JOIN ms_smt_namespaces n ON n.id = p.ns WHERE n.name = $1 \
                 ORDER BY p.version, p.name",
                )
                .bind(&*space.name)
                .fetch_all(&mut *conn)
                .await?;
                rows.into_iter().map(|r| decode_pin(space, r)).collect()
            }

            /// Up to `limit` rows of `at` after the row key `after` (path, then
            /// depth) and with `path < before`, in key order. Both engines'
            /// [`RowQueries::rows_after`] (which skips whole paths: depth
            /// [`PAST_EVERY_DEPTH`]) and the audit's scan.
            pub(super) async fn rows_after_on(
                conn: &mut $conn,
                space: &Space,
                info: NsInfo,
                at: ReadAt,
                (after, after_depth): (&[u8], i64),
                before: &[u8],
                limit: usize,
            ) -> Res<Vec<(RowKey, Vec<u8>)>> {
                space.counters.round_trip(1);
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let rows: Vec<(Vec<u8>, i64, Vec<u8>)> = match at {
                    ReadAt::Current => {
                        // The table's `depth`, not the cast output column of
                        // that name: Postgres then returns the index order.
                        sqlx::query_as(
                            "SELECT path, CAST(depth AS BIGINT), body FROM ms_smt_strata \
                         WHERE ns = $1 AND (path, depth) > ($2, $3) AND path < $4 \
                         ORDER BY path, ms_smt_strata.depth LIMIT $5",
                        )
                        .bind(info.id)
                        .bind(after)
                        .bind(after_depth)
                        .bind(before)
                        .bind(limit)
                        .fetch_all(&mut *conn)
                        .await?
                    }
                    ReadAt::Version(v) => {
                        // Each side stops after `limit` rows in key order.
                        sqlx::query_as(
                            "SELECT path, CAST(depth AS BIGINT), body FROM ( \
                             SELECT * FROM (SELECT path, depth, body FROM ms_smt_strata \
                                 WHERE ns = $1 AND (path, depth) > ($2, $3) AND path < $4 \
                                   AND version <= $6 \
                                 ORDER BY path, depth LIMIT $5) AS live \
                           UNION ALL \
                             SELECT * FROM (SELECT path, depth, body FROM ms_smt_history \
                                 WHERE ns = $1 AND (path, depth) > ($2, $3) AND path < $4 \
                                   AND from_version <= $6 AND to_version > $6 \
                                 ORDER BY path, depth LIMIT $5) AS kept) AS u \
                         ORDER BY path, depth LIMIT $5",
                        )
                        .bind(info.id)
                        .bind(after)
                        .bind(after_depth)
                        .bind(before)
                        .bind(limit)
                        .bind(version_to_sql(v))
                        .fetch_all(&mut *conn)
                        .await?
                    }
                };
                Ok(rows
                    .into_iter()
                    .map(|(path, depth, body)| {
                        let depth = usize::try_from(depth).unwrap_or(usize::MAX);
                        (RowKey { path, depth }, body)
                    })
                    .collect())
            }

            /// Hands `sink` the namespace's root and every row in key order, a
            /// page per statement; then, for each pin (oldest first), the rows a
            /// read at its version sees, in key order. Run inside one
            /// transaction: one snapshot for the current tree and every pin.
            pub(super) async fn scan_rows_on(
                conn: &mut $conn,
                space: &Space,
                sink: &mut dyn $crate::audit::RowSink,
            ) -> Res<()> {
                let state = load_state(conn, space).await?;
                let root = state.map_or_else(ComputedNode::empty_root, |s| s.root);
                let info = state.map(|s| s.info);
                sink.begin(root, info.map_or(space.height, |i| i.height));
                let Some(info) = info else {
                    return Ok(());
                };
                scan_at(conn, space, info, ReadAt::Current, sink).await?;
                for pin in pins_on(conn, space).await? {
                    sink.pinned(&pin);
                    scan_at(conn, space, info, ReadAt::Version(pin.version), sink).await?;
                }
                Ok(())
            }

            /// Feeds `sink` every row of the tree `at`, in key order, a page of
            /// [`SCAN_PAGE`] rows per statement.
            async fn scan_at(
                conn: &mut $conn,
                space: &Space,
                info: NsInfo,
                at: ReadAt,
                sink: &mut dyn $crate::audit::RowSink,
            ) -> Res<()> {
                use $crate::store::row_reads::PAST_EVERY_PATH;
                let mut after: (Vec<u8>, i64) = (Vec::new(), -1);
                loop {
                    let rows = rows_after_on(
                        conn,
                        space,
                        info,
                        at,
                        (&after.0, after.1),
                        &PAST_EVERY_PATH,
                        SCAN_PAGE,
                    )
                    .await?;
                    let next = rows
                        .last()
                        .filter(|_| rows.len() >= SCAN_PAGE)
                        .map(|(key, _)| {
                            (
                                key.path.clone(),
                                i64::try_from(key.depth).unwrap_or(i64::MAX),
                            )
                        });
                    for (key, body) in rows {
                        sink.row(key, &body);
                    }
                    match next {
                        Some(cursor) => after = cursor,
                        None => return Ok(()),
                    }
                }
            }

            /// Takes the write locks of two namespaces, in name order (so two
            /// transactions locking the same pair cannot deadlock).
            pub(super) async fn lock_both(conn: &mut $conn, a: &Space, b: &Space) -> Res<()> {
                let (first, second) = if a.name <= b.name { (a, b) } else { (b, a) };
                lock_namespace(conn, first).await?;
                if first.name != second.name {
                    lock_namespace(conn, second).await?;
                }
                Ok(())
            }

            /// Copies the tree `at` of `src`'s namespace into `target`'s, which
            /// must be vacant (no root, no rows, no pins), in one write
            /// transaction. `None` when the target is not vacant.
            pub(super) async fn copy_on(
                conn: &mut $conn,
                src: &Space,
                at: ReadAt,
                target: &Space,
            ) -> Res<Option<ComputedNode>> {
                lock_both(conn, src, target).await?;
                let from = load_state(conn, src).await?;
                let root = match (from, at) {
                    (None, ReadAt::Current) => ComputedNode::empty_root(),
                    (None, ReadAt::Version(version)) => {
                        return Err(SqlStoreError::NoSuchVersion { version });
                    }
                    (Some(from), ReadAt::Current) => from.root,
                    (Some(from), ReadAt::Version(v)) => root_at_version(conn, src, from, v).await?,
                };
                let to = state_for_write(conn, target).await?;
                if !vacant(conn, target, &to).await? {
                    return Ok(None);
                }
                let version = to.version.saturating_add(1);
                let Some(from) = from else {
                    set_root(conn, target, to.info.id, &root, version, None).await?;
                    return Ok(Some(root));
                };
                target.counters.round_trip(1);
                let copied = match at {
                    ReadAt::Current => {
                        sqlx::query(
                            "INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
                         SELECT $1, path, depth, body, $3 FROM ms_smt_strata WHERE ns = $2 \
                         ORDER BY path, depth",
                        )
                        .bind(to.info.id)
                        .bind(from.info.id)
                        .bind(version)
                        .execute(&mut *conn)
                        .await?
                    }
                    ReadAt::Version(v) => {
                        sqlx::query(
                            "INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
                         SELECT $1, path, depth, body, $3 FROM ( \
                             SELECT path, depth, body FROM ms_smt_strata \
                             WHERE ns = $2 AND version <= $4 \
                           UNION ALL \
                             SELECT path, depth, body FROM ms_smt_history WHERE ns = $2 \
                               AND from_version <= $4 AND to_version > $4) AS u \
                         ORDER BY path, depth",
                        )
                        .bind(to.info.id)
                        .bind(from.info.id)
                        .bind(version)
                        .bind(version_to_sql(v))
                        .execute(&mut *conn)
                        .await?
                    }
                };
                target.counters.written(copied.rows_affected());
                set_root(
                    conn,
                    target,
                    to.info.id,
                    &root,
                    version,
                    Some(from.info.height),
                )
                .await?;
                target.memo_clear();
                Ok(Some(root))
            }

            /// The root pinned at `version`, or the current one if it is the
            /// current version.
            pub(super) async fn root_at_version(
                conn: &mut $conn,
                space: &Space,
                state: NsState,
                version: u64,
            ) -> Res<ComputedNode> {
                if version_to_sql(version) == state.version {
                    return Ok(state.root);
                }
                space.counters.round_trip(1);
                let row: Option<(Option<Vec<u8>>, Option<i64>)> = sqlx::query_as(
                    "SELECT root_hash, root_sum FROM ms_smt_pins WHERE ns = $1 AND version = $2 \
                 LIMIT 1",
                )
                .bind(state.info.id)
                .bind(version_to_sql(version))
                .fetch_optional(&mut *conn)
                .await?;
                let (hash, sum) = row.ok_or(SqlStoreError::NoSuchVersion { version })?;
                decode_root(&space.name, hash.zip(sum))
            }

            /// True when the namespace holds no tree, no rows and no pins.
            pub(super) async fn vacant(
                conn: &mut $conn,
                space: &Space,
                state: &NsState,
            ) -> Res<bool> {
                if state.root != ComputedNode::empty_root() || state.max_pin.is_some() {
                    return Ok(false);
                }
                space.counters.round_trip(1);
                let rows: bool =
                    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM ms_smt_strata WHERE ns = $1)")
                        .bind(state.info.id)
                        .fetch_one(&mut *conn)
                        .await?;
                Ok(!rows)
            }

            /// Sets a namespace's root and version (and its height, when
            /// given).
            pub(super) async fn set_root(
                conn: &mut $conn,
                space: &Space,
                id: i64,
                root: &ComputedNode,
                version: i64,
                height: Option<StratumHeight>,
            ) -> Res<()> {
                let stored = (*root != ComputedNode::empty_root())
                    .then(|| (root.hash.0.to_vec(), sum_to_sql(root.sum)));
                let (hash, sum) = stored.unzip();
                space.counters.round_trip(1);
                sqlx::query(
                    "UPDATE ms_smt_namespaces SET root_hash = $1, root_sum = $2, version = $3, \
                     height = COALESCE($4, height) WHERE id = $5",
                )
                .bind(hash)
                .bind(sum)
                .bind(version)
                .bind(height.map(|h| h.get() as i64))
                .bind(id)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            /// Gives `target`'s name to `staging`'s tree if `target` is vacant
            /// and `staging` holds `expected` and no pins (see
            /// [`BulkStore::take_tree_of`]).
            pub(super) async fn take_tree_on(
                conn: &mut $conn,
                target: &Space,
                staging: &Space,
                expected: &ComputedNode,
            ) -> Res<bool> {
                lock_both(conn, target, staging).await?;
                let Some(from) = load_state(conn, staging).await? else {
                    return Ok(false);
                };
                if from.root != *expected || from.max_pin.is_some() {
                    return Ok(false);
                }
                let mut version = 1;
                if let Some(to) = load_state(conn, target).await? {
                    if !vacant(conn, target, &to).await? {
                        return Ok(false);
                    }
                    version = to.version.saturating_add(1).max(from.version);
                    target.counters.round_trip(1);
                    sqlx::query("DELETE FROM ms_smt_namespaces WHERE id = $1")
                        .bind(to.info.id)
                        .execute(&mut *conn)
                        .await?;
                }
                target.counters.round_trip(1);
                sqlx::query("UPDATE ms_smt_namespaces SET name = $1, version = $2 WHERE id = $3")
                    .bind(&*target.name)
                    .bind(version)
                    .bind(from.info.id)
                    .execute(&mut *conn)
                    .await?;
                target.info.set(Some(from.info));
                staging.info.set(None);
                target.memo_clear();
                staging.memo_clear();
                Ok(true)
            }
        }
        use ops::*;
    };
}

pub(crate) use namespace_ops;
