//! Errors of the pure layer: sums that overflow u64.

/// A u64 sum overflowed while building the node at `level`.
///
/// Sums are checked at every branch, so a write is rejected exactly when the
/// tree's final total would exceed `u64::MAX` (spec §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sum of the node at level {level} exceeds u64::MAX: integer overflow")]
pub struct SumOverflow {
    /// Level of the node whose sum overflowed (0 = root).
    pub level: usize,
}
