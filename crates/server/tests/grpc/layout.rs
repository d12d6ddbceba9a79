//! tapd's universe layout against the tapd fixtures
//! (`../shared/fixtures/tapd/expected.json`, written by taproot-assets'
//! own `mssmt` at 95bd8d41): the fixture trees as universes, their roots
//! and proofs bit-identical to tapd's, and the multiverses above them
//! equal to trees built by tapd's rule (`upsertMultiverseLeafEntry`: a
//! leaf at the ID bytes holding the universe root hash, summed 1 for
//! issuance, the root sum for transfers), built apart here.

use ms_smt::multiverse::{ProofType, Universe, UniverseId};
use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, ComputedNode, Key, Leaf, Multiverse};
use ms_smt_test_support::tapd_expected::tapd_expected as expected;

fn key(hex_key: &str) -> Key {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_key, &mut out).expect("a 32-byte hex key");
    Key(out)
}

#[tokio::test]
async fn fixture_trees_as_universes_give_tapds_roots() {
    let expected = expected();
    let multiverse = Multiverse::new(MemoryStore::new());
    // Each fixture tree with leaves becomes an issuance and a transfer
    // universe of its own asset.
    let mut placed = Vec::new();
    for (i, ns) in expected.namespaces.iter().enumerate() {
        if ns.leaves.is_empty() {
            continue;
        }
        for proof_type in ProofType::ALL {
            let asset = [u8::try_from(i).expect("few") + 1; 32];
            let universe = Universe::new(UniverseId::Asset(asset), proof_type);
            let writes: Vec<(String, Key, Leaf)> = ns
                .leaves
                .iter()
                .map(|l| {
                    let sum: u64 = l.sum.parse().expect("sum");
                    (
                        universe.namespace(),
                        key(&l.key),
                        Leaf::new(hex::decode(&l.value).expect("value"), sum),
                    )
                })
                .collect();
            multiverse
                .forest()
                .insert_many(writes)
                .await
                .expect("write");
            placed.push((universe, ns));
        }
    }
    assert_eq!(
        placed.len(),
        6,
        "the fixtures' three trees with leaves, twice"
    );

    let mut issuance = Vec::new();
    let mut transfer = Vec::new();
    for (universe, ns) in &placed {
        let root = multiverse
            .forest()
            .roots(&[universe.namespace()])
            .await
            .expect("root")[0];
        assert_eq!(hex::encode(root.hash.0), ns.root_hash, "{}", ns.namespace);
        assert_eq!(root.sum.to_string(), ns.root_sum, "{}", ns.namespace);
        // The universe's proofs are tapd's, byte for byte.
        for p in &ns.proofs {
            let nested = multiverse
                .forest()
                .nested_proof(&universe.namespace(), &key(&p.key))
                .await
                .expect("proof");
            assert_eq!(hex::encode(nested.proof().to_bytes()), p.compressed_proof);
        }
        let leaf = match universe.proof_type {
            ProofType::Issuance => Leaf::new(root.hash.0.to_vec(), 1),
            ProofType::Transfer => Leaf::new(root.hash.0.to_vec(), root.sum),
        };
        let into = match universe.proof_type {
            ProofType::Issuance => &mut issuance,
            ProofType::Transfer => &mut transfer,
        };
        into.push((universe.multiverse_key(), leaf));
    }
    for (proof_type, leaves) in [
        (ProofType::Issuance, issuance),
        (ProofType::Transfer, transfer),
    ] {
        let reference = CompactedTree::new(MemoryStore::new());
        let want: ComputedNode = reference.insert_many(leaves).await.expect("reference");
        let got = multiverse.multiverse_root(proof_type).await.expect("root");
        assert_eq!(got, want, "{}", proof_type.multiverse());
        assert_ne!(got, ComputedNode::empty_root());
    }
    // The issuance multiverse counts universes; the transfer one sums
    // their roots (one fixture's sum is above 2^63).
    assert_eq!(
        multiverse
            .multiverse_root(ProofType::Issuance)
            .await
            .expect("root")
            .sum,
        3
    );
}
