//! The integrity audit (`Tree::audit`).
//!
//! * `clean_*`: trees built, partly deleted and emptied on every store and
//!   both layouts audit clean, and the report counts every leaf.
//! * `corruptions_sqlite` / `corruptions_postgres`: 1,000 random
//!   corruptions each (byte flips in row bodies, by field: hash, key, sum,
//!   value, length, tag; deleted rows; swapped sibling rows; swapped
//!   children inside a row; moved and duplicated rows; a wrong root
//!   record). Each is applied inside a transaction that is rolled back
//!   afterwards; the audit must flag 100 % of them, and reads on the
//!   corrupted tree must return a typed error or data that fails
//!   verification against the stored root, never wrong data that verifies.
//! * `pinned_*`: trees with two pins audit clean, with one report per pin
//!   on SQL stores; on SQLite and Postgres every kept row a pin reads
//!   (`ms_smt_history`), flipped or deleted, is flagged in the report of
//!   each pin that reads it and nowhere else, and unpinning frees them all.
//! * `corruptions_memory`: the same idea on the hash-keyed memory layout
//!   through `audit_nodes` on edited scans (value and sum edits, reference
//!   counts, missing and orphan nodes).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::collections::BTreeMap;

use ms_smt::audit::{NodeScan, audit_nodes};
use ms_smt::store::Pin;
use ms_smt::store::{AuditStore, MemoryStore, PinStore, Writable};
use ms_smt::{Compacted, Full, Key, Layout, LayoutKind, Leaf, Node, Tree, TreeError};
use ms_smt_sql::{PostgresStore, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::Connection;
use support::{TempDb, hkey, pg_url, unique};

/// Ordered, so that every walk over it is the same in every run.
type Model = BTreeMap<Key, Leaf>;

/// Builds a tree of `n` keys in three batches, then deletes every third.
async fn build<S: Writable + AuditStore, L: Layout>(tree: &Tree<S, L>, tag: &str, n: u64) -> Model {
    let mut model = Model::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(n.div_ceil(3) as usize) {
        let batch: Vec<(Key, Leaf)> = chunk
            .iter()
            .map(|&i| {
                let value = format!("v{i}").repeat(1 + (i % 4) as usize).into_bytes();
                (hkey(tag, i), Leaf::new(value, 1 + i * 7))
            })
            .collect();
        tree.insert_many(batch.clone()).await.expect("insert");
        model.extend(batch);
    }
    let deletes: Vec<(Key, Leaf)> = (0..n)
        .step_by(3)
        .map(|i| (hkey(tag, i), Leaf::empty()))
        .collect();
    tree.insert_many(deletes.clone()).await.expect("delete");
    for (k, _) in deletes {
        model.remove(&k);
    }
    model
}

async fn assert_clean<S: Writable + AuditStore, L: Layout>(
    tree: &Tree<S, L>,
    model: &Model,
    what: &str,
) {
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{what}: {:?}", report.problems);
    assert_eq!(report.leaves, model.len() as u64, "{what}: leaves");
    assert_eq!(
        report.stored_root,
        tree.root().await.expect("root"),
        "{what}"
    );
}

async fn clean_layout<S: Writable + AuditStore, L: Layout>(store: S, what: &str) {
    let tree = Tree::<S, L>::new(store);
    assert_clean(&tree, &Model::new(), &format!("{what} empty")).await;
    let tag = unique(what);
    let model = build(&tree, &tag, 300).await;
    assert_clean(&tree, &model, &format!("{what} built")).await;
    let all: Vec<(Key, Leaf)> = model.keys().map(|k| (*k, Leaf::empty())).collect();
    tree.insert_many(all).await.expect("delete all keys");
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{what} emptied: {:?}", report.problems);
    assert_eq!(
        report.stored_items, 0,
        "{what}: an emptied tree stores nothing"
    );
}

#[tokio::test]
async fn clean_memory() {
    let store = MemoryStore::new();
    clean_layout::<_, Full>(store.open_namespace("f").unwrap(), "memory full").await;
    clean_layout::<_, Compacted>(store.open_namespace("c").unwrap(), "memory compacted").await;
}

#[tokio::test]
async fn clean_sqlite() {
    let file = TempDb::new("audit_clean");
    let store = SqliteStore::open(&file.path).await.expect("open");
    clean_layout::<_, Full>(store.open_namespace("f"), "sqlite full").await;
    clean_layout::<_, Compacted>(store.open_namespace("c"), "sqlite compacted").await;
    // The caller's-transaction mode scans inside the caller's transaction.
    let tree = Tree::<_, Compacted>::new(store.open_namespace("tx"));
    let model = build(&tree, "tx", 60).await;
    let mut conn = store.pool().acquire().await.expect("conn");
    let mut tx = conn.begin().await.expect("begin");
    let in_tx = Tree::<_, Compacted>::new(store.open_namespace("tx").in_transaction(&mut tx));
    assert_clean(&in_tx, &model, "sqlite in transaction").await;
}

#[tokio::test]
async fn clean_postgres() {
    let Some(url) = pg_url("clean_postgres") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    let ns = unique("audit");
    clean_layout::<_, Full>(store.open_namespace(&format!("{ns}f")), "postgres full").await;
    clean_layout::<_, Compacted>(
        store.open_namespace(&format!("{ns}c")),
        "postgres compacted",
    )
    .await;
}

// ---------------------------------------------------------------------------
// Pinned trees
// ---------------------------------------------------------------------------

/// Builds a tree, pins it as "a", replaces, deletes and adds keys, pins "b",
/// changes it again, and checks the audit: clean, the current tree's
/// leaves in the report and (on stores that keep pinned rows apart) one
/// clean report per pin with its own root and leaves. Returns the two pins.
async fn pinned_history<S: PinStore + Writable + AuditStore, L: Layout>(
    tree: &Tree<S, L>,
    tag: &str,
    separate: bool,
) -> Vec<(Pin, u64)> {
    let mut model = build(tree, tag, 90).await;
    let mut pins = Vec::new();
    // Every change after the build stays in the left half of the key
    // space (first bit 0), so the rows of the right half written by the
    // build stay live and unchanged: pin "a" shares them with the current
    // tree by construction (the SQL case below corrupts some of them).
    let left = |k: &Key| k.0[0] & 0x80 == 0;
    let mut fresh = (1_000u64..).map(|i| hkey(tag, i)).filter(left);
    for (round, name) in ["a", "b", ""].into_iter().enumerate() {
        if !name.is_empty() {
            pins.push((tree.pin(name).await.expect("pin"), model.len() as u64));
        }
        let r = round as u64;
        let mut batch: Vec<(Key, Leaf)> = model
            .keys()
            .filter(|k| left(k))
            .take(20)
            .enumerate()
            .map(|(i, k)| match i % 2 {
                0 => (*k, Leaf::new(format!("new{r}").into_bytes(), 5 + r)),
                _ => (*k, Leaf::empty()),
            })
            .collect();
        batch.extend(
            fresh
                .by_ref()
                .take(15)
                .zip(1..)
                .map(|(k, i)| (k, Leaf::new(vec![7], i))),
        );
        tree.insert_many(batch.clone()).await.expect("change");
        for (k, l) in batch {
            if l.is_empty() {
                model.remove(&k);
            } else {
                model.insert(k, l);
            }
        }
    }
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{tag}: {report:?}");
    if separate {
        assert_eq!(report.leaves, model.len() as u64, "{tag}: current leaves");
        assert_eq!(report.pinned.len(), 2, "{tag}: one report per pin");
        for (audit, (pin, leaves)) in report.pinned.iter().zip(&pins) {
            assert_eq!(audit.pin, *pin, "{tag}");
            assert_eq!(audit.report.stored_root, pin.root, "{tag}");
            assert_eq!(
                audit.report.leaves, *leaves,
                "{tag}: leaves of pin {}",
                pin.name
            );
            assert!(audit.report.stored_items > 0, "{tag}");
        }
    } else {
        // One walk over the current and the pinned trees counts them all.
        let all = model.len() as u64 + pins.iter().map(|(_, n)| n).sum::<u64>();
        assert_eq!(report.leaves, all, "{tag}: leaves of every tree");
        assert!(
            report.pinned.is_empty(),
            "{tag}: pinned trees share the walk"
        );
    }
    pins
}

/// After the pins go, nothing is left to audit but the current tree.
async fn unpin_all<S: PinStore + AuditStore, L: Layout>(tree: &Tree<S, L>, tag: &str) {
    for name in ["a", "b"] {
        assert!(tree.unpin(name).await.expect("unpin"), "{tag}: {name}");
    }
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{tag}: {report:?}");
    assert!(report.pinned.is_empty(), "{tag}");
}

#[tokio::test]
async fn pinned_memory() {
    let store = MemoryStore::new();
    let full = Tree::<_, Full>::new(store.open_namespace("f").unwrap());
    pinned_history(&full, "memory full", false).await;
    unpin_all(&full, "memory full").await;
    let compacted = Tree::<_, Compacted>::new(store.open_namespace("c").unwrap());
    pinned_history(&compacted, "memory compacted", false).await;
    unpin_all(&compacted, "memory compacted").await;
}

/// Asserts that a query found rows: `why` says what should have made them.
fn assert_found<T>(rows: &[T], tag: &str, why: &str) {
    assert!(!rows.is_empty(), "{tag}: {why}");
}

/// The rows a pin reads are checked like the current ones: on a SQL store,
/// a flipped byte in a kept row (`ms_smt_history`) or a kept row deleted
/// shows in the report of every pin that reads it, and only there; a flip
/// in a live row that a pin also reads shows in both. Each corruption is
/// rolled back. `$store` has `pool()` and `namespace()`; statements use
/// `$N` placeholders, which both engines bind.
macro_rules! pinned_sql {
    ($store:expr, $layout:ty, $tag:expr) => {{
        let store = $store;
        let name = unique($tag);
        let tree = Tree::<_, $layout>::new(store.open_namespace(&name));
        // Keys from `$tag`, not the namespace's unique name: the same keys
        // every run; `pinned_history` changes only the left half of the
        // key space after pin "a", so pin "a" keeps live rows the current
        // tree shares (the precondition asserted below).
        let pins = pinned_history(&tree, $tag, true).await;
        let ns: i64 = sqlx::query_scalar("SELECT id FROM ms_smt_namespaces WHERE name = $1")
            .bind(&name)
            .fetch_one(store.pool())
            .await
            .expect("namespace");
        let kept: Vec<(Vec<u8>, i64, Vec<u8>, i64, i64)> = sqlx::query_as(
            "SELECT path, CAST(depth AS BIGINT), body, from_version, to_version \
             FROM ms_smt_history \
             WHERE ns = $1 ORDER BY path, depth, from_version",
        )
        .bind(ns)
        .fetch_all(store.pool())
        .await
        .expect("kept rows");
        assert_found(&kept, $tag, "the changes kept rows for the pins");
        let live: Vec<(Vec<u8>, i64, Vec<u8>)> = sqlx::query_as(
            "SELECT path, CAST(depth AS BIGINT), body FROM ms_smt_strata WHERE ns = $1 \
             AND version <= $2 ORDER BY path, depth",
        )
        .bind(ns)
        .bind(pins[0].0.version as i64)
        .fetch_all(store.pool())
        .await
        .expect("live rows");
        assert_found(&live, $tag, "pin a shares rows with the current tree");
        let mut checked = 0;
        // About 30 kept rows, each flipped and then deleted; a few shared
        // live rows flipped.
        let cases = kept
            .iter()
            .step_by((kept.len() / 30).max(1))
            .flat_map(|(p, d, b, from, to)| {
                [true, false].map(|flip| (p, *d, b, Some((*from, *to)), flip))
            })
            .chain(
                live.iter()
                    .step_by((live.len() / 10).max(1))
                    .map(|(p, d, b)| (p, *d, b, None, true)),
            );
        for (path, depth, body, span, flip) in cases {
            let mut conn = store.pool().acquire().await.expect("conn");
            let mut tx = conn.begin().await.expect("begin");
            let (table, extra) = match span {
                Some((from, _)) => ("ms_smt_history", format!(" AND from_version = {from}")),
                None => ("ms_smt_strata", String::new()),
            };
            let filter = format!("WHERE ns = $1 AND path = $2 AND depth = $3{extra}");
            let sql = if flip {
                format!("UPDATE {table} SET body = $4 {filter}")
            } else {
                format!("DELETE FROM {table} {filter}")
            };
            let mut corrupt = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(ns)
                .bind(path)
                .bind(depth as i32);
            if flip {
                // The last byte of a body is part of a hash, a sum or a value.
                let mut body = body.clone();
                if let Some(last) = body.last_mut() {
                    *last ^= 1;
                }
                corrupt = corrupt.bind(body);
            }
            let done = corrupt.execute(&mut *tx).await.expect("corrupt");
            assert_eq!(done.rows_affected(), 1, "{}: one row changed", $tag);
            {
                let cold = store.open_namespace(&name).with_recent_nodes(0);
                let tree = Tree::<_, $layout>::new(cold.in_transaction(&mut tx));
                let report = tree.audit().await.expect("audit");
                let what = format!("{} {table} {path:?}/{depth} flip={flip}", $tag);
                assert_eq!(
                    report.problems.is_empty(),
                    span.is_some(),
                    "{what}: current tree"
                );
                for (audit, (pin, _)) in report.pinned.iter().zip(&pins) {
                    let reads = match span {
                        Some((from, to)) => from <= pin.version as i64 && (pin.version as i64) < to,
                        None => true,
                    };
                    assert_eq!(!audit.report.is_clean(), reads, "{what}: pin {}", pin.name);
                }
                assert!(!report.is_clean(), "{what}");
            }
            tx.rollback().await.expect("rollback");
            checked += 1;
        }
        println!(
            "{}: {checked} corruptions of pinned rows flagged where read",
            $tag
        );
        unpin_all(&tree, $tag).await;
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ms_smt_history WHERE ns = $1")
            .bind(ns)
            .fetch_one(store.pool())
            .await
            .expect("count");
        assert_eq!(left, 0, "{}: unpinning frees every kept row", $tag);
    }};
}

#[tokio::test]
async fn pinned_sqlite() {
    let file = TempDb::new("audit_pinned");
    let store = SqliteStore::open(&file.path).await.expect("open");
    pinned_sql!(&store, Full, "sqlite full");
    pinned_sql!(&store, Compacted, "sqlite compacted");
}

#[tokio::test]
async fn pinned_postgres() {
    let Some(url) = pg_url("pinned_postgres") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    pinned_sql!(&store, Full, "postgres full");
    pinned_sql!(&store, Compacted, "postgres compacted");
}

// ---------------------------------------------------------------------------
// Row bodies by field, for targeted byte flips
// ---------------------------------------------------------------------------

/// What a byte of a row body holds (see `ms_smt::store::strata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    Format,
    Tag,
    Hash,
    Key,
    Sum,
    Length,
    Value,
}

