//! The change journal's statements (see [`crate::store::JournalStore`]):
//! switching it on and off, restarting it, paging it, finding a root's
//! version, pruning. The commit statements write it (`write_commits` of
//! each engine); everything here is shared SQL.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::{AssertSqlSafe, SqlSafeStr};

use super::dialect::{Arg, Dialect, fetch_optional};
use super::error::{Res, SqlStoreError};
use super::namespaces::{load_state, state_for_write};
use super::space::{
    NamespaceState, decode_root, root_columns, sum_from_sql, version_from_sql, version_to_sql,
};
use crate::hash::Hash;
use crate::key::Key;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::store::{Change, ChangePage, JournalState, Retention};

/// A change row: version, key, old value and sum, new value and sum.
type ChangeRow = (i64, Vec<u8>, Vec<u8>, i64, Vec<u8>, i64);

/// Records `root` as the root at `version` (the journal's start or a
/// restart), with the current time.
async fn record_version<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    id: i64,
    version: i64,
    root: &ComputedNode,
) -> Res<()> {
    let (hash, sum) = root_columns(root);
    let sql = format!(
        "INSERT INTO ms_smt_versions (ns, version, root_hash, root_sum, at) \
         VALUES ($1, $2, $3, $4, {}) ON CONFLICT (ns, version) DO NOTHING",
        C::UNIX_NOW
    );
    conn.execute(
        space.exchange(),
        AssertSqlSafe(sql).into_sql_str(),
        &[
            Arg::Int(id),
            Arg::Int(version),
            Arg::OptBytes(hash),
            Arg::OptInt(sum),
        ],
    )
    .await?;
    Ok(())
}

/// Switches the journal on at the current version, inside a write
/// transaction (nothing changes when it is on already).
pub(crate) async fn enable_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
) -> Res<JournalState> {
    conn.lock_namespace(space).await?;
    let state = state_for_write(conn, space).await?;
    let head_version = version_from_sql(state.version)?;
    if let Some(from) = state.journal {
        return Ok(JournalState {
            from_version: version_from_sql(from)?,
            head_version,
        });
    }
    conn.execute(
        space.exchange(),
        "UPDATE ms_smt_namespaces SET journal_from = version WHERE id = $1".into_sql_str(),
        &[Arg::Int(state.info.id)],
    )
    .await?;
    record_version(conn, space, state.info.id, state.version, &state.root).await?;
    Ok(JournalState {
        from_version: head_version,
        head_version,
    })
}

/// Switches the journal off and drops its rows, inside a write transaction.
pub(crate) async fn disable_on<C: Dialect>(conn: &mut C, space: &NamespaceState) -> Res<()> {
    conn.lock_namespace(space).await?;
    let Some(state) = load_state(conn, space).await? else {
        return Ok(());
    };
    let id = Arg::Int(state.info.id);
    conn.execute(
        space.exchange(),
        "UPDATE ms_smt_namespaces SET journal_from = NULL WHERE id = $1".into_sql_str(),
        &[id],
    )
    .await?;
    conn.execute(
        space.exchange(),
        "DELETE FROM ms_smt_changes WHERE ns = $1".into_sql_str(),
        &[id],
    )
    .await?;
    conn.execute(
        space.exchange(),
        "DELETE FROM ms_smt_versions WHERE ns = $1".into_sql_str(),
        &[id],
    )
    .await?;
    Ok(())
}

/// Restarts the journal at `version`, the version of a write that replaced
/// the tree wholesale (its leaf changes are not listed): what came before
/// is dropped, and followers from before it fall back to a diff walk.
/// Called only while the journal is on.
pub(crate) async fn restart_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    id: i64,
    version: i64,
) -> Res<()> {
    conn.execute(
        space.exchange(),
        "UPDATE ms_smt_namespaces SET journal_from = $2 WHERE id = $1".into_sql_str(),
        &[Arg::Int(id), Arg::Int(version)],
    )
    .await?;
    conn.execute(
        space.exchange(),
        "DELETE FROM ms_smt_changes WHERE ns = $1".into_sql_str(),
        &[Arg::Int(id)],
    )
    .await?;
    drop_versions_before(conn, space, id, version).await?;
    // Only a clear restarts the journal: the tree is empty now.
    record_version(conn, space, id, version, &ComputedNode::empty_root()).await
}

async fn drop_versions_before<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    id: i64,
    version: i64,
) -> Res<()> {
    conn.execute(
        space.exchange(),
        "DELETE FROM ms_smt_versions WHERE ns = $1 AND version < $2".into_sql_str(),
        &[Arg::Int(id), Arg::Int(version)],
    )
    .await?;
    Ok(())
}

