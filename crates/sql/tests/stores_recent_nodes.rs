//! Remembered nodes (`RecentNodes`) and other writers: a handle that
//! remembers nodes stays right after another handle removed rows it
//! remembers; reference counts stay exact.
//!
//! Part of the store suite (`tests/stores_*.rs`, machinery in
//! `tests/support/suite.rs`): each scenario runs on memory, SQLite and
//! Postgres, and on the SQL stores `*_cold`, with every node read by SQL.
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use ms_smt::{Compacted, Full, Key, Layout, Leaf, Tree};
use support::hkey;
use support::model::{self};
use support::suite::*;

// ---------------------------------------------------------------------------
// 4b. Remembered nodes and other writers
// ---------------------------------------------------------------------------

/// A handle that remembers the tree keeps giving right answers and writing
/// right rows after another handle (its own pool and memory: another
/// process) deletes, replaces and adds leaves, so that many nodes it
/// remembers are gone from the database; re-inserting deleted leaves needs
/// rows it still remembers. Deleting every key through it must leave no
/// row behind (the reference counts stayed exact).
async fn other_writers_layout<S: TestStore, L: Layout>(base: &S) {
    let mut a: Mirror<S, L> = Mirror::new(base, "recent");
    let b: Tree<S, L> = Tree::new(a.tree.store().peer().await);
    let fill = |range: std::ops::Range<u64>, tag: &str| -> Vec<(Key, Leaf)> {
        range
            .map(|i| (hkey("recent", i), leaf(&format!("{tag}{i}"), i + 1)))
            .collect()
    };
    a.apply("fill", fill(0..200, "r"), false, Check::Reads)
        .await;

    let mut other: Vec<(Key, Leaf)> = (0..100u64)
        .map(|i| (hkey("recent", i), Leaf::empty()))
        .collect();
    other.extend(fill(100..120, "x"));
    other.extend(fill(200..260, "r"));
    b.insert_many(other.clone())
        .await
        .expect("the other writer");
    a.track(&other);
    a.mem
        .insert_many(other.clone())
        .await
        .expect("memory write");
    model::apply(&mut a.model, &other);
    a.check("after the other writer", Check::Reads).await;

    let mut again = fill(0..50, "r"); // rows the other writer deleted
    again.extend(fill(260..300, "r"));
    again.extend(fill(100..110, "r")); // back to the values before "x"
    a.apply("write after the other writer", again, false, Check::Fresh)
        .await;
    a.apply(
        "single writes after the other writer",
        vec![
            (hkey("recent", 150), Leaf::empty()),
            (hkey("recent", 60), leaf("r60", 61)),
        ],
        true,
        Check::Reads,
    )
    .await;
    let remembered = a.tree.store().stats().nodes_remembered;
    if a.tree.store().remembers() {
        assert!(remembered > 0, "{}: nothing was remembered", a.what);
    }

    let all: Vec<(Key, Leaf)> = a.keys.iter().map(|k| (*k, Leaf::empty())).collect();
    a.apply("delete every key", all, false, Check::Root).await;
    assert_eq!(
        a.tree.store().node_rows().await,
        0,
        "{}: rows left after deleting every key",
        a.what
    );
    a.cleanup().await;
}

on_every_store!(remembered_nodes_survive_other_writers => other_writers_layout::<Full, Compacted>);
