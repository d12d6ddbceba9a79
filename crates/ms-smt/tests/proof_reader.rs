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
    // The same request twice in one batch.
    wanted.push(wanted[3]);
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
        assert_eq!(found, 61, "reads {reads}, batch {batch}");
    }
}

/// The reads `Multiverse::proofs` makes for each of `chunks` (a store
/// reads what its remembered nodes do not answer, so the count is the
/// store's; nothing is written between calls).
async fn direct(
    multiverse: &Multiverse<Probe<MemoryStore>>,
    chunks: Vec<&[(Universe, LeafKey)]>,
) -> u64 {
    let before = fetches(multiverse);
    for chunk in chunks {
        multiverse.proofs(chunk).await.expect("read");
    }
    fetches(multiverse) - before
}

/// Store read calls so far.
fn fetches(multiverse: &Multiverse<Probe<MemoryStore>>) -> u64 {
    multiverse
        .forest()
        .store()
        .hook
        .fetches
        .load(Ordering::Relaxed)
}

/// On one thread the order is fixed: the first request starts a read and
/// the others, made before that read's task runs, wait for the next one.
#[tokio::test(flavor = "current_thread")]
async fn requests_made_during_a_read_share_the_next_one() {
    let (multiverse, wanted) = multiverse().await;
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
        let before = fetches(&multiverse);
        let asked = join_all(wanted.iter().map(|(u, k)| reader.proof(u, k))).await;
        assert_eq!(fetches(&multiverse) - before, expected, "batch {batch}");
        for ((universe, key), answer) in wanted.iter().zip(asked) {
            let alone = multiverse.proof(universe, key).await.expect("read");
            assert_eq!(answer.expect("read"), alone);
        }
    }
    // Sharing is what saves: 65 requests in two reads, not 65.
    let shared = direct(&multiverse, vec![&wanted[..1], &wanted[1..]]).await;
    let alone = direct(&multiverse, wanted.chunks(1).collect()).await;
    assert!(shared * 8 < alone, "{shared} reads shared, {alone} alone");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Polls `future` once, as a caller that then goes away.
async fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    let mut future = Some(future);
    std::future::poll_fn(|cx| Poll::Ready(future.take().map(|f| f.poll(cx))))
        .await
        .unwrap_or(Poll::Pending)
}

/// Outside a runtime a request is read alone, and a read task dropped
/// unrun with its runtime gives its place back: neither leaves a later
/// request waiting for a read that never comes.
#[test]
fn no_request_is_left_without_a_read() {
    let (multiverse, wanted) = runtime().block_on(multiverse());
    let reader = ProofReader::with_bounds(multiverse.clone(), 1, 256);
    let (universe, key) = wanted[0];
    let expected = runtime()
        .block_on(multiverse.proof(&universe, &key))
        .expect("read");
    assert!(expected.is_some());

    // No runtime: the memory store answers at the first poll.
    let mut alone = std::pin::pin!(reader.proof(&universe, &key));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match alone.as_mut().poll(&mut cx) {
        Poll::Ready(answer) => assert_eq!(answer.expect("read"), expected),
        Poll::Pending => panic!("a read outside a runtime waited"),
    }

    // A read task spawned on a runtime that stops before running it.
    let first = runtime();
    first.block_on(async {
        let mut asked = std::pin::pin!(reader.proof(&universe, &key));
        assert!(poll_once(asked.as_mut()).await.is_pending());
    });
    drop(first);

    let later = runtime().block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            reader.proof(&universe, &key),
        )
        .await
    });
    assert_eq!(
        later.expect("a later request was answered").expect("read"),
        expected
    );
}

/// Requests whose callers went away before their read are not read.
#[tokio::test(flavor = "current_thread")]
async fn requests_of_callers_gone_are_not_read() {
    let (multiverse, wanted) = multiverse().await;
    let reader = ProofReader::with_bounds(multiverse.clone(), 1, 256);
    let mut asked: Vec<_> = wanted
        .iter()
        .map(|(u, k)| Box::pin(reader.proof(u, k)))
        .collect();
    // Every request queued (the first one's read spawned, not yet run).
    for future in &mut asked {
        assert!(poll_once(future.as_mut()).await.is_pending());
    }
    let first = asked.remove(0);
    drop(asked);
    let answer = first.await.expect("read");
    assert_eq!(
        answer,
        multiverse
            .proof(&wanted[0].0, &wanted[0].1)
            .await
            .expect("read")
    );
    let stats = reader.stats();
    assert_eq!((stats.reads, stats.proofs), (1, 1), "{stats:?}");
}
