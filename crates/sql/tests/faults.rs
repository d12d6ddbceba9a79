//! Faults in the write path (cargo feature `failpoints`): every failpoint
//! of a commit (`ms_smt_sql::failpoint::POINTS`) × {error, panic} × {SQLite,
//! Postgres} × {pool store, caller's transaction}.
//!
//! Pass: an Ok only for a batch that is durable (read back through another
//! connection); errors are typed (`SqlStoreError::Injected`); the stored
//! root is the old one, or the new one only when COMMIT had returned; the
//! audit is clean; and once the fault is gone the next write succeeds.
#![cfg(all(feature = "failpoints", feature = "sqlite", feature = "postgres"))]

// The writer and forest tests, like the fault tests, arm the SQL write
// path's failpoints: say so rather than skip them.
#[cfg(not(feature = "failpoints"))]
compile_error!(
    "the fault tests need `--features failpoints` (scripts/test.sh passes --all-features)"
);

use ms_smt_test_support as support;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use ms_smt::store::{AuditStore, Writable};
use ms_smt::{CompactedTree, ComputedNode, Key, Leaf, TreeError};
use ms_smt_sql::failpoint::{Action, POINTS, arm, disarm};
use ms_smt_sql::{PostgresStore, SqlStoreError, SqliteStore};
use sqlx::Connection;
use support::{TempDb, hkey, pg_url, root_of, unique};

/// Polls a future, turning a panic into `Err(())`.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

fn batch(tag: &str, round: u64) -> Vec<(Key, Leaf)> {
    (0..40)
        .map(|i| {
            let leaf = Leaf::new(format!("{round}/{i}").into_bytes(), round * 100 + i + 1);
            (hkey(tag, (round * 13 + i) % 200), leaf)
        })
        .collect()
}

/// Seeds the tree of namespace `ns` with its first batch; returns the
/// batches applied so far, the batch the fault will hit, and the roots
/// before and after that batch.
async fn seed<S: Writable + AuditStore>(
    tree: &CompactedTree<S>,
    ns: &str,
) -> (
    Vec<Vec<(Key, Leaf)>>,
    Vec<(Key, Leaf)>,
    ComputedNode,
    ComputedNode,
) {
    let applied = vec![batch(ns, 0)];
    tree.insert_many(applied[0].clone()).await.expect("seed");
    let old = root_of(&applied).await;
    let b = batch(ns, 1);
    let new = root_of(&[applied[0].clone(), b.clone()]).await;
    (applied, b, old, new)
}

/// Once the fault is gone: the audit is clean and the next write succeeds
/// on top of the `applied` batches.
async fn recovers<S: Writable + AuditStore>(
    tree: &CompactedTree<S>,
    ns: &str,
    what: &str,
    mut applied: Vec<Vec<(Key, Leaf)>>,
) {
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{what}: {:?}", report.problems);
    let next = batch(ns, 2);
    tree.insert_many(next.clone())
        .await
        .expect("the next write");
    applied.push(next);
    assert_eq!(
        tree.root().await.expect("root"),
        root_of(&applied).await,
        "{what}"
    );
}

/// What a faulted write returned.
#[derive(Debug)]
enum Outcome {
    Ok,
    Injected,
    Panicked,
}

fn outcome<T: std::fmt::Debug>(
    r: Result<Result<T, TreeError<SqlStoreError>>, ()>,
    what: &str,
) -> Outcome {
    match r {
        Ok(Ok(_)) => Outcome::Ok,
        Ok(Err(TreeError::Store(SqlStoreError::Injected { .. }))) => Outcome::Injected,
        Ok(Err(e)) => panic!("{what}: an untyped or unexpected error: {e:?}"),
        Err(()) => Outcome::Panicked,
    }
}

/// Checks what a fault at `point` left, given the root a fresh handle reads.
fn check_root(
    what: &str,
    point: &str,
    out: &Outcome,
    root: ComputedNode,
    old: ComputedNode,
    new: ComputedNode,
) -> bool {
    match out {
        Outcome::Ok => {
            assert_eq!(root, new, "{what}: Ok for a batch that is not durable");
            true
        }
        _ if point == "after_commit" => {
            assert_eq!(
                root, new,
                "{what}: COMMIT returned, the batch must be durable"
            );
            true
        }
        _ => {
            assert_eq!(
                root, old,
                "{what}: a failed write left a root that is neither"
            );
            false
        }
    }
}

/// Runs every point and action on the pool store `make(ns)` gives.
async fn pool_faults<S: Writable<Error = SqlStoreError> + AuditStore + NoMemory + 'static>(
    store_name: &str,
    make: impl Fn(&str) -> S,
) -> usize {
    let mut faults = 0;
    for point in POINTS {
        for action in [Action::Error, Action::Panic] {
            let ns = unique(&format!("{store_name}-{point}"));
            let what = format!("{store_name} pool {point} {action:?}");
            let tree = CompactedTree::new(make(&ns));
            let (mut applied, b, old, new) = seed(&tree, &ns).await;
            arm(&ns, point, action);
            let faulted = CompactedTree::new(make(&ns));
            let out = faulted_write(&faulted, &b, &what).await;
            disarm(&ns);
            let fresh = CompactedTree::new(make(&ns).with_no_memory());
            let root = fresh.root().await.expect("root");
            if check_root(&what, point, &out, root, old, new) {
                applied.push(b);
            }
            recovers(&fresh, &ns, &what, applied).await;
            faults += 1;
        }
    }
    faults
}

