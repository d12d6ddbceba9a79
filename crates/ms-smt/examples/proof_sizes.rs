//! How much a multiproof saves over single proofs.
//!
//! Builds a compacted tree of 100,000 random leaves in memory, then for k
//! random present keys compares one [`MultiProof`] with k Go-format
//! compressed proofs (`2 + 40 * explicit + 32` bytes each), in bytes and in
//! verification time, and prints a markdown table.
//!
//! `cargo run --release --no-default-features --example proof_sizes`

use std::time::{Duration, Instant};

use ms_smt::MultiProof;
use ms_smt::NodeCache;
use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, ComputedNode, Key, Leaf, Proof};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const LEAVES: usize = 100_000;
const KS: [usize; 3] = [10, 100, 1_000];

/// The fastest of a few runs of `f`: verification is short and the
/// machine may be busy.
fn fastest(runs: u32, mut f: impl FnMut() -> bool) -> Duration {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            assert!(f(), "verification failed");
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    let mut rng = StdRng::seed_from_u64(42);
    let leaves: Vec<(Key, Leaf)> = (0..LEAVES)
        .map(|_| {
            let value: Vec<u8> = (0..rng.gen_range(1..=32)).map(|_| rng.r#gen()).collect();
            (
                Key(rng.r#gen()),
                Leaf::new(value, rng.gen_range(1..1u64 << 32)),
            )
        })
        .collect();

    let tree = CompactedTree::new(MemoryStore::new());
    let start = Instant::now();
    let root: ComputedNode = rt
        .block_on(tree.insert_many(leaves.iter().cloned()))
        .expect("insert");
    let mut cache = NodeCache::new();
    for (hash, node, _) in tree.store().rows().expect("rows") {
        cache.insert(hash, node);
    }
    println!(
        "compacted tree of {LEAVES} random leaves built in {:.1} s\n",
        start.elapsed().as_secs_f64()
    );

    println!(
        "| k | multiproof bytes | explicit siblings | k single proofs (bytes) | ratio | multiproof verify | k single verifies |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for k in KS {
        let picked: Vec<(Key, Leaf)> = rand::seq::index::sample(&mut rng, LEAVES, k)
            .into_iter()
            .map(|i| leaves[i].clone())
            .collect();
        let keys: Vec<Key> = picked.iter().map(|(key, _)| *key).collect();

        let multi = MultiProof::from_source(&cache, &root, &keys).expect("multiproof");
        let multi_bytes = multi.encode().len();
        let singles: Vec<Proof> = rt.block_on(tree.merkle_proofs(&keys)).expect("proofs");
        let single_bytes: usize = singles.iter().map(|p| p.to_bytes().len()).sum();

        let runs = if k >= 1_000 { 5 } else { 20 };
        let multi_time = fastest(runs, || multi.verify(&picked, &root));
        let single_time = fastest(runs, || {
            picked
                .iter()
                .zip(&singles)
                .all(|((key, leaf), proof)| proof.verify(key, leaf, &root))
        });
        println!(
            "| {k} | {multi_bytes} | {} | {single_bytes} | {:.2} | {} | {} |",
            multi.explicit_siblings().len(),
            multi_bytes as f64 / single_bytes as f64,
            ms(multi_time),
            ms(single_time),
        );
    }
}
