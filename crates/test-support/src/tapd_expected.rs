//! The tapd fixtures' `expected.json` (written by taproot-assets' own
//! `mssmt` at 95bd8d41): each fixture tree's namespace, root, leaves and
//! proofs, as the tests of the tapd interop and of the universe layout
//! compare against them.

use serde::Deserialize;

/// The whole file: one entry per fixture tree.
#[derive(Debug, Deserialize)]
pub struct Expected {
    /// The fixture trees.
    pub namespaces: Vec<ExpectedNs>,
}

/// One fixture tree as tapd wrote it.
#[derive(Debug, Deserialize)]
pub struct ExpectedNs {
    /// tapd's namespace of the tree.
    pub namespace: String,
    /// Its root hash, hex.
    pub root_hash: String,
    /// Its root sum, decimal.
    pub root_sum: String,
    /// Every leaf.
    pub leaves: Vec<ExpectedLeaf>,
    /// Compressed proofs of some keys.
    pub proofs: Vec<ExpectedProof>,
}

/// One leaf of a fixture tree.
#[derive(Debug, Deserialize)]
pub struct ExpectedLeaf {
    /// The leaf's key, hex.
    pub key: String,
    /// Its value, hex.
    pub value: String,
    /// Its sum, decimal.
    pub sum: String,
}

/// One proof of a fixture tree.
#[derive(Debug, Deserialize)]
pub struct ExpectedProof {
    /// The key proven, hex.
    pub key: String,
    /// tapd's compressed proof of it, hex.
    pub compressed_proof: String,
}

/// Reads `expected.json` from [`tapd_fixtures`](crate::tapd_fixtures);
/// panics (failing the test) when it is missing or malformed.
pub fn tapd_expected() -> Expected {
    let path = crate::tapd_fixtures().join("expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}
