//! Namespaces: independent trees in one database, `delete_all` scoped to
//! one namespace.
//!
//! Part of the store suite (`tests/stores_*.rs`, machinery in
//! `tests/support/suite.rs`): each scenario runs on memory, SQLite and
//! Postgres, and on the SQL stores `*_cold`, with every node read by SQL.
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use ms_smt::store::BulkStore;
use ms_smt::{Compacted, ComputedNode, Full, Key, Layout, Leaf, Tree};
use support::suite::*;
use support::{hkey, unique};

// ---------------------------------------------------------------------------
// 4. Namespaces
// ---------------------------------------------------------------------------

async fn namespaces_layout<S: TestStore, L: Layout>(base: &S) {
    let lay = layout_name::<L>();
    let mut a: Mirror<S, L> = Mirror::new(base, "ns-a");
    let mut b: Mirror<S, L> = Mirror::new(base, "ns-b");
    // Overlapping contents: keys 10..20 hold the same leaves in both trees,
    // so both namespaces store rows with equal hashes.
    let batch = |range: std::ops::Range<u64>, tag: &str| -> Vec<(Key, Leaf)> {
        range
            .map(|i| (hkey("ns", i), leaf(&format!("{tag}{}", i.min(20)), i + 1)))
            .collect()
    };
    a.apply("fill a", batch(0..20, "v"), false, Check::Reads)
        .await;
    b.apply("fill b", batch(10..30, "v"), false, Check::Reads)
        .await;
    assert_ne!(
        a.tree.root().await.expect("root"),
        b.tree.root().await.expect("root")
    );
    let b_dump = b.tree.store().dump().await;
    let b_root = b.tree.root().await.expect("root");

    a.tree.delete_all().await.expect("delete_all a");
    a.model.clear();
    a.mem.delete_all().await.expect("mem delete_all");
    assert_eq!(
        a.tree.root().await.expect("root"),
        ComputedNode::empty_root(),
        "{lay}"
    );
    assert_eq!(
        a.tree.store().node_rows().await,
        0,
        "{lay}: delete_all left rows"
    );
    assert_eq!(
        a.tree.store().root_rows().await,
        0,
        "{lay}: delete_all left the root"
    );
    a.check("after delete_all", Check::Reads).await;

    assert_eq!(
        b.tree.store().dump().await,
        b_dump,
        "{lay}: delete_all of a touched b"
    );
    assert_eq!(b.tree.root().await.expect("root"), b_root);
    b.check("after delete_all of a", Check::Fresh).await;
    // Another handle (and pool) on b sees the same tree.
    let other: Tree<S, L> = Tree::new(b.tree.store().peer().await);
    assert_eq!(other.root().await.expect("root"), b_root);
    assert_eq!(
        other.get_many(&b.keys).await.expect("get_many"),
        b.tree.get_many(&b.keys).await.expect("get_many")
    );

    // a is usable again and independent of b.
    a.apply("refill a", batch(15..25, "w"), false, Check::Reads)
        .await;
    assert_eq!(
        b.tree.store().dump().await,
        b_dump,
        "{lay}: writes to a touched b"
    );
    b.apply(
        "change b",
        vec![(hkey("ns", 12), Leaf::empty())],
        true,
        Check::Reads,
    )
    .await;
    a.check("after b changed", Check::Reads).await;
    a.cleanup().await;
    b.cleanup().await;
}

on_every_store!(namespaces_are_independent => namespaces_layout::<Full, Compacted>);

/// `forget_if_vacant` refuses a namespace that holds a tree, forgets an
/// emptied one (twice is fine), and the name is usable again from the
/// same handle and from another.
async fn forget_layout<S: TestStore + BulkStore, L: Layout>(base: &S) {
    let lay = layout_name::<L>();
    let name = unique(&format!("forget-{lay}"));
    let tree: Tree<S, L> = Tree::new(base.handle(&name));
    let leaves: Vec<(Key, Leaf)> = (0..20)
        .map(|i| (hkey("forget", i), leaf("f", i + 1)))
        .collect();
    let root = tree.insert_many(leaves.clone()).await.expect("fill");
    assert!(
        !tree.store().forget_if_vacant().await.expect("forget"),
        "{lay}"
    );
    assert_eq!(tree.root().await.expect("root"), root, "{lay}");
    tree.delete_all().await.expect("delete_all");
    assert!(
        tree.store().forget_if_vacant().await.expect("forget"),
        "{lay}"
    );
    assert!(
        tree.store().forget_if_vacant().await.expect("again"),
        "{lay}"
    );
    assert_eq!(tree.store().root_rows().await, 0, "{lay}");
    assert_eq!(tree.store().node_rows().await, 0, "{lay}");
    // Written again through the same handle, seen through another.
    assert_eq!(
        tree.insert_many(leaves.clone()).await.expect("refill"),
        root
    );
    let other: Tree<S, L> = Tree::new(base.handle(&name));
    assert_eq!(other.root().await.expect("root"), root, "{lay}");
    let keys: Vec<Key> = leaves.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        other.get_many(&keys).await.expect("get_many"),
        leaves.into_iter().map(|(_, l)| l).collect::<Vec<_>>(),
        "{lay}"
    );
    tree.delete_all().await.expect("cleanup");
}

on_every_store!(forget_if_vacant => forget_layout::<Full, Compacted>);
