//! # ms-smt-test-support
//!
//! What the workspace's tests, benches and examples share (never
//! published): unique names, keys, temporary SQLite files and the Postgres
//! URL rule (`MSSMT_PG_URL`, required when `MSSMT_REQUIRE_PG=1`), the
//! store suite that runs a scenario on every store, the models the stores
//! are checked against, child processes for the crash campaigns, and the
//! benches' runtime and durable Postgres.
//!
//! Depending on it turns on `ms-smt-core`'s `hash-count`: the per-thread
//! hash count the tests read, which a production build never pays for.

pub mod bench;
pub mod campaign;
pub mod child;
pub mod durable;
pub mod hooked;
pub mod links;
pub mod model;
pub mod proxy;
pub mod recipes;
pub mod scratch_postgres;
pub mod stores;
pub mod submitters;
pub mod suite;
pub mod tapd_expected;
pub mod tapd_proofs;
pub mod upgrade;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, ComputedNode, Key, Leaf};
use ms_smt_core::hash::sha256;
use proptest::test_runner::TestCaseError;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The repository's root (where `scripts/` and `crates/` are); the shared
/// vectors and fixtures are in `../shared` beside it.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Removes the SQLite database at `path` with its WAL and shared-memory
/// files, ignoring any that are gone: how scratch databases clean up.
pub fn remove_sqlite_files(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// Lifts `nodes` (hash, sum, key) from level 256 to level `to` on `lanes`
/// lanes (1, 2 or 4), as the descent lifts compacted leaves: the lanes
/// bench measures the climb kernel with it.
pub fn lift_nodes(
    nodes: &[(ms_smt::Hash, u64, ms_smt::Key)],
    to: usize,
    lanes: usize,
) -> Vec<ms_smt::Hash> {
    use ms_smt_descent::lift::{Lift, lift_on};
    let mut lifts: Vec<Lift> = nodes
        .iter()
        .map(|(hash, sum, key)| Lift::new(*hash, *sum, *key, ms_smt_core::key::MAX_LEVEL, to))
        .collect();
    lift_on(&mut lifts, lanes);
    lifts.into_iter().map(|l| l.hash).collect()
}

/// A name no other test (or earlier run against the same database) uses.
pub fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{tag}-{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A pseudo-random key.
pub fn hkey(tag: &str, i: u64) -> Key {
    Key(sha256(format!("{tag}/{i}").as_bytes()).0)
}

/// `tag` with everything but ASCII letters and digits replaced by `_`.
pub fn sanitize(tag: &str) -> String {
    tag.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Removes a SQLite database file and its WAL/SHM companions on drop.
pub struct TempDb {
    /// The database file.
    pub path: PathBuf,
}

impl TempDb {
    /// A fresh path in the temporary directory.
    pub fn new(tag: &str) -> Self {
        let path = std::env::temp_dir().join(format!("ms_smt_test_{}.db", sanitize(&unique(tag))));
        TempDb { path }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        remove_sqlite_files(&self.path);
    }
}

/// The Postgres URL, or `None` (after printing why) when the test must skip.
pub fn pg_url(test: &str) -> Option<String> {
    match std::env::var("MSSMT_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var("MSSMT_REQUIRE_PG").as_deref() == Ok("1") {
                panic!(
                    "postgres test {test} FAILED: MSSMT_PG_URL is not set but MSSMT_REQUIRE_PG=1 \
                     (run via scripts/with-postgres.sh)"
                );
            }
            eprintln!(
                "postgres test {test} SKIPPED: MSSMT_PG_URL is not set (run via scripts/with-postgres.sh)"
            );
            None
        }
    }
}

/// Audits `tree` and fails, naming `what`, on any problem it finds.
pub async fn assert_audit_clean<
    S: ms_smt::store::Writable + ms_smt::store::AuditStore,
    L: ms_smt::Layout,
>(
    tree: &ms_smt::Tree<S, L>,
    what: &str,
) {
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{what}: {:?}", report.problems);
}

/// The root of `batches` applied in order to an empty compacted memory tree.
pub async fn root_of(batches: &[Vec<(Key, Leaf)>]) -> ComputedNode {
    let tree = CompactedTree::new(MemoryStore::new());
    for b in batches {
        tree.insert_many(b.clone()).await.expect("memory");
    }
    tree.root().await.expect("root")
}

/// The root of the leaves in `model`, built in an empty compacted memory
/// tree.
pub async fn map_root(model: &std::collections::HashMap<Key, Leaf>) -> ComputedNode {
    root_of(&[model.iter().map(|(k, l)| (*k, l.clone())).collect()]).await
}

/// A multi-threaded runtime with two workers, for tests that drive async
/// scenarios from a synchronous proptest runner.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A proptest failure carrying `e`'s message.
pub fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Runs `test` over `strategy` with `config`, panics naming `what`, the
/// store `kind` and the seed ([`proptest_config`]) at a failure, and
/// prints how long the cases took.
pub fn run_cases<T: proptest::strategy::Strategy>(
    what: &str,
    kind: &str,
    config: proptest::test_runner::Config,
    strategy: &T,
    test: impl Fn(T::Value) -> Result<(), TestCaseError>,
) {
    let started = std::time::Instant::now();
    let cases = config.cases;
    let seed = config.rng_seed;
    let result = proptest::test_runner::TestRunner::new(config).run(strategy, test);
    if let Err(e) = result {
        panic!("{what} on {kind}: {e}\nseed = {seed} (re-run with MSSMT_TEST_SEED={seed})");
    }
    eprintln!(
        "{what}::{kind} ({cases} cases) took {:?}",
        started.elapsed()
    );
}

/// The seed of a test's random choices: `MSSMT_TEST_SEED` when set (to
/// re-run a failure), else a fresh one. It is printed to the test's
/// output, which the harness shows when the test fails.
pub fn test_seed() -> u64 {
    let seed = match std::env::var("MSSMT_TEST_SEED") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("MSSMT_TEST_SEED={s} is not a u64")),
        _ => rand::random(),
    };
    eprintln!("seed = {seed} (re-run with MSSMT_TEST_SEED={seed})");
    seed
}

/// Proptest settings: `cases` cases, at most `max_shrink_iters` shrinking
/// steps, no `proptest-regressions` files written into the repository,
/// and the generator seeded by [`test_seed`] (proptest's own default is
/// an unprinted random seed, so a failure could not be replayed).
/// `PROPTEST_RNG_SEED`, when set, still overrides it in `proptest!` tests.
pub fn proptest_config(cases: u32, max_shrink_iters: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        max_shrink_iters,
        rng_seed: proptest::test_runner::RngSeed::Fixed(test_seed()),
        ..proptest::test_runner::Config::default()
    }
}

/// The tapd fixtures (`../shared/fixtures/tapd` beside the checkout, or
/// `$MSSMT_TAPD_FIXTURES`).
pub fn tapd_fixtures() -> PathBuf {
    std::env::var_os("MSSMT_TAPD_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/fixtures/tapd"))
}
