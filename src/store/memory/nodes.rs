//! The node table of one in-memory namespace: a dense slab of entries
//! (node, hash, reference count) and an open-addressing index from hash to
//! slot.
//!
//! A full tree stores millions of nodes; a `HashMap` of whole entries spent
//! most of a large commit on cache misses and page faults (BENCHMARKS.md).

use std::hash::BuildHasher;

use crate::descent::{fork_here, on_two_threads};
use crate::hash::Hash;
use crate::node::Node;
use crate::position::Position;

/// A stored node with its hash and reference count.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub hash: Hash,
    pub node: Node,
    pub refs: u64,
}

/// What dropping one reference did (see [`Nodes::drop_ref`]).
pub(super) enum Dropped {
    /// The store does not hold the node.
    Missing,
    /// Other references remain.
    Kept,
    /// That was the last one: the entry, now out of the store.
    Removed(Entry),
}

/// The nodes of one namespace: a dense slab of entries and an [`Index`]
/// from hash to slot.
///
/// A full tree stores millions of nodes. A `HashMap` of whole entries
/// (120-byte buckets, control bytes apart) spent most of a large commit on
/// cache misses and page faults; here the randomly accessed part is the
/// 16-byte-bucket index, and entries are appended in order.
#[derive(Debug, Default)]
pub(super) struct Nodes {
    slab: Vec<Entry>,
    index: Index,
}

impl Nodes {
    /// Number of stored nodes.
    pub(super) fn len(&self) -> usize {
        self.slab.len()
    }

    /// True when no node is stored.
    pub(super) fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Every stored entry, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slab.iter()
    }

    /// Room for `additional` more nodes, so a large commit grows the slab
    /// and the index once.
    pub(super) fn reserve(&mut self, additional: usize) {
        self.slab.reserve(additional);
        self.index.reserve(additional, &self.slab);
    }

    /// The slot holding `hash`.
    pub(super) fn slot(&self, hash: &Hash) -> Option<usize> {
        let bucket = self.index.find(hash, &self.slab).ok()?;
        self.index.slot(bucket)
    }

    /// The entry of `hash`.
    pub(super) fn get(&self, hash: &Hash) -> Option<&Entry> {
        self.slot(hash).and_then(|s| self.slab.get(s))
    }

    /// The entry of `hash`, mutably.
    pub(super) fn get_mut(&mut self, hash: &Hash) -> Option<&mut Entry> {
        self.slot(hash).and_then(|s| self.slab.get_mut(s))
    }

    /// Takes one more reference to `hash`, storing a copy of `node` (with
    /// one reference) when it is new: one probe sequence either way.
    pub(super) fn add_ref(&mut self, hash: &Hash, node: &Node) {
        self.index.reserve(1, &self.slab);
        match self.index.find(hash, &self.slab) {
            Ok(bucket) => {
                if let Some(e) = self.index.slot(bucket).and_then(|s| self.slab.get_mut(s)) {
                    e.refs += 1;
                }
            }
            Err(empty) => {
                self.index.fill(empty, hash, self.slab.len());
                self.slab.push(Entry {
                    hash: *hash,
                    node: node.clone(),
                    refs: 1,
                });
            }
        }
    }

    /// [`add_ref`](Self::add_ref) for each of `inserts`, in order. Each
    /// chunk's buckets are read together first, so their cache misses
    /// overlap instead of stalling one insert at a time. A large batch
    /// runs on two threads ([`add_refs_split`](Self::add_refs_split)).
    pub(super) fn add_refs(&mut self, inserts: &[(Position, Hash, Node)]) {
        if inserts.len() >= SPLIT_COMMIT && fork_here(inserts.len(), false) {
            return self.add_refs_split(inserts);
        }
        for chunk in inserts.chunks(WARM_AHEAD) {
            self.index.reserve(chunk.len(), &self.slab);
            let mut warm = 0u64;
            for (_, hash, _) in chunk {
                warm ^= self.index.home_word(hash);
            }
            std::hint::black_box(warm);
            for (_, hash, node) in chunk {
                self.add_ref(hash, node);
            }
        }
    }

    /// [`add_refs`](Self::add_refs) on two threads: one files every hash
    /// in the index, the other copies every node into new entries (a full
    /// build's commit is millions of both, each bound by cache misses and
    /// page faults). The index files insert `i` at slot `len + i`; a hash
    /// already stored (or earlier in the batch) counts a reference there
    /// instead, and its unused entry is swapped out afterwards.
    fn add_refs_split(&mut self, inserts: &[(Position, Hash, Node)]) {
        let base = self.slab.len();
        let (index, slab) = (&mut self.index, &self.slab);
        let (dups, fresh) = on_two_threads(
            move || index.file_all(inserts, slab),
            || {
                inserts
                    .iter()
                    .map(|(_, hash, node)| Entry {
                        hash: *hash,
                        node: node.clone(),
                        refs: 1,
                    })
                    .collect::<Vec<_>>()
            },
        );
        if self.slab.is_empty() {
            self.slab = fresh;
        } else {
            self.slab.extend(fresh);
        }
        for &(_, slot) in &dups {
            if let Some(e) = self.slab.get_mut(slot) {
                e.refs += 1;
            }
        }
        // Later duplicates first: the slab's last entry, which takes each
        // one's slot, is then always a filed one.
        for &(i, _) in dups.iter().rev() {
            let at = base + i;
            self.slab.swap_remove(at);
            if let Some(moved) = self.slab.get(at) {
                self.index.repoint(&moved.hash, self.slab.len(), at);
            }
        }
    }

    /// Stores `entry`, whose hash must not be stored yet.
    pub(super) fn restore(&mut self, entry: Entry) {
        self.index.reserve(1, &self.slab);
        if let Err(empty) = self.index.find(&entry.hash, &self.slab) {
            self.index.fill(empty, &entry.hash, self.slab.len());
            self.slab.push(entry);
        }
    }

    /// Drops one reference to `hash`, removing the node with its last one.
    pub(super) fn drop_ref(&mut self, hash: &Hash) -> Dropped {
        match self.get_mut(hash) {
            None => Dropped::Missing,
            Some(e) if e.refs > 1 => {
                e.refs -= 1;
                Dropped::Kept
            }
            Some(_) => self.remove(hash).map_or(Dropped::Missing, Dropped::Removed),
        }
    }

    /// Removes the entry of `hash`. The slab's last entry moves into the
    /// freed slot, so the slab stays dense.
    pub(super) fn remove(&mut self, hash: &Hash) -> Option<Entry> {
        let bucket = self.index.find(hash, &self.slab).ok()?;
        let slot = self.index.slot(bucket)?;
        self.index.clear(bucket);
        let entry = self.slab.swap_remove(slot);
        if let Some(moved) = self.slab.get(slot) {
            self.index.repoint(&moved.hash, self.slab.len(), slot);
        }
        Some(entry)
    }
}