/// The field of every byte of a body, and the offsets of each bottom
/// branch's two 40-byte child references.
fn fields(body: &[u8]) -> (Vec<Field>, Vec<usize>) {
    let mut out = vec![Field::Format];
    let mut bottoms = Vec::new();
    let mut i = 1;
    let mut pending = 1usize; // slots still to read
    while pending > 0 && i < body.len() {
        pending -= 1;
        out.push(Field::Tag);
        let tag = body[i];
        i += 1;
        let mut push = |f: Field, n: usize, i: &mut usize| {
            out.extend(std::iter::repeat_n(f, n));
            *i += n;
        };
        match tag {
            0 => {}
            1 => pending += 2,
            2 => {
                bottoms.push(i);
                for _ in 0..2 {
                    push(Field::Hash, 32, &mut i);
                    push(Field::Sum, 8, &mut i);
                }
            }
            3 | 4 => {
                push(Field::Hash, 32, &mut i);
                if tag == 3 {
                    push(Field::Key, 32, &mut i);
                }
                push(Field::Sum, 8, &mut i);
                let len = u32::from_le_bytes(body[i..i + 4].try_into().unwrap_or([0; 4])) as usize;
                push(Field::Length, 4, &mut i);
                push(Field::Value, len, &mut i);
            }
            _ => break,
        }
    }
    assert_eq!(
        out.len(),
        body.len(),
        "the test's body parser is out of date"
    );
    (out, bottoms)
}

