//! The per-thread count of SHA-256 evaluations (feature `hash-count`).
//!
//! Benches and tests read it before and after an operation to check that
//! each touched node is hashed once. It is test instrumentation: without
//! `hash-count` nothing is counted and counting costs nothing, so
//! production builds (the workspace turns it on only for its own tests,
//! benches and examples, through their dev-dependencies) hash without it.
//! [`hash_calls`] and [`add_hash_calls`] exist with `std` either way (code
//! that forwards counts compiles in every build); without `hash-count`
//! they read 0 and add nothing.

#[cfg(feature = "hash-count")]
mod on {
    use core::cell::Cell;

    std::thread_local! {
        static HASH_CALLS: Cell<u64> = const { Cell::new(0) };
    }

    /// Number of SHA-256 evaluations made by this crate (and by ms-smt) on
    /// the calling thread (feature `hash-count`; without it, always 0).
    ///
    /// It is per thread so concurrent tests do not disturb each other; a
    /// thread-local cell costs about a nanosecond.
    pub fn hash_calls() -> u64 {
        HASH_CALLS.with(Cell::get)
    }

    /// Adds `n` evaluations made on another thread for this one (a split
    /// descent's second half), or made at once by ms-smt's lanes (feature
    /// `hash-count`; without it, nothing).
    pub fn add_hash_calls(n: u64) {
        HASH_CALLS.with(|c| c.set(c.get().wrapping_add(n)));
    }

    #[inline]
    pub(crate) fn count_call() {
        add_hash_calls(1);
    }
}

/// Without `hash-count`: nothing is counted.
#[cfg(not(feature = "hash-count"))]
mod on {
    /// Number of SHA-256 evaluations made by this crate (and by ms-smt) on
    /// the calling thread (feature `hash-count`; without it, always 0).
    #[cfg(feature = "std")]
    #[inline(always)]
    pub fn hash_calls() -> u64 {
        0
    }

    /// Adds `n` evaluations made on another thread for this one (feature
    /// `hash-count`; without it, nothing).
    #[cfg(feature = "std")]
    #[inline(always)]
    pub fn add_hash_calls(_n: u64) {}

    #[inline(always)]
    pub(crate) fn count_call() {}
}

pub(crate) use on::count_call;
#[cfg(feature = "std")]
pub use on::{add_hash_calls, hash_calls};
