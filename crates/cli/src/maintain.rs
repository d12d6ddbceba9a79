//! `maintain`: what a database that runs for months needs now and then,
//! one step after another, each reported with what it changed:
//!
//! 1. **Leaf counts:** counts, once, the namespaces written before the
//!    store kept leaf counts (`SqlStore::count_leaves`), so `namespaces`
//!    lists every count.
//! 2. **Journals** (with a `--journal-keep-*` bound): prunes every
//!    namespace's change journal to what the bounds keep (never a version a
//!    pin holds).
//! 3. **Pins:** lists every pin with how many versions behind its
//!    namespace it is: a pin keeps the rows its root needs
//!    (`ms_smt_history`), so an old one that nobody reads holds space.
//!    Nothing is unpinned (pins are the application's).
//! 4. **The engine** (`--vacuum`): SQLite: the WAL checkpointed and
//!    truncated and `PRAGMA optimize`; `full` also `VACUUM` (rewrites the
//!    file without its free pages; writers wait until it ends and it needs
//!    the file's size free on disk). Postgres: `VACUUM (ANALYZE)` of the
//!    store's tables (dead rows made reusable, statistics fresh; writers go
//!    on); `full` is `VACUUM (FULL, ANALYZE)` (tables and indexes
//!    rewritten compactly; each table locked while it is rewritten);
//!    `--reindex` rebuilds the strata table's indexes without blocking
//!    writers (`REINDEX ... CONCURRENTLY`).
//!
//! Sizes before and after (database, WAL, free pages or dead rows) are
//! printed, or one JSON document with `--json`.

use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use ms_smt::ProgressSink;
use ms_smt::store::{JournalStore, Retention};
use ms_smt_sql::{LeafRecount, SqlStoreError};
use serde_json::{Value, json};

use crate::Outcome;
use crate::db::{Db, sqlite_path};
use crate::error::{CliError, Res};
use crate::output::{Output, name_text};

/// What `--vacuum` does to the engine's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Vacuum {
    /// Nothing.
    None,
    /// SQLite: WAL checkpoint (truncate) and `PRAGMA optimize`; Postgres:
    /// `VACUUM (ANALYZE)` of the store's tables.
    Plain,
    /// SQLite: also `VACUUM`; Postgres: `VACUUM (FULL, ANALYZE)`. Writers
    /// wait while it runs.
    Full,
}

/// Arguments of `maintain`.
#[derive(Debug, Args)]
pub struct MaintainArgs {
    /// Keep the last this many versions of each change journal.
    #[arg(long, value_name = "N")]
    pub journal_keep_versions: Option<u64>,
    /// Keep the versions of each change journal committed within this age
    /// (seconds, or with a unit: 90m, 12h, 7d).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub journal_keep_age: Option<Duration>,
    /// Keep at most this many change rows per journal (whole versions).
    #[arg(long, value_name = "N")]
    pub journal_keep_changes: Option<u64>,
    /// What to do to the engine's files.
    #[arg(long, value_enum, default_value = "plain")]
    pub vacuum: Vacuum,
    /// Postgres: rebuild the strata table's indexes (`REINDEX TABLE
    /// CONCURRENTLY`; writers go on).
    #[arg(long)]
    pub reindex: bool,
}

/// `90`, `90s`, `15m`, `12h`, `7d`.
fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: a number of seconds, or with s, m, h or d"))?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3_600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(format!("{text:?}: the unit is s, m, h or d")),
    };
    Ok(Duration::from_secs(secs))
}

/// The engine's files at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Sizes {
    /// Tables and indexes (SQLite: the database file's pages).
    db_bytes: i64,
    /// The WAL on disk (SQLite's `-wal` file; Postgres: `pg_wal`).
    wal_bytes: i64,
    /// SQLite's free pages; Postgres's dead rows of the store's tables.
    reusable: i64,
    /// Rows the pins keep (`ms_smt_history`).
    history_rows: i64,
}

fn sizes_json(s: &Sizes, pg: bool) -> Value {
    json!({
        "db_bytes": s.db_bytes,
        "wal_bytes": s.wal_bytes,
        if pg { "dead_rows" } else { "free_pages" }: s.reusable,
        "history_rows": s.history_rows,
    })
}

fn sizes_text(s: &Sizes, pg: bool) -> String {
    format!(
        "{:.1} MB, WAL {:.1} MB, {} {}, {} history rows",
        s.db_bytes as f64 / 1e6,
        s.wal_bytes as f64 / 1e6,
        s.reusable,
        if pg { "dead rows" } else { "free pages" },
        s.history_rows
    )
}

fn sql_err(e: sqlx::Error) -> CliError {
    CliError::Store(SqlStoreError::from(e))
}