/// Inserts whose index buckets [`Nodes::add_refs`] reads ahead together.
const WARM_AHEAD: usize = 16;

/// Inserts from which a commit runs on two threads ([`Nodes::add_refs`]):
/// a thread costs tens of microseconds, a commit this large milliseconds.
const SPLIT_COMMIT: usize = 1 << 14;

/// An open-addressing table (linear probing) from node hash to slab slot.
///
/// A bucket is `[tag, slot + 1]`, 0 in the second word marking it empty;
/// the tag is the seeded hash of the node hash's first 8 bytes and picks
/// the home bucket, and a tag match is confirmed on the slab's whole hash.
/// One lookup thus touches one bucket line (a `HashMap` touches a control
/// line and a bucket line). Up to 3/4 full.
#[derive(Debug, Default)]
struct Index {
    buckets: Vec<[u64; 2]>,
    len: usize,
    hasher: foldhash::fast::RandomState,
}

impl Index {
    /// The tag of `hash`; the seed keeps ground hashes from piling up.
    fn tag(&self, hash: &Hash) -> u64 {
        let [a, b, c, d, e, f, g, h, ..] = hash.0;
        self.hasher
            .hash_one(u64::from_le_bytes([a, b, c, d, e, f, g, h]))
    }

    /// The first word of `hash`'s home bucket (0 when there are no
    /// buckets): reading it brings the bucket into cache.
    fn home_word(&self, hash: &Hash) -> u64 {
        let i = self.tag(hash) as usize & self.mask();
        self.buckets.get(i).map_or(0, |b| b[0])
    }

    /// `buckets.len() - 1` (the length is 0 or a power of two).
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// The slot in `bucket`, if it is filled.
    pub(super) fn slot(&self, bucket: usize) -> Option<usize> {
        let [_, slot] = *self.buckets.get(bucket)?;
        usize::try_from(slot).ok()?.checked_sub(1)
    }