// ---------------------------------------------------------------------------
// Corruptions of stored rows
// ---------------------------------------------------------------------------

/// A stored row: path, depth, body.
type StoredRow = (Vec<u8>, i64, Vec<u8>);

/// One way to damage a namespace's stored rows or root record.
#[derive(Debug, Clone)]
enum Corruption {
    /// Flip bit `bit` of byte `byte` of row `row`'s body.
    Flip {
        row: usize,
        byte: usize,
        bit: u8,
        field: Field,
    },
    /// Delete a row.
    Delete { row: usize },
    /// Swap the bodies of two rows at one depth.
    SwapRows { a: usize, b: usize },
    /// Swap the two child references of the bottom branch at `at`.
    SwapChildren { row: usize, at: usize },
    /// Move a row to another path (flip path bit `bit`).
    Move { row: usize, bit: usize },
    /// Copy a row to another path.
    Duplicate { row: usize, bit: usize },
    /// Replace the top row's body with another row's.
    WrongRootRow { from: usize },
    /// Flip a bit of the root record's hash.
    RootHash { bit: usize },
    /// Add one to the root record's sum.
    RootSum,
}

impl Corruption {
    fn kind(&self) -> String {
        match self {
            Corruption::Flip { field, .. } => format!("flip {field:?}"),
            other => format!("{other:?}")
                .split([' ', '{'])
                .next()
                .unwrap_or("")
                .to_owned(),
        }
    }
}

