//! Export and import: a tree as verifiable chunks.
//!
//! An export cuts the tree at one level `L`. The [`Trunk`] lists, for every
//! non-empty subtree at level `L` (of the abstract tree, whatever the
//! layout), its position and (hash, sum); the root recomputes from them
//! alone. Each [`Chunk`] holds the leaves of one such subtree, and checks
//! against its trunk entry by rebuilding that subtree's hash from its
//! leaves.
//!
//! An [`Import`] fills an empty namespace from a trunk and its chunks, in
//! any order, one bounded transaction per chunk, into a staging namespace
//! nobody reads. A chunk that does not check against the trunk is refused
//! before anything of it is written. When every chunk is in and the
//! staging root equals the trunk's root, the staging tree becomes the
//! target's in one step ([`BulkStore::swap_in_from`]). An interrupted
//! import resumes: the chunks already in staging are recognised by their
//! subtree hashes.
//!
//! ```text
//!   level 0        root                      Trunk: root, L, [(P, hash, sum)]
//!   ...           /    \
//!   level L     P1  P2  P3 ...               Chunk Pi: leaves under Pi
//! ```
#![deny(clippy::arithmetic_side_effects)]

use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::descent::NodeCache;
use crate::descent::NodeSource;
use crate::empty::empty_hash;
use crate::error::{PlanError, TreeError};
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node, compacted_hash};
use crate::position::Position;
use crate::progress::{Meter, ProgressOperation};
use crate::store::{BulkStore, TreeStore};
use crate::tree::handle::Res;
use crate::tree::traced::{ErrorKind, Traced};
use crate::tree::{Tree, View};
use crate::universe::copy::staging_name;

const TRUNK_MAGIC: &[u8; 4] = b"MSTK";
const CHUNK_MAGIC: &[u8; 4] = b"MSCH";
const FORMAT: u8 = 1;

/// The top of an exported tree: the root, the cut level, and every
/// non-empty subtree at that level in tree order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trunk {
    /// The tree's root.
    pub root: ComputedNode,
    /// The cut level (0 to 256).
    pub level: usize,
    /// The non-empty subtrees at `level`, in tree order: position and
    /// (hash, sum).
    pub chunks: Vec<(Position, ComputedNode)>,
}

/// The leaves of one subtree at a trunk's cut level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The subtree's position.
    pub position: Position,
    /// Its leaves, in tree order.
    pub leaves: Vec<(Key, Leaf)>,
}

