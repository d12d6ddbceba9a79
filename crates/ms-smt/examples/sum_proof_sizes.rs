//! How large sum proofs are in a tree of 10^6 leaves.
//!
//! Builds a compacted tree of 1,000,000 random leaves in memory, then
//! prints two markdown tables: prefix proofs at depths 0 to 256 (each next
//! to the Go-format compressed proof of a key under the prefix, the
//! target being that + 40 bytes), and range proofs `[a, b)` holding
//! 0 to 10^6 leaves, with endpoints at leaves and at random keys (target
//! 2 × 256 × 40 = 20,480 bytes). Every proof is verified.
//!
//! `cargo run --release --no-default-features --example sum_proof_sizes`

use std::time::{Duration, Instant};

use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, ComputedNode, Key, Leaf, Position};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const LEAVES: usize = 1_000_000;
const SAMPLES: usize = 200;
const DEPTHS: [usize; 9] = [0, 8, 16, 20, 24, 32, 64, 128, 256];
const WIDTHS: [usize; 9] = [0, 1, 2, 10, 100, 1_000, 10_000, 100_000, 999_999];
const RANGE_TARGET: usize = 2 * 256 * 40;

struct Stats {
    sizes: Vec<usize>,
    verify: Duration,
}

impl Stats {
    fn new() -> Self {
        Stats {
            sizes: Vec::new(),
            verify: Duration::ZERO,
        }
    }

    fn line(&self) -> String {
        let n = self.sizes.len().max(1);
        let mean = self.sizes.iter().sum::<usize>() / n;
        let min = self.sizes.iter().min().copied().unwrap_or(0);
        let max = self.sizes.iter().max().copied().unwrap_or(0);
        format!(
            "{min} | {mean} | {max} | {:.1} µs",
            self.verify.as_secs_f64() * 1e6 / n as f64
        )
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    let mut rng = StdRng::seed_from_u64(37);
    let mut leaves: Vec<(Key, Leaf)> = (0..LEAVES)
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
    leaves.sort_by_key(|a| a.0);
    println!(
        "compacted tree of {LEAVES} random leaves built in {:.1} s\n",
        start.elapsed().as_secs_f64()
    );

    println!("Prefix proofs ({SAMPLES} prefixes per depth, on the paths of random leaves):\n");
    println!(
        "| depth | min bytes | mean | max | verify | max leaf proof + 40 | max (proof - leaf proof) | within target |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|:---:|");
    for depth in DEPTHS {
        let mut stats = Stats::new();
        let mut worst_leaf = 0;
        let mut worst_excess = i64::MIN;
        let mut within = true;
        for _ in 0..SAMPLES {
            let key = leaves[rng.gen_range(0..LEAVES)].0;
            let pos = Position::new(depth, &key);
            let (r, total, proof) = rt.block_on(tree.prefix_sum_proof(pos)).expect("prove");
            assert_eq!(r, root);
            let bytes = proof.encode();
            let t = Instant::now();
            assert_eq!(proof.verify_prefix(&pos, &root), Ok(total));
            stats.verify += t.elapsed();
            let leaf = rt
                .block_on(tree.merkle_proof(pos.path()))
                .expect("leaf proof")
                .to_bytes()
                .len();
            worst_leaf = worst_leaf.max(leaf + 40);
            worst_excess = worst_excess.max(bytes.len() as i64 - leaf as i64);
            within &= bytes.len() <= leaf + 40;
            stats.sizes.push(bytes.len());
        }
        println!(
            "| {depth} | {} | {worst_leaf} | {worst_excess} | {} |",
            stats.line(),
            if within { "yes" } else { "no" }
        );
    }

    println!("\nRange proofs [a, b) ({SAMPLES} ranges per width; target {RANGE_TARGET} bytes):\n");
    println!("| leaves in range | endpoints | min bytes | mean | max | verify |");
    println!("|---:|---|---:|---:|---:|---:|");
    let mut overall = 0;
    for width in WIDTHS {
        for at_leaves in [true, false] {
            let mut stats = Stats::new();
            for _ in 0..SAMPLES {
                let i = rng.gen_range(0..LEAVES - width);
                let (a, b) = if at_leaves {
                    (leaves[i].0, leaves[i + width].0)
                } else {
                    // Random keys strictly between neighbouring leaves:
                    // the same leaves, other boundary paths.
                    (
                        between(&mut rng, &leaves, i),
                        between(&mut rng, &leaves, i + width),
                    )
                };
                let (_, total, proof) = rt.block_on(tree.range_sum_proof(a..b)).expect("prove");
                let bytes = proof.encode();
                let t = Instant::now();
                assert_eq!(proof.verify_range(a..b, &root), Ok(total));
                stats.verify += t.elapsed();
                stats.sizes.push(bytes.len());
            }
            overall = overall.max(stats.sizes.iter().copied().max().unwrap_or(0));
            let ends = if at_leaves {
                "at leaves"
            } else {
                "between leaves"
            };
            println!("| {width} | {ends} | {} |", stats.line());
        }
    }
    let (_, total, whole) = rt.block_on(tree.range_sum_proof(..)).expect("prove");
    assert_eq!(whole.verify_range(.., &root), Ok(total));
    println!("| all | unbounded | {} | | | |", whole.encode().len());
    println!(
        "\nlargest range proof: {overall} bytes (target {RANGE_TARGET}: {})",
        if overall <= RANGE_TARGET {
            "met"
        } else {
            "missed"
        }
    );
}

/// A random key after leaf `i - 1` and at or before leaf `i` in tree order
/// (after the last leaf when `i == LEAVES`... never asked): the leaf's key
/// with random low bits, kept only when it stays in that gap.
fn between(rng: &mut StdRng, leaves: &[(Key, Leaf)], i: usize) -> Key {
    let key = leaves[i].0;
    for _ in 0..64 {
        let mut k = key;
        for d in 40..256 {
            k = k.with_bit(d, rng.r#gen());
        }
        let after_prev = i == 0 || leaves[i - 1].0 < k;
        if after_prev && k <= key {
            return k;
        }
    }
    key
}
