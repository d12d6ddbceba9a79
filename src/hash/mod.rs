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
pub use digest::{Hash, branch_hash, hash_calls, leaf_hash, sha256};
pub(crate) use lanes::climb;
pub use lanes::{
    BranchInput, DEFAULT_HASH_LANES, branch_hashes, has_kernel, hash_lanes, scheduled_hashes,
    set_hash_lanes,
};
pub use schedule::SumSchedule;