/// Why a trunk, a chunk or an import is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// The bytes end early.
    #[error("truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// Bytes are left after the encoding.
    #[error("{extra} trailing bytes")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// Not a trunk or chunk of this format.
    #[error("unknown magic or format")]
    BadHeader,
    /// The cut level is above 256.
    #[error("cut level {0} is outside 0..=256")]
    BadLevel(usize),
    /// A position has bits set below its level, or another level.
    #[error("position {0:?} is not canonical")]
    BadPosition(Position),
    /// Trunk entries are not in strict tree order (or repeat).
    #[error("trunk entries are not in strict tree order at {0:?}")]
    Unordered(Position),
    /// A trunk entry is the empty subtree.
    #[error("trunk entry {0:?} is empty")]
    EmptyEntry(Position),
    /// The trunk's entries do not compute its root.
    #[error("trunk entries compute {computed:?}, the trunk claims {claimed:?}")]
    RootMismatch {
        /// The root the trunk states.
        claimed: ComputedNode,
        /// What its entries compute to.
        computed: ComputedNode,
    },
    /// A sum overflowed u64 while rebuilding.
    #[error("sums overflow u64")]
    Overflow,
    /// A chunk at a position the trunk does not list.
    #[error("no trunk entry at {0:?}")]
    UnknownChunk(Position),
    /// A chunk key lies outside the chunk's subtree.
    #[error("key {key} lies outside the chunk at {position:?}")]
    KeyOutside {
        /// The chunk.
        position: Position,
        /// The key.
        key: Key,
    },
    /// Chunk keys are not in strict tree order (or repeat).
    #[error("chunk keys are not in strict tree order at {0}")]
    UnorderedKeys(Key),
    /// A chunk holds an empty leaf.
    #[error("chunk holds an empty leaf at {0}")]
    EmptyLeaf(Key),
    /// A chunk's leaves do not rebuild its trunk entry.
    #[error("chunk at {position:?} computes {computed:?}, the trunk lists {expected:?}")]
    ChunkMismatch {
        /// The chunk.
        position: Position,
        /// The trunk entry.
        expected: ComputedNode,
        /// What its leaves compute to.
        computed: ComputedNode,
    },
}

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError<E: std::error::Error + 'static> {
    /// The trunk or a chunk does not check; nothing of it was written.
    #[error(transparent)]
    Refused(#[from] ExportError),
    /// The target namespace is not empty (or has pins).
    #[error("the target namespace is not empty")]
    TargetNotEmpty,
    /// `finish` was called with chunks missing.
    #[error("{missing} chunks are not imported yet")]
    Incomplete {
        /// How many.
        missing: usize,
    },
    /// The staging tree does not have the trunk's root after every chunk
    /// (someone else wrote to it); nothing was made visible.
    #[error("the staging tree has root {got:?}, the trunk {expected:?}")]
    FinalRootMismatch {
        /// The trunk's root.
        expected: ComputedNode,
        /// The staging root.
        got: ComputedNode,
    },
    /// The store failed.
    #[error(transparent)]
    Tree(#[from] TreeError<E>),
}

impl<E: std::error::Error + 'static> ErrorKind for ImportError<E> {
    fn kind(&self) -> &'static str {
        match self {
            ImportError::Refused(_) => "refused",
            ImportError::TargetNotEmpty => "target_not_empty",
            ImportError::Incomplete { .. } => "incomplete",
            ImportError::FinalRootMismatch { .. } => "final_root_mismatch",
            ImportError::Tree(e) => e.kind(),
        }
    }
}

/// (hash, sum) of the subtree at `level` holding exactly `leaves` (tree
/// order, distinct, all under one position at `level`).
fn subtree_root(level: usize, leaves: &[(Key, Leaf)]) -> Result<ComputedNode, ExportError> {
    match leaves {
        [] => Ok(ComputedNode::empty(level)),
        [(key, leaf)] => Ok(ComputedNode::new(
            compacted_hash(level, key, leaf),
            leaf.sum(),
        )),
        _ if level >= MAX_LEVEL => Err(ExportError::Overflow),
        _ => {
            let split = leaves.partition_point(|(k, _)| !k.bit(level));
            let (left, right) = leaves.split_at(split);
            let below = level.saturating_add(1);
            join(subtree_root(below, left)?, subtree_root(below, right)?)
        }
    }
}

fn join(l: ComputedNode, r: ComputedNode) -> Result<ComputedNode, ExportError> {
    let sum = l.sum.checked_add(r.sum).ok_or(ExportError::Overflow)?;
    Ok(ComputedNode::new(branch_hash(&l.hash, &r.hash, sum), sum))
}

/// The root over `entries` (positions at `cut`, tree order) from `level` down.
fn fold(
    level: usize,
    cut: usize,
    entries: &[(Position, ComputedNode)],
) -> Result<ComputedNode, ExportError> {
    match entries {
        [] => Ok(ComputedNode::empty(level)),
        [(_, node)] if level == cut => Ok(*node),
        _ if level >= cut => Err(ExportError::Unordered(entries[0].0)),
        _ => {
            let split = entries.partition_point(|(p, _)| !p.path().bit(level));
            let (left, right) = entries.split_at(split);
            let below = level.saturating_add(1);
            join(fold(below, cut, left)?, fold(below, cut, right)?)
        }
    }
}

impl Trunk {
    /// Checks the trunk on its own: canonical positions at its level in
    /// strict tree order, no empty entry, and entries that compute its root.
    pub fn check(&self) -> Result<(), ExportError> {
        if self.level > MAX_LEVEL {
            return Err(ExportError::BadLevel(self.level));
        }
        for (i, (pos, node)) in self.chunks.iter().enumerate() {
            if pos.level() != self.level || Position::new(self.level, pos.path()) != *pos {
                return Err(ExportError::BadPosition(*pos));
            }
            if node.hash == empty_hash(self.level) {
                return Err(ExportError::EmptyEntry(*pos));
            }
            if let Some((prev, _)) = i.checked_sub(1).and_then(|j| self.chunks.get(j))
                && prev.path().tree_cmp(pos.path()) != std::cmp::Ordering::Less
            {
                return Err(ExportError::Unordered(*pos));
            }
        }
        let computed = fold(0, self.level, &self.chunks)?;
        if computed != self.root {
            return Err(ExportError::RootMismatch {
                claimed: self.root,
                computed,
            });
        }
        Ok(())
    }

