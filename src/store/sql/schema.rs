//! The versioned DDL runner. Versions are tracked in `ms_smt_migrations`
//! (not sqlx's `_sqlx_migrations`, which belongs to the host application);
//! each version's DDL runs once, in its own transaction with its ledger
//! entry, and a database at a newer version than this crate knows is
//! refused.
//!
//! Checked migrations: the ledger records each version's checksum (SHA-256
//! of its SQL text, byte for byte) when it is applied, and every open
//! compares the recorded checksums with this crate's; a version applied
//! with other SQL than this crate's (an edited migration, or a ledger
//! altered by hand) is refused with [`SqlStoreError::MigrationChanged`]
//! before anything is migrated, as sqlx's `Migrate` refuses a modified
//! migration. A released migration is therefore frozen: a schema change
//! is a new version.
//!
//! Ledgers written before checksums (the released crate's: `version`,
//! `description`, `applied_at`) gain a `checksum` column on their first
//! open by this crate, and the versions already applied are recorded with
//! this crate's checksums: trusted on first open, since the released
//! crate has no other record of what it ran. A known version found
//! without a checksum later (recorded by a release without checksums
//! running beside this one) is trusted the same way. Versions this crate
//! does not know are left as they are (newer ones are refused,
//! [`SqlStoreError::SchemaTooNew`]).
//!
//! Concurrent opens from several processes take the migration lock first
//! (Postgres: an advisory transaction lock; SQLite: `BEGIN IMMEDIATE`),
//! so the ledger is created, upgraded and checked by one of them at a
//! time, and each version is applied once.

use sha2::{Digest, Sha256};
use sqlx::SqlSafeStr;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::dialect::{Arg, Dialect, begin_write_by, fetch_optional};
use super::error::{Res, SqlStoreError};
use super::reply_wait::ReplyWait;
use crate::progress::{ProgressOperation, ProgressSink};

/// A version's checksum: SHA-256 of its SQL text.
pub(crate) fn checksum(sql: &str) -> [u8; 32] {
    Sha256::digest(sql.as_bytes()).into()
}

/// Creates or upgrades the store's tables on `pool` (see the module docs),
/// each round trip bounded by `wait`, in a `schema_upgrade` span (INFO),
/// reporting the versions applied to `progress`
/// ([`ProgressOperation::SchemaUpgrade`]).
pub(crate) async fn migrate<C: Dialect>(
    pool: &sqlx::Pool<C::Database>,
    wait: ReplyWait,
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
    let out = upgrade::<C>(pool, wait, progress)
        .instrument(span.clone())
        .await;
    let (outcome, error) = match &out {
        Ok(()) => ("ok", None),
        Err(e) => ("error", Some(tracing::field::display(e))),
    };
    tracing::info!(target: "ms_smt", parent: &span, outcome, error, "finished");
    out
}

/// [`migrate`], inside its span.
async fn upgrade<C: Dialect>(
    pool: &sqlx::Pool<C::Database>,
    wait: ReplyWait,
    progress: &ProgressSink,
) -> Res<()> {
    let newest = C::MIGRATIONS.last().map_or(0, |m| m.0);
    let mut conn = pool.acquire().await?;
    let applied: Vec<i64> = {
        let mut tx = begin_write_by(&mut *conn, wait).await?;
        tx.lock_migrations(wait).await?;
        tx.run_ddl(wait, C::LEDGER).await?;
        if !has_checksums(&mut *tx, wait).await? {
            tx.run_ddl(wait, C::LEDGER_CHECKSUMS).await?;
        }
        let ledger = ledger(&mut *tx, wait).await?;
        if let Some(&(found, _)) = ledger.iter().max_by_key(|r| r.0).filter(|r| r.0 > newest) {
            return Err(SqlStoreError::SchemaTooNew {
                found,
                supported: newest,
            });
        }
        settle(&mut *tx, wait, &ledger).await?;
        C::bounded_by(wait, tx.commit()).await?;
        ledger.into_iter().map(|(version, _)| version).collect()
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
        let mut tx = begin_write_by(&mut *conn, wait).await?;
        tx.lock_migrations(wait).await?;
        // Another process may have applied it meanwhile (and checked or
        // recorded the others).
        let ledger = ledger(&mut *tx, wait).await?;
        settle(&mut *tx, wait, &ledger).await?;
        if !ledger.iter().any(|(v, _)| v == version) {
            tx.run_ddl(wait, sql).await?;
            tx.execute(
                wait,
                "INSERT INTO ms_smt_migrations (version, description, checksum) \
                 VALUES ($1, $2, $3)"
                    .into_sql_str(),
                &[
                    Arg::Int(*version),
                    Arg::Text(description),
                    Arg::Bytes(&checksum(sql)),
                ],
            )
            .await?;
            ran = ran.saturating_add(1);
        }
        C::bounded_by(wait, tx.commit()).await?;
        tracing::debug!(target: "ms_smt", version = *version, description = *description, "schema version in place");
        meter.add(1);
    }
    span.record("applied", ran);
    meter.finish();
    Ok(())
}

