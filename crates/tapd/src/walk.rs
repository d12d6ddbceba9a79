//! The walk of one tapd namespace from its root: chunks of hashes per
//! query, each node's height learnt on the way down, every row checked
//! against where it sits, leaves handed on in batches.
//!
//! Pending nodes sit on a stack and are fetched a chunk at a time from its
//! top, so the walk goes deep before it goes wide: memory holds about
//! `depth × chunk` pending nodes, never a whole level or the table.
//!
//! Two strengths of checking: `Import` checks what costs one hash per row
//! (branch hashes, leaf positions, missing rows) and leaves the leaves'
//! hashes to the rebuilt root, which proves them all at once; `Audit` also
//! lifts every leaf to its height and adds up every branch's children, to
//! name the row at fault.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::task::Poll;

use tokio::task::JoinHandle;

use crate::empty::is_empty_hash;
use crate::error::{Corruption, TapdError};
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::lift::{Lift, lift_tagged};
use crate::node::ComputedNode;
use crate::position::Position;
use crate::source::{SideReader, SideRows, Snapshot, hash_of};

/// How much the walk checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Cheap checks; stop at the first problem.
    Import,
    /// Every check; keep going past problems.
    Audit,
}

/// Where the walk's leaves go.
pub(crate) trait LeafSink {
    /// The sink's error.
    type Error;
    /// Takes a batch of leaves.
    fn take(&mut self, batch: Vec<(Key, Leaf)>) -> impl Future<Output = Result<(), Self::Error>>;
}

/// Leaves per batch handed to [`Discard`].
pub(crate) const DISCARD_BATCH: usize = 4096;

/// A sink that drops the leaves (audits, and imports the target already
/// holds).
pub(crate) struct Discard;

impl LeafSink for Discard {
    type Error = std::convert::Infallible;
    async fn take(&mut self, _batch: Vec<(Key, Leaf)>) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Why a walk stopped.
pub(crate) enum WalkError<E> {
    /// The source failed, or (in `Import` mode) a row is damaged.
    Source(TapdError),
    /// The sink failed.
    Sink(E),
}

impl<E> From<TapdError> for WalkError<E> {
    fn from(e: TapdError) -> Self {
        WalkError::Source(e)
    }
}

/// What a walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Walked {
    /// tapd's root (hash and the root row's sum); `None` without a root row.
    pub root: Option<ComputedNode>,
    /// Leaves handed to the sink.
    pub leaves: u64,
    /// Rows the root reaches.
    pub reached: u64,
    /// Rows of the namespace.
    pub rows: u64,
    /// Problems (`Audit` mode; `Import` stops at the first).
    pub problems: Vec<Corruption>,
}

impl Walked {
    /// Rows no root reaches.
    pub fn unreachable(&self) -> u64 {
        self.rows.saturating_sub(self.reached)
    }
}

/// A node to fetch: where it sits, the hash its parent holds, and the
/// parent (for the sum check).
#[derive(Clone, Copy)]
struct Pending {
    position: Position,
    hash: Hash,
    parent: Option<Position>,
}

/// A branch whose children are not all in yet (`Audit` mode).
struct OpenBranch {
    hash: Hash,
    stored: u64,
    children: u128,
    waiting: u8,
    /// A child could not be trusted: its sum is not checked.
    broken: bool,
}

/// The walk's running state.
struct Walk<'s, K> {
    mode: Mode,
    namespace: String,
    sink: &'s mut K,
    batch: Vec<(Key, Leaf)>,
    batch_size: usize,
    stack: Vec<Pending>,
    open: HashMap<Position, OpenBranch>,
    out: Walked,
}

