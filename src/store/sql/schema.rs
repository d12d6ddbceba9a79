//! The versioned DDL runner. Versions are tracked in `ms_smt_migrations`
//! (not sqlx's `_sqlx_migrations`, which belongs to the host application);
//! each version's DDL runs once, in its own transaction with its ledger
//! entry, and a database at a newer version than this crate knows is
//! refused.

use sqlx::SqlSafeStr;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::dialect::{Arg, Dialect, begin_write};
use super::error::{Res, SqlStoreError};
use crate::progress::{ProgressOperation, ProgressSink};

/// Creates or upgrades the store's tables on `pool` (see the module docs),
/// in a `schema_upgrade` span (INFO), reporting the versions applied to
/// `progress` ([`ProgressOperation::SchemaUpgrade`]).
pub(crate) async fn migrate<C: Dialect>(
    pool: &sqlx::Pool<C::Database>,
    progress: &ProgressSink,
) -> Res<()> {
    let span = tracing::info_span!(
        target: "ms_smt",
        "schema_upgrade",
        engine = std::any::type_name::<C>(),
        found = Empty,
        newest = C::MIGRATIONS.last().map_or(0, |m| m.0),
        steps = Empty,
        applied = Empty,
    );
    let out = upgrade::<C>(pool, progress).instrument(span.clone()).await;
    let (outcome, error) = match &out {
        Ok(()) => ("ok", None),
        Err(e) => ("error", Some(tracing::field::display(e))),
    };
    tracing::info!(target: "ms_smt", parent: &span, outcome, error, "finished");
    out
}

/// [`migrate`], inside its span.
async fn upgrade<C: Dialect>(pool: &sqlx::Pool<C::Database>, progress: &ProgressSink) -> Res<()> {
    let newest = C::MIGRATIONS.last().map_or(0, |m| m.0);
    let mut conn = pool.acquire().await?;
    let applied = {
        let mut tx = begin_write(&mut *conn).await?;
        tx.lock_migrations().await?;
        tx.run_ddl(C::LEDGER).await?;
        let applied = applied(&mut *tx).await?;
        if let Some(&found) = applied.iter().max().filter(|v| **v > newest) {
            return Err(SqlStoreError::SchemaTooNew {
                found,
                supported: newest,
            });
        }
        C::bounded(tx.commit()).await?;
        applied
    };
    let steps = C::MIGRATIONS
        .iter()
        .filter(|(version, _, _)| !applied.contains(version))
        .count();
    let span = Span::current();
    span.record("found", applied.iter().max().copied().unwrap_or(0))
        .record("steps", steps);
    let mut meter = progress.meter(ProgressOperation::SchemaUpgrade, Some(steps as u64));
    let mut ran = 0u64;
    for (version, description, sql) in C::MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        let mut tx = begin_write(&mut *conn).await?;
        tx.lock_migrations().await?;
        if !self::applied(&mut *tx).await?.contains(version) {
            tx.run_ddl(sql).await?;
            tx.execute(
                "INSERT INTO ms_smt_migrations (version, description) VALUES ($1, $2)"
                    .into_sql_str(),
                &[Arg::Int(*version), Arg::Text(description)],
            )
            .await?;
            ran = ran.saturating_add(1);
        }
        C::bounded(tx.commit()).await?;
        tracing::debug!(target: "ms_smt", version = *version, description = *description, "schema version in place");
        meter.add(1);
    }
    span.record("applied", ran);
    meter.finish();
    Ok(())
}

/// The versions recorded in the ledger.
async fn applied<C: Dialect>(conn: &mut C) -> Res<Vec<i64>> {
    let rows: Vec<(i64,)> = conn
        .fetch_all(
            "SELECT version FROM ms_smt_migrations ORDER BY version".into_sql_str(),
            &[],
        )
        .await?;
    Ok(rows.into_iter().map(|(v,)| v).collect())
}
