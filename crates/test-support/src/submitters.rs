//! Submitters of one leaf at a time to a coalescing writer, for the
//! outage tests (`recovery`, `reply_wait`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ms_smt::{CompactedTree, Key, Leaf};
use ms_smt_sql::PostgresStore;

use super::{assert_audit_clean, hkey};

/// Submitters writing one leaf at a time until `stop`; returns what was
/// acknowledged and the errors answered.
pub async fn submit_until(
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

/// Every leaf of `acked` reads back from `tree`, and the tree audits
/// clean.
pub async fn assert_all_there(tree: &CompactedTree<PostgresStore>, acked: &[(Key, Leaf)]) {
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

/// No submission was answered with an error (the first few shown).
pub fn assert_no_errors(errors: &[String]) {
    assert!(
        errors.is_empty(),
        "answered errors: {:?}",
        &errors[..errors.len().min(5)]
    );
}

/// The tree `ns` at `url`, on a connection of its own (not through a
/// proxy), to read back what was acknowledged.
pub async fn direct_tree(url: &str, ns: &str) -> CompactedTree<PostgresStore> {
    CompactedTree::new(
        PostgresStore::connect(url)
            .await
            .expect("connect")
            .open_namespace(ns),
    )
}
