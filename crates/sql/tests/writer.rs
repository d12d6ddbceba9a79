//! The coalescing writer's guarantees (`Tree::writer`), each on memory,
//! SQLite and Postgres (and the SQL stores cold): many submitters share
//! commits and every acknowledged leaf reads back; queue order is apply
//! order and receipts name a root containing everything acknowledged
//! before; a submission that would overflow the root sum is rejected alone;
//! a submission dropped before its group is sealed is left out; close
//! drains the queue; two writers on one namespace (two pools: two
//! processes) stay correct; a failed commit is never acknowledged (SQL
//! failpoints); a full queue refuses `try_submit`.
//!
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use ms_smt::store::MemoryStore;
use ms_smt::{
    Compacted, CompactedTree, Key, Leaf, PlanError, SubmitError, Ticket, Writer, WriterConfig,
    verify_merkle_proof,
};
use support::suite::*;
use support::{hkey, map_root, unique};
use tokio::task::JoinHandle;

type Model = HashMap<Key, Leaf>;

fn apply(model: &mut Model, batch: &[(Key, Leaf)]) {
    for (k, l) in batch {
        if l.is_empty() {
            model.remove(k);
        } else {
            model.insert(*k, l.clone());
        }
    }
}

/// A config that seals a group only after `wait` (so everything queued
/// within it shares one group).
fn waiting(wait: Duration) -> WriterConfig {
    WriterConfig {
        max_wait: wait,
        ..WriterConfig::default()
    }
}

/// `try_submit`s each of `pairs` alone, in order; the queue must have room
/// for all of them (`what` says why it should).
fn queue_each<S: ms_smt::store::Writable + ms_smt::store::AuditStore>(
    writer: &Writer<S, Compacted>,
    pairs: impl IntoIterator<Item = (Key, Leaf)>,
    what: &str,
) -> Vec<Ticket<S::Error>> {
    pairs
        .into_iter()
        .map(|pair| writer.try_submit([pair]).expect(what))
        .collect()
}

/// A task that submits `batches` in order through `writer` (the last with
/// proofs when `proofs` is set), checks each receipt (its group holds the
/// batch, its proofs verify at its root) and returns what it wrote.
fn submitter<S: TestStore>(
    writer: Writer<S, Compacted>,
    batches: Vec<Vec<(Key, Leaf)>>,
    proofs: bool,
) -> JoinHandle<Vec<(Key, Leaf)>> {
    tokio::spawn(async move {
        let mut written = Vec::new();
        let last = batches.len().saturating_sub(1);
        for (i, batch) in batches.into_iter().enumerate() {
            let receipt = if proofs && i == last {
                writer.submit_with_proofs(batch.clone()).await
            } else {
                writer.submit(batch.clone()).await
            }
            .expect("acknowledged");
            if let Some(proofs) = &receipt.proofs {
                assert_eq!(proofs.len(), batch.len());
                for ((key, leaf), proof) in batch.iter().zip(proofs) {
                    assert!(
                        verify_merkle_proof(key, leaf, proof, &receipt.root),
                        "proof at the receipt's root"
                    );
                }
            }
            assert!(receipt.group_leaves >= batch.len());
            written.extend(batch);
        }
        written
    })
}

/// The model after everything the `tasks` wrote.
async fn model_of(tasks: Vec<JoinHandle<Vec<(Key, Leaf)>>>) -> Model {
    let mut model = Model::new();
    for task in tasks {
        apply(&mut model, &task.await.expect("task"));
    }
    model
}

/// 64 tasks × 8 one-leaf submissions (and 8 tasks of 10 leaves): every
/// submission is acknowledged, groups were shared, every leaf reads back,
/// the audit is clean, and a receipt's proofs verify at its root.
async fn many_submitters<S: TestStore>(store: S) {
    let tag = unique("many");
    let tree = CompactedTree::new(store.handle(&tag));
    let writer = tree.writer(WriterConfig::default());
    let tasks = (0..72u64).map(|t| {
        let size = if t < 64 { 1 } else { 10 };
        let batches = (0..8u64)
            .map(|i| {
                (0..size)
                    .map(|j| {
                        let n = t * 1000 + i * 10 + j;
                        (hkey(&tag, n), leaf(&format!("v{n}"), n + 1))
                    })
                    .collect()
            })
            .collect();
        submitter(writer.clone(), batches, true)
    });
    let model = model_of(tasks.collect()).await;
    let stats = writer.stats();
    writer.close().await;
    assert_eq!(stats.acknowledged, 72 * 8);
    assert_eq!(stats.leaves, 64 * 8 + 8 * 8 * 10);
    assert_eq!(stats.group_sizes.iter().sum::<u64>(), stats.groups);
    assert!(stats.groups <= stats.acknowledged);
    eprintln!(
        "{}: {} groups for {} submissions, largest {}",
        S::KIND,
        stats.groups,
        stats.acknowledged,
        stats.largest_group
    );
    assert_eq!(tree.root().await.expect("root"), map_root(&model).await);
    let keys: Vec<Key> = model.keys().copied().collect();
    let leaves = tree.get_many(&keys).await.expect("read back");
    for (key, got) in keys.iter().zip(&leaves) {
        assert_eq!(Some(got), model.get(key));
    }
    assert!(tree.audit().await.expect("audit").is_clean());
}
on_every_store!(writer_many_submitters => many_submitters);

