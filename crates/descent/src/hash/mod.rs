//! SHA-256 of leaves and branches (spec §1.2, §1.3), one at a time or
//! several in flight at once: [`branch_hashes`] and [`scheduled_hashes`]
//! run `N` independent branch hashes on the SHA-NI kernel where the CPU
//! has it ([`has_kernel`]) and one `sha2` compression pair after another
//! elsewhere, with the same results and the same hash count.

mod climb;
mod lanes;
mod schedule;
#[cfg(target_arch = "x86_64")]
mod shani;

pub use climb::Climb;
pub use lanes::{BranchInput, branch_hashes, climb, has_kernel, scheduled_hashes};
// One hash at a time, and the per-thread count, are ms-smt-core's.
pub use ms_smt_core::hash::{Hash, branch_hash, leaf_hash, sha256};
pub use ms_smt_core::{add_hash_calls, hash_calls};
pub use schedule::SumSchedule;
