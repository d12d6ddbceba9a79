//! Many trees of one store: `Forest` writes of several trees and their
//! parents in one commit, the `ForestWriter`, nested proofs and the audit
//! of links, on every store.
//!
//! * `parents_follow_children`: children written together, one emptied;
//!   every parent leaf is `(child root hash, child root sum)`, each tree's
//!   root equals a tree built alone from the same leaves, nested proofs
//!   verify against the parent's root, the links audit clean.
//! * `stacked_links`: mint/burn/ignore under a root supply tree under a
//!   multiverse with fixed sums: two parent levels.
//! * `overflow_through_the_chain`: a write whose children fit but whose
//!   parent's total would overflow is rejected, nothing written; in the
//!   writer the overflowing submission is rejected alone.
//! * `links_refuse`: a write to a parent, a cycle of links, two parents.
//! * `writer_many_trees`: 200 submitters over 50 trees under a parent:
//!   every acknowledged leaf reads back, groups share commits, receipts'
//!   proofs verify, every tree audits clean and the links too.
//! * `two_writers_race`: two store writers on separate pools over the
//!   same trees and parent, then a close that drains what is queued.
//! * `wide_commits`: commits over 300 trees (more than Postgres locks one
//!   by one) race single-tree writes to the same trees from a second
//!   pool: nothing lost, the links in step.
//! * `more_trees_than_locks`: one commit over 50,000 trees and their
//!   parent (Postgres's lock table holds 64 locks per connection by
//!   default, 12,800 with the test server's 200 connections, plus what
//!   spare shared memory allows: 16,000 fit, 50,000 did not).
//! * `writer_failed_commit`: a group whose commit fails is answered
//!   `Failed`, nothing applied; the writer goes on.
//! * `audit_finds_writes_around_links`: a child written around the forest
//!   and a leaf written into a parent directly are reported.
//! * `memory_commit_is_all_or_nothing`, `sql_commit_is_all_or_nothing`: a
//!   commit of several trees whose last part fails leaves every tree as
//!   it was (memory: a bad batch; SQL: a failpoint in the last namespace).
//! * `host_transaction_*`: several trees and their parent inside the
//!   caller's transaction roll back and commit with it.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::collections::BTreeMap;

use ms_smt::store::{
    AuditStore, ForestCommit, ForestStore, MemoryStore, TreeStore, TreeUpdate, UpdateBatch,
    Writable,
};
use ms_smt::{
    CompactedTree, ComputedNode, Forest, Key, Leaf, Link, LinkError, LinkProblem, LinkSum,
    NestedProof, PlanError, SubmitError, Tree, TreeError, WriterConfig,
};
use sqlx::Connection;
use support::links::{child_key, forest_of};
use support::suite::TestStore;
use support::{hkey, unique};

type Compacted = ms_smt::Compacted;

/// The root of a compacted tree built alone, in memory, from `leaves`.
async fn alone(leaves: &BTreeMap<Key, Leaf>) -> ComputedNode {
    let tree = CompactedTree::new(MemoryStore::new());
    tree.insert_many(leaves.iter().map(|(k, l)| (*k, l.clone())))
        .await
        .expect("memory build");
    tree.root().await.expect("root")
}

async fn parents_follow_children<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let p = unique("parent");
    let forest = forest_of(store, &p);
    let names: Vec<String> = (0..3).map(|i| format!("{p}/c{i}")).collect();
    let mut model: BTreeMap<String, BTreeMap<Key, Leaf>> = BTreeMap::new();
    let mut writes = Vec::new();
    for (c, name) in names.iter().enumerate() {
        for i in 0..40u64 {
            let (key, leaf) = (hkey(name, i), Leaf::new(vec![c as u8; 3], 1 + i));
            writes.push((name.clone(), key, leaf.clone()));
            model.entry(name.clone()).or_default().insert(key, leaf);
        }
    }
    let write = forest.insert_many(writes).await.expect("write");
    assert_eq!(write.trees.len(), 4, "three children and their parent");
    assert_eq!(&*write.trees[3].name, p.as_str(), "the parent comes last");
    check_links(&forest, &p, &names, &model).await;
    // Empty one child, change another: one commit.
    let mut writes: Vec<(String, Key, Leaf)> = model[&names[1]]
        .keys()
        .map(|k| (names[1].clone(), *k, Leaf::empty()))
        .collect();
    writes.push((
        names[2].clone(),
        hkey("new", 1),
        Leaf::new(b"n".to_vec(), 7),
    ));
    forest.insert_many(writes).await.expect("empty a child");
    model.get_mut(&names[1]).expect("child").clear();
    model
        .get_mut(&names[2])
        .expect("child")
        .insert(hkey("new", 1), Leaf::new(b"n".to_vec(), 7));
    check_links(&forest, &p, &names, &model).await;
    let parent = forest.tree(&p).expect("parent");
    let emptied = parent.get(&child_key(&names[1])).await.expect("leaf");
    assert_eq!(
        emptied,
        Leaf::new(ComputedNode::empty_root().hash.0.to_vec(), 0),
        "an emptied child keeps its leaf: the empty root, sum 0"
    );
}

