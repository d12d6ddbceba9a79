//! Replays all official vector files (../shared/vectors, or $MSSMT_VECTORS_DIR)
//! through the same code as the `vectors` example: every layout × write path
//! on the in-memory store.

#[path = "../examples/vectors/replay.rs"]
mod replay;

use std::path::PathBuf;

use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, FullTree};
use replay::{Tally, WritePath};

fn vectors_dir() -> PathBuf {
    std::env::var_os("MSSMT_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/vectors"))
}

const FILES: [&str; 4] = [
    "mssmt_tree_deletion.json",
    "mssmt_tree_error_cases.json",
    "mssmt_tree_proofs.json",
    "mssmt_tree_replacement.json",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_vectors_every_layout_and_path_in_memory() {
    let dir = vectors_dir();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    let (mut valid, mut errors) = (0, 0);
    for name in FILES {
        let path = dir.join(name);
        let file = replay::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        valid += file.valid_test_cases.as_ref().map_or(0, Vec::len);
        errors += file.error_test_cases.as_ref().map_or(0, Vec::len);
        for wp in [WritePath::Sequential, WritePath::Batched] {
            let mut results =
                replay::replay_file(name, &file, "tree=full store=memory", wp, || async {
                    Ok(FullTree::new(MemoryStore::new()))
                })
                .await;
            results.extend(
                replay::replay_file(name, &file, "tree=compacted store=memory", wp, || async {
                    Ok(CompactedTree::new(MemoryStore::new()))
                })
                .await,
            );
            for r in &results {
                tally.add(r);
                if let Some(why) = &r.failure {
                    failures.push(format!("{}: {why}", r.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    // The official files: 4 valid cases, 1 error case, 1,010 proofs.
    assert_eq!((valid, errors), (4, 1));
    assert_eq!(tally.passed, (4 + 1) * 4, "cases × (2 layouts × 2 paths)");
    assert_eq!(tally.proofs, 1010 * 4, "every proof on every layout and path");
}
