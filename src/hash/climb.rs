//! The inputs of `N` lifts climbing together (see `lanes::climb`).

use super::schedule::SumSchedule;
use crate::key::Key;
use ms_smt_core::hash::Hash;

/// `N` nodes climbing `steps` levels each through one-child branches whose
/// other child is empty: lane `l`'s node sits at level `from[l]` (at least
/// `steps`) on `keys[l]`'s path, every branch on its way has the sum
/// `schedules[l]` was made for, and `empties` is the empty-subtree table by
/// level.
pub(crate) struct Climb<'a, const N: usize> {
    pub keys: [&'a Key; N],
    pub from: [usize; N],
    pub steps: usize,
    pub schedules: [&'a SumSchedule; N],
    pub empties: &'a [Hash; 257],
}
