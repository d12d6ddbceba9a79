//! Contention across processes and connections on one namespace.
//!
//! * `sqlite_processes`: 4 processes (`MSSMT_CONTENTION_SQLITE_WRITERS`)
//!   write one SQLite file, each with its own `SqliteStore::open` (the
//!   store's defaults: WAL, `synchronous=FULL`, 60 s busy timeout).
//! * `postgres_connections`: 8 processes (`MSSMT_CONTENTION_PG_WRITERS`),
//!   each with a pool of exactly one connection, on `MSSMT_PG_URL`.
//!
//! The writers are this test binary re-executed (`--exact <test>` with
//! `MSSMT_CONTENTION_CHILD` set). They open their stores, report ready,
//! and start together when the parent says go. Each writes
//! `MSSMT_CONTENTION_BATCHES` (20) batches of mixed sizes (1-10, 11-100,
//! 101-500 keys) over its own keys (replacements and deletes of its own
//! earlier keys included; every batch inserts at least one new key, so
//! every batch moves the root), and prints the root each `insert_many`
//! returned, then its store's `conflicts` counter.
//!
//! Checks: no error reaches any writer ("database is locked" included);
//! the acknowledged roots form one serial history (there is an order of
//! all batches, consistent with each writer's own order, in which the
//! root after every batch is the root that batch acknowledged); the final
//! stored root is the root of that serial replay on a `MemoryStore`; every
//! key reads back; the audit is clean; at least one conflict (a commit
//! refused because another writer moved the root) was seen.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use ms_smt_test_support as support;

use std::collections::HashMap;
use std::io::BufRead;
use std::process::Stdio;
use std::str::FromStr;
use std::time::{Duration, Instant};

use ms_smt::store::{AuditStore, MemoryStore, Writable};

