//! Cancellation safety: every tree future (insert_many, the writer's
//! submit, get_many, merkle_proofs, delete_all, and insert_many in the caller's-transaction
//! mode) is dropped after k polls, for every k from 1 until the operation
//! completes, on SQLite and Postgres. After each drop the store must be
//! usable at once (the next read and write succeed), the root must be the
//! old or the new one, the audit must be clean, and on Postgres no
//! connection may stay idle inside a transaction (`pg_stat_activity`).
//!
//! How many cancellation points an operation has depends on how often its
//! driver answers after the next poll rather than before it (sqlx's SQLite
//! worker thread often answers first), so the counts are printed, not
//! asserted; every point that occurs is checked.
//!
//! These are the failure modes of sqlx issues #3932 (a dropped SQLite
//! `begin_with` left the connection in a transaction, fixed in sqlx 0.9)
//! and #4385/#4393 (a cancelled Postgres `begin` returned a connection to
//! the pool with its transaction open).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use ms_smt::store::{AuditStore, Writable};

use ms_smt::{CompactedTree, Key, Leaf, WriterConfig};
use ms_smt_sql::{PostgresStore, SqliteStore};
use sqlx::Connection;
use support::{TempDb, assert_audit_clean, hkey, map_root, pg_url, sanitize, unique};

type Model = HashMap<Key, Leaf>;

