//! Refused writes: rejected batches (u64 overflow) leave the database byte
//! for byte unchanged; replacement parity; sums >= 2^63 (stored as the i64
//! bit pattern); a batch that drops references the store does not hold is
//! refused whole.
//!
//! Part of the store suite (`tests/stores_*.rs`, machinery in
//! `tests/support/suite.rs`): each scenario runs on memory, SQLite and
//! Postgres, and on the SQL stores `*_cold`, with every node read by SQL.
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use ms_smt::Hash;
use ms_smt::Node;
use ms_smt::store::{ForestStore, TreeUpdate, UpdateBatch};
use ms_smt::{Compacted, ComputedNode, Full, Key, Layout, Leaf, Position, Tree};
use ms_smt_core::hash::branch_hash;
use ms_smt_core::hash::sha256;
use support::suite::*;
use support::{hkey, unique};

// ---------------------------------------------------------------------------
// 3. Overflow atomicity, replacement parity, sums >= 2^63
// ---------------------------------------------------------------------------

fn assert_overflow<E: std::error::Error>(e: &ms_smt::TreeError<E>, what: &str) {
    assert!(
        e.is_overflow(),
        "{what}: expected an overflow error, got {e:?}"
    );
    assert!(
        e.to_string().contains("integer overflow"),
        "{what}: error text lacks \"integer overflow\": {e}"
    );
}

/// A mirror of a new tree in namespace `tag`, seeded with one batch.
async fn seeded<S: TestStore, L: Layout>(
    base: &S,
    tag: &str,
    seed: Vec<(Key, Leaf)>,
    check: Check,
) -> Mirror<S, L> {
    let mut m = Mirror::new(base, tag);
    m.apply("seed", seed, false, check).await;
    m
}

async fn overflow_layout<S: TestStore, L: Layout>(base: &S) {
    let lay = layout_name::<L>();
    let a = hkey("ovf-a", 0);
    let b = hkey("ovf-b", 0);
    let c = hkey("ovf-c", 0);
    let d = hkey("ovf-d", 0);

    // Rejections leave every row as it was.
    let seed = vec![(a, leaf("a", u64::MAX - 20)), (b, leaf("b", 10))];
    let mut m: Mirror<S, L> = seeded(base, "overflow", seed, Check::Reads).await;
    let root0 = m.tree.root().await.expect("root");
    assert_eq!(root0.sum, u64::MAX - 10);
    let before = m.tree.store().dump().await;
    let rejected: Vec<(&str, Vec<(Key, Leaf)>)> = vec![
        ("new key of sum 100", vec![(c, leaf("c", 100))]),
        (
            "replacement that still overflows",
            vec![(b, leaf("b2", 5)), (c, leaf("c", 100))],
        ),
        (
            "deletes plus an overflowing insert",
            vec![(b, Leaf::empty()), (c, leaf("c", 21))],
        ),
        (
            "batch sum itself overflows",
            vec![(c, leaf("c", u64::MAX)), (d, leaf("d", 1))],
        ),
        ("single key of sum 11", vec![(c, leaf("c", 11))]),
    ];
    for (what, batch) in rejected {
        let what = format!("{} {lay}: {what}", S::KIND);
        let err = m.tree.insert_many(batch).await.expect_err(&what);
        assert_overflow(&err, &what);
        assert_eq!(
            m.tree.store().dump().await,
            before,
            "{what}: rows changed by a rejected batch"
        );
        assert_eq!(m.tree.root().await.expect("root"), root0, "{what}");
        assert_eq!(m.tree.get(&c).await.expect("get"), Leaf::empty(), "{what}");
    }
    let err = m
        .tree
        .insert(c, leaf("c", 11))
        .await
        .expect_err("single insert overflow");
    assert_overflow(&err, "single insert");
    assert_eq!(
        m.tree.store().dump().await,
        before,
        "{lay}: rows changed by a rejected insert"
    );
    m.check("after rejections", Check::Fresh).await;
    // Exactly u64::MAX is fine.
    m.apply(
        "fill to u64::MAX",
        vec![(c, leaf("c", 10))],
        false,
        Check::Reads,
    )
    .await;
    assert_eq!(m.tree.root().await.expect("root").sum, u64::MAX);
    m.delete_everything().await;
    m.cleanup().await;

    // Replacement parity: the batch only looks at the final state.
    let r = hkey("ovf-r", 0);
    let s = hkey("ovf-s", 0);
    let n = hkey("ovf-n", 0);
    let seed = vec![(r, leaf("r", u64::MAX - 6)), (s, leaf("s", 6))];
    let mut m: Mirror<S, L> = seeded(base, "overflow-replace", seed, Check::Root).await;
    assert_eq!(m.tree.root().await.expect("root").sum, u64::MAX);
    m.apply(
        "replace big leaf and add a key",
        vec![(n, leaf("n", 1)), (r, leaf("r", 10))],
        false,
        Check::Reads,
    )
    .await;
    assert_eq!(m.tree.root().await.expect("root").sum, 17);
    m.cleanup().await;

    // Sums >= 2^63 round-trip (stored as i64 bit patterns).
    let mut m: Mirror<S, L> = Mirror::new(base, "big-sums");
    let p = hkey("big-p", 0);
    let q = hkey("big-q", 0);
    let big = leaf("p", (1u64 << 63) + 7);
    m.apply(
        "big leaves",
        vec![(p, big.clone()), (q, leaf("q", 1 << 62))],
        false,
        Check::Reads,
    )
    .await;
    let root = m.tree.root().await.expect("root");
    assert_eq!(root.sum, (1u64 << 63) + (1u64 << 62) + 7);
    assert!(root.sum >= 1 << 63);
    assert_eq!(m.tree.get(&p).await.expect("get"), big);
    assert!(
        m.tree
            .merkle_proof(&p)
            .await
            .expect("proof")
            .verify(&p, &big, &root)
    );
    if let Some(raw) = m.tree.store().raw_sums().await {
        // Spec §5.3: 2^63 + 7 is stored as -9223372036854775801.
        assert!(
            raw.nodes.contains(&-9_223_372_036_854_775_801),
            "{} {lay}: raw sums {:?} lack the i64 pattern of 2^63+7",
            S::KIND,
            raw.nodes
        );
        assert_eq!(raw.root, Some(i64::from_ne_bytes(root.sum.to_ne_bytes())));
        assert!(raw.root.is_some_and(|s| s < 0));
    }
    // Read back over a separate pool.
    let peer: Tree<S, L> = Tree::new(m.tree.store().peer().await);
    assert_eq!(peer.root().await.expect("peer root"), root);
    assert_eq!(peer.get(&p).await.expect("peer get"), big);
    m.apply(
        "more on top",
        vec![(hkey("big-r", 0), leaf("r", 5)), (q, leaf("q2", 1 << 61))],
        false,
        Check::Fresh,
    )
    .await;
    m.cleanup().await;
}

