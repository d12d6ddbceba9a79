//! The PostgreSQL server benchmarks may use: one with `fsync = on`, named by
//! `MSSMT_BENCH_PG_URL`. The throwaway test server of
//! `scripts/with-postgres.sh` runs with fsync off, so its commits are not
//! durable and its numbers would not compare with SQLite's
//! `synchronous=FULL`; it is refused. `scripts/pg-cluster.sh init` and
//! `start` give a durable one.

use std::error::Error;

use ms_smt_sql::PostgresStore;

/// `MSSMT_BENCH_PG_URL`, if set and not empty.
pub fn bench_pg_url() -> Option<String> {
    std::env::var("MSSMT_BENCH_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// `url` with any password masked, for printing.
pub fn masked(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@').map(|i| start + i) {
        Some(at) => match url[start..at].find(':').map(|i| start + i) {
            Some(colon) => format!("{}***{}", &url[..=colon], &url[at..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Connects to Postgres, prints its durability settings, and refuses a
/// server running without fsync.
pub async fn durable_postgres(url: &str) -> Result<PostgresStore, Box<dyn Error>> {
    let pg = PostgresStore::connect(url).await?;
    let mut show = Vec::new();
    for what in ["fsync", "synchronous_commit", "server_version"] {
        let sql = format!("SHOW {what}");
        show.push(
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql))
                .fetch_one(pg.pool())
                .await?,
        );
    }
    let [fsync, sync_commit, version] = &show[..] else {
        return Err("SHOW returned fewer settings than asked".into());
    };
    println!(
        "- Postgres {version} at {}: fsync = {fsync}, synchronous_commit = {sync_commit}",
        masked(url)
    );
    if fsync != "on" {
        return Err(format!(
            "the Postgres server at MSSMT_BENCH_PG_URL runs with fsync = {fsync}: its commits are \
             not durable, so its numbers would not compare with SQLite's synchronous=FULL. Restart \
             it with fsync = on (scripts/pg-cluster.sh), or unset MSSMT_BENCH_PG_URL to measure \
             memory and SQLite only."
        )
        .into());
    }
    Ok(pg)
}

/// The durable Postgres of `MSSMT_BENCH_PG_URL` (panicking on one without
/// fsync), or `None` after saying that the Postgres benches are skipped.
#[allow(dead_code)] // the benches' entry point; the examples handle errors themselves
pub fn durable_postgres_or_skip(rt: &tokio::runtime::Runtime) -> Option<PostgresStore> {
    match bench_pg_url() {
        Some(url) => Some(
            rt.block_on(durable_postgres(&url))
                .expect("a durable Postgres at MSSMT_BENCH_PG_URL"),
        ),
        None => {
            eprintln!(
                "postgres benches SKIPPED: MSSMT_BENCH_PG_URL is not set (a server with fsync on; \
                 see benches/support/durable.rs)"
            );
            None
        }
    }
}