/// Every child's root is a tree built alone from its leaves; the parent is
/// a tree of `(child root hash, child root sum)` leaves; nested proofs of
/// some keys verify against the parent's root, through the bytes; the
/// links and every tree audit clean.
async fn check_links<S>(
    forest: &Forest<S, Compacted>,
    p: &str,
    names: &[String],
    model: &BTreeMap<String, BTreeMap<Key, Leaf>>,
) where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    let roots = forest.roots(names).await.expect("roots");
    let mut parent = BTreeMap::new();
    for (name, root) in names.iter().zip(&roots) {
        let leaves = model.get(name).cloned().unwrap_or_default();
        assert_eq!(*root, alone(&leaves).await, "{name}: as built alone");
        parent.insert(child_key(name), LinkSum::ChildRoot.leaf(root));
        support::assert_audit_clean(&forest.tree(name).expect("tree"), name).await;
    }
    let top = forest.roots(&[p]).await.expect("parent root")[0];
    assert_eq!(
        top,
        alone(&parent).await,
        "the parent holds every child's root"
    );
    for (name, leaves) in model {
        for (key, leaf) in leaves.iter().take(3) {
            let proof = forest.nested_proof(name, key).await.expect("nested proof");
            let proof = NestedProof::from_bytes(&proof.to_bytes()).expect("decodes");
            assert_eq!(proof.levels().len(), 1, "one parent");
            assert!(proof.verify(key, leaf, &top), "{name}: verifies at the top");
            assert!(!proof.verify(key, &Leaf::new(b"forged".to_vec(), leaf.sum()), &top));
        }
    }
    let audit = forest.audit_links().await.expect("audit links");
    assert!(audit.is_clean(), "{:?}", audit.problems);
    assert!(audit.children >= names.len() as u64);
}

async fn stacked_links<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let top = unique("multiverse");
    let supply = format!("{top}/supply");
    let subs = ["mint", "burn", "ignore"].map(|s| format!("{supply}/{s}"));
    let forest = Forest::<_, Compacted>::new(store)
        .with_link(Link::children(
            &supply,
            subs.iter().map(|s| (s.clone(), child_key(s))),
        ))
        .with_link(
            Link::children(&top, [(supply.clone(), child_key(&supply))])
                .with_sum(LinkSum::Fixed(1)),
        );
    let write = forest
        .insert_many([
            (
                subs[0].as_str(),
                hkey("m", 1),
                Leaf::new(b"mint".to_vec(), 1_000),
            ),
            (
                subs[1].as_str(),
                hkey("b", 1),
                Leaf::new(b"burn".to_vec(), 10),
            ),
        ])
        .await
        .expect("write");
    let names: Vec<&str> = write.trees.iter().map(|t| &*t.name).collect();
    assert_eq!(
        names.len(),
        4,
        "two sub-trees, the supply root, the top: {names:?}"
    );
    assert_eq!(names[3], top.as_str());
    let roots = forest.roots(&[&supply, &top]).await.expect("roots");
    assert_eq!(roots[0].sum, 1_010, "the supply root sums its sub-trees");
    assert_eq!(roots[1].sum, 1, "the top counts the supply tree as 1");
    let proof = forest
        .nested_proof(&subs[1], &hkey("b", 1))
        .await
        .expect("nested proof");
    assert_eq!(proof.levels().len(), 2);
    let leaf = Leaf::new(b"burn".to_vec(), 10);
    assert!(proof.verify(&hkey("b", 1), &leaf, &roots[1]));
    let chain = proof.roots(&hkey("b", 1), &leaf).expect("no overflow");
    assert_eq!(chain[1], roots[0], "the middle level is the supply root");
    // The ignore tree was never written: no leaf, and that is clean.
    let audit = forest.audit_links().await.expect("audit");
    assert!(audit.is_clean(), "{:?}", audit.problems);
    assert_eq!((audit.parents, audit.children), (2, 4));
}

