//! The Postgres reply wait (`PostgresStore::with_reply_wait`) against a
//! server that stops answering without closing its connections (its
//! processes stopped, as `SIGSTOP` or a frozen VM leaves them; the kernel
//! still answers TCP): the store connects through a proxy
//! (`support/proxy.rs`, one per test) that holds every byte while frozen.
//!
//! * `a_frozen_server_is_answered_in_bounded_time`: with a 2 s wait, a
//!   read in a host's transaction on the frozen server fails with
//!   [`SqlStoreError::NoReply`] within the bound (without it, never), a read
//!   on the pool with that or the pool's checkout timeout, both transient;
//!   a coalescing writer with
//!   20 submitters waits the freeze out (`recovery_wait`), every
//!   submission is answered, none with an error, it writes after the
//!   thaw, every acknowledged leaf is in the tree and the tree audits
//!   clean.
//! * `handles_wait_differently`: three handles of one process on one
//!   frozen server, with waits of 1 s, 3 s and none: the first two fail
//!   with `NoReply` naming their own wait, the third still waits and
//!   answers after the thaw; clones and `open_namespace` handles share
//!   their handle's wait.
//!
//! The wait is a value on each handle (nothing is process-wide), so these
//! run in the suite beside tests whose statements a short wait would
//! fail.
#![cfg(feature = "postgres")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ms_smt::{CompactedTree, Key, Leaf, TreeError, WriterConfig};
use ms_smt_sql::{DEFAULT_POSTGRES_REPLY_WAIT, PostgresStore, SqlStoreError};
use sqlx::PgConnection;
use sqlx::postgres::PgPoolOptions;
use support::proxy::{Gate, through_proxy};
use support::submitters::{assert_all_there, assert_no_errors, direct_tree, submit_until};
use support::{hkey, pg_url, unique};

