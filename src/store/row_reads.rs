//! Reads of strata rows at a version, and the walks the tree's universe
//! operations build on them; shared by both SQL stores.
//!
//! An engine answers two queries ([`RowQueries`]): the rows at given keys,
//! and the rows after a path in key order. At [`ReadAt::Current`] both read
//! `ms_smt_strata` alone; at [`ReadAt::Version`] a position's row is the one
//! that was current then: the live row if it was written at or before that
//! version, else the kept copy in `ms_smt_history` whose `[since, until)`
//! span holds it. Everything here is built on those two queries:
//!
//! * [`paths_at`]: key paths at a pinned version, one statement per row
//!   depth (the current tree has its one-statement recursive walk);
//! * [`positions`]: the rows holding given positions;
//! * [`in_order`]: the rows a left-to-right walk needs next.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use super::sql::{NsInfo, Space, SqlStoreError};
use super::{PathStart, ReadAt};
use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::node::Node;
use crate::position::Position;
use crate::strata::{Row, RowKey, path_bytes};

type Res<T> = Result<T, SqlStoreError>;

/// A path no stored path reaches: 33 bytes sort after every 32-byte path.
pub(crate) const PAST_EVERY_PATH: [u8; 33] = [0xff; 33];

/// The row queries an engine runs for the shared walks.
pub(crate) trait RowQueries: Send {
    /// The namespace's id and height, `None` when it does not exist.
    fn ns_info(&mut self, space: &Space) -> impl Future<Output = Res<Option<NsInfo>>> + Send;

    /// The bodies of the rows at `keys` that exist at `at`.
    fn rows_at(
        &mut self,
        space: &Space,
        info: NsInfo,
        at: ReadAt,
        keys: &[RowKey],
    ) -> impl Future<Output = Res<Vec<(RowKey, Vec<u8>)>>> + Send;

    /// Up to `limit` rows of `at` with `after < path < before`, in key
    /// order (byte order of the path, then depth).
    fn rows_after(
        &mut self,
        space: &Space,
        info: NsInfo,
        at: ReadAt,
        after: &[u8],
        before: &[u8],
        limit: usize,
    ) -> impl Future<Output = Res<Vec<(RowKey, Vec<u8>)>>> + Send;
}

/// Decodes rows into their nodes (counted as read), keeping each decoded
/// row by key for the caller.
fn decode(
    space: &Space,
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
pub(crate) async fn paths_at<C: RowQueries>(
    conn: &mut C,
    space: &Space,
    at: ReadAt,
    starts: &[PathStart],
    siblings: bool,
) -> Res<Vec<(Hash, Node)>> {
    let mut nodes = Vec::new();
    let Some(info) = conn.ns_info(space).await? else {
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
        let rows = conn.rows_at(space, info, at, &keys).await?;
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
pub(crate) async fn positions<C: RowQueries>(
    conn: &mut C,
    space: &Space,
    at: ReadAt,
    nodes: &[(Position, Hash)],
) -> Res<Vec<(Hash, Node)>> {
    let mut out = Vec::new();
    let Some(info) = conn.ns_info(space).await? else {
        return Ok(out);
    };
    let mut keys: Vec<RowKey> = nodes
        .iter()
        .map(|(p, _)| RowKey::on_path(info.height.row_depth(p.level()), p.path()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let rows = conn.rows_at(space, info, at, &keys).await?;
    decode(space, info, rows, &mut out)?;
    Ok(out)
}

/// What a left-to-right walk of the subtree at `from` needs next: the
/// rows on `probe`'s path from `from`'s row down, then up to `limit` rows
/// after `probe` in key order, before `until`.
pub(crate) async fn in_order<C: RowQueries>(
    conn: &mut C,
    space: &Space,
    at: ReadAt,
    from: Position,
    probe: Key,
    until: Option<Key>,
    limit: usize,
) -> Res<Vec<(Hash, Node)>> {
    let mut out = Vec::new();
    let Some(info) = conn.ns_info(space).await? else {
        return Ok(out);
    };
    let first = info.height.row_depth(from.level());
    let keys: Vec<RowKey> = (first..=MAX_LEVEL)
        .step_by(info.height.get())
        .map(|d| RowKey::on_path(d, &probe))
        .collect();
    let path = conn.rows_at(space, info, at, &keys).await?;
    decode(space, info, path, &mut out)?;
    let after = path_bytes(&probe, MAX_LEVEL);
    let before = until.map(|k| path_bytes(&k, MAX_LEVEL));
    let before = before.as_deref().unwrap_or(&PAST_EVERY_PATH);
    let rows = conn
        .rows_after(space, info, at, &after, before, limit.max(1))
        .await?;
    decode(space, info, rows, &mut out)?;
    Ok(out)
}