    /// The entry at `position`, if listed.
    pub fn entry(&self, position: &Position) -> Option<ComputedNode> {
        self.chunks
            .binary_search_by(|(p, _)| p.path().tree_cmp(position.path()))
            .ok()
            .and_then(|i| self.chunks.get(i))
            .filter(|(p, _)| p == position)
            .map(|(_, n)| *n)
    }

    /// The cut level that gives chunks of about `per_chunk` leaves in a
    /// tree of `leaves` leaves (keys spread evenly, as hashed keys are).
    pub fn level_for(leaves: u64, per_chunk: u64) -> usize {
        let chunks = leaves.div_ceil(per_chunk.max(1)).max(1);
        (u64::BITS.saturating_sub(chunks.saturating_sub(1).leading_zeros())) as usize
    }

    /// The wire encoding: `"MSTK" | 1 | level (be16) | root hash | root sum
    /// (be64) | count (be64) | count × (position path (32) | hash | sum
    /// (be64))`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.chunks.len().saturating_mul(72).saturating_add(64));
        out.extend_from_slice(TRUNK_MAGIC);
        out.push(FORMAT);
        out.extend_from_slice(&(self.level as u16).to_be_bytes());
        out.extend_from_slice(&self.root.hash.0);
        out.extend_from_slice(&self.root.sum.to_be_bytes());
        out.extend_from_slice(&(self.chunks.len() as u64).to_be_bytes());
        for (pos, node) in &self.chunks {
            out.extend_from_slice(&pos.path().0);
            out.extend_from_slice(&node.hash.0);
            out.extend_from_slice(&node.sum.to_be_bytes());
        }
        out
    }

    /// Strict decoding of [`encode`](Self::encode), then [`check`](Self::check).
    pub fn decode(bytes: &[u8]) -> Result<Trunk, ExportError> {
        let mut r = Reader::new(bytes);
        let level = r.header(TRUNK_MAGIC)?;
        let root = ComputedNode::new(r.hash()?, r.u64()?);
        let count = r.u64()?;
        // Each entry is 72 bytes: a count the input cannot hold is refused
        // before anything is allocated.
        let count = r.fits(count, 72)?;
        let mut chunks = Vec::with_capacity(count);
        for _ in 0..count {
            let path = Key(r.hash()?.0);
            let pos = Position::new(level, &path);
            if *pos.path() != path {
                return Err(ExportError::BadPosition(pos));
            }
            chunks.push((pos, ComputedNode::new(r.hash()?, r.u64()?)));
        }
        r.finish()?;
        let trunk = Trunk {
            root,
            level,
            chunks,
        };
        trunk.check()?;
        Ok(trunk)
    }
}

impl Chunk {
    /// Checks the chunk against `trunk`: a listed position, keys under it
    /// in strict tree order, no empty leaf, and leaves that rebuild the
    /// trunk's entry.
    pub fn check(&self, trunk: &Trunk) -> Result<(), ExportError> {
        let expected = trunk
            .entry(&self.position)
            .ok_or(ExportError::UnknownChunk(self.position))?;
        for (i, (key, leaf)) in self.leaves.iter().enumerate() {
            if Position::new(self.position.level(), key) != self.position {
                return Err(ExportError::KeyOutside {
                    position: self.position,
                    key: *key,
                });
            }
            if leaf.is_empty() {
                return Err(ExportError::EmptyLeaf(*key));
            }
            if let Some((prev, _)) = i.checked_sub(1).and_then(|j| self.leaves.get(j))
                && prev.tree_cmp(key) != std::cmp::Ordering::Less
            {
                return Err(ExportError::UnorderedKeys(*key));
            }
        }
        let computed = subtree_root(self.position.level(), &self.leaves)?;
        if computed != expected {
            return Err(ExportError::ChunkMismatch {
                position: self.position,
                expected,
                computed,
            });
        }
        Ok(())
    }

