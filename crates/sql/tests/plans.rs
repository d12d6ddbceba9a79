//! The plans a store's Postgres sessions keep: with
//! [`SESSION_OPTIONS`](ms_smt_sql::SESSION_OPTIONS) every statement is
//! planned once per session and the plan is kept, so it must not depend on
//! what the table's statistics said at that moment.
//!
//! * `a_table_vacuumed_empty_leaves_no_scan_in_the_plans`: the strata table
//!   recorded empty (0 pages, 0 tuples: what a VACUUM of a cleared
//!   namespace leaves, here an ANALYZE of the new table), then written and
//!   grown to thousands of rows: the row read of a commit still probes the
//!   primary key. Before
//!   `enable_seqscan = off` joined the session options, the plan made on
//!   the empty table was a sequential scan per probed row, kept until the
//!   next ANALYZE: a commit reading 1,100 rows of a 10^5-leaf tree took
//!   14-16 s instead of ~10 ms (BENCHMARKS.md, "Where a durable leaf's
//!   time goes").
#![cfg(feature = "postgres")]

use crate::support;

use ms_smt::{CompactedTree, Key, Leaf};
use ms_smt_sql::{PostgresStore, SESSION_OPTIONS};
use ms_smt_test_support::scratch_postgres::ScratchPostgres;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

fn leaves(from: u32, n: u32) -> Vec<(Key, Leaf)> {
    (from..from + n)
        .map(|i| {
            let mut k = [0u8; 32];
            k[..4].copy_from_slice(&i.wrapping_mul(0x9e37_79b9).to_be_bytes());
            k[4..8].copy_from_slice(&i.to_le_bytes());
            (
                Key(k),
                Leaf::new(i.to_le_bytes().to_vec(), u64::from(i) + 1),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_table_vacuumed_empty_leaves_no_scan_in_the_plans() {
    let Some(admin) = support::pg_url("a_table_vacuumed_empty_leaves_no_scan_in_the_plans") else {
        return;
    };
    let db = ScratchPostgres::create(&admin, "plans").await;
    let options: PgConnectOptions = db.url.parse().expect("url");
    // One session, the crate's own options: what the store prepares is
    // what is inspected below.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options(SESSION_OPTIONS))
        .await
        .expect("connect");
    let store = PostgresStore::from_pool(pool.clone(), "plans");
    store.migrate().await.expect("migrate");
    // No ANALYZE but the test's own: autovacuum would renew the statistics
    // (and with them every kept plan) at a moment of its choosing.
    sqlx::raw_sql("ALTER TABLE ms_smt_strata SET (autovacuum_enabled = off)")
        .execute(&pool)
        .await
        .expect("autovacuum off");
    let tree = CompactedTree::new(store.clone());
    // Statistics that say the table is empty, as after a VACUUM of a
    // cleared namespace (which a standby's feedback may hold back here).
    sqlx::raw_sql("ANALYZE ms_smt_strata")
        .execute(&pool)
        .await
        .expect("analyze");
    let (pages, tuples): (i32, f32) =
        sqlx::query_as("SELECT relpages, reltuples FROM pg_class WHERE relname = 'ms_smt_strata'")
            .fetch_one(&pool)
            .await
            .expect("statistics");
    assert_eq!((pages, tuples), (0, 0.0), "the table is recorded empty");
    // The first commit on the empty table plans the row read; the tree
    // then grows past what a scan per probe could afford.
    tree.insert_many(leaves(10_000, 100))
        .await
        .expect("planned empty");
    for round in 0..4 {
        tree.insert_many(leaves(20_000 + round * 5_000, 5_000))
            .await
            .expect("grown");
    }
    let name: String = sqlx::query_scalar(
        "SELECT name FROM pg_prepared_statements WHERE statement LIKE 'SELECT k.r, n.path%'",
    )
    .fetch_one(&pool)
    .await
    .expect("the row read is prepared on the store's session");
    let explain = format!(
        "EXPLAIN EXECUTE {name}('{{0}}'::int4[], '{{1}}'::int8[], '{{\"\\\\x00\"}}'::bytea[], '{{4}}'::int4[])"
    );
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .fetch_all(&pool)
        .await
        .expect("explain");
    assert!(
        plan.iter().any(|line| line.contains("Index Scan"))
            && !plan.iter().any(|line| line.contains("Seq Scan")),
        "the kept plan of the row read: {plan:#?}"
    );
    pool.close().await;
    db.drop_database().await;
}
