//! Leaves: a value and a sum (spec §1.2).

use alloc::vec::Vec;
use core::fmt;

use crate::hash::{Hash, leaf_hash};

/// A leaf: an arbitrary byte value and a u64 sum.
///
/// The empty leaf (empty value, sum 0) is what every unwritten key holds;
/// writing it deletes. An empty value with a non-zero sum, or a non-empty
/// value with sum 0, is an ordinary leaf (spec §2.1).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Leaf {
    value: Vec<u8>,
    sum: u64,
}

impl Leaf {
    /// A leaf with this value and sum.
    pub fn new(value: impl Into<Vec<u8>>, sum: u64) -> Self {
        Leaf {
            value: value.into(),
            sum,
        }
    }

    /// The empty leaf.
    pub const fn empty() -> Self {
        Leaf {
            value: Vec::new(),
            sum: 0,
        }
    }

    /// The value bytes.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The sum.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// True for the empty leaf, whose insertion is a delete.
    pub fn is_empty(&self) -> bool {
        self.value.is_empty() && self.sum == 0
    }

    /// `H(value || be64(sum))`.
    pub fn hash(&self) -> Hash {
        leaf_hash(&self.value, self.sum)
    }

    /// The leaf's parts.
    pub fn into_parts(self) -> (Vec<u8>, u64) {
        (self.value, self.sum)
    }
}

impl fmt::Debug for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leaf")
            .field("value", &hex::encode(&self.value))
            .field("sum", &self.sum)
            .finish()
    }
}
