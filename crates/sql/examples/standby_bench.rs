//! Reads on a hot standby under write load: proof reads per second of
//! 1,000-key `merkle_proofs` on the primary alone vs the primary plus one
//! standby, while a writer commits 100-leaf batches on the primary, and
//! the read-your-writes wait (p50/p99) of that writer's token reads.
//!
//! Needs a primary and its streaming hot standby: the two servers
//! `scripts/with-postgres.sh` starts (fsync off), or a durable pair:
//!
//! ```text
//! scripts/with-postgres.sh cargo run --release --example standby_bench
//! D=$(scripts/pg-cluster.sh init); P=$(scripts/pg-cluster.sh start $D)     # fsync on
//! S=$(scripts/pg-cluster.sh start $(scripts/pg-cluster.sh standby <P's port>))
//! MSSMT_PG_URL=$P MSSMT_PG_STANDBY_URL=$S cargo run --release --example standby_bench
//! ```
//!
//! Every read-your-writes read waits at most the default bound (2 s) for
//! the standby and then falls back to the primary; the fallbacks are
//! counted.
//!
//! `MSSMT_STANDBY_BENCH_LEAVES` (default 50,000) leaves are loaded first;
//! each phase runs `MSSMT_STANDBY_BENCH_SECS` (default 10) seconds with
//! four reader tasks (primary alone: all four on the primary; with the
//! standby: two on each).

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ms_smt::{FullTree, Key, Leaf};
use ms_smt_core::hash::sha256;
use ms_smt_sql::{ReplicaSet, ServedBy};

const READERS: usize = 4;
const PROOF_KEYS: u64 = 1_000;
const WRITE_BATCH: u64 = 100;

fn key(i: u64) -> Key {
    Key(sha256(&i.to_le_bytes()).0)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One phase: readers (`on_standby` of them on the standby, the rest on
/// the primary) against a writer; proofs per second, and the writer's
/// read-your-writes waits.
async fn phase(
    set: &ReplicaSet,
    leaves: u64,
    on_standby: usize,
    secs: u64,
) -> Result<(f64, Vec<(Duration, bool)>), Box<dyn Error>> {
    let stop = Arc::new(AtomicBool::new(false));
    let proofs = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for r in 0..READERS {
        let (set, stop, proofs) = (set.clone(), stop.clone(), proofs.clone());
        readers.push(tokio::spawn(async move {
            let mut n = r as u64;
            while !stop.load(Ordering::Relaxed) {
                let mut snapshot = if r < on_standby {
                    set.read(None).await?
                } else {
                    set.read_primary().await?
                };
                let keys: Vec<Key> = (0..PROOF_KEYS)
                    .map(|i| key((n * 7919 + i * 104_729) % leaves))
                    .collect();
                let root = snapshot.root();
                {
                    let tree = FullTree::new(snapshot.store());
                    let got = tree.merkle_proofs(&keys).await?;
                    let leaf = tree.get(&keys[0]).await?;
                    assert!(got[0].verify(&keys[0], &leaf, &root));
                }
                snapshot.finish().await?;
                proofs.fetch_add(PROOF_KEYS, Ordering::Relaxed);
                n += READERS as u64;
            }
            Ok::<_, Box<dyn Error + Send + Sync>>(())
        }));
    }
    let writer = {
        let (set, stop) = (set.clone(), stop.clone());
        tokio::spawn(async move {
            let tree = FullTree::new(set.primary().clone());
            let mut waits = Vec::new();
            let mut next = leaves;
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<(Key, Leaf)> = (next..next + WRITE_BATCH)
                    .map(|i| (key(i), Leaf::new(i.to_le_bytes().to_vec(), 1)))
                    .collect();
                next += WRITE_BATCH;
                tree.insert_many(batch).await?;
                let token = set.commit_token().await?;
                let started = Instant::now();
                let snapshot = set.read(Some(token)).await?;
                // Past the bound the read falls back to the primary.
                let fell_back = snapshot.served_by() == ServedBy::Primary;
                waits.push((started.elapsed(), fell_back));
                snapshot.finish().await?;
            }
            Ok::<_, Box<dyn Error + Send + Sync>>(waits)
        })
    };
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await?.map_err(|e| e.to_string())?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let waits = writer.await?.map_err(|e| e.to_string())?;
    Ok((proofs.load(Ordering::Relaxed) as f64 / elapsed, waits))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let primary = std::env::var("MSSMT_PG_URL")?;
    let standby = std::env::var("MSSMT_PG_STANDBY_URL")?;
    let leaves = env_u64("MSSMT_STANDBY_BENCH_LEAVES", 50_000);
    let secs = env_u64("MSSMT_STANDBY_BENCH_SECS", 10);
    let name = format!("standby-bench-{}", std::process::id());
    let set = ReplicaSet::connect(&primary, &[standby.as_str()])
        .await?
        .open_namespace(&name);
    let tree = FullTree::new(set.primary().clone());
    let load = Instant::now();
    for start in (0..leaves).step_by(10_000) {
        let end = (start + 10_000).min(leaves);
        tree.insert_many((start..end).map(|i| (key(i), Leaf::new(i.to_le_bytes().to_vec(), 1))))
            .await?;
    }
    println!("loaded {leaves} leaves in {:.1?}", load.elapsed());
    let token = set.commit_token().await?;
    set.read(Some(token)).await?.finish().await?;
    for (label, on_standby) in [("primary alone", 0), ("primary + 1 standby", READERS / 2)] {
        let (rate, waits) = phase(&set, leaves, on_standby, secs).await?;
        let fallbacks = waits.iter().filter(|(_, fell_back)| *fell_back).count();
        let mut waits: Vec<Duration> = waits.into_iter().map(|(wait, _)| wait).collect();
        waits.sort();
        println!(
            "{label}: {rate:.0} proofs/s ({READERS} readers, {on_standby} on the standby); \
             writer: {} batches of {WRITE_BATCH}, read-your-writes wait p50 {:.1?} p99 {:.1?}, \
             {fallbacks} served by the primary after the bound",
            waits.len(),
            percentile(&waits, 0.5),
            percentile(&waits, 0.99),
        );
    }
    Ok(())
}
