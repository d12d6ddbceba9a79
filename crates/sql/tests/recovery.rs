//! The coalescing writer across an outage of its Postgres server, without
//! an HA cluster: the store connects through a TCP proxy (`support/proxy.rs`),
//! which cuts every connection and refuses new ones for a while (as a
//! failover does), then lets them through again. The cut falls on a
//! `COMMIT` on its way to the server ([`Gate::CutAtCommit`]), so every run
//! leaves the writer a commit whose outcome it cannot know.
//!
//! * `writer_waits_out_an_outage`: 50 submitters write one leaf at a time
//!   before, during and after a 2 s cut. Every submission is acknowledged
//!   (none answered `Failed` or `Indeterminate`: the writer waits up to
//!   `WriterConfig::recovery_wait` for the store and settles what the cut
//!   interrupted by reading the roots back), every acknowledged leaf is in
//!   the tree, the tree audits clean, and the writer counted a recovery.
//! * `a_short_recovery_wait_answers_with_the_error`: with `recovery_wait`
//!   of zero the same cut is answered with the store's error, and nothing
//!   acknowledged is missing.
#![cfg(feature = "postgres")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ms_smt::{CompactedTree, Key, Leaf, WriterConfig};
use ms_smt_sql::PostgresStore;
use support::proxy::{Gate, through_proxy};
use support::submitters::{assert_all_there, assert_no_errors, direct_tree, submit_until};
use support::{pg_url, unique};

/// Runs submitters for 0.5 s, cuts the proxy at the next `COMMIT` and
/// keeps it cut for `cut`, lets them run 1.5 s more; returns what was acknowledged, the errors, and the stats.
async fn around_a_cut(
    test: &str,
    recovery_wait: Duration,
    cut: Duration,
) -> Option<(
    Vec<(Key, Leaf)>,
    Vec<String>,
    ms_smt::WriterStats,
    CompactedTree<PostgresStore>,
)> {
    let url = pg_url(test)?;
    let (proxy, proxied) = through_proxy(&url).await;
    let store = PostgresStore::connect(&proxied)
        .await
        .expect("connect through the proxy");
    let ns = unique(test);
    let tree = CompactedTree::new(store.open_namespace(&ns));
    let writer = tree.writer(WriterConfig {
        recovery_wait,
        ..WriterConfig::default()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (writer, stop, ns) = (writer.clone(), stop.clone(), ns.clone());
        tokio::spawn(async move { submit_until(&writer, &ns, 50, stop).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.set(Gate::CutAtCommit);
    tokio::time::timeout(Duration::from_secs(30), proxy.wait_for(Gate::Cut))
        .await
        .expect("no COMMIT reached the proxy in 30 s");
    tokio::time::sleep(cut).await;
    proxy.set(Gate::Open);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let (acked, errors) = load.await.expect("load");
    writer.close().await;
    let stats = writer.stats();
    // Read back on a connection of its own, not through the proxy.
    let direct = direct_tree(&url, &ns).await;
    Some((acked, errors, stats, direct))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_waits_out_an_outage() {
    let Some((acked, errors, stats, tree)) = around_a_cut(
        "writer_waits_out_an_outage",
        Duration::from_secs(30),
        Duration::from_secs(2),
    )
    .await
    else {
        return;
    };
    println!(
        "acknowledged {}, errors {}, recovered {}",
        acked.len(),
        errors.len(),
        stats.recovered
    );
    assert_no_errors(&errors);
    assert!(stats.recovered >= 1, "no recovery counted: {stats:?}");
    assert!(!acked.is_empty());
    assert_all_there(&tree, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_recovery_wait_answers_with_the_error() {
    let Some((acked, errors, _, tree)) = around_a_cut(
        "a_short_recovery_wait_answers_with_the_error",
        Duration::ZERO,
        Duration::from_secs(1),
    )
    .await
    else {
        return;
    };
    println!("acknowledged {}, errors {}", acked.len(), errors.len());
    assert!(
        !errors.is_empty(),
        "a cut with no recovery wait answered no error"
    );
    assert_all_there(&tree, &acked).await;
}