    /// The bucket holding `hash` (`Ok`), or the empty bucket where it
    /// would go (`Err`; `usize::MAX` when the table has no buckets).
    fn find(&self, hash: &Hash, slab: &[Entry]) -> Result<usize, usize> {
        self.find_by(hash, |slot| slab.get(slot).map(|e| &e.hash))
    }

    /// [`find`](Self::find) with the hash at each slot from `stored`.
    fn find_by<'h>(
        &self,
        hash: &Hash,
        stored: impl Fn(usize) -> Option<&'h Hash>,
    ) -> Result<usize, usize> {
        if self.buckets.is_empty() {
            return Err(usize::MAX);
        }
        let tag = self.tag(hash);
        let mask = self.mask();
        let mut i = tag as usize & mask;
        // The table is never full, so the walk meets an empty bucket.
        loop {
            let [t, s] = self.buckets.get(i).copied().unwrap_or_default();
            if s == 0 {
                return Err(i);
            }
            if t == tag && stored((s - 1) as usize).is_some_and(|h| h == hash) {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Files the hashes of `inserts`, insert `i` at slot `slab.len() + i`
    /// (its entry is to follow `slab`'s); returns `(i, slot)` for each
    /// insert whose hash was filed already, at `slot`.
    fn file_all(
        &mut self,
        inserts: &[(Position, Hash, Node)],
        slab: &[Entry],
    ) -> Vec<(usize, usize)> {
        let base = slab.len();
        self.reserve(inserts.len(), slab);
        let stored = |slot: usize| match slot.checked_sub(base) {
            None => slab.get(slot).map(|e| &e.hash),
            Some(i) => inserts.get(i).map(|ins| &ins.1),
        };
        let mut dups = Vec::new();
        for (c, chunk) in inserts.chunks(WARM_AHEAD).enumerate() {
            let mut warm = 0u64;
            for (_, hash, _) in chunk {
                warm ^= self.home_word(hash);
            }
            std::hint::black_box(warm);
            for (j, (_, hash, _)) in chunk.iter().enumerate() {
                let i = c * WARM_AHEAD + j;
                match self.find_by(hash, stored) {
                    Ok(bucket) => dups.extend(self.slot(bucket).map(|slot| (i, slot))),
                    Err(empty) => self.fill(empty, hash, base + i),
                }
            }
        }
        dups
    }

    /// Files `slot` for `hash` in the empty `bucket` [`find`](Self::find)
    /// returned.
    fn fill(&mut self, bucket: usize, hash: &Hash, slot: usize) {
        let tag = self.tag(hash);
        if let Some(b) = self.buckets.get_mut(bucket) {
            *b = [tag, slot as u64 + 1];
            self.len += 1;
        }
    }

    /// Room for `additional` more slots: a full rebuild from `slab` (whose
    /// entries the index holds) into at least twice the buckets.
    pub(super) fn reserve(&mut self, additional: usize, slab: &[Entry]) {
        let need = self.len.saturating_add(additional);
        if need.saturating_mul(4) <= self.buckets.len().saturating_mul(3) {
            return;
        }
        let want = (need.saturating_mul(4) / 3 + 1).next_power_of_two();
        let size = want.max(self.buckets.len() * 2).max(16);
        // Written, not left to `calloc`: a zeroed page is mapped on its
        // first read and copied on its first write, two faults in random
        // order, where writing it all first is one fault each, in order.
        self.buckets = Vec::with_capacity(size);
        self.buckets.resize(size, [0; 2]);
        self.len = 0;
        for (slot, e) in slab.iter().enumerate() {
            if let Err(empty) = self.find(&e.hash, &[]) {
                self.fill(empty, &e.hash, slot);
            }
        }
    }

    /// Empties `bucket`, shifting later buckets of the same run back so
    /// that every walk still reaches its entry (no tombstones).
    fn clear(&mut self, bucket: usize) {
        let mask = self.mask();
        let mut hole = bucket;
        let mut j = (bucket + 1) & mask;
        loop {
            let b = self.buckets.get(j).copied().unwrap_or_default();
            if b[1] == 0 {
                break;
            }
            let home = b[0] as usize & mask;
            // `b` may move back to the hole unless its home lies in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                if let Some(h) = self.buckets.get_mut(hole) {
                    *h = b;
                }
                hole = j;
            }
            j = (j + 1) & mask;
        }
        if let Some(h) = self.buckets.get_mut(hole) {
            *h = [0; 2];
            self.len -= 1;
        }
    }

    /// Points the bucket of `hash`, which names slot `from`, at slot `to`.
    fn repoint(&mut self, hash: &Hash, from: usize, to: usize) {
        let tag = self.tag(hash);
        let mask = self.mask();
        let mut i = tag as usize & mask;
        let from = from as u64 + 1;
        while let Some(b) = self.buckets.get_mut(i) {
            if b[1] == 0 {
                return;
            }
            if b[1] == from {
                b[1] = to as u64 + 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::{Dropped, Nodes};
    use crate::hash::Hash;
    use crate::leaf::Leaf;
    use crate::node::Node;

    /// Hashes from a small pool that share their first 8 bytes in groups,
    /// so tags collide and probe runs wrap and shift.
    fn pool() -> Vec<Hash> {
        (0..300u32)
            .map(|i| {
                let mut h = [0u8; 32];
                h[0] = (i % 7) as u8;
                h[8..12].copy_from_slice(&i.to_le_bytes());
                Hash(h)
            })
            .collect()
    }

    /// Random reference adds and drops match a plain map of counts.
    #[test]
    fn nodes_match_a_map_of_counts() {
        let mut rng = StdRng::seed_from_u64(11);
        let pool = pool();
        let mut nodes = Nodes::default();
        let mut model: HashMap<Hash, u64> = HashMap::new();
        for step in 0..20_000 {
            let hash = pool[rng.gen_range(0..pool.len())];
            if rng.gen_bool(0.55) {
                let node = Node::Leaf(Leaf::new(hash.0.to_vec(), 1));
                nodes.add_ref(&hash, &node);
                *model.entry(hash).or_default() += 1;
            } else {
                let dropped = nodes.drop_ref(&hash);
                match model.get_mut(&hash) {
                    None => assert!(matches!(dropped, Dropped::Missing), "step {step}"),
                    Some(1) => {
                        assert!(matches!(dropped, Dropped::Removed(ref e) if e.hash == hash));
                        model.remove(&hash);
                    }
                    Some(n) => {
                        assert!(matches!(dropped, Dropped::Kept));
                        *n -= 1;
                    }
                }
            }
            assert_eq!(nodes.len(), model.len());
            if step % 97 == 0 {
                for h in &pool {
                    let got = nodes.get(h).map(|e| (e.hash, e.refs));
                    assert_eq!(got, model.get(h).map(|n| (*h, *n)), "step {step}");
                }
            }
        }
    }

    /// A commit large enough for two threads leaves the same entries and
    /// counts as one insert at a time: duplicates within the batch and of
    /// stored nodes included.
    #[test]
    fn split_commit_matches_one_at_a_time() {
        crate::descent::set_descent_threads(2);
        let mut rng = StdRng::seed_from_u64(12);
        let node = |h: &Hash| Node::Leaf(Leaf::new(h.0.to_vec(), 1));
        let hash = |rng: &mut StdRng| {
            let mut h = [0u8; 32];
            rng.fill(&mut h[..]);
            Hash(h)
        };
        let stored: Vec<Hash> = (0..1_000).map(|_| hash(&mut rng)).collect();
        let mut batch: Vec<Hash> = (0..super::SPLIT_COMMIT).map(|_| hash(&mut rng)).collect();
        for i in (0..batch.len()).step_by(37) {
            batch[i] = if i % 2 == 0 {
                stored[i % stored.len()]
            } else {
                batch[i / 3]
            };
        }
        let inserts: Vec<_> = batch
            .iter()
            .map(|h| (crate::position::Position::ROOT, *h, node(h)))
            .collect();
        let (mut split, mut serial) = (Nodes::default(), Nodes::default());
        for h in &stored {
            split.add_ref(h, &node(h));
            serial.add_ref(h, &node(h));
        }
        split.add_refs(&inserts);
        for (_, h, n) in &inserts {
            serial.add_ref(h, n);
        }
        assert_eq!(split.len(), serial.len());
        for e in serial.iter() {
            let got = split.get(&e.hash).map(|g| (g.refs, &g.node));
            assert_eq!(got, Some((e.refs, &e.node)));
        }
        crate::descent::set_descent_threads(0);
    }
}