/// A ledger row: version and recorded checksum (`None`: recorded by a
/// release without checksums).
pub(crate) type LedgerRow = (i64, Option<Vec<u8>>);

/// The ledger's rows, by version (the ledger has its `checksum` column).
pub(crate) async fn ledger<C: Dialect>(conn: &mut C, wait: ReplyWait) -> Res<Vec<LedgerRow>> {
    conn.fetch_all(
        wait,
        "SELECT version, checksum FROM ms_smt_migrations ORDER BY version".into_sql_str(),
        &[],
    )
    .await
}

/// True when the ledger has its `checksum` column.
pub(crate) async fn has_checksums<C: Dialect>(conn: &mut C, wait: ReplyWait) -> Res<bool> {
    let found: Option<(i64,)> =
        fetch_optional(conn, wait, C::HAS_CHECKSUMS.into_sql_str(), &[]).await?;
    Ok(found.is_some())
}

/// Fails with [`SqlStoreError::MigrationChanged`] for the first version
/// of `ledger` this crate knows whose recorded checksum is not this
/// crate's.
pub(crate) fn verify<C: Dialect>(ledger: &[LedgerRow]) -> Res<()> {
    for (version, recorded) in ledger {
        let Some(recorded) = recorded else { continue };
        let Some((_, description, sql)) = C::MIGRATIONS.iter().find(|m| m.0 == *version) else {
            continue;
        };
        let expected = checksum(sql);
        if recorded[..] != expected[..] {
            return Err(SqlStoreError::MigrationChanged {
                version: *version,
                description,
                recorded: recorded.clone(),
                expected,
            });
        }
    }
    Ok(())
}

/// [`verify`]s `ledger`, then records this crate's checksum for each
/// version it knows that was recorded without one (trusted: see the
/// module docs). Inside the migration lock.
async fn settle<C: Dialect>(conn: &mut C, wait: ReplyWait, ledger: &[LedgerRow]) -> Res<()> {
    verify::<C>(ledger)?;
    for (version, _) in ledger.iter().filter(|(_, recorded)| recorded.is_none()) {
        let Some((_, _, sql)) = C::MIGRATIONS.iter().find(|m| m.0 == *version) else {
            continue;
        };
        conn.execute(
            wait,
            "UPDATE ms_smt_migrations SET checksum = $1 WHERE version = $2".into_sql_str(),
            &[Arg::Bytes(&checksum(sql)), Arg::Int(*version)],
        )
        .await?;
        tracing::info!(target: "ms_smt", version = *version, "recorded the checksum of a version applied without one");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Dialect, checksum};

    /// Every migration's checksum, pinned: a released migration must never
    /// change (a database that applied it would then be refused), so a
    /// change to one fails here first. A new version is pinned as the
    /// failure prints.
    fn pinned<C: Dialect>(pins: &[(i64, &str)]) {
        let actual: Vec<(i64, String)> = C::MIGRATIONS
            .iter()
            .map(|(version, _, sql)| (*version, hex::encode(checksum(sql))))
            .collect();
        let pins: Vec<(i64, String)> = pins.iter().map(|(v, c)| (*v, (*c).to_owned())).collect();
        assert_eq!(
            pins, actual,
            "a migration changed, or is new: a released migration must stay as it is \
             (a change is a new version); pin a new one as listed"
        );
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_migrations_are_pinned() {
        pinned::<sqlx::SqliteConnection>(&[
            (
                2,
                "0ca86eb8879d899a75b6c70351f68534b247a7b877ccf1aa49a13f10505f40a2",
            ),
            (
                4,
                "f88180a4b845333c61233c00adf8e82d2dff3ec483a19460a2d2d60731f078d7",
            ),
            (
                5,
                "ac913183c401b16ca89f3fa90c23574b404fdb2598fed9d528432da71fb12bcd",
            ),
            (
                6,
                "b1d1af6fe9ba5a235d129a687c2dfa7f817f8d77ff70e0c70c0453ba88a43439",
            ),
            (
                7,
                "54f8f10584846cb9dd39addae4d25af8e02b9c8f47aa32293e2be482c49e08bb",
            ),
            (
                8,
                "e0f219ada97fcdffd026a7b4beafaa5236bb8d3ff368d2616215a4854796e6fd",
            ),
        ]);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_migrations_are_pinned() {
        pinned::<sqlx::PgConnection>(&[
            (
                2,
                "aa2c12c9ac1772db94351fc46b711bc25e6ac11a3712306593bed56af15d84df",
            ),
            (
                4,
                "68d46c99698dff226f89bcaabe9f257ddf9f1a28460dc0da192debefa5c5b11f",
            ),
            (
                5,
                "9a3cb5ebc0d5169d85ea4a98f8a630c769a68df5efd43363b0d2f0c21c01fcb0",
            ),
            (
                6,
                "21a27428a8768ee42b77590d6c56422b9ebc5c000668e5bf497fafcc1989133e",
            ),
            (
                7,
                "5996039822304ae24b7904df132d7783de5950c121e7d46ff096f2045a2cc183",
            ),
            (
                8,
                "73fada945cbee0b508343408bd4cc85caa4d362f820228da14fb72b4743174d3",
            ),
        ]);
    }
}
