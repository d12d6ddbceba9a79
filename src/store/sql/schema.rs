//! The versioned DDL runner. Versions are tracked in `ms_smt_migrations`
//! (not sqlx's `_sqlx_migrations`, which belongs to the host application);
//! each version's DDL runs once, in its own transaction with its ledger
//! entry, and a database at a newer version than this crate knows is
//! refused.

use super::dialect::{Arg, Dialect, begin_write};
use super::error::{Res, SqlStoreError};

/// Creates or upgrades the store's tables on `pool` (see the module docs).
pub(crate) async fn migrate<C: Dialect>(pool: &sqlx::Pool<C::Database>) -> Res<()> {
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
        tx.commit().await?;
        applied
    };
    for (version, description, sql) in C::MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        let mut tx = begin_write(&mut *conn).await?;
        tx.lock_migrations().await?;
        if !self::applied(&mut *tx).await?.contains(version) {
            tx.run_ddl(sql).await?;
            tx.execute(
                "INSERT INTO ms_smt_migrations (version, description) VALUES ($1, $2)",
                &[Arg::Int(*version), Arg::Text(description)],
            )
            .await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// The versions recorded in the ledger.
async fn applied<C: Dialect>(conn: &mut C) -> Res<Vec<i64>> {
    let rows: Vec<(i64,)> = conn
        .fetch_all(
            "SELECT version FROM ms_smt_migrations ORDER BY version",
            &[],
        )
        .await?;
    Ok(rows.into_iter().map(|(v,)| v).collect())
}