fn flip_path(path: &[u8], bit: usize) -> Vec<u8> {
    let mut p = path.to_vec();
    p[bit / 8] ^= 0x80 >> (bit % 8);
    p
}

/// A random corruption that really changes what is stored (`None` when
/// the draw would change nothing; the caller draws again).
fn draw(rng: &mut StdRng, rows: &[StoredRow]) -> Option<Corruption> {
    let exists = |path: &[u8], depth: i64| rows.iter().any(|r| r.0 == path && r.1 == depth);
    let row = rng.gen_range(0..rows.len());
    let (path, depth, body) = &rows[row];
    let c = match rng.gen_range(0..100) {
        0..=54 => {
            let (fields, _) = fields(body);
            let byte = rng.gen_range(0..body.len());
            Corruption::Flip {
                row,
                byte,
                bit: rng.gen_range(0..8),
                field: fields[byte],
            }
        }
        55..=62 => Corruption::Delete { row },
        63..=69 => {
            let peers: Vec<usize> = (0..rows.len())
                .filter(|&j| j != row && rows[j].1 == *depth && rows[j].2 != *body)
                .collect();
            let b = *peers.get(rng.gen_range(0..peers.len().max(1)))?;
            Corruption::SwapRows { a: row, b }
        }
        70..=76 => {
            let (_, bottoms) = fields(body);
            let at = *bottoms.get(rng.gen_range(0..bottoms.len().max(1)))?;
            (body[at..at + 40] != body[at + 40..at + 80]).then_some(())?;
            Corruption::SwapChildren { row, at }
        }
        77..=88 if *depth > 0 => {
            let bit = rng.gen_range(0..*depth as usize);
            if exists(&flip_path(path, bit), *depth) {
                return None;
            }
            if rng.gen_bool(0.5) {
                Corruption::Move { row, bit }
            } else {
                Corruption::Duplicate { row, bit }
            }
        }
        89..=92 => {
            let top = rows.iter().position(|r| r.1 == 0)?;
            (rows[top].2 != *body).then_some(())?;
            Corruption::WrongRootRow { from: row }
        }
        93..=96 => Corruption::RootHash {
            bit: rng.gen_range(0..256),
        },
        _ => Corruption::RootSum,
    };
    Some(c)
}