const WAIT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_answered_in_bounded_time() {
    let test = "a_frozen_server_is_answered_in_bounded_time";
    let Some(url) = pg_url(test) else {
        return;
    };
    let (proxy, proxied) = through_proxy(&url).await;
    // Checkouts bounded too: a new connection to the frozen server waits
    // in its startup exchange, which the pool's acquire timeout bounds.
    let pool = PgPoolOptions::new()
        .acquire_timeout(WAIT)
        .max_connections(8)
        .connect(&proxied)
        .await
        .expect("connect through the proxy");
    let ns = unique(test);
    let store = PostgresStore::from_pool(pool.clone(), &ns).with_reply_wait(Some(WAIT));
    store.migrate().await.expect("migrate");
    let tree = CompactedTree::new(store);
    let before = [(hkey(test, u64::MAX), Leaf::new(vec![7], 7))];
    tree.insert_many(before.clone()).await.expect("insert");

    let writer = tree.writer(WriterConfig {
        recovery_wait: Duration::from_secs(60),
        ..WriterConfig::default()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (writer, stop, ns) = (writer.clone(), stop.clone(), ns.clone());
        tokio::spawn(async move { submit_until(&writer, &ns, 20, stop).await })
    };
    // A host's transaction, open before the freeze: its statements go to
    // the frozen server on the connection it holds.
    let mut host = pool.begin().await.expect("host transaction");
    tokio::time::sleep(Duration::from_millis(500)).await;

    proxy.set(Gate::Frozen);
    let started = Instant::now();
    let in_host = CompactedTree::new(tree.store().in_transaction(&mut host))
        .get(&before[0].0)
        .await;
    let host_waited = started.elapsed();
    assert!(
        matches!(in_host, Err(TreeError::Store(SqlStoreError::NoReply { waited })) if waited == WAIT),
        "a read in the host's transaction on the frozen server answered {in_host:?}"
    );
    assert!(host_waited < WAIT * 5, "the read waited {host_waited:?}");
    drop(host);
    let started = Instant::now();
    let read = tree.get(&before[0].0).await;
    let waited = started.elapsed();
    match &read {
        Err(TreeError::Store(e)) => {
            assert!(e.is_transient(), "not a transient error: {e}");
            assert!(
                matches!(e, SqlStoreError::NoReply { .. })
                    || matches!(e, SqlStoreError::Database(sqlx::Error::PoolTimedOut)),
                "not the reply wait or the checkout bound: {e}"
            );
        }
        other => panic!("a read on the frozen server answered {other:?}"),
    }
    // The bound with a wide margin for a loaded machine; without the wait
    // the read never returns.
    assert!(waited < WAIT * 5, "the read waited {waited:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set(Gate::Open);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    // The writer writes after the thaw (`recovered` counts only the
    // commits that ran into the freeze, which depends on where the group
    // was when it began).
    let after = (hkey(test, u64::MAX - 1), Leaf::new(vec![8], 8));
    writer
        .submit([after.clone()])
        .await
        .expect("a submission after the thaw");

    let (acked, errors) = tokio::time::timeout(Duration::from_secs(120), load)
        .await
        .expect("every submission answered")
        .expect("load");
    writer.close().await;
    let stats = writer.stats();
    println!(
        "host read failed after {host_waited:?}, pool read after {waited:?} with {}; \
         acknowledged {}, errors {}, recovered {}",
        read.err().map(|e| e.to_string()).unwrap_or_default(),
        acked.len(),
        errors.len(),
        stats.recovered
    );
    assert_no_errors(&errors);
    assert!(!acked.is_empty());
    // Read back on a connection of its own, not through the proxy.
    let direct = direct_tree(&url, &ns).await;
    assert_all_there(&direct, &acked).await;
    assert_all_there(&direct, &[before[0].clone(), after]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_wait_differently() {
    let test = "handles_wait_differently";
    let Some(url) = pg_url(test) else {
        return;
    };
    let (short, long) = (Duration::from_secs(1), Duration::from_secs(3));
    let (proxy, proxied) = through_proxy(&url).await;
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&proxied)
        .await
        .expect("connect through the proxy");
    let ns = unique(test);
    let plain = PostgresStore::from_pool(pool.clone(), &ns);
    assert_eq!(
        plain.reply_wait(),
        Some(DEFAULT_POSTGRES_REPLY_WAIT),
        "a handle without a wait of its own waits the default"
    );
    let a = plain.clone().with_reply_wait(Some(short));
    let b = plain.clone().with_reply_wait(Some(long));
    let c = plain.with_reply_wait(None);
    assert_eq!(a.clone().reply_wait(), Some(short), "a clone shares it");
    assert_eq!(
        a.open_namespace("other").reply_wait(),
        Some(short),
        "open_namespace shares it"
    );
    assert_eq!(b.reply_wait(), Some(long));
    assert_eq!(c.reply_wait(), None);
    a.migrate().await.expect("migrate");
    let key = hkey(test, 1);
    let leaf = Leaf::new(vec![1], 1);
    CompactedTree::new(a.clone())
        .insert_many([(key, leaf.clone())])
        .await
        .expect("insert");

    // A host transaction per handle, open before the freeze: each read
    // goes to the frozen server on the connection it holds.
    let (mut host_a, mut host_b) = (
        pool.begin().await.expect("host a"),
        pool.begin().await.expect("host b"),
    );
    let mut host_c = pool.begin().await.expect("host c");
    proxy.set(Gate::Frozen);
    let started = Instant::now();
    let unbounded = tokio::spawn(async move { read_in(&c, &mut host_c, &key, started).await.0 });
    let ((got_a, took_a), (got_b, took_b)) = tokio::join!(
        read_in(&a, &mut host_a, &key, started),
        read_in(&b, &mut host_b, &key, started)
    );
    for (what, got, took, wait) in [("a", got_a, took_a, short), ("b", got_b, took_b, long)] {
        match got {
            Err(TreeError::Store(SqlStoreError::NoReply { waited })) => {
                assert_eq!(waited, wait, "{what}: the handle's own wait");
            }
            other => panic!("{what}: a read on the frozen server answered {other:?}"),
        }
        assert!(
            took >= wait,
            "{what}: failed after {took:?}, before its wait"
        );
        // A wide margin for a loaded machine.
        assert!(took < wait * 5, "{what}: waited {took:?}");
    }
    assert!(
        !unbounded.is_finished(),
        "the handle without a bound answered while the server was frozen"
    );
    drop((host_a, host_b));
    proxy.set(Gate::Open);
    let got = tokio::time::timeout(Duration::from_secs(60), unbounded)
        .await
        .expect("the unbounded read answers after the thaw")
        .expect("task");
    assert_eq!(got.expect("the unbounded read"), leaf);
}

/// `key` read through `store` in the host's transaction on `host`, and
/// how long since `started` it answered.
async fn read_in(
    store: &PostgresStore,
    host: &mut PgConnection,
    key: &Key,
    started: Instant,
) -> (Result<Leaf, TreeError<SqlStoreError>>, Duration) {
    let got = CompactedTree::new(store.in_transaction(host))
        .get(key)
        .await;
    (got, started.elapsed())
}