    /// The wire encoding: `"MSCH" | 1 | level (be16) | position path (32)
    /// | count (be64) | count × (key | sum (be64) | value length (be32) |
    /// value)`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(CHUNK_MAGIC);
        out.push(FORMAT);
        out.extend_from_slice(&(self.position.level() as u16).to_be_bytes());
        out.extend_from_slice(&self.position.path().0);
        out.extend_from_slice(&(self.leaves.len() as u64).to_be_bytes());
        for (key, leaf) in &self.leaves {
            out.extend_from_slice(&key.0);
            out.extend_from_slice(&leaf.sum().to_be_bytes());
            let len = u32::try_from(leaf.value().len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(leaf.value());
        }
        out
    }

    /// Strict decoding of [`encode`](Self::encode). The result still has
    /// to [`check`](Self::check) against its trunk.
    pub fn decode(bytes: &[u8]) -> Result<Chunk, ExportError> {
        let mut r = Reader::new(bytes);
        let level = r.header(CHUNK_MAGIC)?;
        let path = Key(r.hash()?.0);
        let position = Position::new(level, &path);
        if *position.path() != path {
            return Err(ExportError::BadPosition(position));
        }
        let count = r.u64()?;
        // Each leaf takes at least 44 bytes.
        let count = r.fits(count, 44)?;
        let mut leaves = Vec::with_capacity(count);
        for _ in 0..count {
            let key = Key(r.hash()?.0);
            let sum = r.u64()?;
            let len = usize::try_from(r.u32()?).map_err(|_| ExportError::Overflow)?;
            let value = r.take(len)?.to_vec();
            leaves.push((key, Leaf::new(value, sum)));
        }
        r.finish()?;
        Ok(Chunk { position, leaves })
    }
}

