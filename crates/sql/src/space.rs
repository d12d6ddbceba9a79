//! Per-handle namespace state: the name and settings, the id last seen,
//! counters, remembered nodes and rows; and the decoding of what the
//! path walks and root columns return.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::error::{Res, SqlStoreError};
use super::reply_wait::{Exchange, ReplyWait};
use crate::descent::LeafChange;
use crate::hash::Hash;
use crate::key::Key;
use crate::node::{ComputedNode, Node};
use crate::store::{Counters, PathStart, RecentNodes};
use crate::strata::{Fast, Row, RowChange, RowKey, RowMap, StrataError, StratumHeight};

/// A namespace's id and stratum height.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NsInfo {
    pub id: i64,
    pub height: StratumHeight,
}

/// A namespace row as a write transaction sees it.
#[derive(Debug, Clone, Copy)]
pub struct NsState {
    pub info: NsInfo,
    pub root: ComputedNode,
    /// Commits the namespace has taken.
    pub version: i64,
    /// The newest pinned version, if any pin exists: a commit keeps the
    /// rows it replaces that were written at or before it.
    pub max_pin: Option<i64>,
    /// The version the change journal starts at, when it is on: every
    /// commit after it records its leaf changes (`journal.rs`).
    pub journal: Option<i64>,
}

/// The id and height a handle last saw for its namespace's name.
///
/// Refreshed by every root load: an import swaps the tree behind a name
/// ([`BulkStore::swap_in_from`](crate::store::BulkStore::swap_in_from)) by
/// renaming another namespace, so a name's id may change. Writes use the
/// row their own transaction read, never this cache.
#[derive(Debug, Default)]
pub struct InfoCell(Mutex<Option<NsInfo>>);

impl InfoCell {
    /// The last id and height seen, if the namespace existed then.
    pub fn get(&self) -> Option<NsInfo> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what a root load saw (`None`: no such namespace).
    pub fn set(&self, info: Option<NsInfo>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = info;
    }
}

/// What every handle on one namespace carries: its name, the height it
/// creates the namespace with, its Postgres reply wait, the id once known,
/// counters and memory.
#[derive(Debug)]
pub struct NamespaceState {
    pub name: Arc<str>,
    pub height: StratumHeight,
    /// How long the handle's Postgres round trips wait for a reply: every
    /// statement sent for this namespace is bounded by it.
    pub reply_wait: ReplyWait,
    pub info: InfoCell,
    pub counters: Counters,
    pub recent: RecentNodes,
    rows: Mutex<RowMemo>,
}

/// Decoded rows the handle last read or wrote, all of the tree with root
/// hash `root`, so that a commit on that root merges into them instead of
/// reading them again.
///
/// Only the last two commits' worth is kept: the rows of the current
/// generation (read or merged since the last commit) and of the one before
/// it (what a pipelined group read while the previous group committed).
/// Each commit starts a generation and drops the oldest, so a namespace's
/// memo holds what its recent commits touched, not every row its commits
/// ever merged (a forest of many small trees, each written now and then,
/// would otherwise keep every one of their rows in memory). A row that is
/// not kept is read again by the commit that needs it.
///
/// Rows are a function of the tree: every position holds the one node the
/// tree has there, so the rows of a tree with root `root` are the same
/// whenever and by whomever they were read or written, and a commit that
/// found the stored root equal to `root` (under the write lock) may use
/// them as the stored rows. A read tags its rows with the root its own
/// statement saw; a commit tags the rows it merged with the new root
/// before the transaction ends (if it then fails, no tree has that root
/// and the rows are never used, or the tree reaches that root later and
/// they are right again).
///
/// A read may also come back tagged with the root just before the last
/// commit (a pipelined group's read phase ran while the group before it
/// committed). Its rows that the commit did not touch are the same in both
/// trees, so they are kept (`behind`); only rows of an unknown root start
/// the memo over.
#[derive(Debug, Default)]
struct RowMemo {
    root: Option<Hash>,
    /// Rows read or merged since the last commit.
    rows: RowMap,
    /// Rows of the generation before (dropped at the next commit).
    older: RowMap,
    /// The root the last commit started from and the rows it changed.
    behind: Option<(Hash, HashSet<RowKey, Fast>)>,
}

impl RowMemo {
    /// The row `key`, if held.
    fn get(&self, key: &RowKey) -> Option<&Row> {
        self.rows.get(key).or_else(|| self.older.get(key))
    }

