//! Hashing a large batch without stalling the async runtime.

use tokio::runtime::{Handle, RuntimeFlavor};

use crate::descent::PARALLEL_MIN_ITEMS;

/// Runs the descent `plan` for a batch of `items` keys. A batch large
/// enough to be split across threads also runs under
/// `tokio::task::block_in_place` when called on a multi-thread runtime, so
/// the worker's other tasks move to another worker while it hashes; small
/// batches and other runtimes run it as is.
pub(crate) fn hashing<T>(items: usize, plan: impl FnOnce() -> T) -> T {
    if items >= PARALLEL_MIN_ITEMS
        && let Ok(handle) = Handle::try_current()
        && handle.runtime_flavor() == RuntimeFlavor::MultiThread
    {
        return tokio::task::block_in_place(plan);
    }
    plan()
}
