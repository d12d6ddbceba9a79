//! Proof requests of many concurrent callers answered in shared reads.
//!
//! A proof costs a SQL store two statements (the roots, the paths), and
//! on a server most of a statement is its fixed cost: round trip, driver,
//! planning, the hand-off to a connection's worker. [`Multiverse::proofs`]
//! answers any number of proofs in those same two statements, so a server
//! that collects the requests arriving together pays for them once. The
//! collecting is the same as the writer's coalescing: while `reads`
//! batches are being read, new requests wait, and the next read takes all
//! of them (up to a bound). A lone request is read at once, as alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::{LeafKey, Multiverse, MultiverseResult, Universe, UniverseProof};
use crate::store::ForestStore;

/// Reads at once by default: one per two cores the process may use, at
/// least one.
///
/// Fewer reads make larger batches, and on the 2 vCPUs of the benchmarks
/// (docs/benchmarks/federation.md) one read at a time answered the most
/// proofs on SQLite and Postgres (at 10^6 leaves, 16 clients: 4,215 and
/// 3,851 proofs/s, against 3,689 and 3,020 with two); a read is one
/// statement on one connection, so a larger machine runs more of them.
pub fn default_proof_reads() -> usize {
    std::thread::available_parallelism().map_or(1, |cores| (cores.get() / 2).max(1))
}

/// Proofs in one read at most by default.
pub const DEFAULT_PROOF_BATCH: usize = 256;

/// [`Multiverse::proof`] for many concurrent callers, in shared reads.
///
/// At most `reads` reads run at once ([`with_bounds`](Self::with_bounds));
/// requests made meanwhile wait and are answered by the next read, up to
/// `batch` of them in one [`Multiverse::proofs`]
/// (each proof then of that read's state). A read that fails is made
/// again for each proof alone (all at once), so each caller gets its own
/// answer or error. A request whose caller went away (a timeout, a
/// cancelled call) before its read is not read. Clones share the queue.
///
/// Reads run on tasks of the current Tokio runtime; called outside one,
/// [`proof`](Self::proof) reads alone.
pub struct ProofReader<S: ForestStore> {
    shared: Arc<Shared<S>>,
}

impl<S: ForestStore> Clone for ProofReader<S> {
    fn clone(&self) -> Self {
        ProofReader {
            shared: self.shared.clone(),
        }
    }
}

impl<S: ForestStore + std::fmt::Debug> std::fmt::Debug for ProofReader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProofReader")
            .field("multiverse", &self.shared.multiverse)
            .field("reads", &self.shared.reads)
            .field("batch", &self.shared.batch)
            .finish()
    }
}

struct Shared<S: ForestStore> {
    multiverse: Multiverse<S>,
    /// Reads running at once at most.
    reads: usize,
    /// Proofs per read at most.
    batch: usize,
    queue: Mutex<Queue<S>>,
    /// Shared reads made, and the proofs they answered.
    reads_made: AtomicU64,
    proofs_read: AtomicU64,
}

/// What a [`ProofReader`] has done since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProofReaderStats {
    /// Shared reads made ([`Multiverse::proofs`] calls).
    pub reads: u64,
    /// Requests those reads answered (`proofs / reads` is the mean batch).
    pub proofs: u64,
}

/// Requests not yet taken by a read, and the reads running.
struct Queue<S: ForestStore> {
    waiting: Vec<Request<S>>,
    running: usize,
}

/// One caller's proof request and where its answer goes.
struct Request<S: ForestStore> {
    universe: Universe,
    key: LeafKey,
    reply: oneshot::Sender<MultiverseResult<Option<UniverseProof>, S>>,
}

impl<S> ProofReader<S>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + 'static,
{
    /// A reader of `multiverse`'s proofs with the default bounds
    /// ([`default_proof_reads`], [`DEFAULT_PROOF_BATCH`]).
    pub fn new(multiverse: Multiverse<S>) -> Self {
        Self::with_bounds(multiverse, default_proof_reads(), DEFAULT_PROOF_BATCH)
    }

    /// A reader running at most `reads` reads at once and putting at
    /// most `batch` proofs in one (each at least 1): more reads use more
    /// of the store's connections and cores, fewer make larger batches.
    pub fn with_bounds(multiverse: Multiverse<S>, reads: usize, batch: usize) -> Self {
        ProofReader {
            shared: Arc::new(Shared {
                multiverse,
                reads: reads.max(1),
                batch: batch.max(1),
                queue: Mutex::new(Queue {
                    waiting: Vec::new(),
                    running: 0,
                }),
                reads_made: AtomicU64::new(0),
                proofs_read: AtomicU64::new(0),
            }),
        }
    }

