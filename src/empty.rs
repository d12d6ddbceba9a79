//! The 257 empty-subtree hashes `EmptyTree[L]` (spec §1.4), computed once.

use std::sync::LazyLock;

use crate::hash::{Hash, branch_hash, leaf_hash};
use crate::key::MAX_LEVEL;

static EMPTY: LazyLock<[Hash; MAX_LEVEL + 1]> = LazyLock::new(|| {
    let mut table = [Hash::default(); MAX_LEVEL + 1];
    table[MAX_LEVEL] = leaf_hash(&[], 0);
    for level in (0..MAX_LEVEL).rev() {
        table[level] = branch_hash(&table[level + 1], &table[level + 1], 0);
    }
    table
});

/// Hash of the empty subtree rooted at `level` (0 = root, 256 = leaf).
///
/// # Panics
/// If `level > 256`; callers only pass levels of a walk.
#[inline]
pub fn empty_hash(level: usize) -> Hash {
    EMPTY[level]
}

/// The whole table, indexed by level.
pub(crate) fn empty_table() -> &'static [Hash; MAX_LEVEL + 1] {
    &EMPTY
}

/// True when `hash` is the empty subtree hash for `level`.
#[inline]
pub fn is_empty_hash(level: usize, hash: &Hash) -> bool {
    EMPTY[level] == *hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_table() {
        let cases = [
            (
                256,
                "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc",
            ),
            (
                255,
                "5a61e238f07e3a8114e39670c1e5ff430913d5793028258cf8a49282efee4411",
            ),
            (
                254,
                "a9ed7261d36f1df934db5cfc81e1ea6e7c7117203dc4b88ccf336e6385153ec1",
            ),
            (
                2,
                "b72fb4b8936ef8080eac83b2e49b661e7c7f9a2db6880a57f72b8a0431cccc2f",
            ),
            (
                1,
                "5a9d70bc8ac90cab6a114615f3d43a6d64c53e8a6279963a496fd3ee910a8c76",
            ),
            (
                0,
                "b1e8e8f2dc3b266452988cfe169aa73be25405eeead02ab5dd6b3c6fd0ca8d67",
            ),
        ];
        for (level, hex) in cases {
            assert_eq!(empty_hash(level).to_hex(), hex, "level {level}");
        }
    }
}