async fn overflow_through_the_chain<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let p = unique("overflow");
    let forest = forest_of(store, &p);
    let (a, b) = (format!("{p}/a"), format!("{p}/b"));
    let big = u64::MAX / 2 + 1;
    forest
        .insert_many([(a.as_str(), hkey("a", 0), Leaf::new(vec![1], big))])
        .await
        .expect("one child at half");
    let before = forest.roots(&[&a, &b, &p]).await.expect("roots");
    // b alone fits, but the parent's total would pass u64::MAX.
    let err = forest
        .insert_many([(b.as_str(), hkey("b", 0), Leaf::new(vec![2], big))])
        .await
        .expect_err("the parent overflows");
    assert!(err.is_overflow(), "{err:?}");
    assert_eq!(forest.roots(&[&a, &b, &p]).await.expect("roots"), before);
    // In the writer, the overflowing submission is rejected alone.
    let writer = forest.writer(WriterConfig::default());
    let tickets = [
        writer.try_submit([(b.as_str(), hkey("b", 1), Leaf::new(vec![3], 5))]),
        writer.try_submit([(b.as_str(), hkey("b", 2), Leaf::new(vec![4], big))]),
        writer.try_submit([(a.as_str(), hkey("a", 1), Leaf::new(vec![5], 6))]),
    ];
    let mut answers = Vec::new();
    for ticket in tickets {
        answers.push(ticket.expect("queued").await);
    }
    writer.close().await;
    assert!(answers[0].is_ok() && answers[2].is_ok(), "{answers:?}");
    assert!(
        matches!(
            answers[1],
            Err(SubmitError::Rejected(PlanError::Overflow(_)))
        ),
        "{:?}",
        answers[1]
    );
    let roots = forest.roots(&[&p]).await.expect("root");
    assert_eq!(roots[0].sum, big + 5 + 6);
    assert!(forest.audit_links().await.expect("audit").is_clean());
}

async fn writer_many_trees<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let p = unique("many");
    let forest = forest_of(store, &p);
    let writer = forest.writer(WriterConfig::default());
    const SUBMITTERS: u64 = 200;
    const ROUNDS: u64 = 5;
    const TREES: u64 = 50;
    let mut tasks = Vec::new();
    for s in 0..SUBMITTERS {
        let (writer, p) = (writer.clone(), p.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for r in 0..ROUNDS {
                let name = format!("{p}/t{}", (s * ROUNDS + r) % TREES);
                let (key, leaf) = (hkey(&p, s * ROUNDS + r), Leaf::new(vec![s as u8], 1 + r));
                let write = [(name.clone(), key, leaf.clone())];
                let receipt = if r == 0 {
                    writer.submit_with_proofs(write).await
                } else {
                    writer.submit(write).await
                }
                .expect("acknowledged");
                let top = receipt.root(&p).expect("the parent's root");
                assert!(receipt.root(&name).is_some());
                if let Some(proofs) = &receipt.proofs {
                    assert!(proofs[0].verify(&key, &leaf, &top), "receipt proof");
                }
                acked.push((name, key, leaf));
            }
            acked
        }));
    }
    let mut model: BTreeMap<String, BTreeMap<Key, Leaf>> = BTreeMap::new();
    for task in tasks {
        for (name, key, leaf) in task.await.expect("task") {
            model.entry(name).or_default().insert(key, leaf);
        }
    }
    writer.close().await;
    let stats = writer.stats();
    assert_eq!(stats.acknowledged, SUBMITTERS * ROUNDS);
    assert!(
        stats.groups < SUBMITTERS * ROUNDS,
        "groups share commits: {stats:?}"
    );
    for (name, leaves) in &model {
        let tree = forest.tree(name).expect("tree");
        let keys: Vec<Key> = leaves.keys().copied().collect();
        let found = tree.get_many(&keys).await.expect("read back");
        assert_eq!(
            found,
            leaves.values().cloned().collect::<Vec<_>>(),
            "{name}"
        );
        support::assert_audit_clean(&tree, name).await;
    }
    let audit = forest.audit_links().await.expect("audit");
    assert!(audit.is_clean(), "{:?}", audit.problems);
    assert_eq!(audit.children, TREES);
}

