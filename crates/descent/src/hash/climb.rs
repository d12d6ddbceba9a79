//! The inputs of `N` lifts climbing together (see `lanes::climb`).

use super::schedule::SumSchedule;
use crate::key::Key;
use ms_smt_core::hash::Hash;

/// `N` nodes climbing `steps` levels each through one-child branches whose
/// other child is empty: lane `l`'s node sits at level `from[l]` (at least
/// `steps`) on `keys[l]`'s path, every branch on its way has the sum
/// `schedules[l]` was made for, and `empties` is the empty-subtree table by
/// level.
pub struct Climb<'a, const N: usize> {
    /// Each lane's key, whose path it climbs.
    pub keys: [&'a Key; N],
    /// Each lane's starting level.
    pub from: [usize; N],
    /// Levels every lane climbs.
    pub steps: usize,
    /// Each lane's sum, its second block scheduled.
    pub schedules: [&'a SumSchedule; N],
    /// The empty subtree's hash at each level.
    pub empties: &'a [Hash; 257],
}