/// Walks `snapshot`'s namespace, handing leaves to `sink` in batches of
/// `batch_size`.
pub(crate) async fn walk<K: LeafSink>(
    snapshot: &mut Snapshot,
    mode: Mode,
    sink: &mut K,
    batch_size: usize,
) -> Result<Walked, WalkError<K::Error>> {
    let rows = snapshot.count_rows().await?;
    let root = snapshot.root().await?;
    let mut w = Walk {
        mode,
        namespace: snapshot.namespace().to_owned(),
        sink,
        batch: Vec::new(),
        batch_size: batch_size.max(1),
        stack: Vec::new(),
        open: HashMap::new(),
        out: Walked {
            root: None,
            leaves: 0,
            reached: 0,
            rows,
            problems: Vec::new(),
        },
    };
    let Some(root) = root else {
        return Ok(w.out);
    };
    let found = snapshot.fetch(vec![root]).await?;
    let Some(row) = found.get(&root) else {
        w.problem(Corruption::RootMissing {
            namespace: w.namespace.clone(),
            hash: root,
        })?;
        return Ok(w.out);
    };
    w.out.root = Some(ComputedNode::new(root, row.sum));
    w.stack.push(Pending {
        position: Position::ROOT,
        hash: root,
        parent: None,
    });
    let readers = match mode {
        Mode::Import => snapshot.side_readers(SIDE_READERS).await?,
        Mode::Audit => Vec::new(),
    };
    if readers.is_empty() {
        w.walk_on_snapshot(snapshot).await?;
    } else {
        w.walk_on_readers(snapshot, readers).await?;
    }
    w.flush().await?;
    Ok(w.out)
}

/// Side readers an import reads a SQLite source with, each on a thread of
/// its own (sqlx's worker), so this many chunks are read at once while
/// the walk checks the one before them.
const SIDE_READERS: usize = 3;

/// Reads in flight on side readers, oldest first; dropped, they are
/// aborted (a failed walk leaves nothing reading).
struct InFlight(VecDeque<(Vec<Pending>, SideRead)>);

/// A side reader's read of a chunk, in its task.
type SideRead = JoinHandle<(SideReader, Result<SideRows, TapdError>)>;

impl Drop for InFlight {
    fn drop(&mut self) {
        for (_, read) in &self.0 {
            read.abort();
        }
    }
}

/// The distinct hashes of `chunk`, sorted (the order the source reads
/// best).
fn hashes_of(chunk: &[Pending]) -> Vec<Hash> {
    let mut hashes: Vec<Hash> = chunk.iter().map(|p| p.hash).collect();
    hashes.sort_unstable();
    hashes.dedup();
    hashes
}

impl<K: LeafSink> Walk<'_, K> {
    /// The walk on the snapshot alone: one chunk is fetched while the one
    /// before it is checked, so the database works on the next rows
    /// (SQLite in sqlx's worker thread) while this task hashes the last
    /// ones. The next chunk is taken from the stack before the checked
    /// chunk's children go on it, so the walk is depth-first one chunk
    /// late; memory stays about `depth × chunk`.
    async fn walk_on_snapshot(
        &mut self,
        snapshot: &mut Snapshot,
    ) -> Result<(), WalkError<K::Error>> {
        let chunk_size = snapshot.chunk();
        let mut current = self.take_chunk(chunk_size);
        let mut rows = snapshot.fetch(hashes_of(&current)).await?;
        while !current.is_empty() {
            let next = self.take_chunk(chunk_size);
            if next.is_empty() {
                // Nothing else pending: this chunk's children are the next.
                self.check(&current, &rows).await?;
                current = self.take_chunk(chunk_size);
                rows = snapshot.fetch(hashes_of(&current)).await?;
                continue;
            }
            let mut fetch = std::pin::pin!(snapshot.fetch(hashes_of(&next)));
            // Poll once so the query is on its way before the checks run.
            let early = std::future::poll_fn(|cx| Poll::Ready(fetch.as_mut().poll(cx))).await;
            self.check(&current, &rows).await?;
            rows = match early {
                Poll::Ready(done) => done?,
                Poll::Pending => fetch.await?,
            };
            current = next;
        }
        Ok(())
    }

    /// The walk on side readers: every idle reader takes the next chunk
    /// from the stack, in a task of its own (the rows are decoded there,
    /// off this task), and the oldest read is checked as soon as it is in.
    /// The snapshot answers what a reader misses. Memory stays about
    /// `depth × chunk`, plus a chunk per reader.
    async fn walk_on_readers(
        &mut self,
        snapshot: &mut Snapshot,
        mut idle: Vec<SideReader>,
    ) -> Result<(), WalkError<K::Error>> {
        let chunk_size = snapshot.chunk();
        let mut in_flight = InFlight(VecDeque::with_capacity(idle.len()));
        loop {
            while !self.stack.is_empty() {
                let Some(reader) = idle.pop() else { break };
                let chunk = self.take_chunk(chunk_size);
                let read = tokio::spawn(reader.fetch(hashes_of(&chunk)));
                in_flight.0.push_back((chunk, read));
            }
            let Some((chunk, read)) = in_flight.0.pop_front() else {
                return Ok(());
            };
            let (reader, got) = match read.await {
                Ok(done) => done,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Cancelled: the runtime is shutting down under the walk.
                Err(_) => return Err(TapdError::Sql(sqlx::Error::WorkerCrashed).into()),
            };
            idle.push(reader);
            let (mut rows, missed) = got?;
            if !missed.is_empty() {
                rows.extend(snapshot.fetch(missed).await?);
            }
            self.check(&chunk, &rows).await?;
        }
    }
}

