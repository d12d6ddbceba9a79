//! Replays all official vector files (../shared/vectors, or $MSSMT_VECTORS_DIR)
//! through the same code as the `vectors` example: every layout × write path
//! on every store. Postgres comes from $MSSMT_PG_URL (the README's test
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

async fn replay_everything(kind: StoreKind, pg_url: Option<&str>, recent_nodes: usize) {
    let dir = vectors_dir();
    let stores = Stores::open(&[kind], pg_url, recent_nodes)
        .await
        .expect("open stores");
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    let (mut valid, mut errors) = (0, 0);
    for name in FILES {
        let path = dir.join(name);
        let file = replay::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        valid += file.valid_test_cases.as_ref().map_or(0, Vec::len);
        errors += file.error_test_cases.as_ref().map_or(0, Vec::len);
        let paths = [WritePath::Sequential, WritePath::Batched];
        stores
            .replay(kind, name, &file, true, true, &paths, &mut |r| {
                tally.add(r);
                if let Some(why) = &r.failure {
                    failures.push(format!("{}: {why}", r.name));
                }
            })
            .await;
    }
    stores.cleanup().await;
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    // The official files: 4 valid cases, 1 error case, 1,010 proofs.
    assert_eq!((valid, errors), (4, 1));
    assert_eq!(tally.passed, (4 + 1) * 4, "cases × (2 layouts × 2 paths)");
    assert_eq!(
        tally.proofs,
        1010 * 4,
        "every proof on every layout and path"
    );
    eprintln!(
        "{kind:?}: {} cases passed, {} proofs byte-exact",
        tally.passed, tally.proofs
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_vectors_on_memory() {
    replay_everything(StoreKind::Memory, None, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_vectors_on_sqlite() {
    replay_everything(StoreKind::Sqlite, None, DEFAULT_RECENT_NODES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_vectors_on_postgres() {
    match std::env::var("MSSMT_PG_URL").ok().filter(|u| !u.is_empty()) {
        Some(url) => replay_everything(StoreKind::Postgres, Some(&url), 0).await,
        None if std::env::var("MSSMT_REQUIRE_PG").as_deref() == Ok("1") => {
            panic!("MSSMT_REQUIRE_PG=1 but MSSMT_PG_URL is not set")
        }
        None => eprintln!(
            "postgres test all_vectors_on_postgres SKIPPED: MSSMT_PG_URL is not set (run via scripts/with-postgres.sh)"
        ),
    }
}