async fn audit_finds_writes_around_links<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let p = unique("around");
    let forest = forest_of(store, &p);
    let (a, b) = (format!("{p}/a"), format!("{p}/b"));
    forest
        .insert_many([
            (a.as_str(), hkey("a", 0), Leaf::new(vec![1], 1)),
            (b.as_str(), hkey("b", 0), Leaf::new(vec![2], 2)),
        ])
        .await
        .expect("write");
    // Around the forest: a child's own tree, and the parent's.
    forest
        .tree(&a)
        .expect("tree")
        .insert(hkey("a", 1), Leaf::new(vec![3], 3))
        .await
        .expect("direct write");
    forest
        .tree(&p)
        .expect("parent")
        .insert(hkey("stray", 0), Leaf::new(vec![4], 4))
        .await
        .expect("direct write into the parent");
    let audit = forest.audit_links().await.expect("audit");
    assert_eq!(audit.problems.len(), 2, "{:?}", audit.problems);
    assert!(
        audit
            .problems
            .iter()
            .any(|p| matches!(p, LinkProblem::Mismatch { child, .. } if *child == a))
    );
    assert!(
        audit
            .problems
            .iter()
            .any(|p| matches!(p, LinkProblem::Orphan { key, .. } if *key == hkey("stray", 0)))
    );
}

async fn links_refuse<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let p = unique("refuse");
    let forest = forest_of(store.clone(), &p);
    let err = forest
        .insert_many([(p.as_str(), hkey("x", 0), Leaf::new(vec![1], 1))])
        .await
        .expect_err("a parent is not written directly");
    assert!(
        matches!(err, TreeError::Link(LinkError::ParentWrite { .. })),
        "{err:?}"
    );
    let writer = forest.writer(WriterConfig::default());
    let refused = writer
        .submit([(p.as_str(), hkey("x", 0), Leaf::new(vec![1], 1))])
        .await;
    assert!(
        matches!(refused, Err(SubmitError::Refused(_))),
        "{refused:?}"
    );
    writer.close().await;
    // A rule that also claims its own parent: a cycle.
    let q = unique("cycle");
    let cyclic = Forest::<_, Compacted>::new(store.clone())
        .with_link(Link::rule(&q, |name| Some(child_key(name))));
    let err = cyclic
        .insert_many([("child", hkey("x", 0), Leaf::new(vec![1], 1))])
        .await
        .expect_err("cycle");
    assert!(
        matches!(err, TreeError::Link(LinkError::Cycle { .. })),
        "{err:?}"
    );
    // Two links claiming one child.
    let two = Forest::<_, Compacted>::new(store)
        .with_link(Link::children(&format!("{q}-1"), [("kid", Key([1; 32]))]))
        .with_link(Link::children(&format!("{q}-2"), [("kid", Key([2; 32]))]));
    let err = two
        .insert_many([("kid", hkey("x", 0), Leaf::new(vec![1], 1))])
        .await
        .expect_err("two parents");
    assert!(
        matches!(err, TreeError::Link(LinkError::TwoParents { .. })),
        "{err:?}"
    );
}

/// Two store writers on one database (separate pools where the store has
/// them, as two processes would have), racing over the same trees and
/// their parent, then a close that drains what is queued: every
/// acknowledged leaf is there, the parent matches every child.
/// Every acknowledged `(tree, key, leaf)` reads back (one read per tree),
/// and the links audit clean over `children` children.
async fn assert_acked_and_linked<S>(
    forest: &Forest<S, Compacted>,
    acked: &[(String, Key, Leaf)],
    children: u64,
) where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    let mut by_tree: BTreeMap<&str, Vec<(Key, &Leaf)>> = BTreeMap::new();
    for (name, key, leaf) in acked {
        by_tree.entry(name).or_default().push((*key, leaf));
    }
    for (name, writes) in by_tree {
        let keys: Vec<Key> = writes.iter().map(|(k, _)| *k).collect();
        let got = forest
            .tree(name)
            .expect("tree")
            .get_many(&keys)
            .await
            .expect("get");
        for ((_, leaf), got) in writes.iter().zip(&got) {
            assert_eq!(got, *leaf, "{name}: acknowledged leaf lost");
        }
    }
    let audit = forest.audit_links().await.expect("audit");
    assert!(audit.is_clean(), "{:?}", audit.problems);
    assert_eq!(audit.children, children);
}