    /// Rows held.
    fn len(&self) -> usize {
        self.rows.len().saturating_add(self.older.len())
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.older.clear();
        self.behind = None;
    }

    /// True when the memo shows that row `key` does not exist: a row above
    /// it on its path is held and has no branch down to it.
    fn absent(&self, key: &RowKey, height: StratumHeight) -> bool {
        let mut child = *key;
        while let Some(parent) = child.parent(height) {
            if let Some(row) = self.get(&parent) {
                return !row.has_child_row(&child);
            }
            child = parent;
        }
        false
    }
}

/// Rows kept between a read and a commit; above this the memo starts over
/// with the last commit's rows (bulk builds touch more).
const MEMO_ROWS: usize = 1 << 16;

impl NamespaceState {
    /// An exchange of this handle: under its reply wait, counted in its
    /// counters.
    pub fn exchange(&self) -> Exchange<'_> {
        Exchange::counted(self.reply_wait, &self.counters)
    }

    /// A namespace's state with a memory of its own for `recent` nodes.
    pub fn new(name: &str, height: StratumHeight, recent: usize) -> Arc<NamespaceState> {
        Self::waiting(name, height, &RecentNodes::new(recent), ReplyWait::Default)
    }

    /// A namespace's state remembering its nodes in `memory` (shared with
    /// every handle on it: one budget), with the reply wait `reply_wait`.
    pub fn waiting(
        name: &str,
        height: StratumHeight,
        memory: &RecentNodes,
        reply_wait: ReplyWait,
    ) -> Arc<NamespaceState> {
        Arc::new(NamespaceState {
            name: Arc::from(name),
            height,
            reply_wait,
            info: InfoCell::default(),
            counters: Counters::default(),
            recent: memory.for_namespace(name),
            rows: Mutex::new(RowMemo::default()),
        })
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, RowMemo> {
        // A poisoned memo is only a cache: start it over.
        self.rows.lock().unwrap_or_else(|poisoned| {
            let mut memo = poisoned.into_inner();
            *memo = RowMemo::default();
            memo
        })
    }

    /// Remembers rows a read statement returned with the root it saw.
    fn memo_read(&self, root: Hash, rows: Vec<(RowKey, Row)>) {
        let mut guard = self.memo();
        let memo = &mut *guard;
        let full = memo.len().saturating_add(rows.len()) > MEMO_ROWS;
        if !full
            && memo.root != Some(root)
            && let Some((before, changed)) = &memo.behind
            && *before == root
        {
            // Read from the tree just before the last commit: every row
            // that commit did not change is also a row of the memo's tree.
            for (key, row) in rows {
                if !changed.contains(&key) && !memo.older.contains_key(&key) {
                    memo.rows.entry(key).or_insert(row);
                }
            }
            return;
        }
        if memo.root != Some(root) || full {
            memo.clear();
            memo.root = Some(root);
        }
        memo.rows.extend(rows);
    }

    /// For a commit on the tree with root `root`: the touched rows `keys`
    /// the memo holds (taken out of it), and the keys it cannot answer.
    /// Keys whose row the memo shows does not exist (its parent row holds
    /// no branch into it) are in neither.
    pub fn memo_take(&self, root: &ComputedNode, keys: &[RowKey]) -> (RowMap, Vec<RowKey>) {
        let mut memo = self.memo();
        if memo.root != Some(root.hash) {
            return (RowMap::default(), keys.to_vec());
        }
        let mut known = RowMap::with_capacity_and_hasher(keys.len(), Default::default());
        let mut unknown = Vec::new();
        // Absence is judged before any row is taken out: `keys` are
        // sorted parent first, and a taken parent could no longer tell.
        for key in keys {
            if memo.get(key).is_some() {
                continue;
            }
            if !memo.absent(key, self.height) {
                unknown.push(*key);
            }
        }
        for key in keys {
            let row = match memo.rows.remove(key) {
                Some(row) => Some(row),
                None => memo.older.remove(key),
            };
            if let Some(row) = row {
                known.insert(*key, row);
            }
        }
        (known, unknown)
    }

    /// After a commit's merge: the memo holds the tree with root `root`,
    /// a new generation starts with the merged rows, and the oldest is
    /// dropped.
    ///
    /// `changed` are the keys of every row the commit wrote or deleted: a
    /// read that saw `old_root` still finds the others right.
    pub fn memo_committed(
        &self,
        old_root: &Hash,
        root: Hash,
        changed: HashSet<RowKey, Fast>,
        merged: Vec<(RowKey, Row)>,
    ) {
        let mut memo = self.memo();
        if memo.root != Some(*old_root) {
            memo.clear();
        }
        memo.older = std::mem::take(&mut memo.rows);
        if memo.older.len().saturating_add(merged.len()) > MEMO_ROWS {
            memo.older.clear();
        }
        memo.root = Some(root);
        memo.behind = (old_root != &root).then_some((*old_root, changed));
        memo.rows.extend(merged);
    }

    /// Rows the memo holds (for the tests).
    #[cfg(test)]
    fn memo_len(&self) -> usize {
        self.memo().len()
    }

    /// Forgets every row (the namespace was emptied).
    pub fn memo_clear(&self) {
        *self.memo() = RowMemo::default();
    }

    pub fn rows_error(&self, source: StrataError) -> SqlStoreError {
        SqlStoreError::Rows {
            namespace: self.name.to_string(),
            source,
        }
    }

    /// Passes failpoint `point` of this namespace ([`crate::failpoint`]);
    /// always `Ok` without the `failpoints` feature.
    #[inline]
    pub fn fail(&self, point: &'static str) -> Res<()> {
        #[cfg(feature = "failpoints")]
        crate::failpoint::pass(&self.name, point)
            .map_err(|point| SqlStoreError::Injected { point })?;
        let _ = point;
        Ok(())
    }
}