/// The statements that apply `c` to namespace `ns` (named `name`), with
/// `?N` placeholders (Postgres gets `$N`), and their arguments.
enum Arg {
    Int(i64),
    Blob(Vec<u8>),
    Text(String),
}

fn statements(
    c: &Corruption,
    rows: &[StoredRow],
    root_hash: &[u8],
    ns: i64,
    name: &str,
) -> Vec<(&'static str, Vec<Arg>)> {
    use Arg::{Blob, Int, Text};
    let key = |r: usize| vec![Int(ns), Blob(rows[r].0.clone()), Int(rows[r].1)];
    const SET_BODY: &str =
        "UPDATE ms_smt_strata SET body = ?4 WHERE ns = ?1 AND path = ?2 AND depth = ?3";
    let set_body = |r: usize, body: Vec<u8>| {
        let mut a = key(r);
        a.push(Blob(body));
        (SET_BODY, a)
    };
    match c {
        Corruption::Flip { row, byte, bit, .. } => {
            let mut body = rows[*row].2.clone();
            body[*byte] ^= 1 << bit;
            vec![set_body(*row, body)]
        }
        Corruption::Delete { row } => vec![(
            "DELETE FROM ms_smt_strata WHERE ns = ?1 AND path = ?2 AND depth = ?3",
            key(*row),
        )],
        Corruption::SwapRows { a, b } => vec![
            set_body(*a, rows[*b].2.clone()),
            set_body(*b, rows[*a].2.clone()),
        ],
        Corruption::SwapChildren { row, at } => {
            let mut body = rows[*row].2.clone();
            let (l, r) = body[*at..*at + 80].split_at_mut(40);
            l.swap_with_slice(r);
            vec![set_body(*row, body)]
        }
        Corruption::Move { row, bit } => {
            let mut a = key(*row);
            a.push(Blob(flip_path(&rows[*row].0, *bit)));
            vec![(
                "UPDATE ms_smt_strata SET path = ?4 WHERE ns = ?1 AND path = ?2 AND depth = ?3",
                a,
            )]
        }
        Corruption::Duplicate { row, bit } => vec![(
            "INSERT INTO ms_smt_strata (ns, path, depth, body) VALUES (?1, ?2, ?3, ?4)",
            vec![
                Int(ns),
                Blob(flip_path(&rows[*row].0, *bit)),
                Int(rows[*row].1),
                Blob(rows[*row].2.clone()),
            ],
        )],
        Corruption::WrongRootRow { from } => {
            let top = rows.iter().position(|r| r.1 == 0).expect("top row");
            vec![set_body(top, rows[*from].2.clone())]
        }
        Corruption::RootHash { bit } => vec![(
            "UPDATE ms_smt_namespaces SET root_hash = ?2 WHERE name = ?1",
            vec![Text(name.to_owned()), Blob(flip_path(root_hash, *bit))],
        )],
        Corruption::RootSum => vec![(
            "UPDATE ms_smt_namespaces SET root_sum = root_sum + 1 WHERE name = ?1",
            vec![Text(name.to_owned())],
        )],
    }
}

