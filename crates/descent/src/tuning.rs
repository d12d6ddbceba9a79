//! How the descent spends the machine: how many branch hashes it keeps in
//! flight on one core ([`Tuning::hash_lanes`]) and how many threads one
//! descent may hash on ([`Tuning::descent_threads`]).
//!
//! A [`Tuning`] is a value: a tree, a forest or a writer holds one (their
//! `with_hash_lanes` and `with_descent_threads`) and hands it to each pure,
//! synchronous piece of work it runs (a write's descent, a read's walk);
//! nothing is process-wide, so two trees of one process may differ. Work
//! given no tuning (a store's own hashing, an audit's scan) runs at the
//! defaults, [`Tuning::default`]. Roots, proofs, stored nodes and hash
//! counts are the same at every setting.

/// The lane count used where none was set. In the descent's climbs four
/// measured a few per cent faster than two on SHA-NI (10,000 keys into an
/// empty tree on two threads: 55 ms against 60 ms); in isolation two and
/// four are within 10 % of each other, as four spill the 16 vector
/// registers (BENCHMARKS.md, "Lanes").
pub const DEFAULT_HASH_LANES: usize = 4;

/// Hash lanes and descent threads: `None` (the default) takes the
/// defaults, [`DEFAULT_HASH_LANES`] and two threads where the machine has
/// two or more cores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tuning {
    hash_lanes: Option<usize>,
    descent_threads: Option<usize>,
}

impl Tuning {
    /// The defaults.
    pub const fn new() -> Self {
        Tuning {
            hash_lanes: None,
            descent_threads: None,
        }
    }

    /// This tuning with `lanes` branch hashes in flight on one core: 1, 2
    /// or 4 (other values round down to one of them; 0 takes the default).
    /// Without SHA-NI the lanes run one after another, so the
    /// setting changes nothing there.
    pub const fn with_hash_lanes(mut self, lanes: usize) -> Self {
        self.hash_lanes = if lanes == 0 { None } else { Some(lanes) };
        self
    }

    /// This tuning with a descent hashing on at most `threads` threads: 1
    /// keeps it on the calling thread; 2 or more splits a batch of
    /// [`PARALLEL_MIN_ITEMS`](crate::PARALLEL_MIN_ITEMS) or more keys at
    /// its first branch with keys on both sides, one half on a scoped
    /// thread of its own; 0 takes the default.
    pub const fn with_descent_threads(mut self, threads: usize) -> Self {
        self.descent_threads = if threads == 0 { None } else { Some(threads) };
        self
    }

    /// The lanes this tuning hashes on: 1 without SHA-NI, else the lanes
    /// set (rounded down to 1, 2 or 4) or the default.
    pub fn hash_lanes(&self) -> usize {
        if !crate::hash::has_kernel() {
            return 1;
        }
        match self.hash_lanes.unwrap_or(DEFAULT_HASH_LANES) {
            0 => DEFAULT_HASH_LANES,
            1 => 1,
            2 | 3 => 2,
            _ => 4,
        }
    }

    /// The threads one descent may hash on.
    pub fn descent_threads(&self) -> usize {
        match self.descent_threads {
            None | Some(0) => std::thread::available_parallelism().map_or(1, |n| n.get().min(2)),
            Some(n) => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_HASH_LANES, Tuning};

    #[test]
    fn a_tuning_is_its_own_value() {
        let one = Tuning::new().with_descent_threads(1).with_hash_lanes(1);
        let three = Tuning::new().with_descent_threads(3).with_hash_lanes(3);
        assert_eq!(one.descent_threads(), 1);
        assert_eq!(three.descent_threads(), 3);
        if crate::hash::has_kernel() {
            assert_eq!(one.hash_lanes(), 1);
            assert_eq!(three.hash_lanes(), 2, "3 rounds down to 2");
            assert_eq!(Tuning::new().hash_lanes(), DEFAULT_HASH_LANES);
            assert_eq!(Tuning::new().with_hash_lanes(0), Tuning::new());
        } else {
            assert_eq!(three.hash_lanes(), 1, "no kernel: one lane");
        }
        assert!(Tuning::default().descent_threads() >= 1);
    }
}