/// Where the journal stands; `None` when it is off or the namespace does
/// not exist.
pub(crate) async fn state_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
) -> Res<Option<JournalState>> {
    let Some(state) = load_state(conn, space).await? else {
        return Ok(None);
    };
    state
        .journal
        .map(|from| {
            Ok(JournalState {
                from_version: version_from_sql(from)?,
                head_version: version_from_sql(state.version)?,
            })
        })
        .transpose()
}

/// The root recorded for `version`, if the journal still has it.
async fn root_of<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    id: i64,
    version: i64,
) -> Res<Option<ComputedNode>> {
    let row: Option<(Option<Vec<u8>>, Option<i64>)> = fetch_optional(
        conn,
        space.exchange(),
        "SELECT root_hash, root_sum FROM ms_smt_versions WHERE ns = $1 AND version = $2"
            .into_sql_str(),
        &[Arg::Int(id), Arg::Int(version)],
    )
    .await?;
    row.map(|(hash, sum)| decode_root(&space.name, hash.zip(sum)))
        .transpose()
}

fn leaf(value: Vec<u8>, sum: i64) -> Leaf {
    Leaf::new(value, sum_from_sql(sum))
}

fn key(bytes: &[u8]) -> Res<Key> {
    <[u8; 32]>::try_from(bytes)
        .map(Key)
        .map_err(|_| SqlStoreError::CorruptJournal { len: bytes.len() })
}

/// Whether a page reads its [`ChangePage::later`] leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Later {
    /// Left empty: the page's own rows only.
    Skip,
    /// Read: every change between the page and the head.
    Read,
}

/// A page of the journal after `since` (see
/// [`JournalStore::changes`](crate::store::JournalStore::changes)); run
/// inside one read snapshot.
pub(crate) async fn changes_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    since: u64,
    limit: usize,
    with_later: Later,
) -> Res<Option<ChangePage>> {
    let Some(state) = load_state(conn, space).await? else {
        return Ok(None);
    };
    let (Some(from), since_sql) = (state.journal, version_to_sql(since)) else {
        return Ok(None);
    };
    if since_sql < from || since_sql > state.version {
        return Ok(None);
    }
    let id = state.info.id;
    let Some(from_root) = root_of(conn, space, id, since_sql).await? else {
        return Ok(None);
    };
    let limit = limit.max(1);
    let mut rows: Vec<ChangeRow> = conn
        .fetch_all(
            space.exchange(),
            "SELECT version, key, old_value, old_sum, new_value, new_sum FROM ms_smt_changes \
             WHERE ns = $1 AND version > $2 ORDER BY version, key LIMIT $3"
                .into_sql_str(),
            &[
                Arg::Int(id),
                Arg::Int(since_sql),
                Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1)),
            ],
        )
        .await?;
    let to_version = match rows.get(limit).map(|r| r.0) {
        None => state.version,
        Some(cut) if rows.first().is_some_and(|r| r.0 < cut) => {
            rows.retain(|r| r.0 < cut);
            cut.saturating_sub(1)
        }
        // One version larger than the limit: it comes whole.
        Some(cut) => {
            rows = conn
                .fetch_all(
                    space.exchange(),
                    "SELECT version, key, old_value, old_sum, new_value, new_sum \
                     FROM ms_smt_changes WHERE ns = $1 AND version = $2 ORDER BY key"
                        .into_sql_str(),
                    &[Arg::Int(id), Arg::Int(cut)],
                )
                .await?;
            cut
        }
    };
    let to_root = if to_version == state.version {
        state.root
    } else {
        match root_of(conn, space, id, to_version).await? {
            Some(root) => root,
            None => return Ok(None),
        }
    };
    let changes = rows
        .into_iter()
        .map(|(v, k, old, old_sum, new, new_sum)| {
            Ok(Change {
                version: version_from_sql(v)?,
                key: key(&k)?,
                old: leaf(old, old_sum),
                new: leaf(new, new_sum),
            })
        })
        .collect::<Res<Vec<_>>>()?;
    let later = if with_later == Later::Read && to_version < state.version {
        later_leaves(conn, space, id, to_version, &changes).await?
    } else {
        Vec::new()
    };
    Ok(Some(ChangePage {
        from_version: since,
        from_root,
        to_version: version_from_sql(to_version)?,
        to_root,
        changes,
        head_version: version_from_sql(state.version)?,
        head_root: state.root,
        later,
    }))
}