/// What a campaign saw.
#[derive(Default, Debug)]
struct Tally {
    /// Corruptions by kind: (applied, flagged by the audit).
    kinds: BTreeMap<String, (u64, u64)>,
    /// Problems reported, by variant.
    problems: BTreeMap<String, u64>,
    /// Reads that returned a typed error.
    read_errors: u64,
    /// Keys whose (leaf, proof) failed verification against the stored root.
    unverified: u64,
    /// Keys whose (leaf, proof) verified (and were the model's leaf).
    verified: u64,
}

impl Tally {
    fn print(&self, what: &str) {
        let applied: u64 = self.kinds.values().map(|v| v.0).sum();
        let flagged: u64 = self.kinds.values().map(|v| v.1).sum();
        println!("{what}: {flagged}/{applied} corruptions flagged by the audit");
        for (kind, (a, f)) in &self.kinds {
            println!("  {kind:<16} {f}/{a}");
        }
        println!("  problems reported: {:?}", self.problems);
        println!(
            "  reads: {} typed errors; per key: {} failed verification, {} verified and correct",
            self.read_errors, self.unverified, self.verified
        );
    }

    /// Prints the tally, and checks that both layouts' campaigns applied
    /// every corruption.
    fn check(&self, what: &str) {
        self.print(what);
        assert_eq!(
            self.kinds.values().map(|v| v.0).sum::<u64>(),
            2 * corruptions() as u64
        );
    }
}

