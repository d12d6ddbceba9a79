//! Round trips and statements: insert_many, get_many and merkle_proofs cost
//! O(depth) round trips whatever the batch size; constant (Postgres) or
//! chunked (SQLite) commit statements; where each operation's nodes come
//! from (the handle's memory or the store).
//!
//! Part of the store suite (`tests/stores_*.rs`, machinery in
//! `tests/support/suite.rs`): each scenario runs on memory, SQLite and
//! Postgres, and on the SQL stores `*_cold`, with every node read by SQL.
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use ms_smt::store::{MemoryStore, StoreStats, TreeStore};
use ms_smt::{Compacted, Key, Leaf, Tree};
use support::suite::*;
use support::{hkey, unique};

// ---------------------------------------------------------------------------
// 5. Round trips
// ---------------------------------------------------------------------------

/// Checks where one operation's nodes came from: all from the handle's
/// memory when it remembers (the tree was written or read through it
/// before), all from the store when it does not.
fn assert_sources<S: TestStore>(store: &S, cost: &StoreStats, what: &str) {
    if store.remembers() {
        assert_eq!(
            cost.nodes_read,
            0,
            "{}: {what} read nodes that the handle wrote or read before",
            S::KIND
        );
        assert!(
            cost.nodes_remembered > 0,
            "{}: {what} remembered nothing",
            S::KIND
        );
    } else {
        assert!(cost.nodes_read > 0, "{}: {what} read no nodes", S::KIND);
        assert_eq!(cost.nodes_remembered, 0, "{}: {what}", S::KIND);
    }
}

/// Where a write's read phase took its nodes from: as [`assert_sources`],
/// except on stores that read by position, whose commit merges into the
/// rows on the batch's paths: their writes read the paths from the store
/// even when the handle remembers the nodes (taking them from memory would
/// only move those reads into the commit), and remember nothing.
fn assert_write_sources<S: TestStore>(store: &S, cost: &StoreStats, what: &str) {
    // A store that hands out no remembered nodes to writes reads the
    // paths from the store.
    if store.recent_nodes(true).is_none() {
        assert!(cost.nodes_read > 0, "{}: {what} read no nodes", S::KIND);
        assert_eq!(cost.nodes_remembered, 0, "{}: {what}", S::KIND);
    } else {
        assert_sources(store, cost, what);
    }
}

const RT_LEAVES: u64 = 10_000;

/// The SQLite store packs at most 16,384 rows into one statement.
const SQLITE_ROWS_PER_CHUNK: u64 = 16_384;

/// A SQLite commit: BEGIN, root read, root write, COMMIT, plus per chunk of
/// rows at most a delete, an upsert and a check.
fn sqlite_commit_bound(rows: u64) -> u64 {
    4 + 3 * rows.div_ceil(SQLITE_ROWS_PER_CHUNK).max(1)
}

/// A Postgres commit, whatever the batch size: BEGIN, lock, root read,
/// delete, savepoint + insert + release (or rollback), a fallback upsert,
/// an upsert of surviving rows, root write, COMMIT.
const PG_COMMIT_BOUND: u64 = 11;

fn ceil_log2(n: u64) -> u64 {
    u64::from(n.next_power_of_two().trailing_zeros())
}

