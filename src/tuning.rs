//! How the descent spends the machine: how many branch hashes it keeps in
//! flight on one core ([`Tuning::hash_lanes`]) and how many threads one
//! descent may hash on ([`Tuning::descent_threads`]).
//!
//! A [`Tuning`] is a value on a tree, a forest or a writer (their
//! `with_hash_lanes` and `with_descent_threads`), so two trees of one
//! process may differ. The tree puts its value in effect for the pure,
//! synchronous work of each of its operations (a write's descent, a read's
//! walk), on the calling thread and on the descent's second thread, and the
//! hashing code reads the value in effect there; outside such work (the
//! stores' own hashing, an audit's scan) the process-wide defaults apply,
//! which [`set_hash_lanes`](crate::set_hash_lanes) and
//! [`set_descent_threads`](crate::set_descent_threads) set. Roots, proofs,
//! stored nodes and hash counts are the same at every setting.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The lane count used where none was set. In the descent's climbs four
/// measured a few per cent faster than two on SHA-NI (10,000 keys into an
/// empty tree on two threads: 55 ms against 60 ms); in isolation two and
/// four are within 10 % of each other, as four spill the 16 vector
/// registers (BENCHMARKS.md, "Lanes").
pub const DEFAULT_HASH_LANES: usize = 4;

/// The process-wide default lanes; 0: [`DEFAULT_HASH_LANES`].
static DEFAULT_LANES: AtomicUsize = AtomicUsize::new(0);

/// The process-wide default threads; 0: two where the machine has two or
/// more cores, else one.
static DEFAULT_THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The tuning of the work running on this thread, if any.
    static IN_EFFECT: Cell<Option<Tuning>> = const { Cell::new(None) };
}

/// Hash lanes and descent threads: `None` (the default) takes the process
/// default at the time of use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tuning {
    hash_lanes: Option<usize>,
    descent_threads: Option<usize>,
}

impl Tuning {
    /// The process defaults.
    pub const fn new() -> Self {
        Tuning {
            hash_lanes: None,
            descent_threads: None,
        }
    }

    /// This tuning with `lanes` branch hashes in flight on one core: 1, 2
    /// or 4 (other values round down to one of them; 0 takes the process
    /// default). Without SHA-NI the lanes run one after another, so the
    /// setting changes nothing there.
    pub const fn with_hash_lanes(mut self, lanes: usize) -> Self {
        self.hash_lanes = if lanes == 0 { None } else { Some(lanes) };
        self
    }

    /// This tuning with a descent hashing on at most `threads` threads: 1
    /// keeps it on the calling thread; 2 or more splits a batch of
    /// [`PARALLEL_MIN_ITEMS`](crate::PARALLEL_MIN_ITEMS) or more keys at
    /// its first branch with keys on both sides, one half on a scoped
    /// thread of its own; 0 takes the process default.
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
        let asked = self
            .hash_lanes
            .unwrap_or_else(|| DEFAULT_LANES.load(Ordering::Relaxed));
        match asked {
            0 => DEFAULT_HASH_LANES,
            1 => 1,
            2 | 3 => 2,
            _ => 4,
        }
    }

    /// The threads one descent may hash on.
    pub fn descent_threads(&self) -> usize {
        let asked = self
            .descent_threads
            .unwrap_or_else(|| DEFAULT_THREADS.load(Ordering::Relaxed));
        match asked {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(2)),
            n => n,
        }
    }

    /// The tuning in effect on this thread: the one a tree put in effect
    /// for the work running here, else the process defaults.
    pub(crate) fn current() -> Tuning {
        IN_EFFECT.with(Cell::get).unwrap_or_default()
    }

    /// Runs `work` (synchronous: the value does not follow a task across
    /// threads) with this tuning in effect on this thread.
    pub(crate) fn apply<T>(self, work: impl FnOnce() -> T) -> T {
        struct Restore(Option<Tuning>);
        impl Drop for Restore {
            fn drop(&mut self) {
                IN_EFFECT.with(|t| t.set(self.0));
            }
        }
        let _restore = Restore(IN_EFFECT.with(|t| t.replace(Some(self))));
        work()
    }
}

/// Sets the process-wide default of how many branch hashes the descent
/// keeps in flight on one core (see [`Tuning::with_hash_lanes`]): what a
/// tree, forest or writer without its own setting uses. 0 restores
/// [`DEFAULT_HASH_LANES`].
pub fn set_hash_lanes(lanes: usize) {
    DEFAULT_LANES.store(lanes, Ordering::Relaxed);
}

/// The lane count in effect on this thread (see [`Tuning::hash_lanes`]).
pub fn hash_lanes() -> usize {
    Tuning::current().hash_lanes()
}

/// Sets the process-wide default of how many threads one descent may hash
/// on (see [`Tuning::with_descent_threads`]): what a tree, forest or
/// writer without its own setting uses. 0 restores the default: two where
/// the machine has two or more cores, else one.
///
/// The split half runs on a thread of its own, not on the async runtime's
/// workers; the other half runs on the calling thread, which for the tree's
/// async methods is a runtime worker, as without the split.
pub fn set_descent_threads(threads: usize) {
    DEFAULT_THREADS.store(threads, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::Tuning;

    #[test]
    fn a_tuning_is_in_effect_only_inside_its_work() {
        let one = Tuning::new().with_descent_threads(1).with_hash_lanes(1);
        let three = Tuning::new().with_descent_threads(3);
        assert_eq!(Tuning::current(), Tuning::new());
        one.apply(|| {
            assert_eq!(Tuning::current().descent_threads(), 1);
            three.apply(|| assert_eq!(Tuning::current().descent_threads(), 3));
            assert_eq!(Tuning::current(), one);
        });
        assert_eq!(Tuning::current(), Tuning::new());
    }
}