/// For each key changed after `after` that `page` does not change, its
/// leaf at `after` (the old leaf of its first later change), in tree order.
async fn later_leaves<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    id: i64,
    after: i64,
    page: &[Change],
) -> Res<Vec<(Key, Leaf)>> {
    let rows: Vec<(Vec<u8>, Vec<u8>, i64)> = conn
        .fetch_all(
            space.exchange(),
            "SELECT key, old_value, old_sum FROM ms_smt_changes \
             WHERE ns = $1 AND version > $2 ORDER BY version, key"
                .into_sql_str(),
            &[Arg::Int(id), Arg::Int(after)],
        )
        .await?;
    let in_page: BTreeSet<Key> = page.iter().map(|c| c.key).collect();
    let mut first: BTreeMap<Key, Leaf> = BTreeMap::new();
    for (k, value, sum) in rows {
        let k = key(&k)?;
        if !in_page.contains(&k) {
            first.entry(k).or_insert_with(|| leaf(value, sum));
        }
    }
    Ok(first.into_iter().collect())
}

/// The newest version the journal covers with root `root`.
pub(crate) async fn version_of_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    root: &Hash,
) -> Res<Option<u64>> {
    let Some(state) = load_state(conn, space).await? else {
        return Ok(None);
    };
    let Some(from) = state.journal else {
        return Ok(None);
    };
    let id = Arg::Int(state.info.id);
    let row: Option<(Option<i64>,)> = if *root == ComputedNode::empty_root().hash {
        fetch_optional(
            conn,
            space.exchange(),
            "SELECT MAX(version) FROM ms_smt_versions \
             WHERE ns = $1 AND root_hash IS NULL AND version >= $2"
                .into_sql_str(),
            &[id, Arg::Int(from)],
        )
        .await?
    } else {
        fetch_optional(
            conn,
            space.exchange(),
            "SELECT MAX(version) FROM ms_smt_versions \
             WHERE ns = $1 AND root_hash = $2 AND version >= $3"
                .into_sql_str(),
            &[id, Arg::Bytes(&root.0), Arg::Int(from)],
        )
        .await?
    };
    row.and_then(|(v,)| v).map(version_from_sql).transpose()
}

/// Drops what `retention` does not keep, inside a write transaction;
/// returns the change rows removed.
pub(crate) async fn prune_on<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
    retention: &Retention,
) -> Res<u64> {
    conn.lock_namespace(space).await?;
    let Some(state) = load_state(conn, space).await? else {
        return Ok(0);
    };
    let Some(from) = state.journal else {
        return Ok(0);
    };
    let id = state.info.id;
    let mut cut = from;
    if let Some(keep) = retention.versions {
        cut = cut.max(state.version.saturating_sub(version_to_sql(keep)));
    }
    if let Some(age) = retention.age {
        let secs = i64::try_from(age.as_secs()).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT MAX(version) FROM ms_smt_versions WHERE ns = $1 AND at < {} - $2",
            C::UNIX_NOW
        );
        let row: Option<(Option<i64>,)> = fetch_optional(
            conn,
            space.exchange(),
            AssertSqlSafe(sql).into_sql_str(),
            &[Arg::Int(id), Arg::Int(secs)],
        )
        .await?;
        if let Some(v) = row.and_then(|(v,)| v) {
            cut = cut.max(v);
        }
    }
    if let Some(keep) = retention.changes {
        let row: Option<(i64,)> = fetch_optional(
            conn,
            space.exchange(),
            "SELECT version FROM ms_smt_changes WHERE ns = $1 \
             ORDER BY version DESC LIMIT 1 OFFSET $2"
                .into_sql_str(),
            &[Arg::Int(id), Arg::Int(version_to_sql(keep))],
        )
        .await?;
        if let Some((v,)) = row {
            cut = cut.max(v);
        }
    }
    let oldest_pin: Option<(Option<i64>,)> = fetch_optional(
        conn,
        space.exchange(),
        "SELECT MIN(version) FROM ms_smt_pins WHERE ns = $1".into_sql_str(),
        &[Arg::Int(id)],
    )
    .await?;
    if let Some(pin) = oldest_pin.and_then(|(v,)| v) {
        cut = cut.min(pin.max(from));
    }
    let cut = cut.min(state.version);
    if cut <= from {
        return Ok(0);
    }
    let removed = conn
        .execute(
            space.exchange(),
            "DELETE FROM ms_smt_changes WHERE ns = $1 AND version <= $2".into_sql_str(),
            &[Arg::Int(id), Arg::Int(cut)],
        )
        .await?;
    conn.execute(
        space.exchange(),
        "UPDATE ms_smt_namespaces SET journal_from = $2 WHERE id = $1".into_sql_str(),
        &[Arg::Int(id), Arg::Int(cut)],
    )
    .await?;
    drop_versions_before(conn, space, id, cut).await?;
    Ok(removed)
}