/// What a visited node gives its parent's sum check: its sum, or nothing
/// when it could not be trusted.
type Credit = Option<u64>;

impl<K: LeafSink> Walk<'_, K> {
    /// Records `p` (in `Audit` mode) or stops with it.
    fn problem(&mut self, p: Corruption) -> Result<(), TapdError> {
        match self.mode {
            Mode::Import => Err(p.into()),
            Mode::Audit => {
                self.out.problems.push(p);
                Ok(())
            }
        }
    }

    /// Reports the fault `make` builds for node `p`.
    fn fault(
        &mut self,
        p: &Pending,
        make: impl FnOnce(String, Hash, Position) -> Corruption,
    ) -> Result<(), TapdError> {
        let fault = make(self.namespace.clone(), p.hash, p.position);
        self.problem(fault)
    }

    /// Checks a fetched chunk and hands on a full batch of leaves.
    async fn check(
        &mut self,
        chunk: &[Pending],
        rows: &HashMap<Hash, crate::TapdRow>,
    ) -> Result<(), WalkError<K::Error>> {
        self.out.reached += rows.len() as u64;
        self.visit(chunk, rows)?;
        if self.batch.len() >= self.batch_size {
            self.flush().await?;
        }
        Ok(())
    }

    /// Takes up to `size` pending nodes from the top of the stack.
    fn take_chunk(&mut self, size: usize) -> Vec<Pending> {
        let take = self.stack.len().min(size);
        self.stack.split_off(self.stack.len() - take)
    }

    async fn flush(&mut self) -> Result<(), WalkError<K::Error>> {
        if !self.batch.is_empty() {
            let batch = std::mem::take(&mut self.batch);
            self.sink.take(batch).await.map_err(WalkError::Sink)?;
        }
        Ok(())
    }

    /// Checks the chunk's nodes against their rows, queues their
    /// children, and settles their parents' sums.
    fn visit(
        &mut self,
        chunk: &[Pending],
        rows: &HashMap<Hash, crate::TapdRow>,
    ) -> Result<(), TapdError> {
        let mut credits: Vec<(Option<Position>, Credit)> = Vec::with_capacity(chunk.len());
        let mut lifts: Vec<((usize, Hash, Position), Lift)> = Vec::new();
        for p in chunk {
            let level = p.position.level();
            let Some(row) = rows.get(&p.hash) else {
                credits.push((p.parent, None));
                self.fault(p, |namespace, hash, position| Corruption::MissingRow {
                    namespace,
                    hash,
                    position,
                })?;
                continue;
            };
            let malformed = Corruption::Malformed {
                namespace: self.namespace.clone(),
                hash: p.hash,
                position: p.position,
            };
            if let Some(key) = &row.key {
                let (Some(key), Some(value)) = (hash_of(key), &row.value) else {
                    self.problem(malformed)?;
                    credits.push((p.parent, None));
                    continue;
                };
                let key = Key(key.0);
                if Position::new(level, &key) != p.position {
                    credits.push((p.parent, None));
                    self.fault(p, |namespace, hash, position| Corruption::WrongPosition {
                        namespace,
                        hash,
                        position,
                    })?;
                    continue;
                }
                let leaf = Leaf::new(value.clone(), row.sum);
                if self.mode == Mode::Audit {
                    let lift = Lift::new(leaf.hash(), row.sum, key, MAX_LEVEL, level);
                    lifts.push(((credits.len(), p.hash, p.position), lift));
                }
                credits.push((p.parent, Some(row.sum)));
                self.out.leaves += 1;
                self.batch.push((key, leaf));
                continue;
            }
            let children = (
                row.left.as_deref().and_then(hash_of),
                row.right.as_deref().and_then(hash_of),
            );
            let (Some(left), Some(right)) = children else {
                self.problem(malformed)?;
                credits.push((p.parent, None));
                continue;
            };
            if level >= MAX_LEVEL {
                self.problem(malformed)?;
                credits.push((p.parent, None));
                continue;
            }
            let hash_ok = branch_hash(&left, &right, row.sum) == p.hash;
            if !hash_ok {
                self.problem(Corruption::BranchHash {
                    namespace: self.namespace.clone(),
                    hash: p.hash,
                    position: p.position,
                })?;
            }
            let mut waiting = 0u8;
            for (side, child) in [(false, left), (true, right)] {
                if !is_empty_hash(level + 1, &child) {
                    waiting += 1;
                    self.stack.push(Pending {
                        position: p.position.child(side),
                        hash: child,
                        parent: Some(p.position),
                    });
                }
            }
            if self.mode == Mode::Audit {
                self.open.insert(
                    p.position,
                    OpenBranch {
                        hash: p.hash,
                        stored: row.sum,
                        children: 0,
                        waiting,
                        broken: false,
                    },
                );
                if waiting == 0 {
                    self.settle(p.position)?;
                }
            }
            credits.push((p.parent, hash_ok.then_some(row.sum)));
        }
        if self.mode == Mode::Import {
            return Ok(());
        }
        // A tapd walk runs at the default lanes.
        let lanes = ms_smt::Tuning::default().hash_lanes();
        for ((i, hash, position), lift) in lift_tagged(lifts, lanes) {
            if lift.hash != hash {
                self.problem(Corruption::LeafMismatch {
                    namespace: self.namespace.clone(),
                    hash,
                    position,
                })?;
                if let Some(c) = credits.get_mut(i) {
                    c.1 = None;
                }
            }
        }
        for (parent, credit) in credits {
            let Some(parent) = parent else { continue };
            if let Some(open) = self.open.get_mut(&parent) {
                match credit {
                    Some(sum) => open.children += u128::from(sum),
                    None => open.broken = true,
                }
                open.waiting = open.waiting.saturating_sub(1);
                if open.waiting == 0 {
                    self.settle(parent)?;
                }
            }
        }
        Ok(())
    }

    /// Checks a branch whose children are all in.
    fn settle(&mut self, position: Position) -> Result<(), TapdError> {
        let Some(open) = self.open.remove(&position) else {
            return Ok(());
        };
        if !open.broken && u128::from(open.stored) != open.children {
            self.problem(Corruption::BranchSum {
                namespace: self.namespace.clone(),
                hash: open.hash,
                position,
                stored: open.stored,
                children: open.children,
            })?;
        }
        Ok(())
    }
}