/// The walks a path read makes, as query parameters: per start, the depth
/// of the first row it walks, whether the sibling of that row is wanted
/// too, and its key.
///
/// Rows shared by several keys are walked once: starts are taken in tree
/// order, and a start whose key shares its first rows with the previous
/// start's key begins below them, where the two paths part, and asks for
/// the sibling of its first row there (the shared parent row's walk asks
/// only for the previous key's side). A start whose walk would begin
/// below the last level needs no row and is left out.
pub(crate) struct PathParams {
    /// Per start, the depth of the first row to walk.
    pub depths: Vec<usize>,
    /// Per start, whether the sibling of its first row is wanted.
    pub first_sibling: Vec<bool>,
    /// Per start, its key.
    pub keys: Vec<Key>,
}

impl PathParams {
    /// Bytes of one start's path blob for `height`.
    #[cfg(feature = "sqlite")]
    pub fn width(height: StratumHeight) -> usize {
        (crate::key::MAX_LEVEL / height.get() + 1) * 32
    }

    /// The starts' walks. The caller sends `depths.len()` starts, which
    /// may be fewer than `starts`.
    pub fn new(height: StratumHeight, starts: &[PathStart]) -> PathParams {
        use crate::key::MAX_LEVEL;
        let mut order: Vec<&PathStart> = starts.iter().collect();
        order.sort_by_cached_key(|s| crate::strata::path_array(&s.key, MAX_LEVEL));
        let mut out = PathParams {
            depths: Vec::with_capacity(starts.len()),
            first_sibling: Vec::with_capacity(starts.len()),
            keys: Vec::with_capacity(starts.len()),
        };
        let mut previous: Option<(&PathStart, usize)> = None;
        for start in order {
            let own = height.row_depth(start.level.min(MAX_LEVEL));
            // Rows above the first one the two keys do not share are the
            // previous walk's, if that walk covers them (it starts no
            // deeper than this one).
            let first = match previous {
                Some((prev, prev_own)) if prev_own <= own => {
                    let shared = prev.key.first_difference(&start.key).unwrap_or(MAX_LEVEL);
                    own.max(height.row_depth(shared).saturating_add(height.get()))
                }
                _ => own,
            };
            previous = Some((start, own));
            if first > MAX_LEVEL {
                continue;
            }
            out.depths.push(first);
            out.first_sibling.push(first > own);
            out.keys.push(start.key);
        }
        out
    }

    /// Per start, its key as a path: all 256 bits, most significant bit
    /// first in each byte (a row's path is its first `depth` bits).
    #[cfg(feature = "postgres")]
    pub fn key_paths(&self) -> Vec<Vec<u8>> {
        self.keys
            .iter()
            .map(|k| crate::strata::path_bytes(k, crate::key::MAX_LEVEL))
            .collect()
    }

