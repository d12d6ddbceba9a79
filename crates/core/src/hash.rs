//! SHA-256 hashing of leaves and branches (spec §1.2, §1.3).
//!
//! Branch hashing goes straight to the SHA-256 compression function with a
//! pre-padded second block: a branch preimage is always 72 bytes, so the
//! padding is a constant and the streaming `Digest` machinery is overhead.
//! `sha2` selects its SHA-NI backend at run time on x86-64 CPUs that have it.

use alloc::string::String;
use core::fmt;

use sha2::{Digest, Sha256};

use crate::count::count_call;

/// A 32-byte SHA-256 node hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lower-case hex, the form used by the test vectors.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl From<[u8; 32]> for Hash {
    fn from(bytes: [u8; 32]) -> Self {
        Hash(bytes)
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.to_hex())
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

const SHA256_IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// `H(left || right || be64(sum))`, the branch hash of spec §1.3.
#[inline]
pub fn branch_hash(left: &Hash, right: &Hash, sum: u64) -> Hash {
    count_call();
    branch_digest(left, right, sum)
}

/// [`branch_hash`] without counting (feature `hash-count`): ms-smt's lanes count
/// a whole group of hashes at once and use this for their portable path.
#[inline]
pub fn branch_digest(left: &Hash, right: &Hash, sum: u64) -> Hash {
    let mut first = [0u8; 64];
    first[..32].copy_from_slice(&left.0);
    first[32..].copy_from_slice(&right.0);
    // Second block: the 8 sum bytes, the 0x80 terminator, zeros, and the
    // message length (72 bytes = 576 bits) in the last 8 bytes.
    let mut second = [0u8; 64];
    second[..8].copy_from_slice(&sum.to_be_bytes());
    second[8] = 0x80;
    second[56..].copy_from_slice(&576u64.to_be_bytes());
    let mut state = SHA256_IV;
    sha2::block_api::compress256(&mut state, &[first, second]);
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_exact_mut(4).zip(state) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    Hash(out)
}

/// `H(value || be64(sum))`, the leaf hash of spec §1.2 (no length prefix).
#[inline]
pub fn leaf_hash(value: &[u8], sum: u64) -> Hash {
    count_call();
    let mut h = Sha256::new();
    h.update(value);
    h.update(sum.to_be_bytes());
    Hash(h.finalize().into())
}

/// Plain SHA-256 of a byte string; ms-smt's floor bench compares it with
/// [`branch_hash`].
pub fn sha256(data: &[u8]) -> Hash {
    count_call();
    Hash(Sha256::digest(data).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn branch_hash_matches_streaming_sha256() {
        let l = Hash([7u8; 32]);
        let r = Hash([9u8; 32]);
        let mut pre = Vec::new();
        pre.extend_from_slice(&l.0);
        pre.extend_from_slice(&r.0);
        pre.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(branch_hash(&l, &r, 0x0102_0304_0506_0708), sha256(&pre));
    }
}

#[cfg(all(test, feature = "hash-count"))]
mod count_tests {
    use super::{Hash, branch_hash, leaf_hash};
    use crate::count::hash_calls;

    #[test]
    fn counter_counts_calls() {
        let before = hash_calls();
        let _ = leaf_hash(b"a", 1);
        let _ = branch_hash(&Hash::default(), &Hash::default(), 0);
        assert_eq!(hash_calls() - before, 2);
    }
}
