//! tapd's universes on a forest: a universe per asset or group and proof
//! type, in the namespace tapd gives it, and the two multiverse trees
//! over their roots, kept in step in the same commit by the forest's
//! links.
//!
//! ```text
//!   multiverse-issuance      leaf at ID bytes: (universe root hash, 1)
//!   multiverse-transfer      leaf at ID bytes: (universe root hash, root sum)
//!        ▲ (links)
//!   issuance-<hex ID bytes>  leaf at sha256(outpoint ‖ script key): (raw proof, amount)
//!   transfer-<hex ID bytes>  leaf at sha256(outpoint ‖ script key): (raw proof, 1)
//!
//!   ms-smt-universe-directory         one leaf per universe (listing, group keys)
//!   <universe namespace>-leaf-keys    one leaf per universe leaf (its key's preimage)
//! ```
//!
//! The universe and multiverse trees are bit-identical to tapd's (see
//! [`layout`] for where each rule comes from). The two index trees hold
//! what tapd keeps in its SQL tables `universe_roots` and
//! `universe_leaves`: a universe key is a hash, so the outpoint and
//! script key it came from (and a group key behind its hash) must be kept
//! beside the tree to be served. Both index trees sum 1 per leaf, so a
//! subtree's sum counts its leaves and a page at any offset is found by
//! descending the sums, not by walking the leaves before it.
//!
//! Every write goes through [`Multiverse::insert`]: the universe's
//! leaves, its index leaves and its directory leaf in one forest commit,
//! the multiverse leaf above it in the same commit. Every read answers
//! from one state of the trees it reads: the roots are read before and
//! after, and a read that saw a writer move them is read again.
//!
//! Deletes are not offered: tapd removes a universe's multiverse leaf
//! when its last leaf goes, while a forest keeps an emptied tree's leaf
//! in its parent (with the empty root), so the two would part there.

pub mod layout;
mod proof_reader;

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock};

pub use layout::{
    DIRECTORY, ISSUANCE_MULTIVERSE, KEY_RECORD_LEN, KEYS_SUFFIX, KeyRecord, LeafKey, OutPoint,
    OutPointError, ProofType, TRANSFER_MULTIVERSE, Universe, UniverseId, UniverseLeaf,
    hash_from_str, parse_namespace,
};
pub use proof_reader::{DEFAULT_PROOF_BATCH, ProofReader, ProofReaderStats, default_proof_reads};

use crate::LinkSum;
use crate::Proof;
use crate::ProvenLeaf;
use crate::descent::Subtree;
use crate::error::TreeError;
use crate::key::{Key, MAX_LEVEL};
use crate::layout::Compacted;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::position::Position;
use crate::store::ForestStore;
use crate::tree::{Forest, ForestWrite, Link, Tree, View};

/// How many times a read is tried again when writers move its trees
/// under it, before it answers [`MultiverseError::Contention`].
pub const READ_ATTEMPTS: u32 = 8;

/// Levels descended per read when finding a leaf by its index (16
/// subtrees per round trip).
const DESCENT_STRIDE: usize = 4;

/// Leaves per page when a read walks a whole index.
const SCAN_PAGE: usize = 4096;

/// Errors of [`Multiverse`] operations.
#[derive(Debug, thiserror::Error)]
pub enum MultiverseError<E: std::error::Error + 'static> {
    /// A tree operation failed.
    #[error(transparent)]
    Tree(#[from] TreeError<E>),
    /// A leaf without a proof: an empty value would delete the leaf.
    #[error("a universe leaf needs a proof (an empty value deletes)")]
    EmptyProof,
    /// A leaf of another asset written to an asset's universe.
    #[error("a leaf of asset {leaf} cannot go into the universe of asset {universe}")]
    AssetMismatch {
        /// The universe's asset ID, hex.
        universe: String,
        /// The leaf's asset ID, hex.
        leaf: String,
    },
    /// An index tree holds a value that is not one of its records.
    #[error("namespace {namespace:?} holds a malformed index record at {key}")]
    BadRecord {
        /// The index namespace.
        namespace: String,
        /// The key, hex.
        key: String,
    },
    /// Writers kept moving the trees under a read.
    #[error("gave up after {attempts} attempts: writers kept moving the trees under the read")]
    Contention {
        /// Attempts made.
        attempts: u32,
    },
}

