//! Replays all official vector files (../shared/vectors, or $MSSMT_VECTORS_DIR)
//! through the same code as the `vectors` example: every layout × write path
//! on every store, one test per store, layout and path (the memory store in
//! one), except Postgres one leaf at a time, which skips the 10,000-leaf
//! proofs file (see `on_postgres_one_at_a_time`). Postgres comes from $MSSMT_PG_URL (the README's test
//! command starts a throwaway server); without it the Postgres test says it
//! was skipped, or fails when $MSSMT_REQUIRE_PG=1.
//!
//! SQLite runs with the store's default memory of recent nodes (most reads
//! answered in process), Postgres with none (every node read by SQL), so
//! both read paths replay the vectors; the store suite (`tests/stores_*.rs`) runs every scenario
//! both ways on both stores.

#[path = "../examples/vectors/replay.rs"]
mod replay;

use std::path::PathBuf;

use ms_smt::store::DEFAULT_RECENT_NODES;
use replay::{StoreKind, Stores, Tally, WritePath};

fn vectors_dir() -> PathBuf {
    std::env::var_os("MSSMT_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::support::repo_root().join("../shared/vectors"))
}

const FILES: [&str; 4] = [
    "mssmt_tree_deletion.json",
    "mssmt_tree_error_cases.json",
    "mssmt_tree_proofs.json",
    "mssmt_tree_replacement.json",
];

/// Which layouts and write paths one test replays.
#[derive(Clone, Copy)]
struct Part {
    full: bool,
    compacted: bool,
    paths: &'static [WritePath],
}

/// Everything: both layouts, both paths (the memory store, seconds).
const ALL: Part = Part {
    full: true,
    compacted: true,
    paths: &[WritePath::Sequential, WritePath::Batched],
};

/// One layout and one path: the SQL stores replay in four tests each, so
/// that the long ones (SQLite's 10,000 one-leaf commits of the proofs file
/// per layout, Postgres' reads of every node of 1,010 proofs) run beside
/// other tests, not one after another.
const fn part(full: bool, path: &'static [WritePath]) -> Part {
    Part {
        full,
        compacted: !full,
        paths: path,
    }
}

const SEQUENTIAL: &[WritePath] = &[WritePath::Sequential];
const BATCHED: &[WritePath] = &[WritePath::Batched];

async fn replay_everything(kind: StoreKind, pg_url: Option<&str>, recent_nodes: usize, part: Part) {
    replay_files(kind, pg_url, recent_nodes, part, &FILES).await;
}

/// The proofs file: 10,000 leaves and 1,010 proofs.
const PROOFS_FILE: &str = "mssmt_tree_proofs.json";

async fn replay_files(
    kind: StoreKind,
    pg_url: Option<&str>,
    recent_nodes: usize,
    part: Part,
    files: &[&str],
) {
    let dir = vectors_dir();
    let stores = Stores::open(&[kind], pg_url, recent_nodes)
        .await
        .expect("open stores");
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    let (mut valid, mut errors, mut proofs) = (0, 0, 0);
    for &name in files {
        let path = dir.join(name);
        let file = replay::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        valid += file.valid_test_cases.as_ref().map_or(0, Vec::len);
        errors += file.error_test_cases.as_ref().map_or(0, Vec::len);
        for case in file.valid_test_cases.iter().flatten() {
            proofs += case.inclusion_proofs.as_ref().map_or(0, Vec::len);
            proofs += case.exclusion_proofs.as_ref().map_or(0, Vec::len);
        }
        stores
            .replay(
                kind,
                name,
                &file,
                part.full,
                part.compacted,
                part.paths,
                &mut |r| {
                    tally.add(r);
                    if let Some(why) = &r.failure {
                        failures.push(format!("{}: {why}", r.name));
                    }
                },
            )
            .await;
    }
    stores.cleanup().await;
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    if files.len() == FILES.len() {
        // The official files: 4 valid cases, 1 error case, 1,010 proofs.
        assert_eq!((valid, errors, proofs), (4, 1, 1010));
    }
    let runs = (usize::from(part.full) + usize::from(part.compacted)) * part.paths.len();
    assert_eq!(
        tally.passed,
        (valid + errors) * runs,
        "cases × layouts × paths"
    );
    assert_eq!(
        tally.proofs,
        proofs * runs,
        "every proof on every layout and path"
    );
    eprintln!(
        "{kind:?}: {} cases passed, {} proofs byte-exact",
        tally.passed, tally.proofs
    );
}

fn pg_url() -> Option<String> {
    match std::env::var("MSSMT_PG_URL").ok().filter(|u| !u.is_empty()) {
        Some(url) => Some(url),
        None if std::env::var("MSSMT_REQUIRE_PG").as_deref() == Ok("1") => {
            panic!("MSSMT_REQUIRE_PG=1 but MSSMT_PG_URL is not set")
        }
        None => {
            eprintln!(
                "postgres vector test SKIPPED: MSSMT_PG_URL is not set (run via scripts/with-postgres.sh)"
            );
            None
        }
    }
}

async fn on_sqlite(part: Part) {
    replay_everything(StoreKind::Sqlite, None, DEFAULT_RECENT_NODES, part).await;
}

async fn on_postgres(part: Part) {
    if let Some(url) = pg_url() {
        replay_everything(StoreKind::Postgres, Some(&url), 0, part).await;
    }
}

/// Postgres one leaf at a time: every file but the proofs file, whose
/// 10,000 one-leaf commits per layout took two CPU-minutes of CI and
/// exercise no statement that its batched replay (every node of every
/// proof read by SQL), the small files' one-leaf replays here, SQLite's
/// one-leaf replay of it (the same generic write path) and the store
/// suite's one-leaf writes on Postgres do not.
async fn on_postgres_one_at_a_time(full: bool) {
    if let Some(url) = pg_url() {
        let files: Vec<&str> = FILES.into_iter().filter(|f| *f != PROOFS_FILE).collect();
        replay_files(
            StoreKind::Postgres,
            Some(&url),
            0,
            part(full, SEQUENTIAL),
            &files,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_vectors_on_memory() {
    replay_everything(StoreKind::Memory, None, 0, ALL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_full_sequential() {
    on_sqlite(part(true, SEQUENTIAL)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_full_batched() {
    on_sqlite(part(true, BATCHED)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_compacted_sequential() {
    on_sqlite(part(false, SEQUENTIAL)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_compacted_batched() {
    on_sqlite(part(false, BATCHED)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_full_sequential() {
    on_postgres_one_at_a_time(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_full_batched() {
    on_postgres(part(true, BATCHED)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_compacted_sequential() {
    on_postgres_one_at_a_time(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_compacted_batched() {
    on_postgres(part(false, BATCHED)).await;
}
