//! Universe leaf facts of the vector proofs, checked against what the
//! vectors themselves witness: the asset commitment key tapd computed
//! (`tap_key` = universe ID), the asset IDs in transfer witnesses, the
//! block merkle roots (txids), and independent recomputations of the leaf
//! key and namespace.

mod common;

use common::*;
use ms_smt_tapd_proof::{
    FactsError, OutPoint, Proof, ProofFile, ProofType, UniverseLeafFacts, double_sha256,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// All vector proofs with their expected JSON.
fn proofs() -> Vec<(String, Proof, Value)> {
    let mut out = Vec::new();
    for name in [
        "proof_tlv_encoding_generated.json",
        "proof_tlv_encoding_regtest.json",
    ] {
        for (comment, bytes, json) in valid_cases(name, "proof") {
            let proof = Proof::decode(&bytes).unwrap_or_else(|e| panic!("{comment}: {e}"));
            out.push((comment, proof, json));
        }
    }
    out
}

/// tapd's `IsGenesisAsset`, evaluated on the vector's JSON form.
fn json_is_genesis(asset: &Value) -> bool {
    let witnesses = asset["prev_witnesses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let [w] = witnesses.as_slice() else {
        return false;
    };
    let zero_id = w["prev_id"].as_object().is_some_and(|id| {
        id["out_point"] == "0000000000000000000000000000000000000000000000000000000000000000:0"
            && id["asset_id"]
                .as_str()
                .is_some_and(|s| s.bytes().all(|b| b == b'0'))
            && id["script_key"]
                .as_str()
                .is_some_and(|s| s.bytes().all(|b| b == b'0'))
    });
    let stack_empty = w["tx_witness"].as_array().is_none_or(|s| s.is_empty());
    zero_id && w["split_commitment"].is_null() && (stack_empty || !asset["group_key"].is_null())
}

#[test]
fn facts_match_what_the_vectors_witness() {
    let all = proofs();
    assert_eq!(all.len(), 21);
    let mut issuance = 0;
    for (comment, proof, json) in &all {
        let facts =
            UniverseLeafFacts::from_proof(proof).unwrap_or_else(|e| panic!("{comment}: {e}"));
        let asset = &proof.asset;

        // Proof type and sum.
        let expected_type = if json_is_genesis(&json["asset"]) {
            ProofType::Issuance
        } else {
            ProofType::Transfer
        };
        assert_eq!(facts.proof_type, expected_type, "{comment}");
        match facts.proof_type {
            ProofType::Issuance => {
                issuance += 1;
                assert_eq!(facts.sum, asset.amount, "{comment}");
            }
            ProofType::Transfer => assert_eq!(facts.sum, 1, "{comment}"),
        }
        assert_eq!(facts.amount, asset.amount);

        // The universe ID is the asset commitment key tapd computed for the
        // inclusion proof (`TapCommitmentKey`): asset ID, or sha256 of the
        // x-only group key.
        let asset_proof = proof
            .inclusion_proof
            .commitment_proof
            .as_ref()
            .and_then(|c| c.asset_proof.as_ref());
        let tap_key = asset_proof
            .unwrap_or_else(|| panic!("{comment}: no asset proof"))
            .tap_key;
        assert_eq!(
            facts.universe_id, tap_key,
            "{comment}: universe ID vs tap key"
        );
        match &asset.group_key {
            Some(key) => {
                let expected: [u8; 32] = Sha256::digest(&key.as_bytes()[1..]).into();
                assert_eq!(facts.universe_id, expected, "{comment}");
            }
            None => assert_eq!(facts.universe_id, facts.asset_id, "{comment}"),
        }
        assert_eq!(
            facts.namespace,
            format!("{}-{}", facts.proof_type, hex::encode(facts.universe_id))
        );
        assert!(
            facts
                .namespace
                .starts_with(if expected_type == ProofType::Issuance {
                    "issuance-"
                } else {
                    "transfer-"
                })
        );

        // A genesis reveal is the asset's genesis.
        if let Some(genesis) = &proof.genesis_reveal {
            assert_eq!(genesis, &asset.genesis, "{comment}");
            assert_eq!(genesis.id(), facts.asset_id, "{comment}");
        }

        // The anchor outpoint and the leaf key, recomputed by hand: txid,
        // the index as 4 little-endian bytes, the x-only script key.
        let txid = double_sha256(&proof.anchor_tx.encode_no_witness());
        assert_eq!(
            facts.anchor_outpoint,
            OutPoint {
                txid,
                index: proof.inclusion_proof.output_index
            }
        );
        let mut preimage = txid.to_vec();
        preimage.extend_from_slice(&proof.inclusion_proof.output_index.to_le_bytes());
        preimage.extend_from_slice(&asset.script_key.as_bytes()[1..]);
        let leaf_key: [u8; 32] = Sha256::digest(&preimage).into();
        assert_eq!(facts.leaf_key, leaf_key, "{comment}");
        preimage.extend_from_slice(&facts.asset_id);
        assert_eq!(
            facts.asset_leaf_key,
            <[u8; 32]>::from(Sha256::digest(&preimage)),
            "{comment}"
        );

        // The txid folds up the merkle proof to the header's merkle root
        // (the unconfirmed regtest proofs carry an all-zero header).
        if proof.block_header.merkle_root != [0; 32] {
            let mut cur = proof.anchor_tx.txid();
            for (node, left) in proof
                .tx_merkle_proof
                .nodes
                .iter()
                .zip(&proof.tx_merkle_proof.bits)
            {
                let pair = if *left {
                    [cur, *node].concat()
                } else {
                    [*node, cur].concat()
                };
                cur = double_sha256(&pair);
            }
            assert_eq!(
                cur, proof.block_header.merkle_root,
                "{comment}: merkle root"
            );
        }

        // The anchor transaction spends the proof's previous outpoint first.
        assert_eq!(
            proof.anchor_tx.inputs[0].previous_output, proof.prev_out,
            "{comment}"
        );

        // A meta reveal opens the asset's meta hash.
        if let Some(meta) = &proof.meta_reveal {
            assert_eq!(
                meta.meta_hash(),
                asset.genesis.meta_hash,
                "{comment}: meta hash"
            );
        }
    }
    assert_eq!(issuance, 14 + 2, "issuance proofs among the vectors");
}

#[test]
fn asset_ids_match_the_ids_tapd_put_in_transfer_witnesses() {
    // The split root proof spends the genesis output: its witness names the
    // genesis asset by the ID tapd computed.
    let all = proofs();
    let genesis = &all
        .iter()
        .find(|(c, _, _)| c == "valid regtest genesis proof with meta reveal")
        .unwrap()
        .1;
    let root = &all
        .iter()
        .find(|(c, _, _)| c == "valid regtest proof for split root")
        .unwrap()
        .1;
    let genesis_facts = UniverseLeafFacts::from_proof(genesis).unwrap();
    let root_facts = UniverseLeafFacts::from_proof(root).unwrap();
    assert_eq!(genesis_facts.proof_type, ProofType::Issuance);
    assert_eq!(root_facts.proof_type, ProofType::Transfer);
    let prev_id = root.asset.prev_witnesses[0].prev_id.unwrap();
    assert_eq!(prev_id.asset_id, genesis_facts.asset_id);
    assert_eq!(prev_id.out_point, genesis_facts.anchor_outpoint);
    assert_eq!(prev_id.script_key, genesis.asset.script_key);
    // Same asset, same universe, different leaves.
    assert_eq!(root_facts.asset_id, genesis_facts.asset_id);
    assert_eq!(root_facts.universe_id, genesis_facts.universe_id);
    assert_ne!(root_facts.leaf_key, genesis_facts.leaf_key);
    assert_eq!(
        genesis_facts.namespace,
        format!("issuance-{}", hex::encode(genesis_facts.asset_id))
    );
    assert_eq!(
        root_facts.namespace,
        format!("transfer-{}", hex::encode(genesis_facts.asset_id))
    );
    // The ID as the vector's JSON spells it.
    assert_eq!(
        hex::encode(genesis_facts.asset_id),
        "941c6b88de2e5c66797831545adabac0b55f8adb836e921c25d2963c65d15bd1"
    );
}

#[test]
fn every_prev_id_in_the_vector_proofs_names_the_proofs_asset() {
    // Each regtest transfer moves a single asset ID: every non-zero
    // previous ID (also inside split root assets) carries the ID that
    // `Genesis::id` derives.
    let mut checked = 0;
    for (comment, proof, _) in proofs()
        .iter()
        .filter(|(c, _, _)| c.starts_with("valid regtest"))
    {
        let id = proof.asset.id();
        let mut witnesses: Vec<_> = proof.asset.prev_witnesses.iter().collect();
        while let Some(w) = witnesses.pop() {
            if let Some(prev_id) = w.prev_id.filter(|p| !p.is_zero()) {
                assert_eq!(prev_id.asset_id, id, "{comment}");
                checked += 1;
            }
            if let Some(split) = &w.split_commitment {
                assert_eq!(split.root_asset.id(), id, "{comment}");
                witnesses.extend(split.root_asset.prev_witnesses.iter());
            }
        }
    }
    assert!(checked >= 3, "only {checked} previous IDs checked");
}

#[test]
fn proof_file_facts_follow_the_chain() {
    let file = ProofFile::decode(&hex_file("proof-file.hex")).unwrap();
    let facts: Vec<_> = file
        .entries
        .iter()
        .map(|e| UniverseLeafFacts::from_proof_bytes(&e.proof).unwrap())
        .collect();
    assert_eq!(facts[0].proof_type, ProofType::Issuance);
    assert!(
        facts[1..]
            .iter()
            .all(|f| f.proof_type == ProofType::Transfer && f.sum == 1)
    );
    assert!(facts.iter().all(|f| f.universe_id == facts[0].universe_id));
}

#[test]
fn facts_refuse_an_output_index_beyond_the_anchor_transaction() {
    let (_, bytes) = &all_proof_vectors()[0];
    let mut proof = Proof::decode(bytes).unwrap();
    let outputs = proof.anchor_tx.outputs.len();
    proof.inclusion_proof.output_index = outputs as u32;
    assert_eq!(
        UniverseLeafFacts::from_proof(&proof),
        Err(FactsError::AnchorOutputMissing {
            index: outputs as u32,
            outputs
        })
    );
    assert!(matches!(
        UniverseLeafFacts::from_proof_bytes(b"TAPP\x00"),
        Err(FactsError::Decode(_))
    ));
}