/// A multiverse operation's result on store `S`.
pub type MultiverseResult<T, S> = Result<T, MultiverseError<<S as ForestStore>::Error>>;

/// Which part of a listing to read: `limit` entries from `offset`, in key
/// order or its reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageQuery {
    /// Entries to skip.
    pub offset: u64,
    /// Most entries to return.
    pub limit: u64,
    /// Largest key first.
    pub descending: bool,
}

/// A page of a listing and the listing's length at the state it was read
/// from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The entries, in the order asked for.
    pub items: Vec<T>,
    /// How many entries the whole listing has.
    pub total: u64,
}

impl<T> Page<T> {
    /// True when entries lie past this page (in the order asked for).
    pub fn has_more(&self, query: &PageQuery) -> bool {
        query.offset.saturating_add(self.items.len() as u64) < self.total
    }
}

/// Universes whose leaf counts [`Multiverse::stats`] reads in one call.
pub const STATS_CHUNK: u64 = 4_096;

/// Aggregate figures of a multiverse ([`Multiverse::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MultiverseStats {
    /// Universes written (an ID's issuance and transfer universes are
    /// two).
    pub universes: u64,
    /// Of them, the universes of asset groups.
    pub group_universes: u64,
    /// Leaves (proofs) in every universe.
    pub leaves: u64,
}

/// A leaf of a universe with what proves it: the universe root and the
/// leaf's proof there, the multiverse root and the universe's proof
/// there, all of one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniverseProof {
    /// The leaf (raw proof, sum).
    pub leaf: Leaf,
    /// The universe's root.
    pub universe_root: ComputedNode,
    /// The leaf's proof in the universe.
    pub universe_proof: Proof,
    /// The root of the universe's multiverse.
    pub multiverse_root: ComputedNode,
    /// The proof of the universe's leaf in the multiverse.
    pub multiverse_proof: Proof,
}

/// The two multiverse links: a universe namespace `"<type>-<64 hex>"` is a
/// child of its type's multiverse at its ID bytes, summed 1 (issuance) or
/// by its root sum (transfer), as tapd's `upsertMultiverseLeafEntry`.
pub fn multiverse_links() -> [Link; 2] {
    let rule = |wanted: ProofType| {
        move |name: &str| match parse_namespace(name) {
            Some((proof_type, bytes)) if proof_type == wanted => Some(Key(bytes)),
            _ => None,
        }
    };
    [
        Link::rule(ISSUANCE_MULTIVERSE, rule(ProofType::Issuance)).with_sum(LinkSum::Fixed(1)),
        Link::rule(TRANSFER_MULTIVERSE, rule(ProofType::Transfer)).with_sum(LinkSum::ChildRoot),
    ]
}

/// tapd's universes and multiverses on one store (see the module docs).
/// Cheap to clone.
pub struct Multiverse<S: ForestStore> {
    forest: Forest<S, Compacted>,
    /// Universes seen in the directory: a universe is never removed from
    /// it, so [`contains`](Multiverse::contains) reads the directory only
    /// for the others (shared by clones).
    known: Arc<RwLock<HashSet<Key>>>,
}

impl<S: ForestStore + Clone> Clone for Multiverse<S> {
    fn clone(&self) -> Self {
        Multiverse {
            forest: self.forest.clone(),
            known: self.known.clone(),
        }
    }
}

impl<S: ForestStore + std::fmt::Debug> std::fmt::Debug for Multiverse<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multiverse")
            .field("forest", &self.forest)
            .finish()
    }
}