async fn two_writers_race<S>(store: S)
where
    S: ForestStore + Clone + TestStore + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let p = unique("race");
    let peer = store.peer().await;
    let forest = forest_of(store, &p);
    let writers = [
        forest.writer(WriterConfig::default()),
        forest_of(peer, &p).writer(WriterConfig::default()),
    ];
    let mut tasks = Vec::new();
    for s in 0..40u64 {
        let (writer, p) = (writers[(s % 2) as usize].clone(), p.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for r in 0..5u64 {
                let n = s * 5 + r;
                let write = (
                    format!("{p}/t{}", n % 6),
                    hkey(&p, n),
                    Leaf::new(vec![1], 1 + n),
                );
                writer.submit([write.clone()]).await.expect("acknowledged");
                acked.push(write);
            }
            acked
        }));
    }
    // Queued, then drained by close: answered before close returns.
    let queued: Vec<_> = (0..20u64)
        .map(|n| {
            let write = (
                format!("{p}/t{}", n % 6),
                hkey("queued", n),
                Leaf::new(vec![2], 1),
            );
            (
                write.clone(),
                writers[0].try_submit([write]).expect("queued"),
            )
        })
        .collect();
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.expect("task"));
    }
    for w in &writers {
        w.close().await;
    }
    for (write, ticket) in queued {
        ticket.await.expect("drained by close");
        acked.push(write);
    }
    assert_acked_and_linked(&forest, &acked, 6).await;
}

/// Wide commits (300 trees and their parent: Postgres takes its store lock
/// exclusive instead of 301 namespace locks) race narrow ones (one tree,
/// its parent: the namespace locks) on the same trees, from a second pool.
async fn wide_commits<S>(store: S)
where
    S: ForestStore + Clone + TestStore + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    const TREES: u64 = 300;
    let p = unique("wide");
    let peer = store.peer().await;
    let (wide, narrow) = (forest_of(store, &p), forest_of(peer, &p));
    let name = {
        let p = p.clone();
        move |t: u64| format!("{p}/t{t}")
    };
    let wide_task = {
        let (wide, name) = (wide.clone(), name.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            for round in 0..4u64 {
                let writes: Vec<_> = (0..TREES)
                    .map(|t| {
                        (
                            name(t),
                            hkey("wide", round * TREES + t),
                            Leaf::new(vec![1], 1),
                        )
                    })
                    .collect();
                wide.insert_many(writes.clone()).await.expect("wide commit");
                acked.extend(writes);
            }
            acked
        })
    };
    let mut acked = Vec::new();
    for n in 0..60u64 {
        let write = (
            name(n * 7 % TREES),
            hkey("narrow", n),
            Leaf::new(vec![2], 2),
        );
        narrow
            .insert_many([write.clone()])
            .await
            .expect("narrow commit");
        acked.push(write);
    }
    acked.extend(wide_task.await.expect("wide task"));
    assert_acked_and_linked(&wide, &acked, TREES).await;
}

/// One commit over 50,000 trees and their parent: more namespaces than
/// Postgres's default lock table could lock one by one.
async fn more_trees_than_locks<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    const TREES: u64 = 50_000;
    let p = unique("locks");
    let forest = forest_of(store, &p);
    let writes: Vec<_> = (0..TREES)
        .map(|t| {
            (
                format!("{p}/t{t}"),
                hkey("locks", t),
                Leaf::new(vec![3], t + 1),
            )
        })
        .collect();
    forest
        .insert_many(writes.clone())
        .await
        .expect("one commit");
    let names: Vec<&str> = writes.iter().map(|(n, _, _)| n.as_str()).collect();
    let roots = forest.roots(&names).await.expect("roots");
    for ((name, key, leaf), root) in writes.iter().zip(&roots) {
        let one = BTreeMap::from([(*key, leaf.clone())]);
        assert_eq!(*root, alone(&one).await, "{name}");
    }
    let audit = forest.audit_links().await.expect("audit");
    assert!(audit.is_clean(), "{:?}", audit.problems);
    assert_eq!(audit.children, TREES);
}

