//! The Postgres reply wait (`set_postgres_reply_wait`) against a server
//! that stops answering without closing its connections (its processes
//! stopped, as `SIGSTOP` or a frozen VM leaves them; the kernel still
//! answers TCP): the store connects through a proxy (`support/proxy.rs`)
//! that holds every byte while frozen.
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
//!
//! A binary of its own: the wait is a setting of the whole process, and
//! 2 s would fail slow statements of other tests.
#![cfg(feature = "postgres")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ms_smt::store::{PostgresStore, SqlStoreError, set_postgres_reply_wait};
use ms_smt::{CompactedTree, Leaf, TreeError, WriterConfig};
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
    set_postgres_reply_wait(Some(WAIT));
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
    let store = PostgresStore::from_pool(pool.clone(), &ns);
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
