//! The per-thread count of SHA-256 evaluations (feature `std`).
//!
//! Benches and tests read it before and after an operation to check that
//! each touched node is hashed once. Without `std` there are no
//! thread-locals, so nothing is counted and counting costs nothing.

#[cfg(feature = "std")]
mod on {
    use core::cell::Cell;

    std::thread_local! {
        static HASH_CALLS: Cell<u64> = const { Cell::new(0) };
    }

    /// Number of SHA-256 evaluations made by this crate (and by ms-smt) on
    /// the calling thread.
    ///
    /// It is per thread so concurrent tests do not disturb each other; a
    /// thread-local cell costs about a nanosecond.
    pub fn hash_calls() -> u64 {
        HASH_CALLS.with(Cell::get)
    }

    /// Adds `n` evaluations made on another thread for this one (a split
    /// descent's second half), or made at once by ms-smt's lanes.
    pub fn add_hash_calls(n: u64) {
        HASH_CALLS.with(|c| c.set(c.get().wrapping_add(n)));
    }

    #[inline]
    pub(crate) fn count_call() {
        add_hash_calls(1);
    }
}

#[cfg(feature = "std")]
pub(crate) use on::count_call;
#[cfg(feature = "std")]
pub use on::{add_hash_calls, hash_calls};

/// Without `std`: nothing to count into.
#[cfg(not(feature = "std"))]
#[inline(always)]
pub(crate) fn count_call() {}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::hash_calls;
    use crate::hash::{Hash, branch_hash, leaf_hash};

    #[test]
    fn counter_counts_calls() {
        let before = hash_calls();
        let _ = leaf_hash(b"a", 1);
        let _ = branch_hash(&Hash::default(), &Hash::default(), 0);
        assert_eq!(hash_calls() - before, 2);
    }
}
