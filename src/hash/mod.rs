//! SHA-256 of leaves and branches (spec §1.2, §1.3), one at a time or
//! several in flight at once.

mod climb;
mod digest;
mod lanes;
mod schedule;
#[cfg(target_arch = "x86_64")]
mod shani;

pub(crate) use climb::Climb;
pub(crate) use digest::add_hash_calls;
pub use digest::{Hash, branch_hash, hash_calls, leaf_hash};
pub(crate) use lanes::climb;
pub use lanes::{DEFAULT_HASH_LANES, hash_lanes, set_hash_lanes};
// The kernels' own entry points, for the benches and kernel tests.
pub use schedule::SumSchedule;
#[cfg(any(test, feature = "test-utils"))]
pub use {
    digest::sha256,
    lanes::{BranchInput, branch_hashes, has_kernel, scheduled_hashes},
};
