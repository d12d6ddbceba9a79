//! Crash tests of the coalescing writer with real processes.
//!
//! A child process (this test binary, re-executed with `--exact <test>` and
//! `MSSMT_CRASH_WRITER_CHILD` set) runs a [`Writer`](ms_smt::Writer) with 64
//! submitter tasks, each submitting one new leaf at a time, and prints
//! `ACK n` once submission `n` is acknowledged. The parent SIGKILLs it 20 to
//! 600 ms after its first acknowledgement (groups are then being planned, committed and
//! answered), reads everything it printed, and checks on a fresh handle:
//! every acknowledged leaf reads back, and the audit is clean. The next
//! child continues on the same namespace with new keys.
//!
//! * `writer_sqlite_sigkill`: SQLite with the store's default durability
//!   (WAL, `synchronous=FULL`).
//! * `writer_postgres_sigkill`: the client killed, on `MSSMT_PG_URL`.
//!
//! Counts: `MSSMT_CRASH_WRITER_KILLS` (default 8 per engine; the
//! reliability figures use 100). The kill delays come from a printed seed;
//! `MSSMT_TEST_SEED` replays them.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use ms_smt_test_support as support;

use std::process::Stdio;
use std::time::Duration;

use ms_smt::store::{AuditStore, BulkStore, Writable};

use ms_smt::{CompactedTree, Key, Leaf, WriterConfig};
use ms_smt_sql::{PostgresStore, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use support::child::{ChildStore, Target, child_command, child_spec, say, test_name};
use support::{TempDb, assert_audit_clean, hkey, pg_url, test_seed, unique};
use tokio::io::{AsyncBufReadExt, BufReader};

const CHILD_ENV: &str = "MSSMT_CRASH_WRITER_CHILD";
const SUBMITTERS: u64 = 64;

#[derive(Serialize, Deserialize, Debug, Clone)]
struct ChildSpec {
    target: Target,
    namespace: String,
    round: u64,
}

fn kills() -> usize {
    std::env::var("MSSMT_CRASH_WRITER_KILLS")
        .ok()
        .filter(|v| !v.is_empty())
        .map_or(8, |v| {
            v.parse().expect("MSSMT_CRASH_WRITER_KILLS is a count")
        })
}

/// Submission `n`'s key and leaf.
fn pair(namespace: &str, n: u64) -> (Key, Leaf) {
    (
        hkey(namespace, n),
        Leaf::new(n.to_le_bytes().to_vec(), n % 1_000 + 1),
    )
}

/// Runs the child when this process is one; returns false in the parent.
async fn child_mode() -> bool {
    let Some(spec) = child_spec::<ChildSpec>(CHILD_ENV) else {
        return false;
    };
    match spec.target.open(&spec.namespace).await {
        Ok(ChildStore::Sqlite(store)) => child_loop(store, &spec).await,
        Ok(ChildStore::Postgres(store)) => child_loop(store, &spec).await,
        Err(e) => say(&format!("ERR open {e:?}")),
    }
    std::process::exit(2);
}

/// 64 submitters of one new leaf each, until killed.
async fn child_loop<S: Writable + AuditStore + Clone + 'static>(store: S, spec: &ChildSpec) {
    let tree = CompactedTree::new(store);
    let writer = tree.writer(WriterConfig::default());
    // A newline first: libtest has printed "test <name> ... " without one.
    say("\nREADY");
    let mut tasks = Vec::new();
    for t in 0..SUBMITTERS {
        let (writer, spec) = (writer.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0.. {
                let n = spec.round * 100_000_000 + t * 1_000_000 + i;
                match writer.submit([pair(&spec.namespace, n)]).await {
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

/// Kills `rounds` children writing to `target`; returns the acknowledged
/// submissions checked.
async fn campaign<S: BulkStore + AuditStore>(
    test: &str,
    target: Target,
    fresh: impl Fn() -> S,
) -> usize {
    let namespace = unique("crash-writer");
    let mut acked: Vec<u64> = Vec::new();
    // The kill delays, from a printed seed (`MSSMT_TEST_SEED` replays them).
    let mut rng = StdRng::seed_from_u64(test_seed());
    for round in 0..kills() as u64 {
        let spec = ChildSpec {
            target: target.clone(),
            namespace: namespace.clone(),
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
        // The kill comes 20-600 ms after the first acknowledgement, while
        // groups are being planned, committed and answered.
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
        let tree = CompactedTree::new(fresh().open_namespace(&namespace).expect("namespace"));
        let keys: Vec<Key> = acked.iter().map(|n| pair(&namespace, *n).0).collect();
        let got = tree.get_many(&keys).await.expect("read back");
        for (n, leaf) in acked.iter().zip(&got) {
            assert_eq!(
                *leaf,
                pair(&namespace, *n).1,
                "{test} round {round}: acknowledged submission {n} lost"
            );
        }
        assert_audit_clean(&tree, &format!("{test} round {round}")).await;
        eprintln!(
            "{test} round {round}: killed {run_for:?} after the first acknowledgement, {before} acknowledged this round, {} in all, all read back",
            acked.len()
        );
    }
    acked.len()
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
async fn writer_sqlite_sigkill() {
    if child_mode().await {
        return;
    }
    let file = TempDb::new("crash-writer");
    let store = SqliteStore::open(&file.path).await.expect("open");
    let total = campaign(
        "writer_sqlite_sigkill",
        Target::Sqlite(file.path.clone()),
        || store.clone().with_recent_nodes(0),
    )
    .await;
    println!(
        "writer_sqlite_sigkill: {} kills, {total} acknowledged submissions, 0 lost",
        kills()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_postgres_sigkill() {
    if child_mode().await {
        return;
    }
    let Some(url) = pg_url("writer_postgres_sigkill") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    let total = campaign("writer_postgres_sigkill", Target::Postgres(url), || {
        store.clone().with_recent_nodes(0)
    })
    .await;
    println!(
        "writer_postgres_sigkill: {} kills, {total} acknowledged submissions, 0 lost",
        kills()
    );
}