on_every_store!(overflow_and_big_sums => overflow_layout::<Full, Compacted>);

// ---------------------------------------------------------------------------
// A batch that drops references the store does not hold is refused whole.
// ---------------------------------------------------------------------------

/// Commits `batch` directly (below the tree) and checks that it fails with
/// the store's missing-reference error naming `culprit`, writing nothing.
async fn refused<S: TestStore>(store: &S, what: &str, batch: UpdateBatch, culprit: Hash) {
    let before = store.dump().await;
    let part = TreeUpdate {
        tree: store,
        batch: &batch,
    };
    let err = match store.forest().commit_trees(&[part]).await {
        Ok(outcome) => panic!("{} {what}: commit accepted ({outcome:?})", S::KIND),
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains(&culprit.to_string()) && err.contains("batch deletes node"),
        "{} {what}: unexpected error {err}",
        S::KIND
    );
    assert_eq!(
        store.dump().await,
        before,
        "{} {what}: rows changed",
        S::KIND
    );
}

async fn bad_batches<S: TestStore>(base: S) {
    // A namespace of its own: on Postgres, `*_postgres` and
    // `*_postgres_cold` run at once on one database, and every run of the
    // suite on the same database would meet the last one's tree.
    let store = base.handle(&unique("bad-batches"));
    let tree: Tree<S, Compacted> = Tree::new(store.clone());
    let root = tree
        .insert_many(vec![
            (hkey("bad-a", 0), leaf("a", 1)),
            (hkey("bad-b", 0), leaf("b", 2)),
        ])
        .await
        .expect("seed");
    let stranger = sha256(b"a node nobody stored");
    let fresh = Node::Branch {
        left: sha256(b"left"),
        right: sha256(b"right"),
        sum: 3,
    };
    let fresh_hash = branch_hash(&sha256(b"left"), &sha256(b"right"), 3);
    let moved = ComputedNode::new(fresh_hash, 3);

    refused(
        &store,
        "delete of a node that is not stored",
        UpdateBatch {
            old_root: root,
            new_root: moved,
            inserts: vec![],
            deletes: vec![(Position::ROOT, stranger)],
        },
        stranger,
    )
    .await;
    // The root row holds one reference; dropping two is one too many.
    refused(
        &store,
        "two references dropped from a row holding one",
        UpdateBatch {
            old_root: root,
            new_root: moved,
            inserts: vec![],
            deletes: vec![(Position::ROOT, root.hash), (Position::ROOT, root.hash)],
        },
        root.hash,
    )
    .await;
    // Valid inserts and deletes in the same batch are not applied either.
    refused(
        &store,
        "valid changes next to a missing delete",
        UpdateBatch {
            old_root: root,
            new_root: moved,
            inserts: vec![(Position::ROOT, fresh_hash, fresh)],
            deletes: vec![(Position::ROOT, root.hash), (Position::ROOT, stranger)],
        },
        stranger,
    )
    .await;
    assert_eq!(tree.root().await.expect("root"), root);
    assert_eq!(
        tree.get(&hkey("bad-b", 0)).await.expect("get"),
        leaf("b", 2)
    );
}

on_every_store!(bad_batches_are_refused => bad_batches);
