//! Reads of strata rows at a version, and the walks the tree's universe
//! operations build on them.
//!
//! Two queries underlie them: the rows at given keys ([`rows_at`]) and
//! the rows after a path in key order ([`rows_after_on`]). At
//! [`ReadAt::Current`] both read `ms_smt_strata` alone; at
//! [`ReadAt::Version`] a position's row is the one that was current then:
//! the live row if it was written at or before that version, else the
//! kept copy in `ms_smt_history` whose `[since, until)` span holds it.
//! Built on them:
//!
//! * [`paths_on`]: key paths; the current tree has its one-statement
//!   recursive walk ([`Dialect::walk_paths`]), a pinned version one
//!   statement per row depth ([`paths_at`]);
//! * [`positions`]: the rows holding given positions;
//! * [`in_order`]: the rows a left-to-right walk needs next.

use std::collections::{HashMap, HashSet};

use sqlx::SqlSafeStr;

use super::dialect::{Arg, Dialect, PathWalk, RowRead};
use super::error::Res;
use super::namespaces::namespace;
use super::space::{NamespaceState, NsInfo, PAST_EVERY_DEPTH, keyed_rows, version_to_sql};
use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::node::Node;
use crate::position::Position;
use crate::store::{PathStart, ReadAt};
use crate::strata::{Row, RowKey, path_bytes};

/// A path no stored path reaches: 33 bytes sort after every 32-byte path.
pub(crate) const PAST_EVERY_PATH: [u8; 33] = [0xff; 33];

/// The bodies of the rows at `keys` that exist at `at`.
async fn rows_at<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    info: NsInfo,
    at: ReadAt,
    keys: &[RowKey],
) -> Res<Vec<(RowKey, Vec<u8>)>> {
    match at {
        ReadAt::Current => Ok(conn
            .read_rows(&[RowRead { space, info, keys }])
            .await?
            .pop()
            .unwrap_or_default()),
        ReadAt::Version(v) => {
            conn.read_rows_at(space, info, version_to_sql(v), keys)
                .await
        }
    }
}

/// Up to `limit` rows of `at` after the row key `after` (path, then
/// depth) and with `path < before`, in key order. The in-order walk skips
/// whole paths (depth [`PAST_EVERY_DEPTH`]); the audit's scan pages.
pub(crate) async fn rows_after_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    info: NsInfo,
    at: ReadAt,
    (after, after_depth): (&[u8], i64),
    before: &[u8],
    limit: usize,
) -> Res<Vec<(RowKey, Vec<u8>)>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let args = [
        Arg::Int(info.id),
        Arg::Bytes(after),
        Arg::Int(after_depth),
        Arg::Bytes(before),
        Arg::Int(limit),
    ];
    let rows: Vec<(Vec<u8>, i64, Vec<u8>)> = match at {
        // The table's `depth`, not the cast output column of that name:
        // Postgres then returns the index order.
        ReadAt::Current => {
            conn.fetch_all(
                space.exchange(),
                "SELECT path, CAST(depth AS BIGINT), body FROM ms_smt_strata \
                 WHERE ns = $1 AND (path, depth) > ($2, $3) AND path < $4 \
                 ORDER BY path, ms_smt_strata.depth LIMIT $5"
                    .into_sql_str(),
                &args,
            )
            .await?
        }
        // Each side stops after `limit` rows in key order.
        ReadAt::Version(v) => {
            let mut args = args.to_vec();
            args.push(Arg::Int(version_to_sql(v)));
            conn.fetch_all(
                space.exchange(),
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
                 ORDER BY path, depth LIMIT $5"
                    .into_sql_str(),
                &args,
            )
            .await?
        }
    };
    keyed_rows(space, rows)
}

/// Key paths at `at`: the engine's one-statement walk for the current
/// tree (after [`Dialect::guard_walk`] when `guard`), row depth by row
/// depth at a pinned version.
pub(crate) async fn paths_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    at: ReadAt,
    starts: &[PathStart],
    siblings: bool,
    guard: bool,
) -> Res<Vec<(Hash, Node)>> {
    if at != ReadAt::Current {
        return paths_at(conn, space, at, starts, siblings).await;
    }
    let Some(info) = namespace(conn, space).await? else {
        return Ok(Vec::new());
    };
    if guard {
        conn.guard_walk(space).await?;
    }
    let walk = PathWalk {
        space,
        info,
        starts,
        siblings,
    };
    Ok(conn.walk_paths(&[walk]).await?.pop().unwrap_or_default())
}

