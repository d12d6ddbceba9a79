//! Namespace, commit, pin and whole-tree operations, generic over the
//! engine: what differs is behind [`Dialect`], the rest is one statement
//! text for both.

use sqlx::SqlSafeStr;

use super::dialect::{Arg, CommitRows, Dialect, RowRead, fetch_optional};
use super::error::{Res, SqlStoreError};
use super::namespaces::{load_state, state_for_write, states_for_write};
use super::reads::{PAST_EVERY_PATH, rows_after_on};
use super::space::{
    NamespaceState, NsInfo, NsState, SCAN_PAGE, decode_root, merge, root_columns, version_from_sql,
    version_to_sql,
};
use crate::audit::RowSink;
use crate::descent::UpdateBatch;
use crate::node::ComputedNode;
use crate::store::{ForestCommit, ReadAt};
use crate::strata::{self, StratumHeight};
use ms_smt::store::Pin;

/// A pin row: name, version, root hash and sum (NULL for an empty tree).
type PinRow = (String, i64, Option<Vec<u8>>, Option<i64>);

/// One namespace's part of a commit of several.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommitPart<'a> {
    pub space: &'a NamespaceState,
    pub batch: &'a UpdateBatch,
}

/// Check-and-apply of several namespaces' batches inside an open
/// transaction (or savepoint): every namespace locked, every root
/// checked (a batch that changes nothing only guards), then the rows each
/// batch touches merged and all of them written with a constant number
/// of statements. Returns `RootMoved` without writing when a root is not
/// its batch's old root. Parts name distinct namespaces.
pub(crate) async fn commit_many_on<C: Dialect>(
    conn: &mut C,
    parts: &[CommitPart<'_>],
) -> Res<ForestCommit> {
    let spaces: Vec<&NamespaceState> = parts.iter().map(|p| p.space).collect();
    conn.lock_namespaces(&spaces).await?;
    let states = states_for_write(conn, &spaces).await?;
    for (index, (part, state)) in parts.iter().zip(&states).enumerate() {
        if state.root != part.batch.old_root {
            part.space.counters.conflict();
            return Ok(ForestCommit::RootMoved {
                index,
                current: state.root,
            });
        }
    }
    let mut touched = Vec::new();
    for (part, state) in parts.iter().zip(&states) {
        part.space.fail("root_checked")?;
        if part.batch.is_noop() {
            continue;
        }
        let keys = strata::touched_rows(part.batch, state.info.height);
        let (known, unknown) = part.space.memo_take(&part.batch.old_root, &keys);
        touched.push((part, *state, keys, known, unknown));
    }
    let reads: Vec<RowRead<'_>> = touched
        .iter()
        .filter(|t| !t.4.is_empty())
        .map(|(part, state, _, _, unknown)| RowRead {
            space: part.space,
            info: state.info,
            keys: unknown,
        })
        .collect();
    let mut stored = if reads.is_empty() {
        Vec::new()
    } else {
        conn.read_rows(&reads).await?
    }
    .into_iter();
    let mut commits = Vec::with_capacity(touched.len());
    for (part, state, keys, known, unknown) in touched {
        let rows = if unknown.is_empty() {
            Vec::new()
        } else {
            stored.next().unwrap_or_default()
        };
        let (changes, leaves) =
            merge(part.space, state.info.height, part.batch, keys, known, rows)?;
        part.space.fail("merged")?;
        let leaf_delta = leaf_delta(&leaves);
        commits.push(CommitRows {
            space: part.space,
            state,
            changes,
            leaf_delta,
            leaves: if state.journal.is_some() {
                leaves
            } else {
                Vec::new()
            },
            new_root: part.batch.new_root,
        });
    }
    conn.write_commits(&commits).await?;
    for commit in &commits {
        commit.space.counters.written(commit.changes.len() as u64);
    }
    Ok(ForestCommit::Committed)
}

/// What a commit's leaf changes add to the namespace's leaf count: one per
/// key that had no leaf and has one, minus one per key that had one and
/// has none (a replaced leaf counts nothing).
pub(crate) fn leaf_delta(leaves: &[crate::descent::LeafChange]) -> i64 {
    leaves.iter().fold(0i64, |delta, change| {
        match (change.old.is_empty(), change.new.is_empty()) {
            (true, false) => delta.saturating_add(1),
            (false, true) => delta.saturating_sub(1),
            _ => delta,
        }
    })
}

/// Removes the namespace's rows and its root; rows a pin may still read
/// are kept first.
pub(crate) async fn delete_all_on<C: Dialect>(conn: &mut C, space: &NamespaceState) -> Res<()> {
    conn.lock_namespace(space).await?;
    let Some(state) = load_state(conn, space).await? else {
        return Ok(());
    };
    space.memo_clear();
    conn.clear(space, &state).await?;
    if state.journal.is_some() {
        let version = state.version.saturating_add(1);
        super::journal::restart_on(conn, space, state.info.id, version).await?;
    }
    Ok(())
}

fn decode_pin(space: &NamespaceState, (name, version, hash, sum): PinRow) -> Res<Pin> {
    Ok(Pin {
        name,
        root: decode_root(&space.name, hash.zip(sum))?,
        version: version_from_sql(version)?,
    })
}

/// Pins the current root under `name` inside a write transaction.
pub(crate) async fn pin_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    name: &str,
) -> Res<Pin> {
    conn.lock_namespace(space).await?;
    let state = state_for_write(conn, space).await?;
    let id = state.info.id;
    let replaced: Option<(i64,)> = fetch_optional(
        conn,
        space.exchange(),
        "SELECT version FROM ms_smt_pins WHERE ns = $1 AND name = $2".into_sql_str(),
        &[Arg::Int(id), Arg::Text(name)],
    )
    .await?;
    let (hash, sum) = root_columns(&state.root);
    conn.execute(
        space.exchange(),
        "INSERT INTO ms_smt_pins (ns, name, version, root_hash, root_sum) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (ns, name) DO UPDATE SET version = excluded.version, \
             root_hash = excluded.root_hash, root_sum = excluded.root_sum"
            .into_sql_str(),
        &[
            Arg::Int(id),
            Arg::Text(name),
            Arg::Int(state.version),
            Arg::OptBytes(hash),
            Arg::OptInt(sum),
        ],
    )
    .await?;
    if let Some((old,)) = replaced.filter(|(v,)| *v != state.version) {
        release_version(conn, space, id, old).await?;
    }
    Ok(Pin {
        name: name.to_owned(),
        root: state.root,
        version: version_from_sql(state.version)?,
    })
}