/// Polls `fut` at most `k` times; `None` when it was dropped unfinished.
async fn poll_at_most<F: Future>(fut: F, k: usize) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut polls = 0;
    poll_fn(|cx| {
        polls += 1;
        match fut.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending if polls >= k => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

fn batch(tag: &str, round: u64, size: u64) -> Vec<(Key, Leaf)> {
    (0..size)
        .map(|i| {
            let key = hkey(tag, (round * 7 + i) % 300);
            let leaf = if (round + i).is_multiple_of(5) {
                Leaf::empty()
            } else {
                Leaf::new(format!("{round}/{i}").into_bytes(), round * 10 + i + 1)
            };
            (key, leaf)
        })
        .collect()
}

fn applied(model: &Model, batch: &[(Key, Leaf)]) -> Model {
    let mut m = model.clone();
    for (k, l) in batch {
        if l.is_empty() {
            m.remove(k);
        } else {
            m.insert(*k, l.clone());
        }
    }
    m
}

/// What a campaign saw.
#[derive(Default, Debug)]
struct Seen {
    /// Drops by operation.
    drops: HashMap<&'static str, usize>,
    /// Drops after which the new root was already stored.
    landed: usize,
}

/// The operations both stores are cancelled in.
const EVERY_OP: &[&str] = &[
    "insert_many",
    "submit",
    "get_many",
    "merkle_proofs",
    "delete_all",
];

/// Runs one operation with every cancellation point. `check` runs after
/// each drop: it must find the store usable and clean (`fresh` gives a
/// handle with nothing remembered).
async fn campaign<S, F, C>(what: &str, ops: &[&'static str], fresh: F, idle_check: C) -> Seen
where
    S: Writable + AuditStore + Clone + 'static,
    F: Fn() -> S,
    C: AsyncFn(),
{
    let tag = unique(what);
    let tree = CompactedTree::new(fresh());
    let mut model = Model::new();
    let first = batch(&tag, 0, 120);
    tree.insert_many(first.clone()).await.expect("seed");
    model = applied(&model, &first);
    let mut seen = Seen::default();
    let keys: Vec<Key> = (0..40).map(|i| hkey(&tag, i * 7)).collect();

    for (phase, &op) in ops.iter().enumerate() {
        // Rounds differ between phases, so every write below changes the
        // tree (a write that changes nothing commits nothing and would not
        // queue behind what a dropped operation still runs).
        let mut round = 1 + 10_000 * phase as u64;
        for k in 1.. {
            let b = batch(&tag, round, 25 + round % 40);
            let old = tree.root().await.expect("root");
            let new_model = match op {
                "insert_many" | "submit" => applied(&model, &b),
                "delete_all" => Model::new(),
                _ => model.clone(),
            };
            let new = map_root(&new_model).await;
            let done = {
                let handle = CompactedTree::new(fresh());
                match op {
                    "insert_many" => poll_at_most(handle.insert_many(b.clone()), k)
                        .await
                        .map(|r| r.map(|_| ()).expect("insert_many")),
                    "get_many" => poll_at_most(handle.get_many(&keys), k)
                        .await
                        .map(|r| r.map(|_| ()).expect("get_many")),
                    "merkle_proofs" => poll_at_most(handle.merkle_proofs(&keys), k)
                        .await
                        .map(|r| r.map(|_| ()).expect("merkle_proofs")),
                    "submit" => {
                        // Dropped before its group sealed: left out; after:
                        // written. Close waits for the writer either way.
                        let writer = handle.writer(WriterConfig::default());
                        let done = poll_at_most(writer.submit(b.clone()), k)
                            .await
                            .map(|r| r.map(|_| ()).expect("submit"));
                        writer.close().await;
                        done
                    }
                    _ => poll_at_most(handle.delete_all(), k)
                        .await
                        .map(|r| r.expect("delete_all")),
                }
                .is_some()
            };
            idle_check().await;
            // Usable at once: a write first (it queues behind the dropped
            // operation's transaction, which may still be finishing: a
            // write that had decided to commit before the drop commits),
            // then the root shows what the drop left: the old root or the
            // new one, plus the write.
            let next = batch(&tag, round + 1000, 3);
            assert_ne!(
                applied(&model, &next),
                model,
                "the write after a drop changes the tree"
            );
            tree.insert_many(next.clone())
                .await
                .expect("write after a drop");
            let root = tree.root().await.expect("root after a drop");
            let if_landed = applied(&new_model, &next);
            let if_not = applied(&model, &next);
            if root == map_root(&if_landed).await {
                if !done && new != old {
                    seen.landed += 1;
                }
                model = if_landed;
            } else {
                assert_eq!(
                    root,
                    map_root(&if_not).await,
                    "{what} {op} dropped after {k} polls: root is neither old nor new"
                );
                model = if_not;
            }
            assert_audit_clean(&tree, &format!("{what} {op} k={k}")).await;
            let leaves = tree.get_many(&keys).await.expect("get_many after a drop");
            for (key, leaf) in keys.iter().zip(&leaves) {
                assert_eq!(Some(leaf), model.get(key).or(Some(&Leaf::empty())));
            }
            round += 1;
            if done {
                break;
            }
            *seen.drops.entry(op).or_default() += 1;
            if op == "delete_all" {
                // Refill what a landed delete_all removed.
                let refill = batch(&tag, round + 5000, 60);
                tree.insert_many(refill.clone()).await.expect("refill");
                model = applied(&model, &refill);
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_sqlite() {
    let file = TempDb::new("cancel");
    let store = SqliteStore::open(&file.path).await.expect("open");
    let ns = unique("cancel");
    let seen = campaign(
        "sqlite",
        EVERY_OP,
        || store.open_namespace(&ns).with_recent_nodes(0),
        async || {},
    )
    .await;
    println!("sqlite: {seen:?}");
}

/// Fails when a connection of the store under test (application name
/// `app`) stays idle inside a transaction for more than a second. Only its
/// own: the other test of this binary that runs meanwhile keeps host
/// transactions open on purpose.
async fn no_idle_transaction(admin: &sqlx::PgPool, app: &str) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let idle: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND application_name = $1 AND state LIKE 'idle in transaction%'",
        )
        .bind(app)
        .fetch_one(admin)
        .await
        .expect("pg_stat_activity");
        if idle == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{idle} connection(s) idle in a transaction after a dropped future"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Postgres store, its connections named by a unique application name
/// (returned too), and an admin pool on the same database, or `None` when
/// the test skips.
async fn pg_with_admin(test: &str) -> Option<(PostgresStore, sqlx::PgPool, String)> {
    let url = pg_url(test)?;
    let app = sanitize(&unique(test));
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = PostgresStore::connect(&format!("{url}{sep}application_name={app}"))
        .await
        .expect("connect");
    let admin = sqlx::PgPool::connect(&url).await.expect("admin");
    Some((store, admin, app))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_postgres() {
    let Some((store, admin, app)) = pg_with_admin("cancel_postgres").await else {
        return;
    };
    let ns = unique("cancel");
    let seen = campaign(
        "postgres",
        EVERY_OP,
        || store.open_namespace(&ns).with_recent_nodes(0),
        async || no_idle_transaction(&admin, &app).await,
    )
    .await;
    println!("postgres: {seen:?}");
}

/// A tree on `store` seeded with 80 leaves of `tag`, and its model.
async fn seeded<S: Writable + AuditStore>(store: S, tag: &str) -> (CompactedTree<S>, Model) {
    let base = CompactedTree::new(store);
    let model = applied(&Model::new(), &batch(tag, 0, 80));
    base.insert_many(model.iter().map(|(k, l)| (*k, l.clone())))
        .await
        .expect("seed");
    (base, model)
}

/// The caller's-transaction mode: a dropped insert_many inside the host's
/// transaction leaves that transaction usable and open (the host's own
/// earlier write survives it); the host's commit then holds the old or the
/// new root, and the audit is clean.
async fn host_transaction_sqlite(store: &SqliteStore, ns: &str) -> usize {
    let tag = unique("host");
    let (base, mut model) = seeded(store.open_namespace(ns), &tag).await;
    sqlx::query("CREATE TABLE IF NOT EXISTS host_rows (tag TEXT NOT NULL, k BIGINT NOT NULL)")
        .execute(store.pool())
        .await
        .expect("host table");
    let mut drops = 0;
    for k in 1.. {
        let b = batch(&tag, k as u64, 30);
        let old = base.root().await.expect("root");
        let new_model = applied(&model, &b);
        let new = map_root(&new_model).await;
        let mut conn = store.pool().acquire().await.expect("conn");
        let mut tx = conn.begin().await.expect("begin");
        // The host's own write, before ours: rolling the host's transaction
        // back (not just our savepoint) would lose it.
        sqlx::query("INSERT INTO host_rows (tag, k) VALUES ($1, $2)")
            .bind(&tag)
            .bind(k as i64)
            .execute(&mut *tx)
            .await
            .expect("host write");
        let done = {
            let tree = CompactedTree::new(store.open_namespace(ns).in_transaction(&mut tx));
            poll_at_most(tree.insert_many(b.clone()), k)
                .await
                .map(|r| r.expect("insert_many"))
                .is_some()
        };
        // The host's transaction is still usable: a write through it works.
        let extra = batch(&tag, k as u64 + 1000, 2);
        {
            let tree = CompactedTree::new(store.open_namespace(ns).in_transaction(&mut tx));
            tree.insert_many(extra.clone())
                .await
                .expect("write in the host transaction after a drop");
        }
        tx.commit().await.expect("host commit");
        let (host_rows,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM host_rows WHERE tag = $1 AND k = $2")
                .bind(&tag)
                .bind(k as i64)
                .fetch_one(store.pool())
                .await
                .expect("host rows");
        assert_eq!(
            host_rows, 1,
            "host tx k={k}: the host's own write was lost (its transaction was rolled back)"
        );
        let root = base.root().await.expect("root");
        let landed = map_root(&applied(&new_model, &extra)).await;
        let kept = map_root(&applied(&model, &extra)).await;
        assert!(
            root == landed || root == kept,
            "host tx k={k}: root is neither old+extra nor new+extra ({old:?} / {new:?})"
        );
        model = if root == landed {
            applied(&new_model, &extra)
        } else {
            applied(&model, &extra)
        };
        let report = base.audit().await.expect("audit");
        assert!(report.is_clean(), "host tx k={k}: {:?}", report.problems);
        if done {
            break;
        }
        drops += 1;
    }
    drops
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_sqlite_host_transaction() {
    let file = TempDb::new("cancel_host");
    let store = SqliteStore::open(&file.path).await.expect("open");
    // Whether a drop lands inside the savepoint's `begin` (before the
    // SQLite worker answers) depends on thread timing, about one campaign
    // in three; 25 campaigns make missing it unlikely (0.7^25).
    let mut drops = 0;
    for round in 0..25 {
        drops += host_transaction_sqlite(&store, &format!("host{round}")).await;
    }
    println!("sqlite host transaction: {drops} drops in 25 campaigns");
}

/// The caller's-transaction mode, aimed at the savepoint's `begin`: a
/// `delete_all` in the host's transaction takes the lock and sends
/// `SAVEPOINT` in its first poll, so dropping it after one poll nearly always
/// drops that `begin` before the SQLite worker answers. Only the savepoint
/// may be rolled back: the host's own write before it must be committed,
/// and the tree left old or empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_sqlite_host_savepoint_begin() {
    let file = TempDb::new("cancel_host_begin");
    let store = SqliteStore::open(&file.path).await.expect("open");
    let tag = unique("begin");
    let (base, model) = seeded(store.open_namespace("host"), &tag).await;
    let mut expected = map_root(&model).await;
    sqlx::query("CREATE TABLE host_rows (k BIGINT NOT NULL)")
        .execute(store.pool())
        .await
        .expect("host table");
    let mut drops = 0;
    for k in 0..50_i64 {
        let mut conn = store.pool().acquire().await.expect("conn");
        let mut tx = conn.begin().await.expect("begin");
        sqlx::query("INSERT INTO host_rows (k) VALUES ($1)")
            .bind(k)
            .execute(&mut *tx)
            .await
            .expect("host write");
        let done = {
            let tree = CompactedTree::new(store.open_namespace("host").in_transaction(&mut tx));
            poll_at_most(tree.delete_all(), 1).await.is_some()
        };
        tx.commit().await.expect("host commit");
        let (host_rows,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM host_rows WHERE k = $1")
            .bind(k)
            .fetch_one(store.pool())
            .await
            .expect("host rows");
        assert_eq!(host_rows, 1, "k={k}: the host's own write was lost");
        // Dropped after its RELEASE was sent, a delete_all may still land.
        let root = base.root().await.expect("root");
        if done || root != expected {
            expected = map_root(&Model::new()).await;
        }
        drops += usize::from(!done);
        assert_eq!(
            root, expected,
            "k={k}: root is neither the old nor the empty one"
        );
    }
    println!("sqlite host savepoint begin: {drops} drops");
    assert!(drops > 0, "no delete_all was dropped inside its first poll");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_postgres_host_transaction() {
    let Some((store, admin, app)) = pg_with_admin("cancel_postgres_host_transaction").await else {
        return;
    };
    let ns = unique("cancel_host");
    let tag = unique("host");
    let (base, mut model) = seeded(store.open_namespace(&ns), &tag).await;
    let mut drops = 0;
    for k in 1.. {
        let b = batch(&tag, k as u64, 30);
        let new_model = applied(&model, &b);
        let mut tx = store.pool().begin().await.expect("begin");
        let done = {
            let tree = CompactedTree::new(store.open_namespace(&ns).in_transaction(&mut tx));
            poll_at_most(tree.insert_many(b.clone()), k)
                .await
                .map(|r| r.expect("insert_many"))
                .is_some()
        };
        let extra = batch(&tag, k as u64 + 1000, 2);
        {
            let tree = CompactedTree::new(store.open_namespace(&ns).in_transaction(&mut tx));
            tree.insert_many(extra.clone())
                .await
                .expect("write in the host transaction after a drop");
        }
        tx.commit().await.expect("host commit");
        no_idle_transaction(&admin, &app).await;
        let root = base.root().await.expect("root");
        let landed = applied(&new_model, &extra);
        let kept = applied(&model, &extra);
        model = if root == map_root(&landed).await {
            landed
        } else {
            assert_eq!(root, map_root(&kept).await, "host tx k={k}: root");
            kept
        };
        let report = base.audit().await.expect("audit");
        assert!(report.is_clean(), "host tx k={k}: {:?}", report.problems);
        if done {
            break;
        }
        drops += 1;
    }
    println!("postgres host transaction: {drops} drops");
}