async fn sizes(db: &Db, spec: &str) -> Res<Sizes> {
    match db {
        Db::Sqlite(s) => {
            let pool = s.pool();
            let one = |sql: &'static str| async move {
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(pool)
                    .await
                    .map_err(sql_err)
            };
            let pages = one("PRAGMA page_count").await?;
            let page = one("PRAGMA page_size").await?;
            let wal = sqlite_path(spec)
                .map(|p| {
                    let mut w = p.into_os_string();
                    w.push("-wal");
                    std::fs::metadata(w).map_or(0, |m| m.len() as i64)
                })
                .unwrap_or(0);
            Ok(Sizes {
                db_bytes: pages * page,
                wal_bytes: wal,
                reusable: one("PRAGMA freelist_count").await?,
                history_rows: one("SELECT COUNT(*) FROM ms_smt_history").await?,
            })
        }
        Db::Postgres(s) => {
            let pool = s.pool();
            let (db_bytes, dead): (i64, i64) = sqlx::query_as(
                "SELECT COALESCE(SUM(pg_total_relation_size(relid)), 0)::int8, \
                     COALESCE(SUM(n_dead_tup), 0)::int8 \
                 FROM pg_stat_user_tables \
                 WHERE relname LIKE 'ms\\_smt\\_%' AND schemaname = current_schema()",
            )
            .fetch_one(pool)
            .await
            .map_err(sql_err)?;
            // pg_wal needs pg_monitor (or superuser); unknown otherwise.
            let wal = sqlx::query_scalar::<_, i64>(
                "SELECT COALESCE(SUM(size), 0)::int8 FROM pg_ls_waldir()",
            )
            .fetch_one(pool)
            .await
            .unwrap_or(-1);
            let history = sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM ms_smt_history")
                .fetch_one(pool)
                .await
                .map_err(sql_err)?;
            Ok(Sizes {
                db_bytes,
                wal_bytes: wal,
                reusable: dead,
                history_rows: history,
            })
        }
    }
}

/// `maintain`: the steps above, in order.
pub async fn maintain(db: &Db, spec: &str, args: MaintainArgs, out: Output) -> Res<Outcome> {
    let pg = matches!(db, Db::Postgres(_));
    let started = Instant::now();
    let before = sizes(db, spec).await?;
    let mut steps = Vec::new();
    let mut text = vec![format!("before: {}", sizes_text(&before, pg))];

    // 1. Leaf counts.
    let bar = out.counter("count", "rows");
    let progress = {
        let bar = bar.clone();
        ProgressSink::new(move |p| bar.set_position(p.done))
    };
    let step = Instant::now();
    let counted = match db {
        Db::Sqlite(s) => s.count_leaves(&progress).await?,
        Db::Postgres(s) => s.count_leaves(&progress).await?,
    };
    bar.finish_and_clear();
    let failed = counted.iter().filter(|r| r.outcome.is_err()).count();
    steps.push(json!({
        "step": "count_leaves",
        "secs": step.elapsed().as_secs_f64(),
        "namespaces": counted.iter().map(recount_json).collect::<Vec<_>>(),
    }));
    text.push(format!(
        "leaf counts: {} namespace(s) counted{}",
        counted.len() - failed,
        if failed > 0 {
            format!(", {failed} left uncounted")
        } else {
            String::new()
        }
    ));
    for r in counted.iter().filter(|r| r.outcome.is_err()) {
        if let Err(problem) = &r.outcome {
            text.push(format!("  {}: {problem}", name_text(&r.name)));
        }
    }

    // 2. Journals.
    let retention = Retention {
        versions: args.journal_keep_versions,
        age: args.journal_keep_age,
        changes: args.journal_keep_changes,
    };
    if retention != Retention::default() {
        let step = Instant::now();
        let names = journaled(db).await?;
        let bar = out.bar(names.len() as u64, "prune");
        let mut removed = 0u64;
        for name in &names {
            removed += match db {
                Db::Sqlite(s) => s.open_namespace(name).prune_journal(&retention).await?,
                Db::Postgres(s) => s.open_namespace(name).prune_journal(&retention).await?,
            };
            bar.inc(1);
        }
        bar.finish_and_clear();
        steps.push(json!({
            "step": "prune_journals",
            "secs": step.elapsed().as_secs_f64(),
            "journals": names.len(),
            "change_rows_removed": removed,
        }));
        text.push(format!(
            "journals: {} pruned, {removed} change rows removed",
            names.len()
        ));
    }

    // 3. Pins.
    let pins = pins(db).await?;
    steps.push(json!({
        "step": "pins",
        "pins": pins.iter().map(|(ns, name, behind)| json!({
            "namespace": ns, "pin": name, "versions_behind": behind,
        })).collect::<Vec<_>>(),
        "history_rows": before.history_rows,
    }));
    text.push(format!(
        "pins: {} (keeping {} history rows)",
        pins.len(),
        before.history_rows
    ));
    for (ns, name, behind) in pins.iter().take(20) {
        text.push(format!(
            "  {} pin {name:?}: {behind} versions behind",
            name_text(ns)
        ));
    }

    // 4. The engine.
    let step = Instant::now();
    let spinner = out.counter(
        match args.vacuum {
            Vacuum::None => "engine",
            Vacuum::Plain => "vacuum",
            Vacuum::Full => "vacuum full",
        },
        "tables",
    );
    spinner.enable_steady_tick(Duration::from_millis(200));
    let done = engine(db, args.vacuum, args.reindex, &spinner).await?;
    spinner.finish_and_clear();
    let after = sizes(db, spec).await?;
    steps.push(json!({
        "step": "engine",
        "secs": step.elapsed().as_secs_f64(),
        "statements": done,
    }));
    text.push(format!("engine: {}", done.join("; ")));
    text.push(format!("after: {}", sizes_text(&after, pg)));

    out.emit(
        json!({
            "before": sizes_json(&before, pg),
            "after": sizes_json(&after, pg),
            "steps": steps,
            "secs": started.elapsed().as_secs_f64(),
            "uncounted": failed,
        }),
        || text.join("\n"),
    );
    Ok(if failed > 0 {
        Outcome::Failed
    } else {
        Outcome::Ok
    })
}

