//! The node table of one in-memory namespace: two dense slabs (whole
//! entries, and one-child branches kept without their empty child) and an
//! open-addressing index from hash to slot.
//!
//! A full tree stores millions of nodes; a `HashMap` of whole entries spent
//! most of a large commit on cache misses and page faults (BENCHMARKS.md).
//! Nearly all of them are one-child branches whose other child is the
//! empty subtree (a leaf's climb above the level where it parts from its
//! neighbours): a [`Lone`] keeps one in 80 bytes where an [`Entry`] takes
//! 120, the empty hash being implied by its level.

use std::borrow::Cow;
use std::hash::BuildHasher;

use crate::descent::{fork_here, on_two_threads};
use crate::empty::empty_hash;
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

/// A stored branch at `level` with one empty child: the other child, the
/// sum, and on which side the child is. References past `u32::MAX` move
/// it to the entries ([`Nodes::take_ref`]).
#[derive(Debug, Clone)]
struct Lone {
    hash: Hash,
    child: Hash,
    sum: u64,
    refs: u32,
    level: u8,
    right: bool,
}

const _: () = assert!(std::mem::size_of::<Lone>() == 80);

impl Lone {
    /// `node` at `level` as a lone branch, when it is a branch with exactly
    /// one child the empty subtree.
    fn of(level: usize, hash: &Hash, node: &Node) -> Option<Lone> {
        let Node::Branch { left, right, sum } = node else {
            return None;
        };
        let short = u8::try_from(level).ok()?;
        let empty = empty_hash(level + 1);
        let (child, is_right) = match (*left == empty, *right == empty) {
            (true, false) => (*right, true),
            (false, true) => (*left, false),
            _ => return None,
        };
        Some(Lone {
            hash: *hash,
            child,
            sum: *sum,
            refs: 1,
            level: short,
            right: is_right,
        })
    }

    /// The branch as a [`Node`].
    fn node(&self) -> Node {
        let empty = empty_hash(usize::from(self.level) + 1);
        let (left, right) = if self.right {
            (empty, self.child)
        } else {
            (self.child, empty)
        };
        Node::Branch {
            left,
            right,
            sum: self.sum,
        }
    }

    /// The lone branch as a whole entry.
    fn into_entry(self) -> Entry {
        Entry {
            hash: self.hash,
            node: self.node(),
            refs: u64::from(self.refs),
        }
    }
}

/// Where a node is stored: which slab, and the slot in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Entry(usize),
    Lone(usize),
}

impl Slot {
    /// The bit of an index code that names the lone slab.
    const LONE: u64 = 1 << 63;

    /// The slot as an index bucket's second word (never 0, which marks an
    /// empty bucket).
    fn code(self) -> u64 {
        match self {
            Slot::Entry(s) => s as u64 + 1,
            Slot::Lone(s) => (s as u64 + 1) | Self::LONE,
        }
    }

    /// The slot a non-zero code names.
    fn decode(code: u64) -> Option<Slot> {
        let s = usize::try_from((code & !Self::LONE).checked_sub(1)?).ok()?;
        Some(if code & Self::LONE == 0 {
            Slot::Entry(s)
        } else {
            Slot::Lone(s)
        })
    }
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

/// The nodes of one namespace: two dense slabs and an [`Index`] from hash
/// to slot.
///
/// A full tree stores millions of nodes. A `HashMap` of whole entries
/// (120-byte buckets, control bytes apart) spent most of a large commit on
/// cache misses and page faults; here the randomly accessed part is the
/// 16-byte-bucket index, and entries are appended in order.
#[derive(Debug, Default)]
pub(super) struct Nodes {
    entries: Vec<Entry>,
    lone: Vec<Lone>,
    index: Index,
}

/// The hash stored at `slot` of `entries` and `lone`.
fn hash_at<'s>(entries: &'s [Entry], lone: &'s [Lone], slot: Slot) -> Option<&'s Hash> {
    match slot {
        Slot::Entry(s) => entries.get(s).map(|e| &e.hash),
        Slot::Lone(s) => lone.get(s).map(|l| &l.hash),
    }
}

/// Every stored hash with its index code.
fn codes<'s>(entries: &'s [Entry], lone: &'s [Lone]) -> impl Iterator<Item = (&'s Hash, u64)> {
    let whole = entries
        .iter()
        .enumerate()
        .map(|(s, e)| (&e.hash, Slot::Entry(s).code()));
    let lone = lone
        .iter()
        .enumerate()
        .map(|(s, l)| (&l.hash, Slot::Lone(s).code()));
    whole.chain(lone)
}

