//! When the descent takes a second thread: the split threshold, the
//! decision ([`fork_here`]) and the scoped fork ([`on_two_threads`]) the
//! planner, the lift and the memory store's commit share.

use crate::hash::{add_hash_calls, hash_calls};
use crate::tuning::Tuning;

/// Batches of at least this many items are split across two threads at
/// their first branch with work on both sides (below it, each half is
/// hashed on one thread).
pub const PARALLEL_MIN_ITEMS: usize = 256;

/// True when a subtree with `items` items should be split across threads
/// (`forked`: a split above it already did, and one split is all two
/// threads use) under `tuning`.
pub fn fork_here(items: usize, forked: bool, tuning: Tuning) -> bool {
    if forked || items < PARALLEL_MIN_ITEMS {
        return false;
    }
    tuning.descent_threads() >= 2
}

/// Runs `left` on a scoped second thread and `right` on this one; the
/// second thread's hashes count on this thread
/// ([`hash_calls`](crate::hash::hash_calls)). A panic on either side
/// resumes here.
pub fn on_two_threads<A: Send, B>(
    left: impl FnOnce() -> A + Send,
    right: impl FnOnce() -> B,
) -> (A, B) {
    let (a, calls, b) = std::thread::scope(|scope| {
        let handle = scope.spawn(move || {
            let before = hash_calls();
            let a = left();
            (a, hash_calls().wrapping_sub(before))
        });
        let b = right();
        match handle.join() {
            Ok((a, calls)) => (a, calls, b),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    add_hash_calls(calls);
    (a, b)
}