impl<S> Multiverse<S>
where
    S: ForestStore + Clone,
    S::Tree: Clone,
{
    /// The universes of `store`, with both multiverse links declared.
    pub fn new(store: S) -> Self {
        let [issuance, transfer] = multiverse_links();
        Multiverse {
            forest: Forest::new(store).with_link(issuance).with_link(transfer),
            known: Arc::default(),
        }
    }

    /// The forest underneath (its links are [`multiverse_links`]).
    pub fn forest(&self) -> &Forest<S, Compacted> {
        &self.forest
    }

    /// Writes `leaves` to `universe` (a leaf at a key already there
    /// replaces it), with their index leaves, the universe's directory
    /// leaf and its multiverse leaf, in one commit. Empty proofs and, in
    /// an asset's universe, leaves of another asset are refused before
    /// anything is written.
    pub async fn insert(
        &self,
        universe: &Universe,
        leaves: &[UniverseLeaf],
    ) -> MultiverseResult<ForestWrite, S> {
        self.insert_many(&[(*universe, leaves)]).await
    }

    /// [`insert`](Self::insert) of several universes in one commit.
    pub async fn insert_many(
        &self,
        batch: &[(Universe, &[UniverseLeaf])],
    ) -> MultiverseResult<ForestWrite, S> {
        let mut writes: Vec<(String, Key, Leaf)> = Vec::new();
        for (universe, leaves) in batch {
            if leaves.is_empty() {
                continue;
            }
            let namespace = universe.namespace();
            let keys = universe.keys_namespace();
            for leaf in leaves.iter() {
                if leaf.proof.is_empty() {
                    return Err(MultiverseError::EmptyProof);
                }
                if let UniverseId::Asset(id) = universe.id
                    && id != leaf.asset_id
                {
                    return Err(MultiverseError::AssetMismatch {
                        universe: hex::encode(id),
                        leaf: hex::encode(leaf.asset_id),
                    });
                }
                let key = leaf.key.universe_key();
                writes.push((namespace.clone(), key, leaf.leaf(universe.proof_type)));
                let record = KeyRecord::of(leaf, universe.proof_type);
                writes.push((keys.clone(), key, record.to_leaf()));
            }
            writes.push((
                DIRECTORY.to_owned(),
                universe.directory_key(),
                universe.directory_leaf(),
            ));
        }
        Ok(self.forest.insert_many(writes).await?)
    }

    /// A tree of the forest.
    fn tree(&self, name: &str) -> MultiverseResult<Tree<S::Tree, Compacted>, S> {
        Ok(self.forest.tree(name)?)
    }

    /// True when `universe` has been written (it is in the directory).
    /// Reads check this first, so that names no write made are never
    /// opened.
    pub async fn contains(&self, universe: &Universe) -> MultiverseResult<bool, S> {
        let found = self.contains_all(std::iter::once(universe)).await?;
        Ok(found.first().copied().unwrap_or(false))
    }

    /// [`contains`](Self::contains) of each of `universes`, in order: the
    /// ones not yet seen in one read of the directory, each asked once.
    async fn contains_all<'u>(
        &self,
        universes: impl Iterator<Item = &'u Universe> + Clone,
    ) -> MultiverseResult<Vec<bool>, S> {
        // A poisoned lock only means a panic elsewhere while it was held;
        // the set is still a set.
        let known = |key: &Key| {
            self.known
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(key)
        };
        let mut unseen: Vec<Key> = Vec::new();
        for universe in universes.clone() {
            let key = universe.directory_key();
            if !known(&key) && !unseen.contains(&key) {
                unseen.push(key);
            }
        }
        if !unseen.is_empty() {
            let leaves = self.tree(DIRECTORY)?.get_many(&unseen).await?;
            let mut set = self.known.write().unwrap_or_else(PoisonError::into_inner);
            for (key, leaf) in unseen.iter().zip(leaves) {
                if !leaf.is_empty() {
                    set.insert(*key);
                }
            }
        }
        Ok(universes.map(|u| known(&u.directory_key())).collect())
    }

    /// The root of `universe`; `None` when it was never written.
    pub async fn root(&self, universe: &Universe) -> MultiverseResult<Option<ComputedNode>, S> {
        if !self.contains(universe).await? {
            return Ok(None);
        }
        let roots = self.forest.roots(&[universe.namespace()]).await?;
        Ok(roots.first().copied())
    }

    /// The root of `proof_type`'s multiverse (the empty tree's root when
    /// no universe of that type was written).
    pub async fn multiverse_root(
        &self,
        proof_type: ProofType,
    ) -> MultiverseResult<ComputedNode, S> {
        let roots = self.forest.roots(&[proof_type.multiverse()]).await?;
        Ok(roots
            .first()
            .copied()
            .unwrap_or_else(ComputedNode::empty_root))
    }

    /// The multiverse leaves of `ids` in `proof_type`'s multiverse, in
    /// order, each ID once; IDs without a universe are left out.
    pub async fn multiverse_leaves(
        &self,
        proof_type: ProofType,
        ids: &[UniverseId],
    ) -> MultiverseResult<Vec<(UniverseId, Leaf)>, S> {
        let mut unique: Vec<UniverseId> = Vec::with_capacity(ids.len());
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            if seen.insert(id.bytes()) {
                unique.push(*id);
            }
        }
        let keys: Vec<Key> = unique.iter().map(|id| Key(id.bytes())).collect();
        let tree = self.tree(proof_type.multiverse())?;
        let leaves = tree.get_many(&keys).await?;
        Ok(unique
            .into_iter()
            .zip(leaves)
            .filter(|(_, leaf)| !leaf.is_empty())
            .collect())
    }

    /// A page of every universe written (both proof types), in the order
    /// of their [`directory keys`](Universe::directory_key), each with its
    /// root; directory and roots are of one state.
    pub async fn universes(
        &self,
        query: PageQuery,
    ) -> MultiverseResult<Page<(Universe, ComputedNode)>, S> {
        let directory = self.tree(DIRECTORY)?;
        for _ in 0..READ_ATTEMPTS {
            let before = directory.root().await?;
            let Some(page) = index_page(&directory.view(), &before, query).await? else {
                continue;
            };
            let universes = page
                .iter()
                .map(|(key, leaf)| directory_universe::<S::Error>(key, leaf))
                .collect::<Result<Vec<_>, _>>()?;
            let mut names: Vec<String> = vec![DIRECTORY.to_owned()];
            names.extend(universes.iter().map(Universe::namespace));
            let roots = self.forest.roots(&names[..]).await?;
            if roots.first() != Some(&before) {
                continue;
            }
            let items = universes
                .into_iter()
                .zip(roots.into_iter().skip(1))
                .collect();
            return Ok(Page {
                items,
                total: before.sum,
            });
        }
        Err(MultiverseError::Contention {
            attempts: READ_ATTEMPTS,
        })
    }

    /// Aggregate figures of every universe: how many, how many of asset
    /// groups, and their leaves. The universes are of one directory state;
    /// their leaf counts are read [`STATS_CHUNK`] universes at a time, each
    /// chunk of one state.
    pub async fn stats(&self) -> MultiverseResult<MultiverseStats, S> {
        let directory = self.tree(DIRECTORY)?;
        'attempt: for _ in 0..READ_ATTEMPTS {
            let before = directory.root().await?;
            let mut stats = MultiverseStats {
                universes: before.sum,
                ..MultiverseStats::default()
            };
            let mut offset = 0;
            while offset < before.sum {
                let query = PageQuery {
                    offset,
                    limit: STATS_CHUNK,
                    descending: false,
                };
                let Some(page) = index_page(&directory.view(), &before, query).await? else {
                    continue 'attempt;
                };
                let mut names = Vec::with_capacity(page.len());
                for (key, leaf) in &page {
                    let universe = directory_universe::<S::Error>(key, leaf)?;
                    if matches!(universe.id, UniverseId::Group(_)) {
                        stats.group_universes += 1;
                    }
                    names.push(universe.keys_namespace());
                }
                let roots = self.forest.roots(&names[..]).await?;
                stats.leaves = roots
                    .iter()
                    .fold(stats.leaves, |n, root| n.saturating_add(root.sum));
                offset = offset.saturating_add(page.len() as u64);
                if page.is_empty() {
                    break;
                }
            }
            if directory.root().await? != before {
                continue;
            }
            return Ok(stats);
        }
        Err(MultiverseError::Contention {
            attempts: READ_ATTEMPTS,
        })
    }

    /// A page of `universe`'s leaf keys, in universe-key order (or its
    /// reverse), with each leaf's asset, hash and sum; empty when the
    /// universe was never written.
    pub async fn leaf_keys(
        &self,
        universe: &Universe,
        query: PageQuery,
    ) -> MultiverseResult<Page<KeyRecord>, S> {
        if !self.contains(universe).await? {
            return Ok(Page {
                items: Vec::new(),
                total: 0,
            });
        }
        let namespace = universe.keys_namespace();
        let keys = self.tree(&namespace)?;
        for _ in 0..READ_ATTEMPTS {
            let before = keys.root().await?;
            let Some(page) = index_page(&keys.view(), &before, query).await? else {
                continue;
            };
            if keys.root().await? != before {
                continue;
            }
            let items = page
                .iter()
                .map(|(key, leaf)| record::<S::Error>(&namespace, key, leaf))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Page {
                items,
                total: before.sum,
            });
        }
        Err(MultiverseError::Contention {
            attempts: READ_ATTEMPTS,
        })
    }

    /// A page of `universe`'s leaves, as [`leaf_keys`](Self::leaf_keys)
    /// orders them, each with its record; index and universe of one state.
    pub async fn leaves(
        &self,
        universe: &Universe,
        query: PageQuery,
    ) -> MultiverseResult<Page<(KeyRecord, Leaf)>, S> {
        if !self.contains(universe).await? {
            return Ok(Page {
                items: Vec::new(),
                total: 0,
            });
        }
        let namespace = universe.namespace();
        let keys_namespace = universe.keys_namespace();
        let keys = self.tree(&keys_namespace)?;
        let tree = self.tree(&namespace)?;
        let names = [keys_namespace.clone(), namespace.clone()];
        for _ in 0..READ_ATTEMPTS {
            let before = self.forest.roots(&names[..]).await?;
            let Some(index_root) = before.first() else {
                break;
            };
            let Some(page) = index_page(&keys.view(), index_root, query).await? else {
                continue;
            };
            let records = page
                .iter()
                .map(|(key, leaf)| record::<S::Error>(&keys_namespace, key, leaf))
                .collect::<Result<Vec<_>, _>>()?;
            let wanted: Vec<Key> = page.iter().map(|(key, _)| *key).collect();
            let leaves = tree.get_many(&wanted).await?;
            if self.forest.roots(&names[..]).await? != before {
                continue;
            }
            let mut items = Vec::with_capacity(records.len());
            for ((key, _), (record, leaf)) in page.iter().zip(records.into_iter().zip(leaves)) {
                if leaf.hash() != record.leaf_hash || leaf.sum() != record.leaf_sum {
                    return Err(MultiverseError::BadRecord {
                        namespace: keys_namespace,
                        key: key.to_hex(),
                    });
                }
                items.push((record, leaf));
            }
            return Ok(Page {
                items,
                total: index_root.sum,
            });
        }
        Err(MultiverseError::Contention {
            attempts: READ_ATTEMPTS,
        })
    }

    /// The leaf at `key` in `universe` with its proofs up to the
    /// multiverse, of one state; `None` when there is no such leaf.
    pub async fn proof(
        &self,
        universe: &Universe,
        key: &LeafKey,
    ) -> MultiverseResult<Option<UniverseProof>, S> {
        Ok(self.proofs(&[(*universe, *key)]).await?.pop().flatten())
    }

    /// [`proof`](Self::proof) of each `(universe, key)`, in order, all of
    /// one state: one read of every root involved and one of every path,
    /// however many proofs are asked for (what a server answering many
    /// clients at once saves; see [`ProofReader`]).
    pub async fn proofs(
        &self,
        wanted: &[(Universe, LeafKey)],
    ) -> MultiverseResult<Vec<Option<UniverseProof>>, S> {
        let present = self
            .contains_all(wanted.iter().map(|(universe, _)| universe))
            .await?;
        let reads: Vec<(String, Key)> = wanted
            .iter()
            .zip(&present)
            .filter(|(_, present)| **present)
            .map(|((universe, key), _)| (universe.namespace(), key.universe_key()))
            .collect();
        'attempt: for _ in 0..READ_ATTEMPTS {
            // One read of the roots and one of the paths: each leaf is
            // the one its proofs prove under those roots, of one state.
            let mut found = if reads.is_empty() {
                Vec::new()
            } else {
                self.forest.proven_leaves(&reads).await?
            }
            .into_iter();
            let mut out = Vec::with_capacity(wanted.len());
            for present in &present {
                if !*present {
                    out.push(None);
                    continue;
                }
                let Some(ProvenLeaf {
                    leaf,
                    proof: nested,
                    roots,
                }) = found.next()
                else {
                    continue 'attempt;
                };
                if leaf.is_empty() {
                    out.push(None);
                    continue;
                }
                let (Some(level), [universe_root, multiverse_root]) =
                    (nested.levels().first(), &roots[..])
                else {
                    continue 'attempt;
                };
                out.push(Some(UniverseProof {
                    leaf,
                    universe_root: *universe_root,
                    universe_proof: nested.proof().clone(),
                    multiverse_root: *multiverse_root,
                    multiverse_proof: level.proof.clone(),
                }));
            }
            return Ok(out);
        }
        Err(MultiverseError::Contention {
            attempts: READ_ATTEMPTS,
        })
    }

    /// The sum of `universe`'s leaves per asset ID (for an asset's
    /// universe, its one asset), read from its index at one state. Walks
    /// the whole index.
    pub async fn amounts_by_asset_id(
        &self,
        universe: &Universe,
    ) -> MultiverseResult<BTreeMap<[u8; 32], u64>, S> {
        let mut out = BTreeMap::new();
        if !self.contains(universe).await? {
            return Ok(out);
        }
        let namespace = universe.keys_namespace();
        let keys = self.tree(&namespace)?;
        for _ in 0..READ_ATTEMPTS {
            let before = keys.root().await?;
            out.clear();
            let mut leaves = keys.view().leaves(..).with_page(SCAN_PAGE);
            loop {
                let page = leaves.next_page().await?;
                if page.is_empty() {
                    break;
                }
                for entry in page {
                    let record = record::<S::Error>(&namespace, &entry.key, &entry.leaf)?;
                    let sum = out.entry(record.asset_id).or_insert(0u64);
                    *sum = sum.saturating_add(record.leaf_sum);
                }
            }
            if keys.root().await? == before {
                return Ok(out);
            }
        }
        Err(MultiverseError::Contention {
            attempts: READ_ATTEMPTS,
        })
    }
}