    /// Reads made and requests answered so far.
    pub fn stats(&self) -> ProofReaderStats {
        ProofReaderStats {
            reads: self.shared.reads_made.load(Ordering::Relaxed),
            proofs: self.shared.proofs_read.load(Ordering::Relaxed),
        }
    }

    /// The multiverse read.
    pub fn multiverse(&self) -> &Multiverse<S> {
        &self.shared.multiverse
    }

    /// [`Multiverse::proof`] of `key` in `universe`, read with the
    /// requests of other callers made meanwhile (outside a Tokio runtime,
    /// read alone).
    pub async fn proof(
        &self,
        universe: &Universe,
        key: &LeafKey,
    ) -> MultiverseResult<Option<UniverseProof>, S> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.shared.multiverse.proof(universe, key).await;
        };
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut queue = self.shared.lock();
            queue.waiting.push(Request {
                universe: *universe,
                key: *key,
                reply,
            });
            if queue.running < self.shared.reads {
                queue.running += 1;
                Some(self.shared.take(&mut queue))
            } else {
                None
            }
        };
        if let Some(batch) = start {
            // Counted out by the guard even if the task never runs (its
            // runtime shut down first): the guard is the task's argument.
            let running = Running {
                shared: self.shared.clone(),
                armed: true,
            };
            runtime.spawn(read(running, batch));
        }
        match answer.await {
            Ok(answer) => answer,
            // The read's task ended without answering (it panicked, or
            // its runtime shut down): read alone.
            Err(_) => self.shared.multiverse.proof(universe, key).await,
        }
    }
}

impl<S: ForestStore> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, Queue<S>> {
        // The queue is only moved in and out of under the lock; a panic
        // elsewhere leaves it whole.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next batch: the oldest waiting requests whose callers still
    /// wait (a caller that timed out or went away is not read for), up to
    /// the bound.
    fn take(&self, queue: &mut Queue<S>) -> Vec<Request<S>> {
        queue.waiting.retain(|request| !request.reply.is_closed());
        if queue.waiting.len() <= self.batch {
            std::mem::take(&mut queue.waiting)
        } else {
            queue.waiting.drain(..self.batch).collect()
        }
    }
}

/// A read task's place among the `reads` running: counted out when the
/// task ends without finding the queue empty (it unwound, or its runtime
/// dropped it, run or not), and then the requests still waiting are
/// dropped (no read may be left to take them): their callers, and those of
/// the batch it held, find their answers dropped and read alone.
struct Running<S: ForestStore> {
    shared: Arc<Shared<S>>,
    armed: bool,
}

impl<S: ForestStore> Drop for Running<S> {
    fn drop(&mut self) {
        if self.armed {
            let mut queue = self.shared.lock();
            queue.running = queue.running.saturating_sub(1);
            drop(std::mem::take(&mut queue.waiting));
        }
    }
}

/// A read task: answers `batch`, then every batch that waited meanwhile,
/// and ends when none is left (counted out under the same lock that
/// queues requests, so none is left behind).
async fn read<S>(mut running: Running<S>, mut batch: Vec<Request<S>>)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + 'static,
{
    let shared = running.shared.clone();
    loop {
        shared.reads_made.fetch_add(1, Ordering::Relaxed);
        shared
            .proofs_read
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        answer(&shared.multiverse, batch).await;
        let mut queue = shared.lock();
        batch = shared.take(&mut queue);
        if batch.is_empty() {
            queue.running = queue.running.saturating_sub(1);
            running.armed = false;
            return;
        }
    }
}

/// Answers every request of `batch` from one read. If that read fails,
/// each request is read alone, all at once on tasks of their own (so that
/// every caller gets its own answer or error, and a store that is down
/// costs the batch one wait, not one per request).
async fn answer<S>(multiverse: &Multiverse<S>, batch: Vec<Request<S>>)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + 'static,
{
    let wanted: Vec<(Universe, LeafKey)> = batch.iter().map(|r| (r.universe, r.key)).collect();
    match multiverse.proofs(&wanted).await {
        Ok(proofs) if proofs.len() == batch.len() => {
            for (request, proof) in batch.into_iter().zip(proofs) {
                // A caller that went away needs no answer.
                let _ = request.reply.send(Ok(proof));
            }
        }
        _ => {
            for request in batch {
                if request.reply.is_closed() {
                    continue;
                }
                let multiverse = multiverse.clone();
                tokio::spawn(async move {
                    let proof = multiverse.proof(&request.universe, &request.key).await;
                    let _ = request.reply.send(proof);
                });
            }
        }
    }
}
