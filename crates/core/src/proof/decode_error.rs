//! Why bytes are not a proof.

/// Errors of strict proof decoding. Each names a way the bytes differ from a
/// canonical encoding (spec §4.4, §9 C3 option b).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No bytes at all.
    #[error("compressed proof bytes are empty")]
    Empty,
    /// Fewer bytes than the node count and the 32-byte bitmap need. Go
    /// accepts a bitmap cut short by 1-31 bytes (zero-filling it); we do not.
    #[error("compressed proof is truncated: needs {needed} bytes, got {got}")]
    Truncated {
        /// Bytes the header promises.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// Bytes after the bitmap. Go's `Decode` ignores them.
    #[error("trailing data after compressed proof: {extra} bytes")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The bitmap's non-empty positions do not match the node count
    /// (Go: `invalid compressed proof, num_nodes=N, num_expected=M`).
    #[error("invalid compressed proof, num_nodes={nodes}, num_expected={expected}")]
    CountMismatch {
        /// Explicit nodes in the encoding.
        nodes: usize,
        /// Clear bits in the bitmap.
        expected: usize,
    },
    /// An explicit node carries the empty-subtree hash of its level: a
    /// canonical encoding marks it in the bitmap instead. Go accepts it.
    #[error("explicit sibling {index} is the empty subtree of its level (non-canonical)")]
    NonCanonicalEmpty {
        /// Index of the sibling, leaf side first.
        index: usize,
    },
}