/// A cursor over untrusted bytes that never panics.
struct Reader<'a> {
    buf: &'a [u8],
    len: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            len: buf.len(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ExportError> {
        if self.buf.len() < n {
            let read = self.len.saturating_sub(self.buf.len());
            return Err(ExportError::Truncated {
                needed: read.saturating_add(n),
                got: self.len,
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// A file's header: `magic`, the format byte, then its level (at
    /// most [`MAX_LEVEL`]), which it returns.
    fn header(&mut self, magic: &[u8]) -> Result<usize, ExportError> {
        if self.take(4)? != magic || self.byte()? != FORMAT {
            return Err(ExportError::BadHeader);
        }
        let level = usize::from(self.u16()?);
        if level > MAX_LEVEL {
            return Err(ExportError::BadLevel(level));
        }
        Ok(level)
    }

    fn byte(&mut self) -> Result<u8, ExportError> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ExportError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, ExportError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, ExportError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, ExportError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    fn hash(&mut self) -> Result<Hash, ExportError> {
        Ok(Hash(self.array()?))
    }

    /// `count` items of at least `each` bytes, if the rest can hold them.
    fn fits(&self, count: u64, each: usize) -> Result<usize, ExportError> {
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        if count.saturating_mul(each) > self.buf.len() {
            let read = self.len.saturating_sub(self.buf.len());
            return Err(ExportError::Truncated {
                needed: read.saturating_add(count.saturating_mul(each)),
                got: self.len,
            });
        }
        Ok(count)
    }

    fn finish(&self) -> Result<(), ExportError> {
        match self.buf.len() {
            0 => Ok(()),
            extra => Err(ExportError::TrailingBytes { extra }),
        }
    }
}

impl<'t, S: TreeStore, L: Layout> View<'t, S, L> {
    /// The trunk of this view cut at `level` (see the module docs): a walk
    /// of the top `level` levels only. Export from a pinned view so the
    /// trunk and the chunks read later describe one tree.
    pub async fn export_trunk(&self, level: usize) -> Res<Trunk, S> {
        let level = level.min(MAX_LEVEL);
        let span = tracing::debug_span!(
            target: "ms_smt",
            "export_trunk",
            namespace = self.tree.store().namespace(),
            level,
            pinned = self.is_pinned(),
            chunks = Empty,
        );
        let traced = Traced::new(span, self.tree.store());
        let trunk = traced.run(self.tree.store(), self.cut(level)).await?;
        traced.span().record("chunks", trunk.chunks.len());
        Ok(trunk)
    }

    /// [`export_trunk`](Self::export_trunk) at `level` (at most 256),
    /// inside its span.
    async fn cut(&self, level: usize) -> Res<Trunk, S> {
        let mut levels = self
            .tree
            .progress
            .meter(ProgressOperation::ExportTrunk, Some(level as u64));
        let root = self.root().await?;
        let mut cache = NodeCache::new();
        // What sits at each frontier position: a stored node, or a leaf
        // carried down from a compacted leaf above.
        enum At {
            Stored(Hash),
            Lone(Key, Leaf),
        }
        let mut frontier: Vec<(Position, At)> = Vec::new();
        if root != ComputedNode::empty_root() {
            frontier.push((Position::ROOT, At::Stored(root.hash)));
        }
        // Reads the stored frontier nodes no earlier read brought.
        let fill = async |frontier: &[(Position, At)], cache: &mut NodeCache| {
            let want: Vec<(Position, Hash)> = frontier
                .iter()
                .filter_map(|(p, at)| match at {
                    At::Stored(h) if !cache.contains(h) => Some((*p, *h)),
                    _ => None,
                })
                .collect();
            if !want.is_empty() {
                let nodes = self
                    .tree
                    .store()
                    .read_positions(self.target.at, &want)
                    .await
                    .map_err(TreeError::Store)?;
                cache.extend(nodes);
            }
            Ok::<_, TreeError<S::Error>>(())
        };
        for depth in 0..level {
            fill(&frontier, &mut cache).await?;
            let mut next = Vec::with_capacity(frontier.len().saturating_mul(2));
            let below = depth.saturating_add(1);
            for (pos, at) in frontier {
                match at {
                    At::Lone(key, leaf) => {
                        next.push((pos.child(key.bit(depth)), At::Lone(key, leaf)))
                    }
                    At::Stored(hash) => match cache.node(&hash) {
                        Some(Node::Branch { left, right, .. }) => {
                            for (side, child) in [(false, *left), (true, *right)] {
                                if child != empty_hash(below) {
                                    next.push((pos.child(side), At::Stored(child)));
                                }
                            }
                        }
                        Some(Node::Compacted { key, leaf }) => {
                            let key = key.under_path(pos.path(), depth);
                            next.push((pos.child(key.bit(depth)), At::Lone(key, leaf.clone())));
                        }
                        Some(other) => {
                            return Err(PlanError::UnexpectedNode {
                                hash,
                                level: depth,
                                found: other.kind_name(),
                            }
                            .into());
                        }
                        None => return Err(PlanError::MissingNode { hash, level: depth }.into()),
                    },
                }
            }
            frontier = next;
            levels.set(below as u64);
        }
        fill(&frontier, &mut cache).await?;
        let mut chunks = Vec::with_capacity(frontier.len());
        for (pos, at) in frontier {
            let node = match at {
                At::Lone(key, leaf) => {
                    ComputedNode::new(compacted_hash(level, &key, &leaf), leaf.sum())
                }
                At::Stored(hash) => {
                    let node = cache
                        .node(&hash)
                        .ok_or(PlanError::MissingNode { hash, level })?;
                    ComputedNode::new(hash, node.sum())
                }
            };
            chunks.push((pos, node));
        }
        levels.finish();
        Ok(Trunk {
            root,
            level,
            chunks,
        })
    }

    /// The chunk of the subtree at `position`: its leaves.
    pub async fn export_chunk(&self, position: Position) -> Res<Chunk, S> {
        let span = tracing::debug_span!(
            target: "ms_smt",
            "export_chunk",
            namespace = self.tree.store().namespace(),
            level = position.level(),
            pinned = self.is_pinned(),
            leaves = Empty,
        );
        let traced = Traced::new(span, self.tree.store());
        let chunk = traced
            .run(self.tree.store(), async {
                let mut read = self
                    .tree
                    .progress
                    .meter(ProgressOperation::ExportChunk, None);
                let mut pages = self.leaves(*position.path()..=position.last_key());
                let mut leaves = Vec::new();
                loop {
                    let page = pages.next_page().await?;
                    if page.is_empty() {
                        break;
                    }
                    read.add(page.len() as u64);
                    leaves.extend(page.into_iter().map(|e| (e.key, e.leaf)));
                }
                read.finish();
                Ok::<_, TreeError<S::Error>>(Chunk { position, leaves })
            })
            .await?;
        traced.span().record("leaves", chunk.leaves.len());
        Ok(chunk)
    }
}

/// An import in progress into an empty namespace; see the module docs.
#[derive(Debug)]
pub struct Import<'t, S, L> {
    target: &'t Tree<S, L>,
    staging: Tree<S, L>,
    trunk: Trunk,
    /// Per trunk entry (by index), whether its chunk is in.
    done: Vec<bool>,
    /// Chunks in, reported to the target tree's sink.
    meter: Meter,
}

impl<S: BulkStore, L: Layout> Tree<S, L> {
    /// Starts (or resumes) importing the tree `trunk` describes into this
    /// tree's namespace, which must be empty. The trunk is checked first.
    /// Chunks go into the staging namespace `"<name>\u{1f}import"`; those an
    /// earlier, interrupted import of the same trunk left there count as
    /// done, and anything else there is cleared.
    pub async fn import(&self, trunk: Trunk) -> Result<Import<'_, S, L>, ImportError<S::Error>> {
        let span = import_span(self.store(), "start", trunk.chunks.len());
        let traced = Traced::new(span, self.store());
        traced.run(self.store(), self.start_import(trunk)).await
    }

    /// [`import`](Self::import), inside its span.
    async fn start_import(&self, trunk: Trunk) -> Result<Import<'_, S, L>, ImportError<S::Error>> {
        trunk.check()?;
        if self.root().await? != ComputedNode::empty_root() {
            return Err(ImportError::TargetNotEmpty);
        }
        let store = self
            .store()
            .open_namespace(&staging_name(self.store().name(), "import"))
            .map_err(TreeError::Store)?;
        let staging: Tree<S, L> = Tree::new(store);
        let mut done = vec![false; trunk.chunks.len()];
        if staging.root().await? != ComputedNode::empty_root() {
            let positions: Vec<Position> = trunk.chunks.iter().map(|(p, _)| *p).collect();
            let found = staging.view().subtrees(&positions).await?;
            let mut kept = Vec::new();
            for (i, ((pos, node), sub)) in trunk.chunks.iter().zip(&found).enumerate() {
                if sub.computed(trunk.level) == *node {
                    done[i] = true;
                    kept.push((*pos, *node));
                }
            }
            // Resumable only if staging holds exactly the matching chunks.
            let expected = fold(0, trunk.level, &kept)?;
            if staging.root().await? != expected {
                staging.delete_all().await?;
                done.iter_mut().for_each(|d| *d = false);
            }
        }
        let mut meter = self
            .progress
            .meter(ProgressOperation::Import, Some(done.len() as u64));
        let resumed = done.iter().filter(|d| **d).count();
        meter.set(resumed as u64);
        Ok(Import {
            target: self,
            staging,
            trunk,
            done,
            meter,
        })
    }
}

/// The span (DEBUG) of one step of an import into `target`: `step` is
/// `start`, `add` or `finish`; `chunks` counts the trunk's chunks (for
/// `add`, the chunk's leaves). Its counters are the target store's (for
/// `add`, the staging store's, where the chunk is written).
fn import_span<S: TreeStore>(target: &S, step: &'static str, chunks: usize) -> Span {
    tracing::debug_span!(
        target: "ms_smt",
        "import",
        namespace = target.namespace(),
        step,
        chunks,
    )
}

impl<S: BulkStore, L: Layout> Import<'_, S, L> {
    /// The trunk being imported.
    pub fn trunk(&self) -> &Trunk {
        &self.trunk
    }

    /// Positions whose chunks are not in yet.
    pub fn missing(&self) -> Vec<Position> {
        self.trunk
            .chunks
            .iter()
            .zip(&self.done)
            .filter(|(_, d)| !**d)
            .map(|((p, _), _)| *p)
            .collect()
    }

    /// Checks `chunk` against the trunk and, if it holds, writes it into
    /// staging (one `insert_many`). A chunk already in is accepted again
    /// without writing.
    pub async fn add(&mut self, chunk: &Chunk) -> Result<(), ImportError<S::Error>> {
        let span = import_span(self.target.store(), "add", chunk.leaves.len());
        let traced = Traced::new(span, self.staging.store());
        let out = self
            .add_chunk(chunk)
            .instrument(traced.span().clone())
            .await;
        traced.finish(self.staging.store(), &out);
        out
    }

    /// [`add`](Self::add), inside its span.
    async fn add_chunk(&mut self, chunk: &Chunk) -> Result<(), ImportError<S::Error>> {
        chunk.check(&self.trunk)?;
        let i = self
            .trunk
            .chunks
            .binary_search_by(|(p, _)| p.path().tree_cmp(chunk.position.path()))
            .map_err(|_| ExportError::UnknownChunk(chunk.position))?;
        if self.done.get(i).copied().unwrap_or(false) {
            return Ok(());
        }
        self.staging
            .insert_many(chunk.leaves.iter().cloned())
            .await?;
        if let Some(d) = self.done.get_mut(i) {
            *d = true;
        }
        self.meter.add(1);
        Ok(())
    }

    /// Makes the imported tree the target's, once every chunk is in and the
    /// staging root equals the trunk's, in one step. Returns the root.
    pub async fn finish(self) -> Result<ComputedNode, ImportError<S::Error>> {
        let span = import_span(self.target.store(), "finish", self.done.len());
        let target = self.target;
        let traced = Traced::new(span, target.store());
        traced.run(target.store(), self.swap_in()).await
    }

    /// [`finish`](Self::finish), inside its span.
    async fn swap_in(self) -> Result<ComputedNode, ImportError<S::Error>> {
        let missing = self.done.iter().filter(|d| !**d).count();
        if missing > 0 {
            return Err(ImportError::Incomplete { missing });
        }
        let got = self.staging.root().await?;
        if got != self.trunk.root {
            return Err(ImportError::FinalRootMismatch {
                expected: self.trunk.root,
                got,
            });
        }
        if got == ComputedNode::empty_root() {
            // An empty tree: nothing to move, and the target must still be
            // empty.
            return match self.target.root().await? {
                root if root == got => Ok(got),
                _ => Err(ImportError::TargetNotEmpty),
            };
        }
        let taken = self
            .target
            .store()
            .swap_in_from(self.staging.store(), &got)
            .await
            .map_err(TreeError::Store)?;
        if !taken {
            return Err(ImportError::TargetNotEmpty);
        }
        self.meter.finish();
        Ok(got)
    }

    /// Gives up: removes what staging holds.
    pub async fn abort(self) -> Result<(), ImportError<S::Error>> {
        self.staging.delete_all().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::sha256;

    fn key(i: u32) -> Key {
        Key(sha256(&i.to_le_bytes()).0)
    }

    /// A trunk cut at `level` over `n` leaves, and its chunks, built from
    /// the leaves alone.
    fn export(n: u32, level: usize) -> (Trunk, Vec<Chunk>) {
        let mut leaves: Vec<(Key, Leaf)> = (0..n)
            .map(|i| (key(i), Leaf::new(vec![i as u8; 3], u64::from(i) + 1)))
            .collect();
        leaves.sort_by(|a, b| a.0.tree_cmp(&b.0));
        let mut chunks: Vec<Chunk> = Vec::new();
        for (k, l) in leaves {
            let position = Position::new(level, &k);
            match chunks.last_mut() {
                Some(c) if c.position == position => c.leaves.push((k, l)),
                _ => chunks.push(Chunk {
                    position,
                    leaves: vec![(k, l)],
                }),
            }
        }
        let entries: Vec<(Position, ComputedNode)> = chunks
            .iter()
            .map(|c| (c.position, subtree_root(level, &c.leaves).unwrap()))
            .collect();
        let root = fold(0, level, &entries).unwrap();
        let trunk = Trunk {
            root,
            level,
            chunks: entries,
        };
        (trunk, chunks)
    }

    #[test]
    fn trunks_and_chunks_round_trip_and_check() {
        for level in [0, 1, 3, 8] {
            let (trunk, chunks) = export(40, level);
            let all: Vec<(Key, Leaf)> = chunks.iter().flat_map(|c| c.leaves.clone()).collect();
            assert_eq!(trunk.root, subtree_root(0, &all).unwrap(), "level {level}");
            let bytes = trunk.encode();
            assert_eq!(Trunk::decode(&bytes).unwrap(), trunk);
            for chunk in &chunks {
                let bytes = chunk.encode();
                let back = Chunk::decode(&bytes).unwrap();
                assert_eq!(&back, chunk);
                back.check(&trunk).unwrap();
            }
        }
    }

    #[test]
    fn bad_trunk_bytes_are_typed_errors() {
        let (trunk, _) = export(40, 3);
        let bytes = trunk.encode();
        for cut in [0, 4, 5, 7, 39, 48, bytes.len() - 1] {
            assert!(
                matches!(
                    Trunk::decode(&bytes[..cut]),
                    Err(ExportError::Truncated { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            Trunk::decode(&long),
            Err(ExportError::TrailingBytes { extra: 1 })
        );
        let mut magic = bytes.clone();
        magic[0] ^= 1;
        assert_eq!(Trunk::decode(&magic), Err(ExportError::BadHeader));
        // A bit below the cut level set in the first position's path.
        let mut position = bytes.clone();
        position[4 + 1 + 2 + 40 + 8] |= 0x80;
        assert!(matches!(
            Trunk::decode(&position),
            Err(ExportError::BadPosition(_))
        ));
        // A changed entry sum: the root no longer computes.
        let mut sum = bytes.clone();
        let last = sum.len() - 1;
        sum[last] ^= 1;
        assert!(matches!(
            Trunk::decode(&sum),
            Err(ExportError::RootMismatch { .. })
        ));
        // A count no input could hold is refused before allocating.
        let mut count = bytes.clone();
        count[47..55].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            Trunk::decode(&count),
            Err(ExportError::Truncated { .. })
        ));
        // Entries out of order.
        let mut swapped = trunk.clone();
        swapped.chunks.swap(0, 1);
        assert!(matches!(swapped.check(), Err(ExportError::Unordered(_))));
    }

    #[test]
    fn bad_chunks_are_refused() {
        let (trunk, chunks) = export(40, 2);
        let chunk = &chunks[0];
        let mut forged = chunk.clone();
        forged.leaves[0].1 = Leaf::new(b"forged".to_vec(), forged.leaves[0].1.sum());
        assert!(matches!(
            forged.check(&trunk),
            Err(ExportError::ChunkMismatch { .. })
        ));
        let mut short = chunk.clone();
        short.leaves.pop();
        assert!(matches!(
            short.check(&trunk),
            Err(ExportError::ChunkMismatch { .. })
        ));
        let mut outside = chunk.clone();
        outside.leaves.push(chunks[1].leaves[0].clone());
        assert!(matches!(
            outside.check(&trunk),
            Err(ExportError::KeyOutside { .. })
        ));
        let mut twice = chunk.clone();
        twice.leaves.push(chunk.leaves[0].clone());
        assert!(matches!(
            twice.check(&trunk),
            Err(ExportError::UnorderedKeys(_))
        ));
        let mut empty = chunk.clone();
        empty.leaves[0].1 = Leaf::empty();
        assert!(matches!(
            empty.check(&trunk),
            Err(ExportError::EmptyLeaf(_))
        ));
        let mut elsewhere = chunk.clone();
        elsewhere.position = Position::new(2, &Key([0xff; 32]));
        if trunk.entry(&elsewhere.position).is_none() {
            assert!(matches!(
                elsewhere.check(&trunk),
                Err(ExportError::UnknownChunk(_))
            ));
        }
        let bytes = chunk.encode();
        for cut in [3, 10, 50, bytes.len() - 1] {
            assert!(matches!(
                Chunk::decode(&bytes[..cut]),
                Err(ExportError::Truncated { .. })
            ));
        }
    }
}
