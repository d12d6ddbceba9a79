//! Checked u64 sum arithmetic: every sum in the crate is added here.
#![deny(clippy::arithmetic_side_effects)]

use crate::error::SumOverflow;

/// `a + b`, or the overflow error naming the level of the node being built.
#[inline]
pub fn add(a: u64, b: u64, level: usize) -> Result<u64, SumOverflow> {
    a.checked_add(b).ok_or(SumOverflow { level })
}