    /// Appends two blobs of [`width`](Self::width) bytes for start `i`
    /// to `paths` and `sibs`, of 32-byte slots: slot `j` the (zero-padded)
    /// path of the row at depth `j * height` on the start's key, and of
    /// that row's sibling (slot 0 unused). A query cuts the real
    /// `(depth + 7) / 8` bytes out of a slot.
    #[cfg(feature = "sqlite")]
    pub fn push_slot_blobs(
        &self,
        height: StratumHeight,
        i: usize,
        paths: &mut Vec<u8>,
        sibs: &mut Vec<u8>,
    ) {
        use crate::key::MAX_LEVEL;
        use crate::strata::{path_array, path_prefix};
        // The whole key as a path once; each slot is a prefix of it (or
        // of it with the prefix's last bit flipped, for the sibling).
        let full = path_array(&self.keys[i], MAX_LEVEL);
        for d in (0..=MAX_LEVEL).step_by(height.get()) {
            paths.extend_from_slice(&path_prefix(&full, d));
            match d.checked_sub(1) {
                Some(last) => {
                    let mut other = full;
                    other[last / 8] ^= 0x80 >> (last % 8);
                    sibs.extend_from_slice(&path_prefix(&other, d));
                }
                None => sibs.extend_from_slice(&[0u8; 32]),
            }
        }
    }
}

/// Decodes rows read by a path walk (path, depth, body) into the nodes
/// they hold, and remembers the rows for the next commit when the walk's
/// statement also reported the root it saw.
pub(crate) fn path_nodes<'r>(
    space: &NamespaceState,
    height: StratumHeight,
    root: Option<Hash>,
    rows: impl IntoIterator<Item = (&'r [u8], i64, &'r [u8])>,
) -> Result<Vec<(Hash, Node)>, SqlStoreError> {
    let mut out = Vec::new();
    let mut decoded = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (path, depth, body) in rows {
        let depth = usize::try_from(depth).unwrap_or(usize::MAX);
        // A sibling row may also be another key's path row.
        if !seen.insert((path, depth)) {
            continue;
        }
        let mut row = Row::decode(depth, height, body).map_err(|e| space.rows_error(e))?;
        let (_, nodes) = row.nodes().map_err(|e| space.rows_error(e))?;
        space.counters.read(nodes.len() as u64);
        out.extend(nodes);
        decoded.push((stored_key(space, path, depth)?, row));
    }
    if let Some(root) = root {
        space.memo_read(root, decoded);
    }
    Ok(out)
}

/// Merges `batch` into the rows it touches (`touched`, its
/// [`touched_rows`](crate::strata::touched_rows)): `known` (from the memo) and
/// `stored` (read inside the commit's transaction); returns the row
/// changes to write, and remembers the merged rows under the new root.
pub(crate) fn merge(
    space: &NamespaceState,
    height: StratumHeight,
    batch: &crate::descent::UpdateBatch,
    touched: Vec<RowKey>,
    mut known: RowMap,
    stored: Vec<(RowKey, Vec<u8>)>,
) -> Result<(Vec<RowChange>, Vec<LeafChange>), SqlStoreError> {
    for (key, body) in stored {
        let row = Row::decode(key.depth, height, &body).map_err(|e| space.rows_error(e))?;
        known.insert(key, row);
    }
    let merged = crate::strata::apply_keeping_rows(batch, height, known, touched)
        .map_err(|e| space.rows_error(e))?;
    let changed = merged
        .changes
        .iter()
        .map(|change| match change {
            RowChange::Put(key, _) | RowChange::Delete(key) => *key,
        })
        .collect();
    space.memo_committed(
        &batch.old_root.hash,
        batch.new_root.hash,
        changed,
        merged.rows,
    );
    Ok((merged.changes, merged.leaves))
}

/// A u64 sum as the i64 with the same bits (SQL has only signed 64-bit
/// integers). Sums are never compared or added in SQL.
pub(crate) fn sum_to_sql(sum: u64) -> i64 {
    i64::from_ne_bytes(sum.to_ne_bytes())
}

/// The inverse of [`sum_to_sql`].
pub(crate) fn sum_from_sql(sum: i64) -> u64 {
    u64::from_ne_bytes(sum.to_ne_bytes())
}