/// Removes the pin `name` inside a write transaction; false when none.
pub(crate) async fn unpin_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    name: &str,
) -> Res<bool> {
    conn.lock_namespace(space).await?;
    let Some(info) = load_state(conn, space).await?.map(|s| s.info) else {
        return Ok(false);
    };
    let removed: Option<(i64,)> = fetch_optional(
        conn,
        space.exchange(),
        "DELETE FROM ms_smt_pins WHERE ns = $1 AND name = $2 RETURNING version".into_sql_str(),
        &[Arg::Int(info.id), Arg::Text(name)],
    )
    .await?;
    match removed {
        Some((version,)) => release_version(conn, space, info.id, version)
            .await
            .map(|()| true),
        None => Ok(false),
    }
}

/// Deletes the kept rows that only version `version` (no longer pinned)
/// could read: those current at it that no remaining pin reads.
async fn release_version<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    ns: i64,
    version: i64,
) -> Res<()> {
    conn.execute(
        space.exchange(),
        "DELETE FROM ms_smt_history AS h WHERE h.ns = $1 \
           AND h.from_version <= $2 AND h.to_version > $2 \
           AND NOT EXISTS (SELECT 1 FROM ms_smt_pins p WHERE p.ns = $1 \
               AND p.version >= h.from_version AND p.version < h.to_version)"
            .into_sql_str(),
        &[Arg::Int(ns), Arg::Int(version)],
    )
    .await?;
    Ok(())
}

/// The pin `name`, if any.
pub(crate) async fn pinned_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    name: &str,
) -> Res<Option<Pin>> {
    let row: Option<PinRow> = fetch_optional(
        conn,
        space.exchange(),
        "SELECT p.name, p.version, p.root_hash, p.root_sum FROM ms_smt_pins p \
         JOIN ms_smt_namespaces n ON n.id = p.ns WHERE n.name = $1 AND p.name = $2"
            .into_sql_str(),
        &[Arg::Text(&space.name), Arg::Text(name)],
    )
    .await?;
    row.map(|r| decode_pin(space, r)).transpose()
}