/// Decodes rows into their nodes (counted as read), keeping each decoded
/// row by key for the caller.
fn decode(
    space: &NamespaceState,
    info: NsInfo,
    rows: Vec<(RowKey, Vec<u8>)>,
    nodes: &mut Vec<(Hash, Node)>,
) -> Res<HashMap<RowKey, Row>> {
    let mut decoded = HashMap::with_capacity(rows.len());
    for (key, body) in rows {
        let mut row =
            Row::decode(key.depth, info.height, &body).map_err(|e| space.rows_error(e))?;
        let (_, found) = row.nodes().map_err(|e| space.rows_error(e))?;
        space.counters.read(found.len() as u64);
        nodes.extend(found);
        decoded.insert(key, row);
    }
    Ok(decoded)
}

/// Every node on the paths of `starts` at `at` (with `siblings`, also the
/// sibling row at each row boundary), reading one row depth per
/// statement: a walk continues into the next row only where its row has
/// a branch down to it.
async fn paths_at<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    at: ReadAt,
    starts: &[PathStart],
    siblings: bool,
) -> Res<Vec<(Hash, Node)>> {
    let mut nodes = Vec::new();
    let Some(info) = namespace(conn, space).await? else {
        return Ok(nodes);
    };
    let h = info.height.get();
    let mut walks: Vec<(Key, usize)> = starts
        .iter()
        .map(|s| (s.key, info.height.row_depth(s.level.min(MAX_LEVEL))))
        .collect();
    let mut seen: HashSet<RowKey> = HashSet::new();
    while !walks.is_empty() {
        let mut keys: Vec<RowKey> = Vec::with_capacity(walks.len());
        for (key, depth) in &walks {
            keys.push(RowKey::on_path(*depth, key));
            if siblings && let Some(bit) = depth.checked_sub(1) {
                let other = key.with_bit(bit, !key.bit(bit));
                keys.push(RowKey::on_path(*depth, &other));
            }
        }
        keys.sort_unstable();
        keys.dedup();
        keys.retain(|k| !seen.contains(k));
        seen.extend(keys.iter().cloned());
        let rows = rows_at(conn, space, info, at, &keys).await?;
        let decoded = decode(space, info, rows, &mut nodes)?;
        walks.retain_mut(|(key, depth)| {
            let below = depth.saturating_add(h);
            let here = RowKey::on_path(*depth, key);
            let continues = below <= MAX_LEVEL
                && decoded
                    .get(&here)
                    .is_some_and(|row| row.has_child_row(&RowKey::on_path(below, key)));
            *depth = below;
            continues
        });
    }
    Ok(nodes)
}

/// The rows holding each of `nodes`' positions, at `at`.
pub(crate) async fn positions<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    at: ReadAt,
    nodes: &[(Position, Hash)],
) -> Res<Vec<(Hash, Node)>> {
    let mut out = Vec::new();
    let Some(info) = namespace(conn, space).await? else {
        return Ok(out);
    };
    let mut keys: Vec<RowKey> = nodes
        .iter()
        .map(|(p, _)| RowKey::on_path(info.height.row_depth(p.level()), p.path()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let rows = rows_at(conn, space, info, at, &keys).await?;
    decode(space, info, rows, &mut out)?;
    Ok(out)
}

/// What a left-to-right walk of the subtree at `from` needs next: the
/// rows on `probe`'s path from `from`'s row down, then up to `limit` rows
/// after `probe` in key order, before `until`.
pub(crate) async fn in_order<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    at: ReadAt,
    from: Position,
    probe: Key,
    until: Option<Key>,
    limit: usize,
) -> Res<Vec<(Hash, Node)>> {
    let mut out = Vec::new();
    let Some(info) = namespace(conn, space).await? else {
        return Ok(out);
    };
    let first = info.height.row_depth(from.level());
    let keys: Vec<RowKey> = (first..=MAX_LEVEL)
        .step_by(info.height.get())
        .map(|d| RowKey::on_path(d, &probe))
        .collect();
    let path = rows_at(conn, space, info, at, &keys).await?;
    decode(space, info, path, &mut out)?;
    let after = path_bytes(&probe, MAX_LEVEL);
    let before = until.map(|k| path_bytes(&k, MAX_LEVEL));
    let before = before.as_deref().unwrap_or(&PAST_EVERY_PATH);
    let rows = rows_after_on(
        conn,
        space,
        info,
        at,
        (&after, PAST_EVERY_DEPTH),
        before,
        limit.max(1),
    )
    .await?;
    decode(space, info, rows, &mut out)?;
    Ok(out)
}