impl Nodes {
    /// Number of stored nodes.
    pub(super) fn len(&self) -> usize {
        self.entries.len() + self.lone.len()
    }

    /// True when no node is stored.
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every stored node with its hash and reference count, in no
    /// particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Hash, Cow<'_, Node>, u64)> {
        let whole = self
            .entries
            .iter()
            .map(|e| (e.hash, Cow::Borrowed(&e.node), e.refs));
        let lone = self
            .lone
            .iter()
            .map(|l| (l.hash, Cow::Owned(l.node()), u64::from(l.refs)));
        whole.chain(lone)
    }

    /// Room in the index for `additional` more nodes, so a large commit
    /// grows it once.
    pub(super) fn reserve(&mut self, additional: usize) {
        self.index
            .reserve(additional, codes(&self.entries, &self.lone));
    }

    /// The bucket holding `hash` (`Ok`), or the empty bucket where it
    /// would go (`Err`).
    fn find(&self, hash: &Hash) -> Result<usize, usize> {
        let (entries, lone) = (&self.entries, &self.lone);
        self.index.find_by(hash, |code| {
            Slot::decode(code).and_then(|slot| hash_at(entries, lone, slot))
        })
    }

    /// Where `hash` is stored.
    fn slot(&self, hash: &Hash) -> Option<Slot> {
        let bucket = self.find(hash).ok()?;
        self.index.slot(bucket)
    }

    /// The node stored under `hash`.
    pub(super) fn get(&self, hash: &Hash) -> Option<Cow<'_, Node>> {
        match self.slot(hash)? {
            Slot::Entry(s) => self.entries.get(s).map(|e| Cow::Borrowed(&e.node)),
            Slot::Lone(s) => self.lone.get(s).map(|l| Cow::Owned(l.node())),
        }
    }

    /// The reference count of `hash`.
    #[cfg(test)]
    fn refs(&self, hash: &Hash) -> Option<u64> {
        match self.slot(hash)? {
            Slot::Entry(s) => self.entries.get(s).map(|e| e.refs),
            Slot::Lone(s) => self.lone.get(s).map(|l| u64::from(l.refs)),
        }
    }

    /// Appends `node` at `level` (with one reference) to its slab.
    fn push(&mut self, level: usize, hash: &Hash, node: &Node) -> Slot {
        match Lone::of(level, hash, node) {
            Some(lone) => {
                self.lone.push(lone);
                Slot::Lone(self.lone.len() - 1)
            }
            None => {
                self.entries.push(Entry {
                    hash: *hash,
                    node: node.clone(),
                    refs: 1,
                });
                Slot::Entry(self.entries.len() - 1)
            }
        }
    }

    /// Takes one more reference to `hash`, storing a copy of `node` (at
    /// `level`, with one reference) when it is new: one probe sequence
    /// either way.
    pub(super) fn add_ref(&mut self, level: usize, hash: &Hash, node: &Node) {
        self.reserve(1);
        match self.find(hash) {
            Ok(bucket) => {
                if let Some(slot) = self.index.slot(bucket) {
                    self.bump(slot);
                }
            }
            Err(empty) => {
                let slot = self.push(level, hash, node);
                self.index.fill(empty, hash, slot.code());
            }
        }
    }

    /// One more reference to the node at `slot`.
    fn bump(&mut self, slot: Slot) {
        match slot {
            Slot::Entry(s) => {
                if let Some(e) = self.entries.get_mut(s) {
                    e.refs += 1;
                }
            }
            Slot::Lone(s) => {
                let Some(l) = self.lone.get_mut(s) else {
                    return;
                };
                if let Some(refs) = l.refs.checked_add(1) {
                    l.refs = refs;
                    return;
                }
                // Past `u32::MAX`: the node becomes a whole entry.
                let hash = l.hash;
                if let Some(mut entry) = self.remove(&hash) {
                    entry.refs += 1;
                    self.restore(entry);
                }
            }
        }
    }

    /// One more reference to the stored `hash`; false when it is not
    /// stored.
    pub(super) fn take_ref(&mut self, hash: &Hash) -> bool {
        let slot = self.slot(hash);
        slot.map(|slot| self.bump(slot)).is_some()
    }

    /// [`add_ref`](Self::add_ref) for each of `inserts`, in order. Each
    /// chunk's buckets are read together first, so their cache misses
    /// overlap instead of stalling one insert at a time. A large batch
    /// runs on two threads ([`add_refs_split`](Self::add_refs_split)).
    pub(super) fn add_refs(&mut self, inserts: &[(Position, Hash, Node)]) {
        // The store's own work runs at the default threads.
        if inserts.len() >= SPLIT_COMMIT
            && fork_here(inserts.len(), false, crate::Tuning::default())
        {
            return self.add_refs_split(inserts);
        }
        for chunk in inserts.chunks(WARM_AHEAD) {
            self.reserve(chunk.len());
            let mut warm = 0u64;
            for (_, hash, _) in chunk {
                warm ^= self.index.home_word(hash);
            }
            std::hint::black_box(warm);
            for (pos, hash, node) in chunk {
                self.add_ref(pos.level(), hash, node);
            }
        }
    }

    /// [`add_refs`](Self::add_refs) on two threads: one files every hash
    /// in the index, the other copies every node to the end of its slab (a
    /// full build's commit is millions of both, each bound by cache misses
    /// and page faults). A hash already stored (or earlier in the batch)
    /// is filed once; its copy is swapped out afterwards and the stored
    /// node takes the reference.
    fn add_refs_split(&mut self, inserts: &[(Position, Hash, Node)]) {
        let (index, entries, lone) = (&mut self.index, &self.entries, &self.lone);
        let (dups, (whole, lone)) = on_two_threads(
            move || index.file_all(inserts, entries, lone),
            || {
                let (mut whole, mut lone) = (Vec::new(), Vec::new());
                for (pos, hash, node) in inserts {
                    match Lone::of(pos.level(), hash, node) {
                        Some(l) => lone.push(l),
                        None => whole.push(Entry {
                            hash: *hash,
                            node: node.clone(),
                            refs: 1,
                        }),
                    }
                }
                (whole, lone)
            },
        );
        append(&mut self.entries, whole);
        append(&mut self.lone, lone);
        // Later copies first: the slab's last node, which takes each one's
        // slot, is then always a filed one.
        let (mut whole_dups, mut lone_dups): (Vec<_>, Vec<_>) = dups
            .iter()
            .partition(|(slot, _)| matches!(slot, Slot::Entry(_)));
        whole_dups.reverse();
        lone_dups.reverse();
        for (slot, _) in whole_dups.into_iter().chain(lone_dups) {
            let moved = match slot {
                Slot::Entry(at) => {
                    self.entries.swap_remove(at);
                    self.entries.get(at).map(|e| (e.hash, self.entries.len()))
                }
                Slot::Lone(at) => {
                    self.lone.swap_remove(at);
                    self.lone.get(at).map(|l| (l.hash, self.lone.len()))
                }
            };
            if let Some((hash, from)) = moved {
                let (from, to) = match slot {
                    Slot::Entry(at) => (Slot::Entry(from), Slot::Entry(at)),
                    Slot::Lone(at) => (Slot::Lone(from), Slot::Lone(at)),
                };
                self.index.repoint(&hash, from.code(), to.code());
            }
        }
        for (_, i) in dups {
            if let Some((_, hash, _)) = inserts.get(i) {
                self.take_ref(hash);
            }
        }
    }

    /// Stores `entry`, whose hash must not be stored yet.
    pub(super) fn restore(&mut self, entry: Entry) {
        self.reserve(1);
        if let Err(empty) = self.find(&entry.hash) {
            self.index
                .fill(empty, &entry.hash, Slot::Entry(self.entries.len()).code());
            self.entries.push(entry);
        }
    }

    /// Drops one reference to `hash`, removing the node with its last one.
    pub(super) fn drop_ref(&mut self, hash: &Hash) -> Dropped {
        let last = match self.slot(hash) {
            None => return Dropped::Missing,
            Some(Slot::Entry(s)) => self.entries.get_mut(s).map(|e| {
                e.refs = e.refs.saturating_sub(1);
                e.refs == 0
            }),
            Some(Slot::Lone(s)) => self.lone.get_mut(s).map(|l| {
                l.refs = l.refs.saturating_sub(1);
                l.refs == 0
            }),
        };
        match last {
            None => Dropped::Missing,
            Some(false) => Dropped::Kept,
            Some(true) => self.remove(hash).map_or(Dropped::Missing, |mut e| {
                e.refs = 1;
                Dropped::Removed(e)
            }),
        }
    }

    /// Removes the node of `hash`, as a whole entry. The slab's last node
    /// moves into the freed slot, so the slabs stay dense.
    pub(super) fn remove(&mut self, hash: &Hash) -> Option<Entry> {
        let bucket = self.find(hash).ok()?;
        let slot = self.index.slot(bucket)?;
        self.index.clear(bucket);
        match slot {
            Slot::Entry(at) => {
                let entry = self.entries.swap_remove(at);
                if let Some(moved) = self.entries.get(at) {
                    let from = Slot::Entry(self.entries.len()).code();
                    self.index.repoint(&moved.hash, from, slot.code());
                }
                Some(entry)
            }
            Slot::Lone(at) => {
                let lone = self.lone.swap_remove(at);
                if let Some(moved) = self.lone.get(at) {
                    let from = Slot::Lone(self.lone.len()).code();
                    self.index.repoint(&moved.hash, from, slot.code());
                }
                Some(lone.into_entry())
            }
        }
    }
}

