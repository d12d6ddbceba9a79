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
/// Lost optimistic races after which a write takes its trees' write lock.
pub const EXCLUSIVE_AFTER: u32 = crate::tree::engine::EXCLUSIVE_AFTER;

/// Lifts `nodes` (hash, sum, key) from level 256 to level `to` on `lanes`
/// lanes (1, 2 or 4), as the descent lifts compacted leaves: the lanes
/// bench measures the climb kernel with it.
pub fn lift_nodes(
    nodes: &[(crate::Hash, u64, crate::Key)],
    to: usize,
    lanes: usize,
) -> Vec<crate::Hash> {
    let mut lifts: Vec<crate::lift::Lift> = nodes
        .iter()
        .map(|(hash, sum, key)| crate::lift::Lift::new(*hash, *sum, *key, MAX_LEVEL, to))
        .collect();
    crate::lift::lift_on(&mut lifts, lanes);
    lifts.into_iter().map(|l| l.hash).collect()
}

/// Removes the SQLite database at `path` with its WAL and shared-memory
/// files, ignoring any that are gone: how scratch databases clean up.
pub fn remove_sqlite_files(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}
