//! The lone climbs of a full build, a few in lockstep on the lanes.
//!
//! A full build stores every branch on every leaf's path. Above the level
//! where a leaf parts from its neighbours it climbs alone, through
//! one-child branches (about 240 of a leaf's 256 levels in a build of
//! 10,000 keys), each hash depending on the one before. Different leaves'
//! climbs are independent, so [`Chains`] climbs the next lane count of
//! leaves of a build together and hands the build each level's hash when
//! it reaches that leaf: the same hashes, in the same count, stored in the
//! same order.

use crate::empty::empty_table;
use crate::hash::{Climb, Hash, SumSchedule, climb};
use crate::items::Item;
use crate::key::MAX_LEVEL;
use crate::prelift::lift_targets;

/// Hashes one chain holds: levels 0 to 256.
const LEVELS: usize = MAX_LEVEL + 1;

/// The lone climbs of one build (a span of items built at one level), on
/// one thread.
pub(crate) struct Chains<'s, 'a> {
    items: &'s [Item<'a>],
    /// The build's non-empty leaves in order: index in `items` and the
    /// level its climb ends at.
    targets: &'s [(usize, usize)],
    /// Leaves of `targets` this cursor climbs next: `next..end`.
    next: usize,
    end: usize,
    /// The climbed leaves not yet taken, in order (indices in `targets`),
    /// and their hashes, [`LEVELS`] per leaf by level.
    window: Vec<usize>,
    taken: usize,
    hashes: Vec<Hash>,
    /// Leaves climbed together.
    lanes: usize,
}

impl<'s, 'a> Chains<'s, 'a> {
    /// The climbs of the build of `items` at `level`, or `None` where the
    /// lanes buy nothing (one lane, or one leaf). `targets` is filled here
    /// and must outlive the cursors.
    pub fn new(
        level: usize,
        items: &'s [Item<'a>],
        targets: &'s mut Vec<(usize, usize)>,
        lanes: usize,
    ) -> Option<Self> {
        if lanes < 2 || items.len() < 2 {
            return None;
        }
        *targets = lift_targets(level, items);
        Some(Chains {
            items,
            targets,
            next: 0,
            end: targets.len(),
            window: Vec::new(),
            taken: 0,
            hashes: Vec::new(),
            lanes,
        })
    }

    /// Two cursors for the halves of a split build of items `from..until`
    /// (the leaves before item `at`, and the rest), each with the climbed
    /// hashes of its own leaves, so none is lost; this one goes on after
    /// item `until`.
    pub fn split(&mut self, at: usize, until: usize) -> (Self, Self) {
        let first = self.window.get(self.taken).copied().unwrap_or(self.next);
        let rest = &self.targets[first..self.end];
        let mid = first + rest.partition_point(|t| t.0 < at);
        let stop = first + rest.partition_point(|t| t.0 < until);
        let halves = (self.part(first, mid), self.part(mid, stop));
        *self = self.part(stop, self.end);
        halves
    }

    /// A cursor for the leaves `lo..hi` of `targets` not taken yet, with
    /// the hashes of those already climbed.
    fn part(&self, lo: usize, hi: usize) -> Self {
        let mut part = Chains {
            items: self.items,
            targets: self.targets,
            next: self.next.clamp(lo, hi),
            end: hi,
            window: Vec::new(),
            taken: 0,
            hashes: Vec::new(),
            lanes: self.lanes,
        };
        for (slot, &t) in self.window.iter().enumerate().skip(self.taken) {
            if (lo..hi).contains(&t) {
                part.window.push(t);
                part.hashes
                    .extend_from_slice(&self.hashes[slot * LEVELS..(slot + 1) * LEVELS]);
            }
        }
        part
    }

    /// The hashes of the climb of item `item` to `level` (indexed by level,
    /// `level..=256` filled; 256 is the leaf hash), when it is the next
    /// leaf of this cursor and climbs to `level`.
    pub fn take(&mut self, item: usize, level: usize) -> Option<&[Hash]> {
        if self.taken == self.window.len() {
            self.climb_next();
        }
        let slot = self.taken;
        let &t = self.window.get(slot)?;
        if self.targets.get(t) != Some(&(item, level)) {
            return None;
        }
        self.taken += 1;
        self.hashes.get(slot * LEVELS..(slot + 1) * LEVELS)
    }

    /// Climbs the next leaves (as many as there are lanes) to their levels.
    fn climb_next(&mut self) {
        let count = self.lanes.min(self.end - self.next);
        self.window.clear();
        self.window.extend(self.next..self.next + count);
        self.next += count;
        self.taken = 0;
        self.hashes.clear();
        self.hashes.resize(count * LEVELS, Hash::default());
        let mut schedules = Vec::with_capacity(count);
        for (slot, &t) in self.window.iter().enumerate() {
            let leaf = self.items[self.targets[t].0].leaf;
            self.hashes[slot * LEVELS + MAX_LEVEL] = leaf.hash();
            schedules.push(SumSchedule::new(leaf.sum()));
        }
        let lowest = self.window.iter().map(|&t| self.targets[t].1).min();
        let Some(lowest) = lowest else { return };
        for level in (lowest..MAX_LEVEL).rev() {
            let mut active = [0usize; 4];
            let mut n = 0;
            for (slot, &t) in self.window.iter().enumerate() {
                if self.targets[t].1 <= level && n < active.len() {
                    active[n] = slot;
                    n += 1;
                }
            }
            match n {
                4 => self.step::<4>(&active, level, &schedules),
                3 => self.step::<3>(&active, level, &schedules),
                2 => self.step::<2>(&active, level, &schedules),
                _ => self.step::<1>(&active, level, &schedules),
            }
        }
    }

    /// The branches at `level` of the climbs in window slots `active[..N]`.
    fn step<const N: usize>(
        &mut self,
        active: &[usize; 4],
        level: usize,
        schedules: &[SumSchedule],
    ) {
        let mut nodes: [Hash; N] =
            std::array::from_fn(|l| self.hashes[active[l] * LEVELS + level + 1]);
        let together = Climb {
            keys: std::array::from_fn(|l| &self.items[self.targets[self.window[active[l]]].0].key),
            from: [level + 1; N],
            steps: 1,
            schedules: std::array::from_fn(|l| &schedules[active[l]]),
            empties: empty_table(),
        };
        climb(&mut nodes, &together);
        for (l, hash) in nodes.into_iter().enumerate() {
            self.hashes[active[l] * LEVELS + level] = hash;
        }
    }
}