/// Submissions queued in a known order over 12 keys (so later ones
/// overwrite and delete earlier ones): the tree ends as the ordered model,
/// and each receipt's root is the model after some prefix that includes
/// the submission, with prefixes growing in queue order.
async fn queue_order<S: TestStore>(store: S) {
    let tag = unique("order");
    let tree = CompactedTree::new(store.handle(&tag));
    let writer = tree.writer(waiting(Duration::from_millis(20)));
    let mut prefix_roots = Vec::new();
    let mut model = Model::new();
    let mut tickets = Vec::new();
    for i in 0..60u64 {
        let batch: Vec<(Key, Leaf)> = (0..1 + i % 3)
            .map(|j| {
                let key = hkey(&tag, (i * 5 + j) % 12);
                let leaf = if (i + j) % 7 == 0 {
                    Leaf::empty()
                } else {
                    leaf(&format!("{i}/{j}"), i * 3 + j + 1)
                };
                (key, leaf)
            })
            .collect();
        apply(&mut model, &batch);
        prefix_roots.push(map_root(&model).await);
        tickets.push(writer.try_submit(batch).expect("queued"));
        if i % 9 == 0 {
            // Let some groups seal on the way.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    let mut last_prefix = 0;
    for (i, ticket) in tickets.into_iter().enumerate() {
        let receipt = ticket.await.expect("acknowledged");
        let prefix = prefix_roots
            .iter()
            .enumerate()
            .skip(i)
            .find(|(_, r)| **r == receipt.root)
            .map(|(p, _)| p)
            .unwrap_or_else(|| panic!("receipt {i}: root is no prefix including it"));
        assert!(prefix >= last_prefix, "receipts follow queue order");
        last_prefix = prefix;
    }
    writer.close().await;
    assert_eq!(tree.root().await.expect("root"), map_root(&model).await);
}
on_every_store!(writer_queue_order => queue_order);

/// One group (the writer waits 300 ms): A nearly fills the u64 sum, B would
/// overflow it and is rejected alone, C fits, D's own leaves overflow
/// (rejected before any read), E replaces A's leaf with a larger one that
/// still fits because A's sum is replaced, not added. Then F, alone in its
/// group, would overflow and is rejected.
async fn overflow_alone<S: TestStore>(store: S) {
    let tag = unique("overflow");
    let tree = CompactedTree::new(store.handle(&tag));
    tree.insert(hkey(&tag, 100), leaf("seed", 1))
        .await
        .expect("seed");
    let writer = tree.writer(waiting(Duration::from_millis(300)));
    let k = |i| hkey(&tag, i);
    let a = writer
        .try_submit([(k(1), leaf("a", u64::MAX - 20))])
        .expect("a");
    let b = writer.try_submit([(k(2), leaf("b", 30))]).expect("b");
    let c = writer.try_submit([(k(3), leaf("c", 5))]).expect("c");
    let d = writer
        .try_submit([(k(4), leaf("d1", u64::MAX)), (k(5), leaf("d2", 1))])
        .expect("d");
    let e = writer
        .try_submit([(k(1), leaf("e", u64::MAX - 6))])
        .expect("e");
    let (a, b, c, d, e) = (a.await, b.await, c.await, d.await, e.await);
    let e = e.expect("e fits: it replaces a");
    assert_eq!(a.expect("a").root, e.root, "one group");
    assert!(matches!(
        b,
        Err(SubmitError::Rejected(PlanError::Overflow(_)))
    ));
    assert_eq!(c.expect("c").root, e.root);
    assert!(matches!(
        d,
        Err(SubmitError::Rejected(PlanError::BatchSumOverflow))
    ));
    assert_eq!(e.root.sum, u64::MAX - 6 + 5 + 1);
    // Alone in its group (nothing else queued or in flight), a submission
    // that would overflow is rejected the same way.
    let alone = writer.submit([(k(6), leaf("f", 10))]).await;
    assert!(
        matches!(alone, Err(SubmitError::Rejected(PlanError::Overflow(_)))),
        "{alone:?}"
    );
    let model: Model = [
        (k(100), leaf("seed", 1)),
        (k(1), leaf("e", u64::MAX - 6)),
        (k(3), leaf("c", 5)),
    ]
    .into_iter()
    .collect();
    assert_eq!(tree.root().await.expect("root"), map_root(&model).await);
    let stats = writer.stats();
    assert_eq!((stats.rejected, stats.acknowledged), (3, 3));
    writer.close().await;
}
on_every_store!(writer_overflow_alone => overflow_alone);

/// A ticket dropped while its group gathers (the writer waits 300 ms) is
/// left out; the others commit.
async fn dropped_before_seal<S: TestStore>(store: S) {
    let tag = unique("dropped");
    let tree = CompactedTree::new(store.handle(&tag));
    let writer = tree.writer(waiting(Duration::from_millis(300)));
    let kept = writer
        .try_submit([(hkey(&tag, 1), leaf("kept", 1))])
        .expect("kept");
    drop(
        writer
            .try_submit([(hkey(&tag, 2), leaf("dropped", 2))])
            .expect("dropped"),
    );
    kept.await.expect("kept is written");
    writer.close().await;
    assert_eq!(writer.stats().abandoned, 1);
    assert_eq!(
        tree.get(&hkey(&tag, 2)).await.expect("get"),
        Leaf::empty(),
        "a submission dropped before sealing is not written"
    );
    assert_eq!(
        tree.get(&hkey(&tag, 1)).await.expect("get"),
        leaf("kept", 1)
    );
}
on_every_store!(writer_dropped_before_seal => dropped_before_seal);

/// Close with 300 submissions queued: every one is written before close
/// returns, and later submissions are refused.
async fn close_drains<S: TestStore>(store: S) {
    let tag = unique("close");
    let tree = CompactedTree::new(store.handle(&tag));
    let writer = tree.writer(WriterConfig {
        max_group_leaves: 64,
        ..WriterConfig::default()
    });
    let each = (0..300u64).map(|i| (hkey(&tag, i), leaf("x", i + 1)));
    let tickets = queue_each(&writer, each, "queued");
    writer.close().await;
    assert!(matches!(
        writer.submit([(hkey(&tag, 999), leaf("late", 1))]).await,
        Err(SubmitError::Closed)
    ));
    for ticket in tickets {
        ticket.await.expect("drained");
    }
    let stats = writer.stats();
    assert_eq!(stats.acknowledged, 300);
    assert!(stats.largest_group <= 64);
    let leaves = tree
        .get_many(&(0..300).map(|i| hkey(&tag, i)).collect::<Vec<_>>())
        .await
        .expect("read");
    assert!(leaves.iter().all(|l| !l.is_empty()));
}
on_every_store!(writer_close_drains => close_drains);

/// Two writers on one namespace through two pools (two processes), 16
/// submitters each: every acknowledged leaf reads back and the audit is
/// clean (lost races are retried, never acknowledged twice or lost).
async fn two_writers<S: TestStore>(store: S) {
    let tag = unique("two");
    let first = store.handle(&tag);
    let second = first.peer().await;
    let trees = [CompactedTree::new(first), CompactedTree::new(second)];
    let mut tasks = Vec::new();
    let mut writers = Vec::new();
    for (w, tree) in trees.iter().enumerate() {
        let writer = tree.writer(WriterConfig::default());
        for t in 0..16u64 {
            let batches = (0..6u64)
                .map(|i| {
                    let n = (w as u64) * 100_000 + t * 100 + i;
                    vec![(hkey(&tag, n), leaf(&format!("{n}"), n + 1))]
                })
                .collect();
            tasks.push(submitter(writer.clone(), batches, false));
        }
        writers.push(writer);
    }
    let model = model_of(tasks).await;
    for writer in writers {
        writer.close().await;
    }
    assert_eq!(model.len(), 2 * 16 * 6);
    assert_eq!(trees[0].root().await.expect("root"), map_root(&model).await);
    assert!(trees[1].audit().await.expect("audit").is_clean());
}
on_every_store!(writer_two_writers => two_writers);

/// A full queue refuses `try_submit`; nothing runs the writer's task until
/// this single-threaded test yields.
#[tokio::test(flavor = "current_thread")]
async fn try_submit_refuses_when_full() {
    let tree = CompactedTree::new(MemoryStore::new());
    let writer = tree.writer(WriterConfig {
        queue_bound: 3,
        ..WriterConfig::default()
    });
    let tickets = queue_each(
        &writer,
        (0..3u64).map(|i| (hkey("full", i), leaf("x", 1))),
        "room",
    );
    assert!(matches!(
        writer.try_submit([(hkey("full", 9), leaf("x", 1))]),
        Err(SubmitError::Full)
    ));
    for ticket in tickets {
        ticket.await.expect("written");
    }
    writer
        .try_submit([(hkey("full", 9), leaf("x", 1))])
        .expect("room again")
        .await
        .expect("written");
    writer.close().await;
    assert_eq!(tree.root().await.expect("root").sum, 4);
}

/// Failpoints in the SQL commit: an error before COMMIT fails the group
/// (the root shows nothing was applied); an error after COMMIT is
/// acknowledged, because the root shows the group landed; a panic inside
/// the store answers `Stopped` and the writer goes on.
#[cfg(feature = "failpoints")]
mod failing_commits {
    use super::*;
    use ms_smt_sql::failpoint::{Action, arm, disarm};

    async fn scenario<S: TestStore>(store: S) {
        let tag = unique("fail");
        let store = store.handle(&tag);
        let ns = store.ns();
        let tree = CompactedTree::new(store);
        let writer = tree.writer(WriterConfig::default());
        let k = |i| hkey(&tag, i);
        writer.submit([(k(1), leaf("a", 1))]).await.expect("a");
        let before = tree.root().await.expect("root");

        arm(&ns, "before_commit", Action::Error);
        let failed = writer.submit([(k(2), leaf("b", 2))]).await;
        assert!(matches!(failed, Err(SubmitError::Failed(_))), "{failed:?}");
        assert_eq!(tree.root().await.expect("root"), before);

        arm(&ns, "after_commit", Action::Error);
        let landed = writer
            .submit([(k(3), leaf("c", 3))])
            .await
            .expect("landed commit is acknowledged");
        assert_eq!(tree.root().await.expect("root"), landed.root);

        arm(&ns, "merged", Action::Panic);
        let panicked = writer.submit([(k(4), leaf("d", 4))]).await;
        assert!(
            matches!(panicked, Err(SubmitError::Stopped)),
            "{panicked:?}"
        );
        assert_eq!(tree.root().await.expect("root"), landed.root);
        disarm(&ns);

        writer
            .submit([(k(5), leaf("e", 5))])
            .await
            .expect("the writer goes on");
        writer.close().await;
        let model: Model = [
            (k(1), leaf("a", 1)),
            (k(3), leaf("c", 3)),
            (k(5), leaf("e", 5)),
        ]
        .into_iter()
        .collect();
        assert_eq!(tree.root().await.expect("root"), map_root(&model).await);
        assert!(tree.audit().await.expect("audit").is_clean());
    }

    /// Groups of one submission each, queued at once, so each is planned
    /// on the one before while that one commits: the first commit fails
    /// (the group planned on it is planned again on the committed tree),
    /// a later one fails after COMMIT (acknowledged: it landed).
    async fn pipelined<S: TestStore>(store: S) {
        let tag = unique("pipe");
        let store = store.handle(&tag);
        let ns = store.ns();
        let tree = CompactedTree::new(store);
        let writer = tree.writer(WriterConfig {
            max_group_leaves: 1,
            ..WriterConfig::default()
        });
        arm(&ns, "before_commit", Action::Error);
        let pairs: Vec<_> = (0..40u64)
            .map(|i| (hkey(&tag, i % 30), leaf(&format!("{i}"), i + 1)))
            .collect();
        let tickets = queue_each(&writer, pairs.clone(), "queued");
        let mut model = Model::new();
        let mut failed = 0;
        for (i, (pair, ticket)) in pairs.into_iter().zip(tickets).enumerate() {
            if i == 20 {
                arm(&ns, "after_commit", Action::Error);
            }
            match ticket.await {
                Ok(_) => apply(&mut model, &[pair]),
                Err(SubmitError::Failed(_)) => failed += 1,
                Err(other) => panic!("submission {i}: {other:?}"),
            }
        }
        disarm(&ns);
        let stats = writer.stats();
        writer.close().await;
        assert_eq!(failed, 1, "only the group whose commit failed");
        assert!(stats.planned_ahead > 0, "{stats:?}");
        assert_eq!(tree.root().await.expect("root"), map_root(&model).await);
        assert!(tree.audit().await.expect("audit").is_clean());
    }

    on_every_store!(pipelined_groups => pipelined, sql);
    on_every_store!(failed_commits => scenario, sql);
}
