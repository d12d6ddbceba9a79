//! What the crate's own tests, benches and examples reach beyond the public
//! API (cargo feature `test-utils`, as in reth): hashing internals, the
//! strata row codec, the retry policy. Not part of the stable API.

pub use crate::empty::empty_hash;
pub use crate::hash::{
    BranchInput, SumSchedule, branch_hash, branch_hashes, has_kernel, hash_calls, leaf_hash,
    scheduled_hashes, sha256,
};
pub use crate::key::MAX_LEVEL;
pub use crate::strata::Row;
pub use crate::tree::handle::EXCLUSIVE_AFTER;