use ms_smt::{CompactedTree, ComputedNode, Key, Leaf};
use ms_smt_sql::{PostgresStore, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use support::child::{
    Target, child_command, child_spec, count_from_env, say, seed_from_env, test_name,
};
use support::{TempDb, hkey, pg_url, unique};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Set in a writer's environment: its [`ChildSpec`] as JSON.
const CHILD_ENV: &str = "MSSMT_CONTENTION_CHILD";
/// How long a run may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(600);

/// Batch `b` of writer `w`: its own keys only.
fn batch(seed: u64, w: u64, b: u64) -> Vec<(Key, Leaf)> {
    let mut rng = StdRng::seed_from_u64(seed ^ (w << 40) ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let tag = format!("contention-{seed}-w{w}");
    let n = match rng.gen_range(0..10) {
        0..3 => rng.gen_range(1..=10),
        3..7 => rng.gen_range(11..=100),
        _ => rng.gen_range(101..=500),
    };
    let mut out = vec![(
        hkey(&format!("{tag}-fresh"), b),
        Leaf::new(format!("fresh {b}").into_bytes(), 1 + b),
    )];
    for j in 1..n {
        let key = hkey(&tag, rng.gen_range(0..3_000));
        let leaf = if rng.gen_ratio(1, 10) {
            Leaf::empty()
        } else {
            let value = format!("w{w} b{b} j{j} {}", rng.gen_range(0..u32::MAX));
            Leaf::new(value.into_bytes(), rng.gen_range(1..1_000_000))
        };
        out.push((key, leaf));
    }
    out
}

// ---------------------------------------------------------------------------
// The writer
// ---------------------------------------------------------------------------

#[derive(Serialize, Deserialize, Debug, Clone)]
struct ChildSpec {
    target: Target,
    namespace: String,
    seed: u64,
    writer: u64,
    batches: u64,
}

/// Runs the writer when this process is one; returns false in the parent.
async fn child_mode() -> bool {
    let Some(spec) = child_spec::<ChildSpec>(CHILD_ENV) else {
        return false;
    };
    match &spec.target {
        Target::Sqlite(path) => match SqliteStore::open(path).await {
            Ok(store) => {
                child_loop(
                    CompactedTree::new(store.open_namespace(&spec.namespace)),
                    &spec,
                )
                .await
            }
            Err(e) => say(&format!("ERR open {e} | {e:?}")),
        },
        Target::Postgres(url) => {
            let options = PgConnectOptions::from_str(url)
                .expect("url")
                .options([("jit", "off")]);
            match PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
            {
                Ok(pool) => {
                    let store = PostgresStore::from_pool(pool, &spec.namespace);
                    child_loop(CompactedTree::new(store), &spec).await
                }
                Err(e) => say(&format!("ERR open {e} | {e:?}")),
            }
        }
    }
    std::process::exit(0);
}

async fn child_loop<S: Writable + AuditStore>(tree: CompactedTree<S>, spec: &ChildSpec) {
    // A newline first: libtest has printed "test <name> ... " without one.
    say("\nREADY");
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go).expect("stdin");
    if go.trim() != "GO" {
        return;
    }
    for b in 0..spec.batches {
        let before = tree.store().stats().conflicts;
        match tree.insert_many(batch(spec.seed, spec.writer, b)).await {
            Ok(root) => say(&format!(
                "ACK {b} {} {} {}",
                root.hash,
                root.sum,
                tree.store().stats().conflicts - before
            )),
            Err(e) => {
                say(&format!("ERR {b} {e} | {e:?}"));
                break;
            }
        }
    }
    let stats = tree.store().stats();
    say(&format!(
        "DONE {} {} {}",
        stats.conflicts, stats.round_trips, stats.nodes_written
    ));
}

// ---------------------------------------------------------------------------
// The parent
// ---------------------------------------------------------------------------

/// What one writer said.
#[derive(Debug, Default)]
struct Report {
    acks: Vec<(u64, String, u64)>,
    errors: Vec<String>,
    conflicts: u64,
    /// The most conflicts one batch met before it committed.
    most_retried: u64,
    round_trips: u64,
    done: bool,
}

fn parse(lines: &[String]) -> Report {
    let mut r = Report::default();
    for line in lines {
        let mut parts = line.split(' ');
        match parts.next() {
            Some("ACK") => {
                let b = parts.next().and_then(|s| s.parse().ok()).expect("ACK b");
                let hash = parts.next().expect("ACK root").to_string();
                let sum = parts.next().and_then(|s| s.parse().ok()).expect("ACK sum");
                let conflicts: u64 = parts
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("ACK conflicts");
                r.most_retried = r.most_retried.max(conflicts);
                r.acks.push((b, hash, sum));
            }
            Some("ERR") => r.errors.push(line.clone()),
            Some("DONE") => {
                r.conflicts = parts.next().and_then(|s| s.parse().ok()).expect("DONE");
                r.round_trips = parts.next().and_then(|s| s.parse().ok()).expect("DONE");
                r.done = true;
            }
            _ => {}
        }
    }
    r
}

/// Runs `writers` writers on `target` and returns their reports.
async fn run_writers(
    test: &str,
    target: Target,
    namespace: &str,
    seed: u64,
    writers: u64,
    batches: u64,
) -> Vec<Report> {
    let mut children = Vec::new();
    for w in 0..writers {
        let spec = ChildSpec {
            target: target.clone(),
            namespace: namespace.to_string(),
            seed,
            writer: w,
            batches,
        };
        let mut child = child_command(
            CHILD_ENV,
            &spec,
            &test_name(module_path!(), test),
            Stdio::piped(),
        )
        .spawn()
        .expect("spawn writer");
        let stdin = child.stdin.take().expect("stdin");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        // Wait until it is ready.
        loop {
            let line = tokio::time::timeout(HANG, lines.next_line())
                .await
                .expect("writer silent")
                .expect("read writer");
            match line {
                Some(l) if l == "READY" => break,
                Some(l) if l.starts_with("ERR") => panic!("{test}: writer {w} failed to open: {l}"),
                Some(_) => {}
                None => panic!("{test}: writer {w} exited before READY"),
            }
        }
        children.push((child, stdin, lines));
    }
    // All at once.
    let mut readers = Vec::new();
    for (mut child, mut stdin, mut lines) in children {
        stdin.write_all(b"GO\n").await.expect("GO");
        stdin.flush().await.expect("GO");
        readers.push(tokio::spawn(async move {
            let mut said = Vec::new();
            while let Some(line) = lines.next_line().await.expect("read writer") {
                said.push(line);
            }
            let status = child.wait().await.expect("wait writer");
            (status, said)
        }));
    }
    let mut reports = Vec::new();
    for (w, reader) in readers.into_iter().enumerate() {
        let (status, said) = tokio::time::timeout(HANG, reader)
            .await
            .unwrap_or_else(|_| panic!("{test}: writer {w} still running after {HANG:?} (hang)"))
            .expect("reader task");
        let report = parse(&said);
        assert!(
            status.success() && report.done || !report.errors.is_empty(),
            "{test}: writer {w} exited with {status} without finishing: {said:?}"
        );
        reports.push(report);
    }
    reports
}

/// Finds the serial order of all acknowledged batches (each writer's in
/// its own order) in which every batch's root is the one it acknowledged,
/// replaying on a memory store; returns the final root, every key written
/// with its final leaf, and how often consecutive commits came from
/// different writers.
async fn serial_replay(
    test: &str,
    seed: u64,
    reports: &[Report],
) -> (ComputedNode, HashMap<Key, Leaf>, usize) {
    let tree = CompactedTree::new(MemoryStore::new());
    let mut leaves: HashMap<Key, Leaf> = HashMap::new();
    let mut next = vec![0usize; reports.len()];
    let total: usize = reports.iter().map(|r| r.acks.len()).sum();
    let mut root = ComputedNode::empty_root();
    let mut last_writer = None;
    let mut switches = 0;
    for step in 0..total {
        let mut found = None;
        for (w, report) in reports.iter().enumerate() {
            let Some((b, hash, sum)) = report.acks.get(next[w]) else {
                continue;
            };
            let batch = batch(seed, w as u64, *b);
            let undo: Vec<(Key, Leaf)> = batch
                .iter()
                .map(|(k, _)| (*k, leaves.get(k).cloned().unwrap_or_default()))
                .collect();
            let after = tree.insert_many(batch.clone()).await.expect("memory");
            if after.hash.to_hex() == *hash && after.sum == *sum {
                leaves.extend(batch);
                root = after;
                found = Some(w);
                break;
            }
            let back = tree.insert_many(undo).await.expect("memory undo");
            assert_eq!(back, root, "memory undo");
        }
        let Some(w) = found else {
            let pending: Vec<_> = reports
                .iter()
                .enumerate()
                .filter_map(|(w, r)| r.acks.get(next[w]).map(|a| (w, a.0, a.1.clone())))
                .collect();
            panic!(
                "{test}: after {step} of {total} batches in serial order (root {root:?}) no writer's \
                 next acknowledged root follows: {pending:?}"
            );
        };
        if last_writer.is_some_and(|l| l != w) {
            switches += 1;
        }
        last_writer = Some(w);
        next[w] += 1;
    }
    (root, leaves, switches)
}

/// Everything after the writers are done.
async fn check_final<S: Writable + AuditStore>(
    test: &str,
    tree: &CompactedTree<S>,
    seed: u64,
    reports: &[Report],
    started: Instant,
) {
    let errors: Vec<&String> = reports.iter().flat_map(|r| &r.errors).collect();
    let locked = errors.iter().filter(|e| e.contains("locked")).count();
    assert!(
        errors.is_empty(),
        "{test}: {} errors reached writers ({locked} 'database is locked'): {errors:#?}",
        errors.len()
    );
    let (root, leaves, switches) = serial_replay(test, seed, reports).await;
    let stored = tree.root().await.expect("root");
    assert_eq!(
        stored, root,
        "{test}: the final tree is not the serial replay of the acknowledged batches"
    );
    let keys: Vec<Key> = leaves.keys().copied().collect();
    for chunk in keys.chunks(4096) {
        let got = tree.get_many(chunk).await.expect("get_many");
        for (key, leaf) in chunk.iter().zip(&got) {
            assert_eq!(
                Some(leaf),
                leaves.get(key),
                "{test}: key {key:?} reads back wrong"
            );
        }
    }
    let live = leaves.values().filter(|l| !l.is_empty()).count() as u64;
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{test}: audit: {:?}", report.problems);
    assert_eq!(report.leaves, live, "{test}: audit leaf count");
    let batches: usize = reports.iter().map(|r| r.acks.len()).sum();
    let sizes: usize = reports
        .iter()
        .enumerate()
        .flat_map(|(w, r)| r.acks.iter().map(move |a| batch(seed, w as u64, a.0).len()))
        .sum();
    let conflicts: Vec<u64> = reports.iter().map(|r| r.conflicts).collect();
    let total: u64 = conflicts.iter().sum();
    let most = reports.iter().map(|r| r.most_retried).max().unwrap_or(0);
    println!(
        "{test}: {} writers, {batches} batches ({sizes} writes) acknowledged and replayed serially \
         ({switches} writer switches), final tree {live} leaves, audit clean, 0 errors; \
         conflicts {total} (per writer {conflicts:?}; at most {most} for one batch, after {} \
         a write takes the namespace lock); seed {seed}; {:.1} s",
        reports.len(),
        ms_smt::EXCLUSIVE_AFTER,
        started.elapsed().as_secs_f64()
    );
    assert!(
        total >= 1,
        "{test}: no conflict seen; the writers did not overlap"
    );
    // A write that lost EXCLUSIVE_AFTER races takes the lock and cannot
    // lose again: no batch starves behind faster writers.
    assert!(
        most <= u64::from(ms_smt::EXCLUSIVE_AFTER),
        "{test}: a batch lost {most} races; the lock fallback did not hold"
    );
}

/// `writers` child processes write `MSSMT_CONTENTION_BATCHES` (default 20)
/// batches each into a fresh namespace of `target`; the final tree, read
/// through `store_of(namespace)`, must hold every acknowledged batch.
async fn contend<S: Writable + AuditStore>(
    test: &str,
    target: Target,
    writers: u64,
    store_of: impl Fn(&str) -> S,
    started: Instant,
) {
    let namespace = unique("contention");
    let seed = seed_from_env("MSSMT_CONTENTION_SEED");
    // Printed now, so that a failure shows it (the summary comes last).
    eprintln!("{test}: seed {seed} (re-run with MSSMT_CONTENTION_SEED={seed})");
    let batches = count_from_env("MSSMT_CONTENTION_BATCHES", 20);
    let reports = run_writers(test, target, &namespace, seed, writers, batches).await;
    let tree = CompactedTree::new(store_of(&namespace));
    check_final(test, &tree, seed, &reports, started).await;
}

#[tokio::test]
async fn sqlite_processes() {
    if child_mode().await {
        return;
    }
    let started = Instant::now();
    let file = TempDb::new("contention");
    let store = SqliteStore::open(&file.path).await.expect("create");
    let writers = count_from_env("MSSMT_CONTENTION_SQLITE_WRITERS", 4);
    let target = Target::Sqlite(file.path.clone());
    contend(
        "sqlite_processes",
        target,
        writers,
        |ns| store.open_namespace(ns),
        started,
    )
    .await;
}

#[tokio::test]
async fn postgres_connections() {
    if child_mode().await {
        return;
    }
    let Some(url) = pg_url("postgres_connections") else {
        return;
    };
    let started = Instant::now();
    let store = PostgresStore::connect(&url).await.expect("connect");
    let writers = count_from_env("MSSMT_CONTENTION_PG_WRITERS", 8);
    let target = Target::Postgres(url);
    contend(
        "postgres_connections",
        target,
        writers,
        |ns| store.open_namespace(ns),
        started,
    )
    .await;
}