/// Every pin of the namespace, oldest version first.
pub(crate) async fn pins_on<C: Dialect>(conn: &mut C, space: &NamespaceState) -> Res<Vec<Pin>> {
    let rows: Vec<PinRow> = conn
        .fetch_all(
            space.exchange(),
            "SELECT p.name, p.version, p.root_hash, p.root_sum FROM ms_smt_pins p \
             JOIN ms_smt_namespaces n ON n.id = p.ns WHERE n.name = $1 \
             ORDER BY p.version, p.name"
                .into_sql_str(),
            &[Arg::Text(&space.name)],
        )
        .await?;
    rows.into_iter().map(|r| decode_pin(space, r)).collect()
}

/// Hands `sink` the namespace's root and every row in key order, a page
/// per statement; then, for each pin (oldest first), the rows a read at
/// its version sees. Run inside one transaction: one snapshot for all.
pub(crate) async fn scan_rows_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    sink: &mut dyn RowSink,
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

/// Feeds `sink` every row of the tree `at`, in key order, [`SCAN_PAGE`]
/// rows per statement.
async fn scan_at<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    info: NsInfo,
    at: ReadAt,
    sink: &mut dyn RowSink,
) -> Res<()> {
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
                    key.path.to_vec(),
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
async fn lock_both<C: Dialect>(conn: &mut C, a: &NamespaceState, b: &NamespaceState) -> Res<()> {
    let (first, second) = if a.name <= b.name { (a, b) } else { (b, a) };
    conn.lock_namespace(first).await?;
    if first.name != second.name {
        conn.lock_namespace(second).await?;
    }
    Ok(())
}

/// Copies the tree `at` of `src`'s namespace into `target`'s, which must
/// be vacant (no root, no rows, no pins), in one write transaction.
/// `None` when the target is not vacant.
pub(crate) async fn copy_on<C: Dialect>(
    conn: &mut C,
    src: &NamespaceState,
    at: ReadAt,
    target: &NamespaceState,
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
        set_root(
            conn,
            target,
            to.info.id,
            &root,
            version,
            None,
            Copied::Empty,
        )
        .await?;
        return Ok(Some(root));
    };
    let copied = match at {
        ReadAt::Current => {
            conn.execute(
                target.exchange(),
                "INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
                 SELECT $1, path, depth, body, $3 FROM ms_smt_strata WHERE ns = $2 \
                 ORDER BY path, depth"
                    .into_sql_str(),
                &[
                    Arg::Int(to.info.id),
                    Arg::Int(from.info.id),
                    Arg::Int(version),
                ],
            )
            .await?
        }
        ReadAt::Version(v) => {
            conn.execute(
                target.exchange(),
                "INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
                 SELECT $1, path, depth, body, $3 FROM ( \
                     SELECT path, depth, body FROM ms_smt_strata \
                     WHERE ns = $2 AND version <= $4 \
                   UNION ALL \
                     SELECT path, depth, body FROM ms_smt_history WHERE ns = $2 \
                       AND from_version <= $4 AND to_version > $4) AS u \
                 ORDER BY path, depth"
                    .into_sql_str(),
                &[
                    Arg::Int(to.info.id),
                    Arg::Int(from.info.id),
                    Arg::Int(version),
                    Arg::Int(version_to_sql(v)),
                ],
            )
            .await?
        }
    };
    target.counters.written(copied);
    let count = match at {
        _ if root == ComputedNode::empty_root() => Copied::Empty,
        ReadAt::Current => Copied::From(from.info.id),
        ReadAt::Version(_) => Copied::Uncounted,
    };
    set_root(
        conn,
        target,
        to.info.id,
        &root,
        version,
        Some(from.info.height),
        count,
    )
    .await?;
    target.memo_clear();
    Ok(Some(root))
}

/// The root pinned at `version`, or the current one if it is the current
/// version.
async fn root_at_version<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    state: NsState,
    version: u64,
) -> Res<ComputedNode> {
    if version_to_sql(version) == state.version {
        return Ok(state.root);
    }
    let row: Option<(Option<Vec<u8>>, Option<i64>)> = fetch_optional(
        conn,
        space.exchange(),
        "SELECT root_hash, root_sum FROM ms_smt_pins WHERE ns = $1 AND version = $2 \
         LIMIT 1"
            .into_sql_str(),
        &[Arg::Int(state.info.id), Arg::Int(version_to_sql(version))],
    )
    .await?;
    let (hash, sum) = row.ok_or(SqlStoreError::NoSuchVersion { version })?;
    decode_root(&space.name, hash.zip(sum))
}