/// Audits a corrupted tree and reads `keys` from it: the audit must flag
/// something, and a read must fail with a typed error or return data that
/// fails verification unless it is the model's (correct) leaf.
async fn check_corrupted<S: Writable + AuditStore, L: Layout>(
    tree: &Tree<S, L>,
    model: &Model,
    keys: &[Key],
    c: &Corruption,
    tally: &mut Tally,
) {
    let report = tree
        .audit()
        .await
        .expect("an audit reads, whatever it finds");
    let entry = tally.kinds.entry(c.kind()).or_default();
    entry.0 += 1;
    assert!(!report.is_clean(), "{c:?} went unnoticed");
    entry.1 += 1;
    for p in &report.problems {
        let name = format!("{p:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or("")
            .to_owned();
        *tally.problems.entry(name).or_default() += 1;
    }
    let reads = async {
        let root = tree.root().await?;
        let leaves = tree.get_many(keys).await?;
        let proofs = tree.merkle_proofs(keys).await?;
        Ok::<_, TreeError<S::Error>>((root, leaves, proofs))
    };
    match reads.await {
        Err(_) => tally.read_errors += 1,
        Ok((root, leaves, proofs)) => {
            for ((key, leaf), proof) in keys.iter().zip(&leaves).zip(&proofs) {
                if proof.verify(key, leaf, &root) {
                    let want = model.get(key).cloned().unwrap_or_else(Leaf::empty);
                    assert_eq!(*leaf, want, "{c:?}: a wrong leaf verified");
                    tally.verified += 1;
                } else {
                    tally.unverified += 1;
                }
            }
        }
    }
}

/// Some present and some absent keys.
fn sample_keys(rng: &mut StdRng, model: &Model, tag: &str) -> Vec<Key> {
    let mut present: Vec<&Key> = model.keys().collect();
    present.sort_by_key(|k| k.0);
    let mut keys: Vec<Key> = (0..6)
        .map(|_| *present[rng.gen_range(0..present.len())])
        .collect();
    keys.extend((0..3).map(|_| hkey(tag, rng.gen_range(1_000_000..2_000_000))));
    keys
}

/// Corruptions per layout and store (`MSSMT_AUDIT_CORRUPTIONS`, default
/// 500; the reliability campaign runs 5,000).
fn corruptions() -> usize {
    std::env::var("MSSMT_AUDIT_CORRUPTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
}

fn to_pg(sql: &str) -> String {
    sql.replace('?', "$")
}

/// The id and root hash of namespace `name` and its strata rows, read with
/// statements turned into the engine's dialect by `sql`, depths read as `D`.
async fn stored<DB, D>(
    pool: &sqlx::Pool<DB>,
    name: &str,
    sql: impl Fn(&str) -> String,
) -> (i64, Vec<u8>, Vec<StoredRow>)
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    (i64, Vec<u8>): Send + Unpin + for<'r> sqlx::FromRow<'r, DB::Row>,
    (Vec<u8>, D, Vec<u8>): Send + Unpin + for<'r> sqlx::FromRow<'r, DB::Row>,
    D: Into<i64>,
{
    let namespace_sql = sql("SELECT id, root_hash FROM ms_smt_namespaces WHERE name = ?1");
    let (ns, root_hash): (i64, Vec<u8>) = sqlx::query_as(sqlx::AssertSqlSafe(namespace_sql))
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("namespace");
    let rows_sql =
        sql("SELECT path, depth, body FROM ms_smt_strata WHERE ns = ?1 ORDER BY path, depth");
    let rows: Vec<(Vec<u8>, D, Vec<u8>)> = sqlx::query_as(sqlx::AssertSqlSafe(rows_sql))
        .bind(ns)
        .fetch_all(pool)
        .await
        .expect("rows");
    let rows = rows.into_iter().map(|(p, d, b)| (p, d.into(), b)).collect();
    (ns, root_hash, rows)
}

/// The campaign proper: `corruptions()` random corruptions of `$rows` (of
/// namespace `$ns`, named `$name`), each applied inside a transaction on
/// `$store` (statements turned into its dialect by `$sql`), checked by
/// [`check_corrupted`] through a cold handle in that transaction, and rolled
/// back.
macro_rules! corrupt_and_roll_back {
    ($store:expr, $L:ty, $seed:expr, $rows:expr, $root_hash:expr, $ns:expr, $name:expr, $model:expr, $tally:expr, $sql:expr) => {{
        let mut rng = StdRng::seed_from_u64($seed);
        let mut done = 0;
        while done < corruptions() {
            let Some(c) = draw(&mut rng, $rows) else {
                continue;
            };
            let keys = sample_keys(&mut rng, $model, CAMPAIGN_KEYS);
            let mut conn = $store.pool().acquire().await.expect("conn");
            let mut tx = conn.begin().await.expect("begin");
            for (sql, args) in statements(&c, $rows, $root_hash, $ns, $name) {
                let sql: String = ($sql)(sql);
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for a in args {
                    q = match a {
                        Arg::Int(v) => q.bind(v),
                        Arg::Blob(v) => q.bind(v),
                        Arg::Text(v) => q.bind(v),
                    };
                }
                q.execute(&mut *tx).await.expect("corrupt");
            }
            {
                let cold = $store.open_namespace($name).with_recent_nodes(0);
                let tree = Tree::<_, $L>::new(cold.in_transaction(&mut tx));
                check_corrupted(&tree, $model, &keys, &c, $tally).await;
            }
            tx.rollback().await.expect("rollback");
            done += 1;
        }
    }};
}

/// The tag of a campaign's keys: the same keys every run, so that the
/// seeded corruptions hit the same rows every run (keys from the
/// namespace's unique name would change the tree, its rows and so what
/// each seed corrupts).
const CAMPAIGN_KEYS: &str = "corrupt";

async fn sqlite_campaign<L: Layout>(store: &SqliteStore, tally: &mut Tally, seed: u64) {
    let name = unique("corrupt");
    let tree = Tree::<_, L>::new(store.open_namespace(&name));
    let model = build(&tree, CAMPAIGN_KEYS, leaves_for::<L>()).await;
    let (ns, root_hash, rows) = stored::<_, i64>(store.pool(), &name, str::to_owned).await;
    corrupt_and_roll_back!(
        store,
        L,
        seed,
        &rows,
        &root_hash,
        ns,
        &name,
        &model,
        tally,
        str::to_owned
    );
    // Every corruption was rolled back: the tree is whole again.
    assert_clean(&tree, &model, "sqlite after the campaign").await;
}

async fn pg_campaign<L: Layout>(store: &PostgresStore, tally: &mut Tally, seed: u64) {
    let name = unique("corrupt");
    let tree = Tree::<_, L>::new(store.open_namespace(&name));
    let model = build(&tree, CAMPAIGN_KEYS, leaves_for::<L>()).await;
    // Postgres keeps depths as INT.
    let (ns, root_hash, rows) = stored::<_, i32>(store.pool(), &name, to_pg).await;
    corrupt_and_roll_back!(
        store, L, seed, &rows, &root_hash, ns, &name, &model, tally, to_pg
    );
    assert_clean(&tree, &model, "postgres after the campaign").await;
}

/// A full tree keeps 65 rows per key path: a smaller tree keeps the
/// campaign quick.
fn leaves_for<L: Layout>() -> u64 {
    match L::KIND {
        LayoutKind::Full => 60,
        LayoutKind::Compacted => 240,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruptions_sqlite() {
    let file = TempDb::new("audit_corrupt");
    let store = SqliteStore::open(&file.path).await.expect("open");
    let mut tally = Tally::default();
    sqlite_campaign::<Compacted>(&store, &mut tally, 1).await;
    sqlite_campaign::<Full>(&store, &mut tally, 2).await;
    tally.check("sqlite");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruptions_postgres() {
    let Some(url) = pg_url("corruptions_postgres") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    let mut tally = Tally::default();
    pg_campaign::<Compacted>(&store, &mut tally, 3).await;
    pg_campaign::<Full>(&store, &mut tally, 4).await;
    tally.check("postgres");
}

// ---------------------------------------------------------------------------
// The hash-keyed layout (memory store)
// ---------------------------------------------------------------------------

#[tokio::test]
async fn corruptions_memory() {
    for kind in [LayoutKind::Full, LayoutKind::Compacted] {
        let store = MemoryStore::new();
        let mut scan = match kind {
            LayoutKind::Full => {
                let tree = Tree::<_, Full>::new(store.clone());
                build(&tree, "mem", 40).await;
                store.scan_nodes().unwrap()
            }
            LayoutKind::Compacted => {
                let tree = Tree::<_, Compacted>::new(store.clone());
                build(&tree, "mem", 120).await;
                store.scan_nodes().unwrap()
            }
        };
        // The memory store lists its nodes in hash-map order, which
        // differs from run to run: in hash order, the seeded rounds below
        // pick the same nodes every run.
        scan.nodes.sort_by_key(|n| n.0);
        assert!(audit_nodes(kind, &scan).is_clean());
        let mut rng = StdRng::seed_from_u64(5);
        let mut flagged = 0;
        for round in 0..500 {
            let mut bad = NodeScan {
                root: scan.root,
                nodes: scan.nodes.clone(),
                pinned: Vec::new(),
            };
            let i = rng.gen_range(0..bad.nodes.len());
            match round % 6 {
                0 => {
                    bad.nodes.remove(i);
                }
                1 => bad.nodes[i].2 += 1,
                2 => bad.nodes.push((
                    ms_smt_core::hash::sha256(&[round as u8, 1]),
                    Node::Leaf(Leaf::new(b"orphan".to_vec(), 1)),
                    1,
                )),
                3 => bad.root.sum ^= 1 << rng.gen_range(0..64),
                _ => {
                    let (_, node, _) = &mut bad.nodes[i];
                    *node = match node.clone() {
                        Node::Branch { left, right, sum } => Node::Branch {
                            left: right,
                            right: left,
                            sum,
                        },
                        Node::Leaf(l) => Node::Leaf(Leaf::new(l.value().to_vec(), l.sum() ^ 1)),
                        Node::Compacted { key, leaf } => Node::Compacted {
                            key,
                            leaf: Leaf::new([leaf.value(), b"x"].concat(), leaf.sum()),
                        },
                    };
                    if bad.nodes[i].1 == scan.nodes[i].1 {
                        continue;
                    }
                }
            }
            let report = audit_nodes(kind, &bad);
            assert!(!report.is_clean(), "{kind:?} round {round} went unnoticed");
            flagged += 1;
        }
        println!("memory {kind:?}: {flagged} corruptions flagged");
    }
}