/// The index record of the leaf at `key` of index `namespace`.
fn record<E: std::error::Error + 'static>(
    namespace: &str,
    key: &Key,
    leaf: &Leaf,
) -> Result<KeyRecord, MultiverseError<E>> {
    match KeyRecord::from_value(leaf.value()) {
        Some(record) if record.key.universe_key() == *key => Ok(record),
        _ => Err(MultiverseError::BadRecord {
            namespace: namespace.to_owned(),
            key: key.to_hex(),
        }),
    }
}

/// The universe a directory entry names; its value not being one is a
/// damaged record.
fn directory_universe<E: std::error::Error + 'static>(
    key: &Key,
    leaf: &Leaf,
) -> Result<Universe, MultiverseError<E>> {
    Universe::from_directory_value(leaf.value()).ok_or_else(|| MultiverseError::BadRecord {
        namespace: DIRECTORY.to_owned(),
        key: key.to_hex(),
    })
}

/// The page `query` asks for of an index tree (every leaf summed 1) whose
/// root is `root`: the ascending key range that holds it, found by its
/// first entry's index, then reversed if asked. `None` when the tree did
/// not match `root` meanwhile.
async fn index_page<T, L>(
    view: &View<'_, T, L>,
    root: &ComputedNode,
    query: PageQuery,
) -> Result<Option<Vec<(Key, Leaf)>>, TreeError<T::Error>>
where
    T: crate::store::TreeStore,
    L: crate::layout::Layout,
{
    let total = root.sum;
    let (start, end) = if query.descending {
        let end = total.saturating_sub(query.offset);
        (end.saturating_sub(query.limit), end)
    } else {
        let start = query.offset.min(total);
        (start, start.saturating_add(query.limit).min(total))
    };
    if start >= end {
        return Ok(Some(Vec::new()));
    }
    let Some(first) = nth_key(view, start).await? else {
        return Ok(None);
    };
    let want = usize::try_from(end - start).unwrap_or(usize::MAX);
    let mut leaves = view
        .leaves((Bound::Included(first), Bound::Unbounded))
        .with_page(want);
    let page = leaves.next_page().await?;
    if page.len() != want || page.first().map(|e| e.key) != Some(first) {
        return Ok(None);
    }
    let mut items: Vec<(Key, Leaf)> = page.into_iter().map(|e| (e.key, e.leaf)).collect();
    if query.descending {
        items.reverse();
    }
    Ok(Some(items))
}