/// The rows a path walk's statement returned, as (path, depth, body)
/// borrowed from the driver's buffers (columns 0-2), and the root hash
/// the statement saw (column 3 of every row; `None` for no rows, an empty
/// tree, or a column that is not 32 bytes, which is then only not
/// remembered). Both stores' walks return these columns.
#[allow(clippy::type_complexity)]
pub(crate) fn walk_rows<'r, R>(
    rows: &'r [R],
) -> Result<(Option<Hash>, Vec<(&'r [u8], i64, &'r [u8])>), sqlx::Error>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    &'r [u8]: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let root = match rows.first() {
        Some(row) => row
            .try_get::<Option<&[u8]>, _>(3)?
            .and_then(|h| <[u8; 32]>::try_from(h).ok())
            .map(Hash),
        None => None,
    };
    let rows = rows
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    Ok((root, rows))
}

/// Rows as read, (path, depth, body), keyed by position; a path longer
/// than any row's is a malformed row of `space`.
pub(crate) fn keyed_rows<D: TryInto<usize>>(
    space: &NamespaceState,
    rows: Vec<(Vec<u8>, D, Vec<u8>)>,
) -> Res<Vec<(RowKey, Vec<u8>)>> {
    rows.into_iter()
        .map(|(path, depth, body)| Ok((stored_key(space, &path, depth)?, body)))
        .collect()
}

/// The key of a row read at (`path`, `depth`; a depth no `usize` holds is
/// past every row's, and refused as malformed).
pub(crate) fn stored_key<D: TryInto<usize>>(
    space: &NamespaceState,
    path: &[u8],
    depth: D,
) -> Res<RowKey> {
    let depth = depth.try_into().unwrap_or(usize::MAX);
    RowKey::stored(path, depth).ok_or_else(|| {
        space.rows_error(StrataError::Malformed {
            depth,
            what: "row path longer than 32 bytes",
        })
    })
}

/// Decodes a root row.
pub(crate) fn decode_root(
    namespace: &str,
    row: Option<(Vec<u8>, i64)>,
) -> Result<ComputedNode, SqlStoreError> {
    match row {
        None => Ok(ComputedNode::empty_root()),
        Some((hash, sum)) => Ok(ComputedNode::new(
            Hash(<[u8; 32]>::try_from(hash.as_slice()).map_err(|_| {
                SqlStoreError::CorruptRoot {
                    namespace: namespace.to_owned(),
                    len: hash.len(),
                }
            })?),
            sum_from_sql(sum),
        )),
    }
}

/// Rows per statement of a namespace scan.
pub(crate) const SCAN_PAGE: usize = 2048;

/// A row depth past every stored one (rows sit at depths 0 to 256): the
/// cursor `(path, PAST_EVERY_DEPTH)` comes after every row at `path`.
pub(crate) const PAST_EVERY_DEPTH: i64 = crate::key::MAX_LEVEL as i64 + 1;

/// A version as SQL's signed integer (versions count commits; they never
/// reach 2^63).
pub(crate) fn version_to_sql(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) fn version_from_sql(v: i64) -> Res<u64> {
    u64::try_from(v).map_err(|_| SqlStoreError::BadVersion(v))
}

