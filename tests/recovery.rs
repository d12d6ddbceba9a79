//! The coalescing writer across an outage of its Postgres server, without
//! an HA cluster: the store connects through a TCP proxy in this test,
//! which cuts every connection and refuses new ones for a while (as a
//! failover does), then lets them through again.
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

use ms_smt::store::PostgresStore;
use ms_smt::{CompactedTree, Key, Leaf, WriterConfig};
use support::{assert_audit_clean, hkey, pg_url, unique};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy to `upstream`: while `open` is false it closes every
/// connection it carries and refuses new ones.
struct Proxy {
    port: u16,
    open: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (open, _) = watch::channel(true);
        let gate = open.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let mut watch = gate.subscribe();
                if !*watch.borrow() {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = watch.wait_for(|open| !*open) => {}
                    }
                });
            }
        });
        Proxy { port, open }
    }

    fn set_open(&self, open: bool) {
        self.open.send_replace(open);
    }
}

/// The store at `url`, reached through a new proxy.
async fn through_proxy(url: &str) -> (Proxy, String) {
    let rest = url.split_once("://").expect("scheme").1;
    let host_port = rest.split(['/', '?']).next().expect("host");
    let host_port = host_port.rsplit_once('@').map_or(host_port, |(_, h)| h);
    let proxy = Proxy::start(host_port.to_owned()).await;
    let proxied = url.replacen(host_port, &format!("127.0.0.1:{}", proxy.port), 1);
    (proxy, proxied)
}

/// Submitters writing one leaf at a time until `stop`; returns what was
/// acknowledged and the errors answered.
async fn submit_until(
    writer: &ms_smt::Writer<PostgresStore, ms_smt::Compacted>,
    tag: &str,
    submitters: u64,
    stop: Arc<AtomicBool>,
) -> (Vec<(Key, Leaf)>, Vec<String>) {
    let mut tasks = Vec::new();
    for s in 0..submitters {
        let (writer, stop, tag) = (writer.clone(), stop.clone(), tag.to_owned());
        tasks.push(tokio::spawn(async move {
            let (mut acked, mut errors) = (Vec::new(), Vec::new());
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (key, leaf) = (hkey(&tag, s * 1_000_000 + n), Leaf::new(vec![1], 1 + n));
                n += 1;
                match writer.submit([(key, leaf.clone())]).await {
                    Ok(_) => acked.push((key, leaf)),
                    Err(e) => {
                        errors.push(e.to_string());
                        // The store is out of reach: do not spin.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (acked, errors)
        }));
    }
    let (mut acked, mut errors) = (Vec::new(), Vec::new());
    for task in tasks {
        let (a, e) = task.await.expect("submitter");
        acked.extend(a);
        errors.extend(e);
    }
    (acked, errors)
}

/// Runs submitters for 0.5 s, cuts the proxy for `cut`, lets them run
/// 1.5 s more; returns what was acknowledged, the errors, and the stats.
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
    proxy.set_open(false);
    tokio::time::sleep(cut).await;
    proxy.set_open(true);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let (acked, errors) = load.await.expect("load");
    writer.close().await;
    let stats = writer.stats();
    // Read back on a connection of its own, not through the proxy.
    let direct = CompactedTree::new(
        PostgresStore::connect(&url)
            .await
            .expect("connect")
            .open_namespace(&ns),
    );
    Some((acked, errors, stats, direct))
}

async fn assert_all_there(tree: &CompactedTree<PostgresStore>, acked: &[(Key, Leaf)]) {
    let keys: Vec<Key> = acked.iter().map(|(k, _)| *k).collect();
    let found = tree.get_many(&keys).await.expect("read back");
    let missing = acked
        .iter()
        .zip(&found)
        .filter(|((_, leaf), got)| leaf != *got)
        .count();
    assert_eq!(missing, 0, "acknowledged leaves missing");
    assert_audit_clean(tree, "after the cut").await;
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
    assert!(
        errors.is_empty(),
        "answered errors: {:?}",
        &errors[..errors.len().min(5)]
    );
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
