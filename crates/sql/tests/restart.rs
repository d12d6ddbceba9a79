//! A Postgres server restarted under a `PostgresStore`'s pool: no call
//! fails afterwards on a connection the pool held across the restart
//! (`PostgresStore::connect` checks a connection idle for
//! `STALE_CHECK_AFTER` before handing it out), while a pool without the
//! check fails once per such connection (which shows the restart really
//! left them dead).
//!
//! The test starts a cluster of its own (`scripts/pg-cluster.sh`: the
//! suite's shared server must not restart under the other tests), on a
//! fixed port across the restart. Without PostgreSQL's server binaries it
//! prints a SKIPPED line, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(feature = "postgres")]

use std::process::Stdio;
use std::time::Duration;

use ms_smt::{CompactedTree, Key, Leaf};
use ms_smt_sql::{PostgresStore, STALE_CHECK_AFTER};
use sqlx::postgres::PgPoolOptions;

use crate::support::hkey;

const CLUSTER_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg-cluster.sh");

/// Runs the cluster script off the runtime's threads; its stdout, or
/// `None` with exit status 3 (no server binaries).
async fn cluster(args: &[&str]) -> Option<String> {
    let out = tokio::process::Command::new(CLUSTER_SCRIPT)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run scripts/pg-cluster.sh");
    if out.status.code() == Some(3) {
        return None;
    }
    assert!(
        out.status.success(),
        "pg-cluster.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_owned(),
    )
}

/// Removes the cluster however the test ends.
struct Destroy(String);

impl Drop for Destroy {
    fn drop(&mut self) {
        let _ = std::process::Command::new(CLUSTER_SCRIPT)
            .args(["destroy", &self.0])
            .stdin(Stdio::null())
            .output();
    }
}

/// Holds `n` pooled connections at once (so the pool keeps `n` open),
/// then returns them to the pool and waits until it holds them idle (a
/// dropped connection goes back to the pool in a task of its own).
async fn open_connections(pool: &sqlx::PgPool, n: usize) {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(pool.acquire().await.expect("acquire"));
    }
    for conn in &mut held {
        sqlx::query("SELECT 1")
            .execute(&mut **conn)
            .await
            .expect("select");
    }
    drop(held);
    // A bound only so a pool that drops connections fails instead of
    // hanging.
    let waiting = std::time::Instant::now();
    while pool.num_idle() < n {
        assert!(
            waiting.elapsed() < Duration::from_secs(30),
            "the pool keeps {} of {n} connections",
            pool.num_idle()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Restarts the server on its port and waits until every pooled
/// connection has been idle for longer than the store's check threshold.
async fn restart(dir: &str, url: &str) {
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .expect("a port in the URL");
    cluster(&["stop", dir]).await.expect("stop");
    let again = cluster(&["start", dir, port]).await.expect("start");
    assert_eq!(again, url, "the server came back on another port");
    tokio::time::sleep(STALE_CHECK_AFTER + Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_fails_no_call() {
    let Some(dir) = cluster(&["init"]).await else {
        if std::env::var("MSSMT_REQUIRE_PG").as_deref() == Ok("1") {
            panic!("restart test FAILED: no PostgreSQL server binaries but MSSMT_REQUIRE_PG=1");
        }
        eprintln!("postgres test restart SKIPPED: no PostgreSQL server binaries (initdb, pg_ctl)");
        return;
    };
    let _destroy = Destroy(dir.clone());
    let url = cluster(&["start", &dir]).await.expect("start");
    const CONNECTIONS: usize = 8;

    // The store's pool: every call after the restart succeeds.
    let store = PostgresStore::connect(&url).await.expect("connect");
    let tree = CompactedTree::new(store.open_namespace("restart"));
    let leaves: Vec<(Key, Leaf)> = (0..100)
        .map(|i| (hkey("restart", i), Leaf::new(vec![i as u8], i + 1)))
        .collect();
    let root = tree.insert_many(leaves.clone()).await.expect("write");
    open_connections(store.pool(), CONNECTIONS).await;
    restart(&dir, &url).await;
    // As many calls at once as the pool held connections, then more one
    // by one, reads and a write.
    let keys: Vec<Key> = leaves.iter().map(|(k, _)| *k).collect();
    let calls = (0..CONNECTIONS).map(|i| {
        let tree = tree.clone();
        let key = keys[i];
        tokio::spawn(async move { tree.get(&key).await })
    });
    for (i, call) in calls.enumerate() {
        let leaf = call.await.expect("task").expect("a read after the restart");
        assert_eq!(leaf, leaves[i].1);
    }
    for key in &keys[..20] {
        tree.merkle_proof(key)
            .await
            .expect("a proof after the restart");
    }
    assert_eq!(tree.root().await.expect("root"), root);
    tree.insert_many([(hkey("restart", 1000), Leaf::new(vec![1], 1))])
        .await
        .expect("a write after the restart");

    // A second restart, with the store idle in between: the same.
    open_connections(store.pool(), CONNECTIONS).await;
    restart(&dir, &url).await;
    for key in &keys[..CONNECTIONS * 2] {
        tree.get(key)
            .await
            .expect("a read after the second restart");
    }
    store.pool().close().await;

    // The control: a pool without the check fails on the connections it
    // held across a restart (sqlx drops each after its failure).
    let plain = PgPoolOptions::new()
        .test_before_acquire(false)
        .max_connections(CONNECTIONS as u32)
        .connect(&url)
        .await
        .expect("connect");
    open_connections(&plain, CONNECTIONS).await;
    restart(&dir, &url).await;
    let mut failed = 0;
    for _ in 0..CONNECTIONS * 2 {
        if sqlx::query("SELECT 1").execute(&plain).await.is_err() {
            failed += 1;
        }
    }
    assert!(failed >= 1, "a restart left no pooled connection dead");
    plain.close().await;
}
