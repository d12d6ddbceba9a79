//! What the integration tests share: unique names, keys, temporary SQLite
//! files and the Postgres URL rule (`MSSMT_PG_URL`, required when
//! `MSSMT_REQUIRE_PG=1`).
#![allow(dead_code)] // each test crate uses its own part of this module

pub mod child;
#[cfg(feature = "cli")]
pub mod cli;
pub mod hooked;
pub mod links;
pub mod model;
#[cfg(feature = "postgres")]
pub mod proxy;
pub mod recipes;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub mod stores;
#[cfg(feature = "postgres")]
pub mod submitters;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub mod suite;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use ms_smt::store::MemoryStore;
use ms_smt::test_utils::sha256;
use ms_smt::{CompactedTree, ComputedNode, Key, Leaf};
use proptest::test_runner::TestCaseError;

static COUNTER: AtomicU64 = AtomicU64::new(0);

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
        ms_smt::test_utils::remove_sqlite_files(&self.path);
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
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/tapd")
        })
}