/// Appends `src` to `dst`, taking it whole when `dst` is empty.
fn append<T>(dst: &mut Vec<T>, src: Vec<T>) {
    if dst.is_empty() {
        *dst = src;
    } else {
        dst.extend(src);
    }
}

/// Inserts whose index buckets [`Nodes::add_refs`] reads ahead together.
const WARM_AHEAD: usize = 16;

/// Inserts from which a commit runs on two threads ([`Nodes::add_refs`]):
/// a thread costs tens of microseconds, a commit this large milliseconds.
const SPLIT_COMMIT: usize = 1 << 14;

/// An open-addressing table (linear probing) from node hash to slot.
///
/// A bucket is `[tag, code]`, the code naming a slab and slot
/// ([`Slot::code`]), 0 marking the bucket empty; the tag is the seeded
/// hash of the node hash's first 8 bytes and picks the home bucket, and a
/// tag match is confirmed on the slab's whole hash.
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
    fn slot(&self, bucket: usize) -> Option<Slot> {
        let [_, code] = *self.buckets.get(bucket)?;
        Slot::decode(code)
    }

    /// The bucket holding `hash` (`Ok`), or the empty bucket where it
    /// would go (`Err`; `usize::MAX` when the table has no buckets); a tag
    /// match is confirmed on the hash `stored` gives for the bucket's code.
    fn find_by<'h>(
        &self,
        hash: &Hash,
        stored: impl Fn(u64) -> Option<&'h Hash>,
    ) -> Result<usize, usize> {
        if self.buckets.is_empty() {
            return Err(usize::MAX);
        }
        let tag = self.tag(hash);
        let mask = self.mask();
        let mut i = tag as usize & mask;
        // The table is never full, so the walk meets an empty bucket.
        loop {
            let [t, code] = self.buckets.get(i).copied().unwrap_or_default();
            if code == 0 {
                return Err(i);
            }
            if t == tag && stored(code).is_some_and(|h| h == hash) {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Files the hashes of `inserts` whose nodes are to be appended to
    /// `entries` and `lone` in order (each to the slab [`Lone::of`] picks);
    /// returns the slot of the copy of each insert whose hash was filed
    /// already, with the insert's index.
    fn file_all(
        &mut self,
        inserts: &[(Position, Hash, Node)],
        entries: &[Entry],
        lone: &[Lone],
    ) -> Vec<(Slot, usize)> {
        self.reserve(inserts.len(), codes(entries, lone));
        // The insert behind each new slot of either slab.
        let (mut new_whole, mut new_lone) = (Vec::new(), Vec::new());
        let stored = |code: u64, new_whole: &[usize], new_lone: &[usize]| {
            let new = |slot: usize, base: usize, new: &[usize]| {
                let i = *new.get(slot.checked_sub(base)?)?;
                inserts.get(i).map(|ins| &ins.1)
            };
            match Slot::decode(code)? {
                Slot::Entry(s) if s < entries.len() => entries.get(s).map(|e| &e.hash),
                Slot::Lone(s) if s < lone.len() => lone.get(s).map(|l| &l.hash),
                Slot::Entry(s) => new(s, entries.len(), new_whole),
                Slot::Lone(s) => new(s, lone.len(), new_lone),
            }
        };
        let mut dups = Vec::new();
        for (c, chunk) in inserts.chunks(WARM_AHEAD).enumerate() {
            let mut warm = 0u64;
            for (_, hash, _) in chunk {
                warm ^= self.home_word(hash);
            }
            std::hint::black_box(warm);
            for (j, (pos, hash, node)) in chunk.iter().enumerate() {
                let i = c * WARM_AHEAD + j;
                let slot = if Lone::of(pos.level(), hash, node).is_some() {
                    new_lone.push(i);
                    Slot::Lone(lone.len() + new_lone.len() - 1)
                } else {
                    new_whole.push(i);
                    Slot::Entry(entries.len() + new_whole.len() - 1)
                };
                match self.find_by(hash, |code| stored(code, &new_whole, &new_lone)) {
                    Ok(_) => dups.push((slot, i)),
                    Err(empty) => self.fill(empty, hash, slot.code()),
                }
            }
        }
        dups
    }

    /// Files the slot `code` names for `hash` in the empty `bucket`
    /// [`find_by`](Self::find_by) returned.
    fn fill(&mut self, bucket: usize, hash: &Hash, code: u64) {
        let tag = self.tag(hash);
        if let Some(b) = self.buckets.get_mut(bucket) {
            *b = [tag, code];
            self.len += 1;
        }
    }

    /// Room for `additional` more slots: a full rebuild from `stored` (every
    /// hash the index holds, with its code) into at least twice the
    /// buckets.
    fn reserve<'h>(&mut self, additional: usize, stored: impl Iterator<Item = (&'h Hash, u64)>) {
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
        for (hash, code) in stored {
            if let Err(empty) = self.find_by(hash, |_| None) {
                self.fill(empty, hash, code);
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

    /// Points the bucket of `hash`, which holds the code `from`, at `to`.
    fn repoint(&mut self, hash: &Hash, from: u64, to: u64) {
        let tag = self.tag(hash);
        let mask = self.mask();
        let mut i = tag as usize & mask;
        while let Some(b) = self.buckets.get_mut(i) {
            if b[1] == 0 {
                return;
            }
            if b[1] == from {
                b[1] = to;
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

    use super::{Dropped, Nodes, Slot};
    use crate::empty::empty_hash;
    use crate::hash::Hash;
    use crate::leaf::Leaf;
    use crate::node::Node;
    use crate::position::Position;

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

    /// The level and node stored under `hash`: every third a one-child
    /// branch (kept as a lone entry), on either side, the others leaves
    /// and two-child branches.
    fn node_of(hash: &Hash) -> (usize, Node) {
        let i = u32::from_le_bytes([hash.0[8], hash.0[9], hash.0[10], hash.0[11]]) as usize;
        let level = i % 256;
        let child = Hash([i as u8 | 1; 32]);
        let empty = empty_hash(level + 1);
        let node = match i % 6 {
            0 => Node::Branch {
                left: child,
                right: empty,
                sum: i as u64,
            },
            3 => Node::Branch {
                left: empty,
                right: child,
                sum: i as u64,
            },
            1 => Node::Branch {
                left: child,
                right: child,
                sum: 2,
            },
            _ => Node::Leaf(Leaf::new(hash.0.to_vec(), 1)),
        };
        (level, node)
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
                let (level, node) = node_of(&hash);
                nodes.add_ref(level, &hash, &node);
                *model.entry(hash).or_default() += 1;
            } else {
                let dropped = nodes.drop_ref(&hash);
                match model.get_mut(&hash) {
                    None => assert!(matches!(dropped, Dropped::Missing), "step {step}"),
                    Some(1) => {
                        assert!(matches!(dropped, Dropped::Removed(ref e)
                            if e.hash == hash && e.node == node_of(&hash).1));
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
                    let got = nodes.get(h).map(|n| (n.into_owned(), nodes.refs(h)));
                    let want = model.get(h).map(|n| (node_of(h).1, Some(*n)));
                    assert_eq!(got, want, "step {step}");
                }
            }
        }
        assert!(!nodes.lone.is_empty() && !nodes.entries.is_empty());
    }

    /// A commit large enough for two threads leaves the same nodes and
    /// counts as one insert at a time: duplicates within the batch and of
    /// stored nodes included, in both slabs.
    #[test]
    fn split_commit_matches_one_at_a_time() {
        split_commit_on_two_threads();
    }

    fn split_commit_on_two_threads() {
        let mut rng = StdRng::seed_from_u64(12);
        let hash = |rng: &mut StdRng| {
            let mut h = [0u8; 32];
            rng.fill(&mut h[..]);
            Hash(h)
        };
        let insert = |h: Hash| {
            let (level, node) = node_of(&h);
            (Position::new(level, &crate::key::Key(h.0)), h, node)
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
        let inserts: Vec<_> = batch.iter().map(|h| insert(*h)).collect();
        let (mut split, mut serial) = (Nodes::default(), Nodes::default());
        for (pos, h, n) in stored.iter().map(|h| insert(*h)) {
            split.add_ref(pos.level(), &h, &n);
            serial.add_ref(pos.level(), &h, &n);
        }
        split.add_refs(&inserts);
        for (pos, h, n) in &inserts {
            serial.add_ref(pos.level(), h, n);
        }
        assert_eq!(split.len(), serial.len());
        assert_eq!(split.lone.len(), serial.lone.len());
        for (hash, node, refs) in serial.iter() {
            let got = split
                .get(&hash)
                .map(|n| (n.into_owned(), split.refs(&hash)));
            assert_eq!(got, Some((node.into_owned(), Some(refs))));
        }
    }

    /// A lone branch past `u32::MAX` references becomes a whole entry and
    /// keeps counting.
    #[test]
    fn lone_references_past_u32_move_to_the_entries() {
        let h = pool()[0];
        let (level, node) = node_of(&h);
        let mut nodes = Nodes::default();
        nodes.add_ref(level, &h, &node);
        assert!(matches!(nodes.slot(&h), Some(Slot::Lone(0))));
        nodes.lone[0].refs = u32::MAX;
        assert!(nodes.take_ref(&h));
        assert!(matches!(nodes.slot(&h), Some(Slot::Entry(0))));
        assert_eq!(nodes.refs(&h), Some(u64::from(u32::MAX) + 1));
        assert_eq!(nodes.get(&h).map(|n| n.into_owned()), Some(node));
        assert!(matches!(nodes.drop_ref(&h), Dropped::Kept));
        assert_eq!(nodes.len(), 1);
    }
}