/// The key of the leaf at `index` (0-based, in key order) of a tree whose
/// every leaf sums 1: a descent by subtree sums, [`DESCENT_STRIDE`] levels
/// per read. `None` when the sums do not lead to a leaf (a writer moved
/// the tree between reads).
async fn nth_key<T, L>(
    view: &View<'_, T, L>,
    index: u64,
) -> Result<Option<Key>, TreeError<T::Error>>
where
    T: crate::store::TreeStore,
    L: crate::layout::Layout,
{
    let mut at = Position::ROOT;
    let mut index = index;
    loop {
        let depth = DESCENT_STRIDE.min(MAX_LEVEL - at.level());
        let mut below = vec![at];
        for _ in 0..depth {
            below = below
                .iter()
                .flat_map(|p| [p.child(false), p.child(true)])
                .collect();
        }
        let subtrees = view.subtrees(&below).await?;
        let mut next = None;
        for (position, subtree) in below.into_iter().zip(subtrees) {
            let sum = subtree.sum();
            if index >= sum {
                index -= sum;
                continue;
            }
            next = Some((position, subtree));
            break;
        }
        match next {
            Some((_, Subtree::Leaf { key, .. })) if index == 0 => return Ok(Some(key)),
            Some((position, Subtree::Branch(_))) if position.level() < MAX_LEVEL => {
                at = position;
            }
            _ => return Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CompactedTree;
    use crate::store::MemoryStore;

    fn leaf(n: u8, asset: [u8; 32], amount: u64) -> UniverseLeaf {
        UniverseLeaf {
            key: LeafKey {
                outpoint: OutPoint {
                    txid: [n; 32],
                    index: u32::from(n),
                },
                script_key: [n.wrapping_add(1); 32],
            },
            asset_id: asset,
            proof: vec![n; 1 + usize::from(n)],
            amount,
            burn: false,
        }
    }

    #[tokio::test]
    async fn pages_at_any_offset_both_ways() {
        let multiverse = Multiverse::new(MemoryStore::new());
        let universe = Universe::new(UniverseId::Asset([9; 32]), ProofType::Issuance);
        let leaves: Vec<UniverseLeaf> = (0..40).map(|n| leaf(n, [9; 32], 10)).collect();
        multiverse.insert(&universe, &leaves).await.expect("insert");
        let mut keys: Vec<Key> = leaves.iter().map(|l| l.key.universe_key()).collect();
        keys.sort();
        for (offset, limit, descending) in [
            (0, 7, false),
            (35, 10, false),
            (3, 5, true),
            (38, 9, true),
            (40, 3, false),
        ] {
            let query = PageQuery {
                offset,
                limit,
                descending,
            };
            let page = multiverse.leaf_keys(&universe, query).await.expect("page");
            let mut want: Vec<Key> = keys.clone();
            if descending {
                want.reverse();
            }
            let want: Vec<Key> = want
                .into_iter()
                .skip(offset as usize)
                .take(limit as usize)
                .collect();
            let got: Vec<Key> = page.items.iter().map(|r| r.key.universe_key()).collect();
            assert_eq!(got, want, "offset {offset} limit {limit} desc {descending}");
            assert_eq!(page.total, 40);
            assert_eq!(page.has_more(&query), offset + limit < 40);
        }
    }

    #[tokio::test]
    async fn proofs_reach_the_multiverse_root() {
        let multiverse = Multiverse::new(MemoryStore::new());
        let universe = Universe::new(UniverseId::Group([3; 32]), ProofType::Transfer);
        let leaves: Vec<UniverseLeaf> = (0..5).map(|n| leaf(n, [n; 32], 77)).collect();
        multiverse.insert(&universe, &leaves).await.expect("insert");
        let proof = multiverse
            .proof(&universe, &leaves[2].key)
            .await
            .expect("read")
            .expect("present");
        let key = leaves[2].key.universe_key();
        assert!(
            proof
                .universe_proof
                .verify(&key, &proof.leaf, &proof.universe_root)
        );
        assert_eq!(proof.universe_root.sum, 5);
        let mv_leaf = LinkSum::ChildRoot.leaf(&proof.universe_root);
        assert!(proof.multiverse_proof.verify(
            &universe.multiverse_key(),
            &mv_leaf,
            &proof.multiverse_root
        ));
        // The multiverse is the reference's: a compacted tree with one leaf
        // at the ID bytes holding the universe root.
        let reference = CompactedTree::new(MemoryStore::new());
        let root = reference
            .insert(universe.multiverse_key(), mv_leaf)
            .await
            .expect("reference");
        assert_eq!(root, proof.multiverse_root);
        let missing = LeafKey {
            outpoint: OutPoint {
                txid: [200; 32],
                index: 0,
            },
            script_key: [0; 32],
        };
        assert_eq!(
            multiverse.proof(&universe, &missing).await.expect("read"),
            None
        );
        let amounts = multiverse
            .amounts_by_asset_id(&universe)
            .await
            .expect("amounts");
        assert_eq!(amounts.len(), 5);
        assert!(amounts.values().all(|sum| *sum == 1));
    }

    #[tokio::test]
    async fn stats_count_universes_groups_and_leaves_past_a_chunk() {
        let multiverse = Multiverse::new(MemoryStore::new());
        assert_eq!(
            multiverse.stats().await.expect("stats"),
            MultiverseStats::default()
        );
        // More universes than one chunk reads, every third of a group, of
        // 1 to 3 leaves each.
        let count = STATS_CHUNK + 5;
        let mut want = MultiverseStats::default();
        let mut batch = Vec::new();
        for i in 0..count {
            let bytes = {
                let mut b = [0u8; 32];
                b[..8].copy_from_slice(&i.to_be_bytes());
                b
            };
            let (id, proof_type) = if i % 3 == 0 {
                (UniverseId::Group(bytes), ProofType::Transfer)
            } else {
                (UniverseId::Asset(bytes), ProofType::Issuance)
            };
            let n = 1 + (i % 3) as u8;
            let leaves: Vec<UniverseLeaf> = (0..n).map(|k| leaf(k, bytes, 5)).collect();
            want.universes += 1;
            want.group_universes += u64::from(i % 3 == 0);
            want.leaves += u64::from(n);
            batch.push((Universe::new(id, proof_type), leaves));
        }
        let writes: Vec<(Universe, &[UniverseLeaf])> =
            batch.iter().map(|(u, l)| (*u, &l[..])).collect();
        multiverse.insert_many(&writes).await.expect("insert");
        assert_eq!(multiverse.stats().await.expect("stats"), want);
        // A leaf replaced is not one more.
        let (universe, leaves) = &batch[1];
        let mut again = leaves[0].clone();
        again.proof = vec![42; 9];
        multiverse
            .insert(universe, &[again])
            .await
            .expect("replace");
        assert_eq!(multiverse.stats().await.expect("stats"), want);
    }

    #[tokio::test]
    async fn refuses_what_tapd_would_not_store() {
        let multiverse = Multiverse::new(MemoryStore::new());
        let universe = Universe::new(UniverseId::Asset([1; 32]), ProofType::Issuance);
        let mut bad = leaf(1, [2; 32], 1);
        assert!(matches!(
            multiverse
                .insert(&universe, std::slice::from_ref(&bad))
                .await,
            Err(MultiverseError::AssetMismatch { .. })
        ));
        bad.asset_id = [1; 32];
        bad.proof.clear();
        assert!(matches!(
            multiverse.insert(&universe, &[bad]).await,
            Err(MultiverseError::EmptyProof)
        ));
        assert!(!multiverse.contains(&universe).await.expect("read"));
    }
}