/// Deletes `space`'s namespace row if the namespace is vacant (see
/// [`BulkStore::forget_if_vacant`](crate::store::BulkStore::forget_if_vacant)).
pub(crate) async fn forget_on<C: Dialect>(conn: &mut C, space: &NamespaceState) -> Res<bool> {
    conn.lock_namespace(space).await?;
    let Some(state) = load_state(conn, space).await? else {
        return Ok(true);
    };
    if !vacant(conn, space, &state).await? {
        return Ok(false);
    }
    delete_vacant_row(conn, space, state.info.id).await?;
    space.info.set(None);
    Ok(true)
}

/// Deletes the row of a namespace found vacant. Nothing else refers to
/// it: a vacant namespace has no rows and no pins, and without pins no
/// history is kept.
async fn delete_vacant_row<C: Dialect>(conn: &mut C, space: &NamespaceState, id: i64) -> Res<()> {
    conn.execute(
        space.exchange(),
        "DELETE FROM ms_smt_namespaces WHERE id = $1".into_sql_str(),
        &[Arg::Int(id)],
    )
    .await?;
    Ok(())
}

/// True when the namespace holds no tree, no rows and no pins.
async fn vacant<C: Dialect>(conn: &mut C, space: &NamespaceState, state: &NsState) -> Res<bool> {
    if state.root != ComputedNode::empty_root()
        || state.max_pin.is_some()
        || state.journal.is_some()
    {
        return Ok(false);
    }
    let rows: Option<(bool,)> = fetch_optional(
        conn,
        space.exchange(),
        "SELECT EXISTS (SELECT 1 FROM ms_smt_strata WHERE ns = $1)".into_sql_str(),
        &[Arg::Int(state.info.id)],
    )
    .await?;
    Ok(!rows.is_some_and(|(r,)| r))
}

/// The leaf count a copied tree starts with.
#[derive(Debug, Clone, Copy)]
enum Copied {
    /// The empty tree: 0.
    Empty,
    /// The current tree of namespace `id`: its count (or, while that is
    /// not counted yet, its count of changes, still to be counted).
    From(i64),
    /// A pinned tree: not counted (a pin keeps no count).
    Uncounted,
}

/// Sets a namespace's root, version and leaf count (and its height, when
/// given). A count still to be counted (`leaves_since` not NULL) is
/// marked with this version, so a recount that began before it does not
/// apply ([`count_leaves`](super::SqlStore::count_leaves)).
async fn set_root<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    id: i64,
    root: &ComputedNode,
    version: i64,
    height: Option<StratumHeight>,
    count: Copied,
) -> Res<()> {
    let (hash, sum) = root_columns(root);
    let (from, uncounted) = match count {
        Copied::Empty => (None, 0),
        Copied::From(src) => (Some(src), 0),
        Copied::Uncounted => (None, 1),
    };
    conn.execute(
        space.exchange(),
        "UPDATE ms_smt_namespaces SET root_hash = $1, root_sum = $2, version = $3, \
             height = COALESCE($4, height), \
             leaves = COALESCE((SELECT s.leaves FROM ms_smt_namespaces s WHERE s.id = $6), 0), \
             leaves_since = CASE WHEN $7 = 1 THEN $3 ELSE (SELECT CASE WHEN \
                 s.leaves_since IS NULL THEN NULL ELSE $3 END FROM ms_smt_namespaces s \
                 WHERE s.id = $6) END \
         WHERE id = $5"
            .into_sql_str(),
        &[
            Arg::OptBytes(hash),
            Arg::OptInt(sum),
            Arg::Int(version),
            Arg::OptInt(height.map(|h| h.get() as i64)),
            Arg::Int(id),
            Arg::OptInt(from),
            Arg::Int(uncounted),
        ],
    )
    .await?;
    Ok(())
}

/// Gives `target`'s name to `staging`'s tree if `target` is vacant and
/// `staging` holds `expected` and no pins (see
/// [`BulkStore::swap_in_from`](crate::store::BulkStore::swap_in_from)).
pub(crate) async fn take_tree_on<C: Dialect>(
    conn: &mut C,
    target: &NamespaceState,
    staging: &NamespaceState,
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
        delete_vacant_row(conn, target, to.info.id).await?;
    }
    conn.execute(
        target.exchange(),
        "UPDATE ms_smt_namespaces SET name = $1, version = $2 WHERE id = $3".into_sql_str(),
        &[
            Arg::Text(&target.name),
            Arg::Int(version),
            Arg::Int(from.info.id),
        ],
    )
    .await?;
    target.info.set(Some(from.info));
    staging.info.set(None);
    target.memo_clear();
    staging.memo_clear();
    Ok(true)
}
