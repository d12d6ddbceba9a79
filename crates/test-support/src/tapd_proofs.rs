//! Universe leaves whose proofs decode as tapd's, as many as a test or a
//! bench needs: two official regtest vectors (an asset's genesis and a
//! transfer of it), re-encoded with another asset name (a new asset ID,
//! one per universe) and another anchor transaction lock time (a new
//! anchor outpoint, one per leaf). Each proof's universe, key and amount
//! are what `UniverseLeafFacts` derives from it; none would pass tapd's
//! chain verification (the block and witnesses are the vector's), which
//! nothing in this workspace performs.

use ms_smt::multiverse::{LeafKey, OutPoint, ProofType, Universe, UniverseId, UniverseLeaf};
use ms_smt_tapd_proof::{Proof, UniverseLeafFacts};
use serde_json::Value;

/// The vector file the two proofs come from.
const VECTORS: &str = "../shared/vectors/tapd-proof/proof_tlv_encoding_regtest.json";

/// Makes proofs from the two vector proofs.
#[derive(Debug, Clone)]
pub struct ProofMaker {
    issuance: Proof,
    transfer: Proof,
}

fn vector(json: &Value, comment: &str) -> Proof {
    let case = json["valid_test_cases"]
        .as_array()
        .expect("valid cases")
        .iter()
        .find(|c| c["comment"] == comment)
        .unwrap_or_else(|| panic!("{VECTORS}: no case {comment:?}"));
    let bytes = hex::decode(case["expected"].as_str().expect("expected")).expect("hex");
    Proof::decode(&bytes).expect("a vector proof decodes")
}

impl ProofMaker {
    /// The maker, from the official vectors beside the repository
    /// (missing vectors fail the caller; they are never skipped).
    pub fn from_vectors() -> Self {
        let path = crate::repo_root().join(VECTORS);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let json: Value = serde_json::from_str(&text).expect("vector JSON");
        ProofMaker {
            issuance: vector(&json, "valid regtest genesis proof with meta reveal"),
            transfer: vector(&json, "valid regtest ownership proof"),
        }
    }

    /// The encoded proof of leaf `leaf` of asset `asset`'s `proof_type`
    /// universe, of `amount` units.
    pub fn proof(&self, proof_type: ProofType, asset: u32, leaf: u32, amount: u64) -> Vec<u8> {
        let mut proof = match proof_type {
            ProofType::Issuance => self.issuance.clone(),
            ProofType::Transfer => self.transfer.clone(),
        };
        let tag = format!("ms-smt test asset {asset}").into_bytes();
        proof.asset.genesis.tag.clone_from(&tag);
        if let Some(reveal) = &mut proof.genesis_reveal {
            reveal.tag = tag;
        }
        proof.asset.amount = amount;
        proof.anchor_tx.lock_time = leaf;
        proof.encode()
    }

    /// Leaf `leaf` of asset `asset`'s `proof_type` universe, as its proof
    /// makes it.
    pub fn leaf(&self, proof_type: ProofType, asset: u32, leaf: u32, amount: u64) -> UniverseLeaf {
        leaf_of_proof(self.proof(proof_type, asset, leaf, amount))
    }

    /// Asset `asset`'s `proof_type` universe.
    pub fn universe(&self, proof_type: ProofType, asset: u32) -> Universe {
        let facts = UniverseLeafFacts::from_proof_bytes(&self.proof(proof_type, asset, 0, 1))
            .expect("facts");
        Universe::new(UniverseId::Asset(facts.asset_id), proof_type)
    }
}

/// The universe leaf `proof` makes (its key, asset and amount from the
/// proof; not a burn).
pub fn leaf_of_proof(proof: Vec<u8>) -> UniverseLeaf {
    let facts = UniverseLeafFacts::from_proof_bytes(&proof).expect("the proof decodes");
    UniverseLeaf {
        key: LeafKey {
            outpoint: OutPoint {
                txid: facts.anchor_outpoint.txid,
                index: facts.anchor_outpoint.index,
            },
            script_key: facts.script_key.x_only(),
        },
        asset_id: facts.asset_id,
        proof,
        amount: facts.amount,
        burn: false,
    }
}
