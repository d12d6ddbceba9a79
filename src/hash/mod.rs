//! SHA-256 of leaves and branches (spec §1.2, §1.3), one at a time or
//! several in flight at once.

mod climb;
mod lanes;
mod schedule;
#[cfg(target_arch = "x86_64")]
mod shani;

pub(crate) use climb::Climb;
// One hash at a time, and the per-thread count, are ms-smt-core's.
pub(crate) use lanes::climb;
// Whether SHA-NI runs here: the lane count's ceiling, in every build.
pub use lanes::has_kernel;
pub(crate) use ms_smt_core::add_hash_calls;
pub use ms_smt_core::hash::{Hash, branch_hash};
pub use ms_smt_core::hash_calls;
// The kernels' own entry points, for the benches and kernel tests.
#[cfg(any(test, feature = "test-utils"))]
pub use lanes::{BranchInput, branch_hashes, scheduled_hashes};
#[cfg(any(test, feature = "test-utils"))]
pub use ms_smt_core::hash::{leaf_hash, sha256};
pub use schedule::SumSchedule;
