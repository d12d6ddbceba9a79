//! The migration runner: applies a [`MigrationSet`] to a database and
//! reports where a set stands. Versions are tracked in `ms_smt_migrations`
//! (not sqlx's `_sqlx_migrations`, which belongs to the host application),
//! a row per (set, version); each version's DDL runs once, in its own
//! transaction with its ledger row, and a database at a newer version of
//! a set than this crate knows is refused.
//!
//! Checked migrations: the ledger records each version's checksum (SHA-256
//! of its SQL, [`Migration::checksum`]) when it is applied, and every open
//! compares the recorded checksums with this crate's; a version applied
//! with other SQL than this crate's (an edited migration, or a ledger
//! altered by hand) is refused with [`SqlStoreError::MigrationChanged`]
//! before anything is migrated, as sqlx's `Migrate` refuses a modified
//! migration.
//!
//! The ledger itself has grown twice, and each open brings an older one
//! up to date inside the migration lock, nothing lost:
//!
//! * releases before checksums wrote `version`, `description`,
//!   `applied_at`: the ledger gains a `checksum` column and the versions
//!   already applied are recorded with this crate's checksums (trusted on
//!   that first open: the released crate kept no other record of what it
//!   ran). A known version found without a checksum later (recorded by
//!   such a release running beside this one) is trusted the same way;
//! * releases before sets (0.1) kept the tree schema's versions alone:
//!   the ledger gains a `migration_set` column, its rows become the tree
//!   schema's ([`TREE_SCHEMA`](crate::migrations::TREE_SCHEMA)), and its
//!   key becomes (set, version).
//!
//! Concurrent opens from several processes take the migration lock first
//! (Postgres: an advisory transaction lock; SQLite: `BEGIN IMMEDIATE`),
//! so the ledger is created, upgraded and checked by one of them at a
//! time, and each version is applied once.

use sqlx::SqlSafeStr;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::dialect::{Arg, Dialect, begin_write_by, fetch_optional};
use super::error::{Res, SqlStoreError};
use super::migrations::{Migration, MigrationSet, Step};
use super::reply_wait::{Exchange, ReplyWait};
use ms_smt::{ProgressOperation, ProgressSink};

/// How a database's schema stands against the one this crate writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaState {
    /// No `ms_smt_migrations` ledger: this crate never migrated it.
    Missing,
    /// Migrated to `found`, older than this crate's (a
    /// [`migrate`](crate::SqlStore::migrate) upgrades it).
    Older {
        /// The newest version applied.
        found: i64,
    },
    /// The schema this crate writes.
    Current,
    /// Migrated by a newer release than this crate.
    Newer {
        /// The newest version applied.
        found: i64,
    },
}

/// The newest version of `list`.
fn newest(list: &[Migration]) -> i64 {
    list.last().map_or(0, |m| m.version)
}

/// Creates or upgrades `set`'s tables on `pool` (see the module docs),
/// each round trip bounded by `ex`, in a `schema_upgrade` span (INFO),
/// reporting the versions applied to `progress`
/// ([`ProgressOperation::SchemaUpgrade`]).
pub(crate) async fn migrate<C: Dialect>(
    pool: &sqlx::Pool<C::Database>,
    set: &MigrationSet,
    wait: ReplyWait,
    progress: &ProgressSink,
) -> Res<()> {
    // The crate's own bookkeeping: counted in no handle's counters.
    let ex = Exchange::uncounted(wait);
    let list = C::migrations(set);
    let span = tracing::info_span!(
        target: "ms_smt",
        "schema_upgrade",
        engine = std::any::type_name::<C>(),
        set = set.name,
        found = Empty,
        newest = newest(list),
        steps = Empty,
        applied = Empty,
    );
    let out = upgrade::<C>(pool, set, ex, progress)
        .instrument(span.clone())
        .await;
    let (outcome, error) = match &out {
        Ok(()) => ("ok", None),
        Err(e) => ("error", Some(tracing::field::display(e))),
    };
    tracing::info!(target: "ms_smt", parent: &span, outcome, error, "finished");
    out
}

