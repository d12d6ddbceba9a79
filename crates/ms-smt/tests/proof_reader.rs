//! `ProofReader`: concurrent proof requests answered in shared reads,
//! each answer the one a lone `Multiverse::proof` gives.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::Poll;

use ms_smt::Multiverse;
use ms_smt::multiverse::{
    LeafKey, OutPoint, ProofReader, ProofType, Universe, UniverseId, UniverseLeaf,
};
use ms_smt::store::MemoryStore;

use crate::support::suite::Probe;

fn leaf_key(tag: u8, n: u8) -> LeafKey {
    let mut txid = [tag; 32];
    txid[0] = n;
    LeafKey {
        outpoint: OutPoint {
            txid,
            index: u32::from(n),
        },
        script_key: [n ^ tag; 32],
    }
}

fn leaf(tag: u8, n: u8, asset_id: [u8; 32]) -> UniverseLeaf {
    UniverseLeaf {
        key: leaf_key(tag, n),
        asset_id,
        proof: vec![tag, n, 0x55],
        amount: 100 + u64::from(n),
        burn: false,
    }
}

/// Every future of `futures` run to its end, each first polled in order
/// (so, on one thread, every request is queued before any read runs).
async fn join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Three universes of 20 leaves each, and what is asked of them: every
/// leaf, keys no universe holds, and a universe never written.
async fn multiverse() -> (Multiverse<Probe<MemoryStore>>, Vec<(Universe, LeafKey)>) {
    let multiverse = Multiverse::new(Probe::new(MemoryStore::new()));
    let mut wanted = Vec::new();
    for tag in 1..=3u8 {
        let asset = [tag; 32];
        let universe = Universe::new(UniverseId::Asset(asset), ProofType::Issuance);
        let leaves: Vec<UniverseLeaf> = (0..20).map(|n| leaf(tag, n, asset)).collect();
        multiverse.insert(&universe, &leaves).await.expect("insert");
        wanted.extend(leaves.iter().map(|l| (universe, l.key)));
        wanted.push((universe, leaf_key(tag, 200)));
    }
    let unwritten = Universe::new(UniverseId::Asset([9; 32]), ProofType::Transfer);
    wanted.push((unwritten, leaf_key(1, 0)));
    (multiverse, wanted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_get_what_a_lone_read_gives() {
    let (multiverse, wanted) = multiverse().await;
    for (reads, batch) in [(1, 1), (1, 7), (2, 4), (4, 256)] {
        let reader = ProofReader::with_bounds(multiverse.clone(), reads, batch);
        let asked = join_all(wanted.iter().map(|(u, k)| reader.proof(u, k))).await;
        let mut found = 0;
        for ((universe, key), answer) in wanted.iter().zip(asked) {
            let answer = answer.expect("read");
            let alone = multiverse.proof(universe, key).await.expect("read");
            assert_eq!(answer, alone, "reads {reads}, batch {batch}, key {key:?}");
            found += usize::from(answer.is_some());
        }
        assert_eq!(found, 60, "reads {reads}, batch {batch}");
    }
}

/// The reads `Multiverse::proofs` makes for each of `chunks` (a store
/// reads what its remembered nodes do not answer, so the count is the
/// store's; nothing is written between calls).
async fn direct(
    multiverse: &Multiverse<Probe<MemoryStore>>,
    chunks: Vec<&[(Universe, LeafKey)]>,
) -> u64 {
    let fetches = || {
        multiverse
            .forest()
            .store()
            .hook
            .fetches
            .load(Ordering::Relaxed)
    };
    let before = fetches();
    for chunk in chunks {
        multiverse.proofs(chunk).await.expect("read");
    }
    fetches() - before
}

/// On one thread the order is fixed: the first request starts a read and
/// the others, made before that read's task runs, wait for the next one.
#[tokio::test(flavor = "current_thread")]
async fn requests_made_during_a_read_share_the_next_one() {
    let (multiverse, wanted) = multiverse().await;
    let fetches = || {
        multiverse
            .forest()
            .store()
            .hook
            .fetches
            .load(Ordering::Relaxed)
    };
    // Every universe's directory leaf seen once, so that only proof
    // reads are counted.
    for (universe, _) in &wanted {
        multiverse.contains(universe).await.expect("contains");
    }
    for batch in [256, 16, 1] {
        // The first request's read, then the others in batches.
        let mut chunks = vec![&wanted[..1]];
        chunks.extend(wanted[1..].chunks(batch));
        let expected = direct(&multiverse, chunks.clone()).await;
        let reader = ProofReader::with_bounds(multiverse.clone(), 1, batch);
        let before = fetches();
        let asked = join_all(wanted.iter().map(|(u, k)| reader.proof(u, k))).await;
        assert_eq!(fetches() - before, expected, "batch {batch}");
        for ((universe, key), answer) in wanted.iter().zip(asked) {
            let alone = multiverse.proof(universe, key).await.expect("read");
            assert_eq!(answer.expect("read"), alone);
        }
    }
    // Sharing is what saves: 64 requests in two reads, not 64.
    let shared = direct(&multiverse, vec![&wanted[..1], &wanted[1..]]).await;
    let alone = direct(&multiverse, wanted.chunks(1).collect()).await;
    assert!(shared * 8 < alone, "{shared} reads shared, {alone} alone");
}
