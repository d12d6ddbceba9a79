//! The official proof vectors (`mssmt_tree_proofs.json`: 1,000 inclusion
//! and 10 exclusion proofs in the Go compressed format) checked with this
//! crate alone: strict decoding, verification against the vector's root,
//! and byte-exact re-encoding. The file is read from `$MSSMT_VECTORS_DIR`,
//! or `shared/vectors` beside the repository (`../../../shared/vectors`
//! from this crate's directory).

use std::collections::BTreeMap;
use std::path::PathBuf;

use ms_smt_core::{CompressedProof, ComputedNode, Hash, Key, Leaf, Proof};
use serde::Deserialize;

#[derive(Deserialize)]
struct File {
    all_tree_leaves: Vec<TreeLeaf>,
    valid_test_cases: Vec<Case>,
}

#[derive(Deserialize)]
struct TreeLeaf {
    key: String,
    node: Value,
}

#[derive(Deserialize)]
struct Value {
    value: String,
    sum: String,
}

#[derive(Deserialize)]
struct Case {
    root_hash: String,
    root_sum: String,
    inclusion_proofs: Option<Vec<VectorProof>>,
    exclusion_proofs: Option<Vec<VectorProof>>,
}

#[derive(Deserialize)]
struct VectorProof {
    proof_key: String,
    compressed_proof: String,
}

/// Resolved at run time from the working directory (cargo runs tests in
/// the crate's directory), not from `CARGO_MANIFEST_DIR` at build time: a
/// test binary reused from a build in another checkout (a shared target
/// directory) would look beside that checkout.
fn vectors_dir() -> PathBuf {
    std::env::var_os("MSSMT_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/vectors")
        })
}

fn key(hex: &str) -> Key {
    hex.parse().unwrap_or_else(|e| panic!("{hex}: {e}"))
}

/// Decodes, verifies and re-encodes one vector proof of `leaf` at `key`.
fn check(proof: &VectorProof, leaf: &Leaf, root: &ComputedNode) -> Result<(), String> {
    let key = key(&proof.proof_key);
    let bytes = hex::decode(&proof.compressed_proof).map_err(|e| e.to_string())?;
    let compressed = CompressedProof::decode(&bytes).map_err(|e| e.to_string())?;
    let full = compressed.decompress().map_err(|e| e.to_string())?;
    if !full.verify(&key, leaf, root) {
        return Err(format!("{key}: does not verify"));
    }
    if full.to_bytes() != bytes || Proof::from_bytes(&bytes).as_ref() != Ok(&full) {
        return Err(format!("{key}: does not round-trip"));
    }
    // Anything else at the key (one more unit of sum) must not verify.
    let other = Leaf::new(leaf.value().to_vec(), leaf.sum().wrapping_add(1));
    if full.verify(&key, &other, root) {
        return Err(format!("{key}: verifies a wrong leaf"));
    }
    Ok(())
}

#[test]
fn official_proofs_verify() {
    let path = vectors_dir().join("mssmt_tree_proofs.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (set MSSMT_VECTORS_DIR)", path.display()));
    let file: File = serde_json::from_str(&text).expect("vector JSON");
    let leaves: BTreeMap<Key, Leaf> = file
        .all_tree_leaves
        .iter()
        .map(|l| {
            let value = hex::decode(&l.node.value).expect("leaf value hex");
            let sum = l.node.sum.parse().expect("leaf sum");
            (key(&l.key), Leaf::new(value, sum))
        })
        .collect();
    let (mut included, mut excluded) = (0, 0);
    let mut failures = Vec::new();
    for case in &file.valid_test_cases {
        let root = ComputedNode::new(
            Hash(key(&case.root_hash).0),
            case.root_sum.parse().expect("root sum"),
        );
        for proof in case.inclusion_proofs.iter().flatten() {
            let leaf = &leaves[&key(&proof.proof_key)];
            failures.extend(check(proof, leaf, &root).err());
            included += 1;
        }
        for proof in case.exclusion_proofs.iter().flatten() {
            failures.extend(check(proof, &Leaf::empty(), &root).err());
            excluded += 1;
        }
    }
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    assert_eq!((included, excluded), (1000, 10));
}