/// A group whose commit fails (a failpoint before COMMIT, in the parent's
/// namespace) is answered `Failed` and nothing of it is applied; the
/// writer goes on.
async fn writer_failed_commit<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    use ms_smt_sql::failpoint::{Action, arm, disarm};
    let p = unique("fail");
    let forest = forest_of(store, &p);
    let writer = forest.writer(WriterConfig::default());
    let (a, b) = (format!("{p}/a"), format!("{p}/b"));
    writer
        .submit([(a.as_str(), hkey("a", 0), Leaf::new(vec![1], 1))])
        .await
        .expect("first");
    let before = forest.roots(&[&a, &b, &p]).await.expect("roots");
    arm(&p, "before_commit", Action::Error);
    let failed = writer
        .submit([
            (a.as_str(), hkey("a", 1), Leaf::new(vec![2], 2)),
            (b.as_str(), hkey("b", 1), Leaf::new(vec![3], 3)),
        ])
        .await;
    disarm(&p);
    assert!(matches!(failed, Err(SubmitError::Failed(_))), "{failed:?}");
    assert_eq!(forest.roots(&[&a, &b, &p]).await.expect("roots"), before);
    writer
        .submit([(b.as_str(), hkey("b", 2), Leaf::new(vec![4], 4))])
        .await
        .expect("the writer goes on");
    writer.close().await;
    assert_eq!(forest.roots(&[&p]).await.expect("root")[0].sum, 1 + 4);
    assert!(forest.audit_links().await.expect("audit").is_clean());
}

support::suite::on_every_store!(two_writers_race => two_writers_race);
support::suite::on_every_store!(wide_commits => wide_commits);
support::suite::on_every_store!(more_trees_than_locks => more_trees_than_locks, sql);
support::suite::on_every_store!(writer_failed_commit => writer_failed_commit, sql);
support::suite::on_every_store!(parents_follow_children => parents_follow_children);
support::suite::on_every_store!(stacked_links => stacked_links);
support::suite::on_every_store!(overflow_through_the_chain => overflow_through_the_chain);
support::suite::on_every_store!(writer_many_trees => writer_many_trees);
support::suite::on_every_store!(audit_finds_writes_around_links => audit_finds_writes_around_links);
support::suite::on_every_store!(links_refuse => links_refuse);

#[tokio::test]
async fn memory_commit_is_all_or_nothing() {
    let store = MemoryStore::new();
    let (a, b) = (store.tree("a").expect("a"), store.tree("b").expect("b"));
    let tree = Tree::<_, Compacted>::new(a.clone());
    let root = tree
        .insert(hkey("a", 0), Leaf::new(vec![1], 1))
        .await
        .expect("a");
    let before = store.rows().expect("rows");
    let a_rows = a.rows().expect("a rows");
    // Part one adds a leaf to a (planned on a's own nodes); part two
    // deletes a node b does not hold.
    let mut nodes = ms_smt::NodeCache::new();
    nodes.extend(
        a.scan_nodes()
            .expect("scan")
            .nodes
            .into_iter()
            .map(|(h, n, _)| (h, n)),
    );
    let good = ms_smt::plan_insert_many(
        ms_smt::LayoutKind::Compacted,
        &nodes,
        root,
        &[(hkey("a", 1), Leaf::new(vec![2], 2))],
        ms_smt::Tuning::default(),
    )
    .expect("plan");
    let mut bad = UpdateBatch::noop(ComputedNode::empty_root());
    bad.new_root = good.new_root;
    bad.deletes = vec![(
        ms_smt::Position::new(0, &Key([0; 32])),
        ms_smt::Hash([9; 32]),
    )];
    let outcome = store
        .commit_trees(&[
            TreeUpdate {
                tree: &a,
                batch: &good,
            },
            TreeUpdate {
                tree: &b,
                batch: &bad,
            },
        ])
        .await;
    assert!(outcome.is_err(), "the second part fails: {outcome:?}");
    assert_eq!(a.rows().expect("rows"), a_rows, "the first part is undone");
    assert_eq!(a.load_root().await.expect("root"), root);
    assert_eq!(store.rows().expect("rows"), before);
    // A root that moved refuses the whole commit.
    let moved = store
        .commit_trees(&[TreeUpdate {
            tree: &b,
            batch: &good,
        }])
        .await
        .expect("commit");
    assert!(matches!(moved, ForestCommit::RootMoved { index: 0, .. }));
}