fn recount_json(r: &LeafRecount) -> Value {
    match &r.outcome {
        Ok(n) => json!({ "name": r.name, "leaves": n }),
        Err(problem) => json!({ "name": r.name, "problem": problem.to_string() }),
    }
}

/// The namespaces whose journal is on.
async fn journaled(db: &Db) -> Res<Vec<String>> {
    const SQL: &str = "SELECT name FROM ms_smt_namespaces WHERE journal_from IS NOT NULL \
                       ORDER BY name";
    match db {
        Db::Sqlite(s) => sqlx::query_scalar(SQL).fetch_all(s.pool()).await,
        Db::Postgres(s) => sqlx::query_scalar(SQL).fetch_all(s.pool()).await,
    }
    .map_err(sql_err)
}

/// Every pin: its namespace, name, and versions behind the namespace.
async fn pins(db: &Db) -> Res<Vec<(String, String, i64)>> {
    const SQL: &str = "SELECT n.name, p.name, n.version - p.version FROM ms_smt_pins p \
                       JOIN ms_smt_namespaces n ON n.id = p.ns ORDER BY 3 DESC, 1, 2";
    match db {
        Db::Sqlite(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await,
        Db::Postgres(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await,
    }
    .map_err(sql_err)
}

/// The store's tables (Postgres), as `VACUUM` and `REINDEX` name them.
const TABLES: [&str; 6] = [
    "ms_smt_strata",
    "ms_smt_history",
    "ms_smt_changes",
    "ms_smt_versions",
    "ms_smt_pins",
    "ms_smt_namespaces",
];

/// The engine's step; returns the statements it ran.
async fn engine(
    db: &Db,
    vacuum: Vacuum,
    reindex: bool,
    spinner: &indicatif::ProgressBar,
) -> Res<Vec<String>> {
    let mut done = Vec::new();
    match db {
        Db::Sqlite(s) => {
            if reindex {
                return Err(CliError::Unsupported("--reindex is for Postgres"));
            }
            let mut statements = Vec::new();
            if vacuum != Vacuum::None {
                statements.push("PRAGMA wal_checkpoint(TRUNCATE)");
            }
            if vacuum == Vacuum::Full {
                // VACUUM writes the whole file through the WAL: truncate
                // it again afterwards.
                statements.extend(["VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"]);
            }
            if vacuum != Vacuum::None {
                statements.push("PRAGMA optimize");
            }
            // One connection for all: the pool's others stay idle.
            let mut conn = s.pool().acquire().await.map_err(sql_err)?;
            for sql in statements {
                spinner.set_message(sql.to_owned());
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(&mut *conn)
                    .await
                    .map_err(sql_err)?;
                spinner.inc(1);
                done.push(sql.to_owned());
            }
        }
        Db::Postgres(s) => {
            let mut statements = Vec::new();
            if reindex {
                statements.push("REINDEX TABLE CONCURRENTLY ms_smt_strata".to_owned());
            }
            for table in TABLES {
                match vacuum {
                    Vacuum::None => {}
                    Vacuum::Plain => statements.push(format!("VACUUM (ANALYZE) {table}")),
                    Vacuum::Full => statements.push(format!("VACUUM (FULL, ANALYZE) {table}")),
                }
            }
            for sql in statements {
                spinner.set_message(sql.clone());
                // Not in a transaction (VACUUM refuses one): the simple
                // protocol, one statement.
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                    .execute(s.pool())
                    .await
                    .map_err(sql_err)?;
                spinner.inc(1);
                done.push(sql);
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::parse_age;
    use std::time::Duration;

    #[test]
    fn ages_parse() {
        assert_eq!(parse_age("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(604_800)));
        assert!(parse_age("7w").is_err());
        assert!(parse_age("d").is_err());
    }
}