/// Brings the ledger to its current shape (inside the migration lock).
async fn upgrade_ledger<C: Dialect>(conn: &mut C, ex: Exchange<'_>) -> Res<()> {
    conn.run_ddl(ex, C::LEDGER.create).await?;
    if !exists(conn, ex, C::LEDGER.has_checksums).await? {
        conn.run_ddl(ex, C::LEDGER.add_checksums).await?;
    }
    if !exists(conn, ex, C::LEDGER.has_sets).await? {
        conn.run_ddl(ex, C::LEDGER.add_sets).await?;
        tracing::info!(target: "ms_smt", "the ledger keeps migration sets now; its rows are the tree schema's");
    }
    Ok(())
}

/// [`migrate`], inside its span.
async fn upgrade<C: Dialect>(
    pool: &sqlx::Pool<C::Database>,
    set: &MigrationSet,
    ex: Exchange<'_>,
    progress: &ProgressSink,
) -> Res<()> {
    let list = C::migrations(set);
    let mut conn = pool.acquire().await?;
    let applied: Vec<i64> = {
        let mut tx = begin_write_by(&mut *conn, ex).await?;
        tx.lock_migrations(ex).await?;
        upgrade_ledger(&mut *tx, ex).await?;
        let ledger = ledger(&mut *tx, ex, set.name).await?;
        if let Some(&(found, _)) = ledger
            .iter()
            .max_by_key(|r| r.0)
            .filter(|r| r.0 > newest(list))
        {
            return Err(SqlStoreError::SchemaTooNew {
                found,
                supported: newest(list),
            });
        }
        settle(&mut *tx, ex, set.name, list, &ledger).await?;
        C::exchange(ex, tx.commit()).await?;
        ledger.into_iter().map(|(version, _)| version).collect()
    };
    let pending: Vec<(&Migration, &'static str)> = list
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .filter_map(|m| match m.step {
            Step::Sql(sql) => Some((m, sql)),
            // Never run: what it made belongs to another set now.
            Step::Retired { .. } => None,
        })
        .collect();
    let span = Span::current();
    span.record("found", applied.iter().max().copied().unwrap_or(0))
        .record("steps", pending.len());
    let mut meter = progress.meter(ProgressOperation::SchemaUpgrade, Some(pending.len() as u64));
    let mut ran = 0u64;
    for (migration, sql) in pending {
        let mut tx = begin_write_by(&mut *conn, ex).await?;
        tx.lock_migrations(ex).await?;
        // Another process may have applied it meanwhile (and checked or
        // recorded the others).
        let ledger = ledger(&mut *tx, ex, set.name).await?;
        settle(&mut *tx, ex, set.name, list, &ledger).await?;
        if !ledger.iter().any(|(v, _)| *v == migration.version) {
            tx.run_ddl(ex, sql).await?;
            tx.execute(
                ex,
                "INSERT INTO ms_smt_migrations (migration_set, version, description, checksum) \
                 VALUES ($1, $2, $3, $4)"
                    .into_sql_str(),
                &[
                    Arg::Text(set.name),
                    Arg::Int(migration.version),
                    Arg::Text(migration.description),
                    Arg::Bytes(&migration.checksum()),
                ],
            )
            .await?;
            ran = ran.saturating_add(1);
        }
        C::exchange(ex, tx.commit()).await?;
        tracing::debug!(
            target: "ms_smt",
            set = set.name,
            version = migration.version,
            description = migration.description,
            "schema version in place"
        );
        meter.add(1);
    }
    span.record("applied", ran);
    meter.finish();
    Ok(())
}

/// A ledger row: version and recorded checksum (`None`: recorded by a
/// release without checksums).
pub(crate) type LedgerRow = (i64, Option<Vec<u8>>);

/// The ledger's rows of `set`, by version (the ledger is in its current
/// shape).
pub(crate) async fn ledger<C: Dialect>(
    conn: &mut C,
    ex: Exchange<'_>,
    set: &str,
) -> Res<Vec<LedgerRow>> {
    conn.fetch_all(
        ex,
        "SELECT version, checksum FROM ms_smt_migrations WHERE migration_set = $1 \
         ORDER BY version"
            .into_sql_str(),
        &[Arg::Text(set)],
    )
    .await
}

/// True when `query` (one of [`LedgerSql`](crate::ledger::LedgerSql)'s `has_*`/`exists`) finds its
/// row.
pub(crate) async fn exists<C: Dialect>(
    conn: &mut C,
    ex: Exchange<'_>,
    query: &'static str,
) -> Res<bool> {
    let found: Option<(i64,)> = fetch_optional(conn, ex, query.into_sql_str(), &[]).await?;
    Ok(found.is_some())
}

/// Fails with [`SqlStoreError::MigrationChanged`] for the first version
/// of `ledger` that `list` knows whose recorded checksum is not `list`'s.
pub(crate) fn verify(list: &[Migration], ledger: &[LedgerRow]) -> Res<()> {
    for (version, recorded) in ledger {
        let Some(recorded) = recorded else { continue };
        let Some(migration) = list.iter().find(|m| m.version == *version) else {
            continue;
        };
        let expected = migration.checksum();
        if recorded[..] != expected[..] {
            return Err(SqlStoreError::MigrationChanged {
                version: *version,
                description: migration.description,
                recorded: recorded.clone(),
                expected,
            });
        }
    }
    Ok(())
}

/// [`verify`]s `ledger`, then records `list`'s checksum for each version
/// it knows that was recorded without one (trusted: see the module docs).
/// Inside the migration lock.
async fn settle<C: Dialect>(
    conn: &mut C,
    ex: Exchange<'_>,
    set: &str,
    list: &[Migration],
    ledger: &[LedgerRow],
) -> Res<()> {
    verify(list, ledger)?;
    for (version, _) in ledger.iter().filter(|(_, recorded)| recorded.is_none()) {
        let Some(migration) = list.iter().find(|m| m.version == *version) else {
            continue;
        };
        conn.execute(
            ex,
            "UPDATE ms_smt_migrations SET checksum = $1 \
             WHERE migration_set = $2 AND version = $3"
                .into_sql_str(),
            &[
                Arg::Bytes(&migration.checksum()),
                Arg::Text(set),
                Arg::Int(*version),
            ],
        )
        .await?;
        tracing::info!(target: "ms_smt", set, version = *version, "recorded the checksum of a version applied without one");
    }
    Ok(())
}

/// How `set` stands in the database behind `conn`, read without writing
/// (see [`SqlStore::schema_state`](crate::SqlStore::schema_state)).
pub(crate) async fn state<C: Dialect>(
    conn: &mut C,
    ex: Exchange<'_>,
    set: &MigrationSet,
) -> Res<SchemaState> {
    if !exists(conn, ex, C::LEDGER.exists).await? {
        return Ok(SchemaState::Missing);
    }
    // A ledger from before sets holds the tree schema's versions alone.
    let sets = exists(conn, ex, C::LEDGER.has_sets).await?;
    let rows: Vec<LedgerRow> = if sets {
        ledger(conn, ex, set.name).await?
    } else if set.name == super::migrations::TREE_SCHEMA.name {
        if exists(conn, ex, C::LEDGER.has_checksums).await? {
            let sql = "SELECT version, checksum FROM ms_smt_migrations ORDER BY version";
            conn.fetch_all(ex, sql.into_sql_str(), &[]).await?
        } else {
            let sql = "SELECT version FROM ms_smt_migrations ORDER BY version";
            let versions: Vec<(i64,)> = conn.fetch_all(ex, sql.into_sql_str(), &[]).await?;
            versions.into_iter().map(|(v,)| (v, None)).collect()
        }
    } else {
        Vec::new()
    };
    let list = C::migrations(set);
    let supported = newest(list);
    let state = match rows.iter().map(|r| r.0).max() {
        None => SchemaState::Missing,
        Some(found) if found < supported => SchemaState::Older { found },
        Some(found) if found > supported => SchemaState::Newer { found },
        Some(_) => SchemaState::Current,
    };
    if matches!(state, SchemaState::Older { .. } | SchemaState::Current) {
        verify(list, &rows)?;
    }
    Ok(state)
}
