//! A namespace's row: read (refreshing the handle's id and height), of
//! several namespaces in one statement, and inside a write transaction
//! (created when missing).

use std::collections::HashMap;

use sqlx::SqlSafeStr;

use super::dialect::{Arg, Dialect, fetch_optional};
use super::error::{Res, SqlStoreError};
use super::rows::NamespaceRow;
use super::space::{NamespaceState, NsInfo, NsState, decode_root};
use crate::node::ComputedNode;
use crate::strata::StratumHeight;

/// The namespace's row (`None` when it does not exist), refreshing the
/// handle's id and height.
pub(crate) async fn load_state<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
) -> Res<Option<NsState>> {
    let row: Option<NamespaceRow> = fetch_optional(
        conn,
        space.exchange(),
        "SELECT name, id, CAST(height AS BIGINT), root_hash, root_sum, version, \
            (SELECT MAX(p.version) FROM ms_smt_pins p WHERE p.ns = n.id), journal_from \
         FROM ms_smt_namespaces n WHERE name = $1"
            .into_sql_str(),
        &[Arg::Text(&space.name)],
    )
    .await?;
    ns_state(space, row)
}

/// Decodes a namespace row (`None`: no such namespace) and refreshes the
/// handle's id and height with it.
fn ns_state(space: &NamespaceState, row: Option<NamespaceRow>) -> Res<Option<NsState>> {
    let Some(row) = row else {
        space.info.set(None);
        return Ok(None);
    };
    let (id, height, version) = (row.head.id, row.head.height, row.head.version);
    let height = u8::try_from(height)
        .ok()
        .and_then(StratumHeight::new)
        .ok_or(SqlStoreError::StratumHeight(height))?;
    let info = NsInfo { id, height };
    space.info.set(Some(info));
    Ok(Some(NsState {
        info,
        root: decode_root(&space.name, row.head.root_hash.zip(row.head.root_sum))?,
        version,
        max_pin: row.max_pin,
        journal: row.journal_from,
    }))
}

/// The rows of several namespaces (each `None` when it does not exist),
/// in order, in one statement; refreshes each handle's id and height.
pub(crate) async fn load_states<C: Dialect>(
    conn: &mut C,
    spaces: &[&NamespaceState],
) -> Res<Vec<Option<NsState>>> {
    if let [space] = spaces {
        return Ok(vec![load_state(conn, space).await?]);
    }
    let mut rows: HashMap<String, NamespaceRow> = conn
        .namespace_rows(spaces)
        .await?
        .into_iter()
        .map(|row| (row.head.name.clone(), row))
        .collect();
    spaces
        .iter()
        .map(|space| ns_state(space, rows.remove(&*space.name)))
        .collect()
}

/// The namespace's root, learning its id and height on the way.
pub(crate) async fn load_root<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
) -> Res<ComputedNode> {
    Ok(load_state(conn, space)
        .await?
        .map_or_else(ComputedNode::empty_root, |s| s.root))
}

/// The namespace's id and height for a read (the handle's last sight of
/// it, else its row); `None` when it does not exist.
pub(crate) async fn namespace<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
) -> Res<Option<NsInfo>> {
    match space.info.get() {
        Some(info) => Ok(Some(info)),
        None => Ok(load_state(conn, space).await?.map(|s| s.info)),
    }
}

/// The namespace's row inside a write transaction, created if missing.
pub(crate) async fn state_for_write<C: Dialect>(
    conn: &mut C,
    space: &NamespaceState,
) -> Res<NsState> {
    let mut states = states_for_write(conn, &[space]).await?;
    states.pop().ok_or(SqlStoreError::NamespaceVanished)
}

/// The rows of several namespaces inside a write transaction, in order,
/// the missing ones created (one statement for all of them).
pub(crate) async fn states_for_write<C: Dialect>(
    conn: &mut C,
    spaces: &[&NamespaceState],
) -> Res<Vec<NsState>> {
    let mut states = load_states(conn, spaces).await?;
    let missing: Vec<&NamespaceState> = spaces
        .iter()
        .zip(&states)
        .filter(|(_, s)| s.is_none())
        .map(|(space, _)| *space)
        .collect();
    if !missing.is_empty() {
        conn.create_namespaces(&missing).await?;
        let mut created = load_states(conn, &missing).await?.into_iter();
        for state in states.iter_mut().filter(|s| s.is_none()) {
            *state = created.next().flatten();
        }
    }
    states
        .into_iter()
        .map(|s| s.ok_or(SqlStoreError::NamespaceVanished))
        .collect()
}