/// A root as the (hash, sum) columns: both NULL for the empty tree.
pub(crate) fn root_columns(root: &ComputedNode) -> (Option<&[u8]>, Option<i64>) {
    (*root != ComputedNode::empty_root())
        .then(|| (&root.hash.0[..], sum_to_sql(root.sum)))
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit's merged rows: `n` rows at depth 4 under paths from `from`.
    fn rows(from: u8, n: u8) -> Vec<(RowKey, Row)> {
        let height = StratumHeight::default();
        (0..n)
            .map(|i| {
                let key = RowKey::stored(&[from.wrapping_add(i) & 0xf0], 4).expect("short");
                (key, Row::empty(4, height))
            })
            .collect()
    }

    #[test]
    fn the_memo_keeps_two_generations_of_rows() {
        let space = NamespaceState::new("memo", StratumHeight::default(), 0);
        let mut root = Hash([0; 32]);
        // Commits one after another, each merging rows under other paths:
        // only the last two commits' rows stay.
        for c in 0u8..20 {
            let next = Hash([c.wrapping_add(1); 32]);
            space.memo_committed(&root, next, HashSet::default(), rows(c.wrapping_mul(16), 1));
            root = next;
            assert!(space.memo_len() <= 2, "commit {c}: {}", space.memo_len());
        }
        // Rows read for the next group are kept through one commit, so a
        // pipelined group finds them at its own commit.
        let read = rows(0x70, 1);
        let read_key = read[0].0;
        space.memo_read(root, read);
        let next = Hash([0xee; 32]);
        space.memo_committed(&root, next, HashSet::default(), rows(0x10, 1));
        let at = ComputedNode::new(next, 0);
        let (known, unknown) = space.memo_take(&at, std::slice::from_ref(&read_key));
        assert!(known.contains_key(&read_key) && unknown.is_empty());
        // Another root drops everything.
        space.memo_committed(
            &Hash([0x55; 32]),
            Hash([0x56; 32]),
            HashSet::default(),
            Vec::new(),
        );
        assert_eq!(space.memo_len(), 0);
    }

    #[test]
    fn a_read_of_the_tree_before_the_last_commit_keeps_the_rows_it_did_not_change() {
        let space = NamespaceState::new("memo", StratumHeight::default(), 0);
        let (r0, r1) = (Hash([1; 32]), Hash([2; 32]));
        // A commit from r0 to r1 changes the rows under 0x10 (written) and
        // 0x20 (deleted).
        let written = rows(0x10, 1);
        let changed: HashSet<RowKey, Fast> =
            [written[0].0, rows(0x20, 1)[0].0].into_iter().collect();
        space.memo_committed(&r0, r1, changed, written.clone());
        // A pipelined read that saw r0 comes back after that commit: its
        // rows under 0x20 and 0x10 are stale, the one under 0x30 is not.
        let mut stale = rows(0x10, 1);
        stale.extend(rows(0x20, 1));
        stale.extend(rows(0x30, 1));
        let keys: Vec<RowKey> = stale.iter().map(|(k, _)| *k).collect();
        space.memo_read(r0, stale);
        let (known, unknown) = space.memo_take(&ComputedNode::new(r1, 0), &keys);
        // 0x10 is the commit's own row, 0x30 the read's; 0x20 must be read.
        assert!(known.contains_key(&keys[0]) && known.contains_key(&keys[2]));
        assert_eq!(unknown, vec![keys[1]]);
        // A read of an unknown root still starts the memo over.
        space.memo_read(Hash([9; 32]), rows(0x40, 1));
        let (known, _) = space.memo_take(&ComputedNode::new(r1, 0), &keys);
        assert!(known.is_empty());
    }

    /// The slot blobs are each row's path and its sibling's as
    /// `path_array` gives them.
    #[cfg(feature = "sqlite")]
    #[test]
    fn slot_blobs_hold_each_rows_path_and_its_siblings() {
        use crate::key::MAX_LEVEL;
        use crate::strata::path_array;
        let keys = [
            Key([0u8; 32]),
            Key([0xff; 32]),
            Key(core::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5a)),
        ];
        for height in 1..=StratumHeight::MAX {
            let height = StratumHeight::new(height).expect("height");
            let starts: Vec<PathStart> = keys
                .iter()
                .map(|key| PathStart {
                    hash: Hash([0; 32]),
                    key: *key,
                    level: 0,
                })
                .collect();
            let params = PathParams::new(height, &starts);
            for (i, key) in params.keys.iter().enumerate() {
                let (mut paths, mut sibs) = (Vec::new(), Vec::new());
                params.push_slot_blobs(height, i, &mut paths, &mut sibs);
                assert_eq!(paths.len(), PathParams::width(height));
                assert_eq!(sibs.len(), PathParams::width(height));
                for (j, d) in (0..=MAX_LEVEL).step_by(height.get()).enumerate() {
                    let slot = |blob: &[u8]| {
                        <[u8; 32]>::try_from(&blob[j * 32..j * 32 + 32]).expect("slot")
                    };
                    assert_eq!(
                        slot(&paths),
                        path_array(key, d),
                        "height {height:?} depth {d}"
                    );
                    let sibling = match d.checked_sub(1) {
                        Some(last) => path_array(&key.with_bit(last, !key.bit(last)), d),
                        None => [0u8; 32],
                    };
                    assert_eq!(slot(&sibs), sibling, "height {height:?} depth {d}");
                }
            }
        }
    }

    #[test]
    fn sums_round_trip_through_i64() {
        for s in [0, 1, (1u64 << 63) + 7, u64::MAX] {
            assert_eq!(sum_from_sql(sum_to_sql(s)), s);
        }
        assert_eq!(sum_to_sql((1u64 << 63) + 7), -9223372036854775801);
    }
}