async fn round_trips<S: TestStore>(base: S) {
    let store = base.handle(&unique("round-trips"));
    let probe = Probe::new(store.clone());
    let tree: Tree<Probe<S>, Compacted> = Tree::new(probe.clone());
    let mem: Tree<MemoryStore, Compacted> = Tree::new(MemoryStore::new());
    let seed: Vec<(Key, Leaf)> = (0..RT_LEAVES)
        .map(|i| (hkey("rt-seed", i), leaf(&format!("s{i}"), i % 1000 + 1)))
        .collect();
    let root = tree.insert_many(seed.clone()).await.expect("seed");
    assert_eq!(root, mem.insert_many(seed.clone()).await.expect("mem seed"));
    probe.take_commits();

    let bound = 2 * (ceil_log2(RT_LEAVES) + 8);
    let mut commit_stats = Vec::new();
    for b in [10u64, 1000] {
        let batch: Vec<(Key, Leaf)> = (0..b)
            .map(|i| (hkey(&format!("rt-new-{b}"), i), leaf(&format!("n{i}"), 3)))
            .collect();
        let before = tree.store().stats();
        let root = tree.insert_many(batch.clone()).await.expect("insert_many");
        let cost = tree.store().stats().since(&before);
        assert_eq!(
            root,
            mem.insert_many(batch.clone()).await.expect("mem"),
            "{}",
            S::KIND
        );
        let commits = probe.take_commits();
        assert_eq!(
            commits.len(),
            1,
            "{}: one commit expected without concurrency",
            S::KIND
        );
        let (commit, committed) = commits[0];
        assert!(committed, "{}: the commit did not apply", S::KIND);
        eprintln!(
            "round trips [{}] insert_many B={b} into {RT_LEAVES} leaves: {} round trips, {} statements \
             (commit: {} round trips, {} statements, {} rows changed), bound {bound}",
            S::KIND,
            cost.round_trips,
            cost.statements,
            commit.round_trips,
            commit.statements,
            commit.nodes_written
        );
        assert!(
            cost.round_trips <= bound,
            "{}: insert_many of {b} keys took {} round trips (bound {bound})",
            S::KIND,
            cost.round_trips
        );
        assert_write_sources(&store, &cost, &format!("insert_many of {b} keys"));
        commit_stats.push(commit);
    }
    let (c10, c1000) = (commit_stats[0], commit_stats[1]);
    match S::KIND {
        "postgres" => {
            for c in [c10, c1000] {
                assert!(
                    c.statements <= PG_COMMIT_BOUND,
                    "postgres: a commit of {} rows took {} statements (bound {PG_COMMIT_BOUND})",
                    c.nodes_written,
                    c.statements
                );
            }
        }
        "sqlite" => {
            for c in [c10, c1000] {
                let bound = sqlite_commit_bound(c.nodes_written);
                assert!(
                    c.statements <= bound,
                    "sqlite: a commit of {} rows took {} statements (bound {bound})",
                    c.nodes_written,
                    c.statements
                );
            }
        }
        _ => assert_eq!(c1000.statements, c10.statements),
    }

    // Reads of 1,000 keys: half present, half absent.
    let keys: Vec<Key> = (0..1000u64)
        .map(|i| {
            if i % 2 == 0 {
                hkey("rt-seed", i * 7)
            } else {
                hkey("rt-absent", i)
            }
        })
        .collect();
    let root = tree.root().await.expect("root");
    let before = tree.store().stats();
    let got = tree.get_many(&keys).await.expect("get_many");
    let get_cost = tree.store().stats().since(&before);
    let before = tree.store().stats();
    let proofs = tree.merkle_proofs(&keys).await.expect("merkle_proofs");
    let proof_cost = tree.store().stats().since(&before);
    eprintln!(
        "round trips [{}] get_many of 1000 keys: {} round trips; merkle_proofs of 1000 keys: {} round trips, bound {bound}",
        S::KIND,
        get_cost.round_trips,
        proof_cost.round_trips
    );
    assert!(
        get_cost.round_trips <= bound,
        "{}: get_many took {} round trips",
        S::KIND,
        get_cost.round_trips
    );
    assert!(
        proof_cost.round_trips <= bound,
        "{}: merkle_proofs took {} round trips",
        S::KIND,
        proof_cost.round_trips
    );
    assert_sources(&store, &get_cost, "get_many");
    assert_sources(&store, &proof_cost, "merkle_proofs");
    assert_eq!(got, mem.get_many(&keys).await.expect("mem get_many"));
    for (i, (k, p)) in keys.iter().zip(&proofs).enumerate() {
        let want = if i % 2 == 0 {
            leaf(&format!("s{}", i * 7), (i as u64 * 7) % 1000 + 1)
        } else {
            Leaf::empty()
        };
        assert_eq!(got[i], want);
        assert!(
            p.verify(k, &want, &root),
            "{}: proof {i} does not verify",
            S::KIND
        );
    }
    tree.delete_all().await.expect("delete_all");
    assert_eq!(store.node_rows().await, 0);
}

on_every_store!(round_trips_are_o_depth => round_trips);
