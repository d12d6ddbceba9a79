//! The main job: build a real tree in an embedded SQLite file.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```
//!
//! Creates `quickstart.db` in the current directory, inserts 10,000 leaves
//! with one `insert_many`, prints the root, the sum, the store round trips
//! and a verified proof. Run it again and it reopens the same tree.

use std::process::ExitCode;
use std::time::Instant;

use ms_smt::store::TreeStore;

use ms_smt::{CompactedTree, Key, Leaf};
use ms_smt_sql::SqliteStore;
use sha2::{Digest, Sha256};

const LEAVES: u64 = 10_000;
const DB: &str = "quickstart.db";

/// Leaf `i`: key = SHA-256 of `i`, a 32-byte value, sum `i + 1`.
fn leaf(i: u64) -> (Key, Leaf) {
    let key = Key(Sha256::digest(i.to_be_bytes()).into());
    let value = Sha256::digest(format!("asset #{i}")).to_vec();
    (key, Leaf::new(value, i + 1))
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let store = SqliteStore::open(DB).await?;
    let tree = CompactedTree::new(store.clone());

    let root = tree.root().await?;
    if root.sum == 0 {
        let before = store.stats();
        let start = Instant::now();
        tree.insert_many((0..LEAVES).map(leaf)).await?;
        let used = store.stats().since(&before);
        println!(
            "inserted {LEAVES} leaves into {DB} with one insert_many in {:.1?}: {} round trips, {} statements, {} node rows written",
            start.elapsed(),
            used.round_trips,
            used.statements,
            used.nodes_written
        );
    } else {
        println!("reopened the existing tree in {DB}");
    }

    let root = tree.root().await?;
    println!("root hash: {}", root.hash);
    println!("root sum:  {}", root.sum);

    let (key, expected) = leaf(42);
    let before = store.stats();
    let proof = tree.merkle_proof(&key).await?;
    let used = store.stats().since(&before);
    let bytes = proof.to_bytes();
    let verified = ms_smt::Proof::from_bytes(&bytes)?.verify(&key, &expected, &root);
    println!(
        "proof for leaf 42 (key {key}): {} bytes, {} round trips ({} nodes read, {} remembered), verified: {verified}",
        bytes.len(),
        used.round_trips,
        used.nodes_read,
        used.nodes_remembered
    );
    if !verified {
        return Err("the proof did not verify".into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
