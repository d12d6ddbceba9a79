//! Crash tests of the store-wide writer with real processes: submissions
//! spread over many trees under a parent tree.
//!
//! A child process (this test binary, re-executed with `--exact <test>`
//! and `MSSMT_CRASH_FOREST_CHILD` set) runs a
//! [`ForestWriter`](ms_smt::ForestWriter) over 16 trees linked under one
//! parent, with 64 submitter tasks each submitting one new leaf at a time
//! (task `t` to tree `t mod 16`), and prints `ACK n` once submission `n`
//! is acknowledged. The parent SIGKILLs it 20 to 600 ms after its first
//! acknowledgement and checks on fresh handles: every acknowledged leaf
//! reads back in its tree, every parent leaf equals its child's root (no
//! half-applied group is visible), and every tree audits clean. The next
//! child continues on the same trees with new keys.
//!
//! * `forest_sqlite_sigkill`: SQLite with the store's default durability.
//! * `forest_postgres_sigkill`: the client killed, on `MSSMT_PG_URL`.
//!
//! Counts: `MSSMT_CRASH_FOREST_KILLS` (default 8 per engine; the
//! reliability figures use 100). The kill times come from
//! `MSSMT_CRASH_FOREST_SEED` (printed; random when unset).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use ms_smt_test_support as support;

use std::process::Stdio;
use std::time::Duration;

use ms_smt::store::{AuditStore, ForestStore, Writable};