/// A handle that remembers nothing, so reads go to the database.
trait NoMemory {
    fn with_no_memory(self) -> Self;
}
impl NoMemory for SqliteStore {
    fn with_no_memory(self) -> Self {
        self.with_recent_nodes(0)
    }
}
impl NoMemory for PostgresStore {
    fn with_no_memory(self) -> Self {
        self.with_recent_nodes(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_sqlite_pool() {
    let file = TempDb::new("faults");
    let store = SqliteStore::open(&file.path).await.expect("open");
    let n = pool_faults("sqlite", |ns| store.open_namespace(ns)).await;
    println!("sqlite pool store: {n} faults, all clean");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_postgres_pool() {
    let Some(url) = pg_url("faults_postgres_pool") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    let n = pool_faults("postgres", |ns| store.open_namespace(ns)).await;
    println!("postgres pool store: {n} faults, all clean");
}

/// The points a write inside the caller's transaction passes (the pool
/// store's own BEGIN and COMMIT are the caller's there).
const TX_POINTS: [&str; 3] = ["root_checked", "merged", "written"];

/// Runs every point of [`TX_POINTS`] and action in the caller's
/// transaction, on namespaces of the pool store `make(ns)` gives.
/// `write_in_tx(ns, what, batch)` writes `batch` through a store in a host
/// transaction (see [`write_in_tx`]) and has the host commit, returning what
/// the write returned; `check(what, outcome, root, old, new)` checks the
/// root read after the commit.
async fn host_tx_faults<S: Writable + AuditStore + NoMemory>(
    (tag, label): (&str, &str),
    make: impl Fn(&str) -> S,
    check: impl Fn(&str, &Outcome, ComputedNode, ComputedNode, ComputedNode),
    write_in_tx: impl AsyncFn(&str, &str, &[(Key, Leaf)]) -> Outcome,
) {
    let mut faults = 0;
    for point in TX_POINTS {
        for action in [Action::Error, Action::Panic] {
            let ns = unique(&format!("{tag}-{point}"));
            let what = format!("{label} {point} {action:?}");
            let tree = CompactedTree::new(make(&ns).with_no_memory());
            let (mut applied, b, old, new) = seed(&tree, &ns).await;
            arm(&ns, point, action);
            let out = write_in_tx(&ns, &what, &b).await;
            let root = tree.root().await.expect("root");
            check(&what, &out, root, old, new);
            if root == new {
                applied.push(b);
            }
            recovers(&tree, &ns, &what, applied).await;
            faults += 1;
        }
    }
    println!("{label}: {faults} faults, all clean");
}

/// `batch` written through `tree`, with a panic caught.
async fn faulted_write<S: Writable<Error = SqlStoreError> + AuditStore>(
    tree: &CompactedTree<S>,
    batch: &[(Key, Leaf)],
    what: &str,
) -> Outcome {
    outcome(
        CatchUnwind(Box::pin(tree.insert_many(batch.to_vec()))).await,
        what,
    )
}

/// `batch` written through the store `open` makes on the host's
/// transaction `tx` ([`faulted_write`]); then the fault at `ns` is
/// disarmed, before the host commits.
async fn write_in_tx<'t, C, S: Writable<Error = SqlStoreError> + AuditStore>(
    tx: &'t mut C,
    open: impl FnOnce(&'t mut C) -> S,
    ns: &str,
    what: &str,
    batch: &[(Key, Leaf)],
) -> Outcome {
    let in_tx = CompactedTree::new(open(tx));
    let out = faulted_write(&in_tx, batch, what).await;
    drop(in_tx);
    disarm(ns);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_sqlite_host_transaction() {
    let file = TempDb::new("faults_tx");
    let store = SqliteStore::open(&file.path).await.expect("open");
    host_tx_faults(
        ("sqlite-tx", "sqlite host transaction"),
        |ns| store.open_namespace(ns),
        |what, out, root, old, new| match out {
            Outcome::Ok => assert_eq!(root, new, "{what}"),
            _ => assert_eq!(
                root, old,
                "{what}: a failed write leaked into the host's commit"
            ),
        },
        async |ns, what, b| {
            let mut conn = store.pool().acquire().await.expect("conn");
            let mut tx = conn.begin().await.expect("begin");
            let open = |c| store.open_namespace(ns).in_transaction(c);
            let out = write_in_tx(&mut *tx, open, ns, what, b).await;
            // The host commits whatever it has: a failed write must have
            // left nothing of itself in the host's transaction.
            tx.commit().await.expect("host commit");
            out
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_postgres_host_transaction() {
    let Some(url) = pg_url("faults_postgres_host_transaction") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    host_tx_faults(
        ("pg-tx", "postgres host transaction"),
        |ns| store.open_namespace(ns),
        |what, out, root, old, new| {
            assert!(
                root == old || root == new,
                "{what}: root is neither old nor new"
            );
            if matches!(out, Outcome::Ok) {
                assert_eq!(root, new, "{what}");
            }
        },
        async |ns, what, b| {
            let mut tx = store.pool().begin().await.expect("begin");
            let open = |c| store.open_namespace(ns).in_transaction(c);
            let out = write_in_tx(&mut *tx, open, ns, what, b).await;
            // Postgres writes a commit in one statement: the host's commit
            // holds all of it or none of it.
            tx.commit().await.expect("host commit");
            out
        },
    )
    .await;
}