/// A commit of several namespaces whose last namespace fails at each
/// write step leaves every namespace as it was.
async fn sql_all_or_nothing<S>(store: S)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    use ms_smt_sql::failpoint::{Action, arm, disarm};
    let p = unique("atomic");
    let forest = forest_of(store, &p);
    let (a, b) = (format!("{p}/a"), format!("{p}/b"));
    forest
        .insert_many([
            (a.as_str(), hkey("a", 0), Leaf::new(vec![1], 1)),
            (b.as_str(), hkey("b", 0), Leaf::new(vec![2], 2)),
        ])
        .await
        .expect("write");
    let before = forest.roots(&[&a, &b, &p]).await.expect("roots");
    for point in ["root_checked", "merged", "written", "before_commit"] {
        arm(&p, point, Action::Error);
        let err = forest
            .insert_many([
                (a.as_str(), hkey("a", 1), Leaf::new(vec![3], 3)),
                (b.as_str(), hkey("b", 1), Leaf::new(vec![4], 4)),
            ])
            .await
            .expect_err("the parent's namespace fails");
        disarm(&p);
        assert!(matches!(err, TreeError::Store(_)), "{point}: {err:?}");
        assert_eq!(
            forest.roots(&[&a, &b, &p]).await.expect("roots"),
            before,
            "{point}: nothing of the commit landed"
        );
    }
    let audit = forest.audit_links().await.expect("audit");
    assert!(audit.is_clean(), "{:?}", audit.problems);
}

support::suite::on_every_store!(sql_commit_is_all_or_nothing => sql_all_or_nothing, sql);

/// Two trees and their parent written inside the caller's transaction,
/// beside a row of the caller's own: rolled back, nothing; committed, all.
macro_rules! host_transaction {
    ($store:expr, $begin:literal) => {{
        let store = $store;
        let p = unique("host");
        let (a, b) = (format!("{p}/a"), format!("{p}/b"));
        for commit in [false, true] {
            let mut conn = store.pool().acquire().await.expect("conn");
            let mut tx = conn.begin_with($begin).await.expect("begin");
            {
                let forest = forest_of(store.forest_in_transaction(&mut *tx), &p);
                forest
                    .insert_many([
                        (a.as_str(), hkey("a", 0), Leaf::new(vec![1], 1)),
                        (b.as_str(), hkey("b", 0), Leaf::new(vec![2], 2)),
                    ])
                    .await
                    .expect("write in the transaction");
                let roots = forest.roots(&[&a, &b, &p]).await.expect("roots");
                assert_eq!(roots[2].sum, 3, "the parent moves inside the transaction");
            }
            if commit {
                tx.commit().await.expect("commit");
            } else {
                tx.rollback().await.expect("rollback");
            }
            let forest = forest_of(store.clone(), &p);
            let roots = forest.roots(&[&a, &b, &p]).await.expect("roots");
            let expected = if commit { 3 } else { 0 };
            assert_eq!(roots[2].sum, expected, "commit={commit}");
            assert_eq!(roots[0].sum + roots[1].sum, expected);
        }
        let forest = forest_of(store.clone(), &p);
        assert!(forest.audit_links().await.expect("audit").is_clean());
    }};
}

#[tokio::test]
async fn host_transaction_sqlite() {
    let db = support::stores::SqliteDb::open("forest_host").await;
    host_transaction!(&db.store, "BEGIN IMMEDIATE");
}

#[tokio::test]
async fn host_transaction_postgres() {
    let Some(store) = support::stores::pg_store("host_transaction_postgres").await else {
        return;
    };
    host_transaction!(&store, "BEGIN");
}
