use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, FullTree, Key, Leaf};
use std::time::Instant;
fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let batch: Vec<(Key, Leaf)> = (0..10_000)
            .map(|_| {
                let mut k = [0u8; 32];
                for c in k.chunks_mut(8) {
                    c.copy_from_slice(&next().to_le_bytes());
                }
                (Key(k), Leaf::new(vec![7u8; 100], next() % (1 << 32)))
            })
            .collect();
        let l = ms_smt::hash::Hash([1; 32]);
        let t = Instant::now();
        let mut h = l;
        for _ in 0..1_000_000 {
            h = ms_smt::hash::branch_hash(&h, &l, 5);
        }
        println!("branch_hash: {:?}/op {}", t.elapsed() / 1_000_000, h);
        let h0 = ms_smt::hash::hash_calls();
        let tree = CompactedTree::new(MemoryStore::new());
        let t = Instant::now();
        tree.insert_many(batch.clone()).await.unwrap();
        println!(
            "compacted insert_many 10k: {:?} hashes {}",
            t.elapsed(),
            ms_smt::hash::hash_calls() - h0
        );
        let h0 = ms_smt::hash::hash_calls();
        let tree2 = FullTree::new(MemoryStore::new());
        let t = Instant::now();
        tree2.insert_many(batch.clone()).await.unwrap();
        println!(
            "full insert_many 10k: {:?} hashes {}",
            t.elapsed(),
            ms_smt::hash::hash_calls() - h0
        );
        let t = Instant::now();
        for (k, _) in batch.iter().take(1000) {
            tree.get(k).await.unwrap();
        }
        println!("get: {:?}", t.elapsed() / 1000);
        let t = Instant::now();
        let mut ps = vec![];
        for (k, _) in batch.iter().take(1000) {
            ps.push(tree.merkle_proof(k).await.unwrap());
        }
        println!("proof: {:?}", t.elapsed() / 1000);
        let root = tree.root().await.unwrap();
        let t = Instant::now();
        for ((k, l), p) in batch.iter().zip(&ps) {
            assert!(p.verify(k, l, &root));
        }
        println!("verify: {:?}", t.elapsed() / 1000);
        let more: Vec<(Key, Leaf)> = (0..1000)
            .map(|_| {
                let mut k = [0u8; 32];
                for c in k.chunks_mut(8) {
                    c.copy_from_slice(&next().to_le_bytes());
                }
                (Key(k), Leaf::new(vec![1u8; 50], 5))
            })
            .collect();
        let t = Instant::now();
        tree.insert_many(more.clone()).await.unwrap();
        println!("compacted 1000 into 10k: {:?}", t.elapsed());
    });
}