use ms_smt::{Compacted, Forest, Key, Leaf, Link, WriterConfig};
use ms_smt_sql::{PostgresStore, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use support::child::{
    Target, child_command, child_spec, count_from_env, say, seed_from_env, test_name,
};
use support::{TempDb, assert_audit_clean, hkey, pg_url, unique};
use tokio::io::{AsyncBufReadExt, BufReader};

const CHILD_ENV: &str = "MSSMT_CRASH_FOREST_CHILD";
const SUBMITTERS: u64 = 64;
const TREES: u64 = 16;

#[derive(Serialize, Deserialize, Debug, Clone)]
struct ChildSpec {
    target: Target,
    run: String,
    round: u64,
}

fn kills() -> usize {
    count_from_env("MSSMT_CRASH_FOREST_KILLS", 8)
}

/// The forest of a run: trees `{run}/t{i}` under the parent `{run}`.
fn forest<S: ForestStore>(store: S, run: &str) -> Forest<S, Compacted> {
    let prefix = format!("{run}/t");
    Forest::new(store).with_link(Link::rule(run, move |name| {
        name.starts_with(&prefix)
            .then(|| Key(ms_smt_core::hash::sha256(name.as_bytes()).0))
    }))
}

/// Submission `n`'s tree, key and leaf.
fn write(run: &str, n: u64) -> (String, Key, Leaf) {
    let tree = format!("{run}/t{}", (n / 1_000_000) % TREES);
    (
        tree,
        hkey(run, n),
        Leaf::new(n.to_le_bytes().to_vec(), n % 1_000 + 1),
    )
}

/// Runs the child when this process is one; returns false in the parent.
async fn child_mode() -> bool {
    let Some(spec) = child_spec::<ChildSpec>(CHILD_ENV) else {
        return false;
    };
    match &spec.target {
        Target::Sqlite(path) => match SqliteStore::open(path).await {
            Ok(store) => child_loop(store, &spec).await,
            Err(e) => say(&format!("ERR open {e:?}")),
        },
        Target::Postgres(url) => match PostgresStore::connect(url).await {
            Ok(store) => child_loop(store, &spec).await,
            Err(e) => say(&format!("ERR open {e:?}")),
        },
    }
    std::process::exit(2);
}

/// 64 submitters of one new leaf each over the trees, until killed.
async fn child_loop<S>(store: S, spec: &ChildSpec)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let writer = forest(store, &spec.run).writer(WriterConfig::default());
    // A newline first: libtest has printed "test <name> ... " without one.
    say("\nREADY");
    let mut tasks = Vec::new();
    for t in 0..SUBMITTERS {
        let (writer, spec) = (writer.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0.. {
                let n = spec.round * 100_000_000 + t * 1_000_000 + i;
                match writer.submit([write(&spec.run, n)]).await {
                    Ok(_) => say(&format!("ACK {n}")),
                    Err(e) => {
                        say(&format!("ERR {n} {e}"));
                        return;
                    }
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// Kills `kills()` children writing to `target`; returns the acknowledged
/// submissions checked.
async fn campaign<S>(test: &str, target: Target, fresh: impl Fn() -> S) -> usize
where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    let run = unique("crash-forest");
    let seed = seed_from_env("MSSMT_CRASH_FOREST_SEED");
    eprintln!("{test}: seed {seed} (replay with MSSMT_CRASH_FOREST_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut acked: Vec<u64> = Vec::new();
    for round in 0..kills() as u64 {
        let spec = ChildSpec {
            target: target.clone(),
            run: run.clone(),
            round,
        };
        let mut child = child_command(
            CHILD_ENV,
            &spec,
            &test_name(module_path!(), test),
            Stdio::null(),
        )
        .spawn()
        .expect("spawn child");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .expect("child ready within 60 s")
                .expect("read")
                .expect("child ready");
            if line == "READY" {
                break;
            }
            assert!(!line.starts_with("ERR"), "child: {line}");
        }
        let mut before = 0;
        while before == 0 {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .expect("an acknowledgement within 60 s")
                .expect("read")
                .expect("child acknowledges");
            record(&line, &mut acked, &mut before);
        }
        let run_for = Duration::from_millis(rng.gen_range(20..600));
        let deadline = tokio::time::Instant::now() + run_for;
        loop {
            match tokio::time::timeout_at(deadline, lines.next_line()).await {
                Err(_) => break,
                Ok(line) => match line.expect("read") {
                    Some(line) => record(&line, &mut acked, &mut before),
                    None => panic!("child exited before it was killed"),
                },
            }
        }
        child.start_kill().expect("SIGKILL");
        child.wait().await.expect("wait");
        // What it printed before dying was acknowledged before it died.
        while let Some(line) = lines.next_line().await.expect("read") {
            record(&line, &mut acked, &mut before);
        }
        check(
            &forest(fresh(), &run),
            &run,
            &acked,
            &format!("{test} round {round} (seed {seed})"),
        )
        .await;
        eprintln!(
            "{test} round {round}: killed {run_for:?} after the first acknowledgement, {before} acknowledged this round, {} in all, all read back, links clean",
            acked.len()
        );
    }
    acked.len()
}

/// Every acknowledged leaf reads back, the parent matches every child,
/// every tree audits clean.
async fn check<S>(forest: &Forest<S, Compacted>, run: &str, acked: &[u64], what: &str)
where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    for t in 0..TREES {
        let name = format!("{run}/t{t}");
        let mine: Vec<(Key, Leaf)> = acked
            .iter()
            .map(|n| write(run, *n))
            .filter(|(tree, _, _)| *tree == name)
            .map(|(_, k, l)| (k, l))
            .collect();
        let tree = forest.tree(&name).expect("tree");
        let keys: Vec<Key> = mine.iter().map(|(k, _)| *k).collect();
        let got = tree.get_many(&keys).await.expect("read back");
        for ((key, want), leaf) in mine.iter().zip(&got) {
            assert_eq!(
                leaf, want,
                "{what}: acknowledged leaf {key:?} of {name} lost"
            );
        }
        assert_audit_clean(&tree, &format!("{what}: {name}")).await;
    }
    assert_audit_clean(
        &forest.tree(run).expect("parent"),
        &format!("{what}: parent"),
    )
    .await;
    let links = forest.audit_links().await.expect("audit links");
    assert!(links.is_clean(), "{what}: {:?}", links.problems);
}

fn record(line: &str, acked: &mut Vec<u64>, count: &mut usize) {
    if let Some(n) = line.strip_prefix("ACK ") {
        acked.push(n.parse().expect("ACK n"));
        *count += 1;
    } else {
        assert!(!line.starts_with("ERR"), "child: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forest_sqlite_sigkill() {
    if child_mode().await {
        return;
    }
    let file = TempDb::new("crash-forest");
    let store = SqliteStore::open(&file.path).await.expect("open");
    let total = campaign(
        "forest_sqlite_sigkill",
        Target::Sqlite(file.path.clone()),
        || store.clone().with_recent_nodes(0),
    )
    .await;
    println!(
        "forest_sqlite_sigkill: {} kills, {total} acknowledged submissions over {TREES} trees and a parent, 0 lost, 0 parent/child mismatches",
        kills()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forest_postgres_sigkill() {
    if child_mode().await {
        return;
    }
    let Some(url) = pg_url("forest_postgres_sigkill") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    let total = campaign("forest_postgres_sigkill", Target::Postgres(url), || {
        store.clone().with_recent_nodes(0)
    })
    .await;
    println!(
        "forest_postgres_sigkill: {} kills, {total} acknowledged submissions over {TREES} trees and a parent, 0 lost, 0 parent/child mismatches",
        kills()
    );
}
