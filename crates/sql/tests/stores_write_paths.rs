//! Write and read paths on tree shapes that stress them: twin subtrees
//! (equal subtrees at different positions, spec §9 B3, B4, B3-CL, G255) and
//! batches that delete, replace and add across row boundaries.
//!
//! Part of the store suite (`tests/stores_*.rs`, machinery in
//! `tests/support/suite.rs`): each scenario runs on memory, SQLite and
//! Postgres, and on the SQL stores `*_cold`, with every node read by SQL.
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use ms_smt::{Compacted, Full, Key, Layout, LayoutKind, Leaf};
use support::hkey;
use support::recipes::flip;
use support::suite::*;

// ---------------------------------------------------------------------------
// 2. Twin subtrees (spec §9 B3, B4, B3-CL, G255)
// ---------------------------------------------------------------------------

fn k_zero() -> Key {
    Key([0; 32])
}

/// Sets of keys that, holding one shared leaf, produce equal subtrees (equal
/// hashes) at different positions.
fn twin_sets() -> Vec<(&'static str, Vec<Key>)> {
    let z = k_zero();
    let x = hkey("twin-x", 0);
    vec![
        // B4: 00x32 and 01 00x31 with the same leaf.
        ("bit 0", vec![z, flip(z, &[0])]),
        // B4 full-tree variant and G255: differing only in bit 255.
        ("bit 255", vec![z, flip(z, &[255])]),
        // Both at once.
        (
            "bits 0 and 255",
            vec![z, flip(z, &[0]), flip(z, &[255]), flip(z, &[0, 255])],
        ),
        // Four equal subtrees at level 2 (B3-CL: equal compacted leaves).
        (
            "bits 0,1",
            vec![x, flip(x, &[0]), flip(x, &[1]), flip(x, &[0, 1])],
        ),
        // High bits of the first byte.
        (
            "bits 6,7",
            vec![x, flip(x, &[6]), flip(x, &[7]), flip(x, &[6, 7])],
        ),
        // Top bits of several bytes.
        (
            "byte tops",
            vec![x, flip(x, &[7]), flip(x, &[15]), flip(x, &[255])],
        ),
        // The last levels (G255 inside a populated subtree).
        (
            "bits 254,255",
            vec![x, flip(x, &[254]), flip(x, &[255]), flip(x, &[254, 255])],
        ),
    ]
}

/// Twin sets also run on the full layout (every full-tree step walks 256
/// levels, so the overlapping variants run on the compacted layout only).
const FULL_TWIN_SETS: &[&str] = &[
    "bit 0",
    "bit 255",
    "bits 0 and 255",
    "bits 0,1",
    "bits 254,255",
];

async fn twins_layout<S: TestStore, L: Layout>(base: &S) {
    let same = leaf("twin", 5);
    let other = leaf("other", 9);
    for (name, keys) in twin_sets() {
        if L::KIND == LayoutKind::Full && !FULL_TWIN_SETS.contains(&name) {
            continue;
        }
        let mut m: Mirror<S, L> = Mirror::new(base, &format!("twins-{name}"));
        let k0 = keys[0];
        let k1 = keys[1];
        let outsider = hkey("twin-outsider", 1);
        let mut batch: Vec<(Key, Leaf)> = keys.iter().map(|k| (*k, same.clone())).collect();
        batch.push((outsider, other.clone()));
        m.apply(&format!("{name}: insert twins"), batch, false, Check::Reads)
            .await;

        // Delete one twin: the others stay readable (get_many in the check,
        // and a plain get here) and provable.
        m.apply(
            &format!("{name}: delete first twin"),
            vec![(k0, Leaf::empty())],
            true,
            Check::Reads,
        )
        .await;
        assert_eq!(
            m.tree.get(&k1).await.expect("get"),
            same,
            "{}: {name}: twin {k1:?} lost",
            m.what
        );

        // Deleting an absent key (next to the twins) changes nothing at all.
        let before = m.tree.store().dump().await;
        m.apply(
            &format!("{name}: delete absent"),
            vec![(k0, Leaf::empty())],
            false,
            Check::Root,
        )
        .await;
        m.apply(
            &format!("{name}: delete absent near"),
            vec![(flip(k1, &[100]), Leaf::empty())],
            true,
            Check::Root,
        )
        .await;
        assert_eq!(
            m.tree.store().dump().await,
            before,
            "{}: {name}: deleting absent keys wrote rows",
            m.what
        );

        // Replace a twin.
        m.apply(
            &format!("{name}: replace second twin"),
            vec![(k1, other.clone())],
            true,
            Check::Reads,
        )
        .await;
        // Further inserts: the deleted twin back, the replaced one back to
        // the shared leaf, a new neighbour.
        m.apply(
            &format!("{name}: re-insert"),
            vec![
                (k0, same.clone()),
                (k1, same.clone()),
                (flip(k0, &[128]), same.clone()),
            ],
            false,
            Check::Root,
        )
        .await;
        // Delete and replace in one batch, and write next to the last level.
        let last = *keys.last().expect("twins");
        m.apply(
            &format!("{name}: mixed batch"),
            vec![
                (last, Leaf::empty()),
                (k0, other.clone()),
                (flip(k1, &[255]), same.clone()),
            ],
            false,
            Check::Root,
        )
        .await;
        m.apply(
            &format!("{name}: single insert at a twin slot"),
            vec![(last, same.clone())],
            true,
            Check::Fresh,
        )
        .await;
        m.delete_everything().await;
        m.cleanup().await;
    }
}

on_every_store!(twin_subtrees => twins_layout::<Full, Compacted>);

/// Batches that delete, replace and add many keys of a tree big enough
/// for several row levels at once: paths of neighbouring keys share their
/// upper rows (a position store walks those once) and part at every row
/// boundary, and compacted deletes pull leaves up across row boundaries,
/// so the read phase must bring every sibling row the plan needs.
async fn mixed_batches_layout<S: TestStore, L: Layout>(base: &S) {
    let mut m: Mirror<S, L> = Mirror::new(base, "mixed");
    let n = 1500u64;
    let build: Vec<(Key, Leaf)> = (0..n)
        .map(|i| (hkey("mixed", i), leaf(&format!("v{i}"), 1 + i)))
        .collect();
    m.apply("build", build, false, Check::Root).await;
    let mixed: Vec<(Key, Leaf)> = (0..n)
        .step_by(5)
        .map(|i| (hkey("mixed", i), Leaf::empty()))
        .chain(
            (1..n)
                .step_by(5)
                .map(|i| (hkey("mixed", i), leaf("new", 7))),
        )
        .chain((n..n + 300).map(|i| (hkey("mixed", i), leaf(&format!("n{i}"), i))))
        .collect();
    m.apply("delete, replace and add", mixed, false, Check::Reads)
        .await;
    let thin: Vec<(Key, Leaf)> = (0..n + 300)
        .filter(|i| i % 7 != 3)
        .map(|i| (hkey("mixed", i), Leaf::empty()))
        .collect();
    m.apply("delete all but a few", thin, false, Check::Fresh)
        .await;
    m.delete_everything().await;
    m.cleanup().await;
}

on_every_store!(mixed_batches_over_rows => mixed_batches_layout::<Compacted, Full>);
