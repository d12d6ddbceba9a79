//! What a universe leaf is, derived from its proof as tapd derives it
//! (`universe.NewUniIDFromAsset`, `universe.BaseLeafKey`,
//! `universe.Leaf.SmtLeafNode`, `universe.Identifier.String`).

use alloc::format;
use alloc::string::String;

use sha2::{Digest, Sha256};

use crate::btc::OutPoint;
use crate::error::FactsError;
use crate::keys::PublicKey;
use crate::proof::Proof;

/// The kind of universe a leaf belongs to (tapd's `universe.ProofType`,
/// whose numbering the discriminants keep).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProofType {
    /// An issuance (minting) proof: the asset is a genesis asset.
    Issuance = 1,
    /// A transfer proof.
    Transfer = 2,
}

impl ProofType {
    /// tapd's `ProofType.String`: `"issuance"` or `"transfer"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ProofType::Issuance => "issuance",
            ProofType::Transfer => "transfer",
        }
    }
}

impl core::fmt::Display for ProofType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a universe server needs to file a proof as a leaf, derived from the
/// proof alone. Nothing here is verified against the chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UniverseLeafFacts {
    /// Issuance if the asset is a genesis asset (tapd's `IsGenesisAsset`),
    /// else transfer.
    pub proof_type: ProofType,
    /// The asset ID ([`Genesis::id`](crate::Genesis::id)).
    pub asset_id: [u8; 32],
    /// The asset's group key, for a grouped asset.
    pub group_key: Option<PublicKey>,
    /// The universe ID bytes (tapd's `Identifier.Bytes`): the asset ID, or
    /// for a grouped asset `sha256(x-only group key)`.
    pub universe_id: [u8; 32],
    /// The universe namespace (tapd's `Identifier.String`):
    /// `"issuance-<hex universe ID>"` or `"transfer-<hex universe ID>"`.
    pub namespace: String,
    /// The outpoint holding the asset: the anchor transaction's ID and the
    /// inclusion proof's output index (tapd's `Proof.OutPoint`).
    pub anchor_outpoint: OutPoint,
    /// The asset's script key.
    pub script_key: PublicKey,
    /// The leaf's key in the universe tree (tapd's `BaseLeafKey.UniverseKey`):
    /// `sha256(txid || index as 4 little-endian bytes || x-only script key)`.
    pub leaf_key: [u8; 32],
    /// The leaf key of supply-commitment trees (tapd's
    /// `AssetLeafKey.UniverseKey`): `sha256(txid || index LE || x-only script
    /// key || asset ID)`. Issuance and transfer universes use
    /// [`leaf_key`](Self::leaf_key).
    pub asset_leaf_key: [u8; 32],
    /// The asset's amount.
    pub amount: u64,
    /// The leaf's sum (tapd's `Leaf.SmtLeafNode`): the amount for an
    /// issuance, 1 for a transfer (a transfer universe counts transfers).
    pub sum: u64,
}

impl UniverseLeafFacts {
    /// The facts of `proof`.
    ///
    /// Fails only if the inclusion proof's output index names no output of
    /// the anchor transaction (a sanity check; tapd leaves that to proof
    /// verification).
    pub fn from_proof(proof: &Proof) -> Result<Self, FactsError> {
        let asset = &proof.asset;
        let outputs = proof.anchor_tx.outputs.len();
        let index = proof.inclusion_proof.output_index;
        if !usize::try_from(index).is_ok_and(|i| i < outputs) {
            return Err(FactsError::AnchorOutputMissing { index, outputs });
        }
        let proof_type = if asset.is_genesis_asset() {
            ProofType::Issuance
        } else {
            ProofType::Transfer
        };
        let asset_id = asset.id();
        let universe_id = match &asset.group_key {
            Some(key) => Sha256::digest(key.x_only()).into(),
            None => asset_id,
        };
        let anchor_outpoint = proof.outpoint();
        let script_key_x = asset.script_key.x_only();
        let mut h = Sha256::new();
        h.update(anchor_outpoint.bitcoin_bytes());
        h.update(script_key_x);
        let leaf_key: [u8; 32] = h.clone().finalize().into();
        h.update(asset_id);
        let asset_leaf_key: [u8; 32] = h.finalize().into();
        let sum = match proof_type {
            ProofType::Issuance => asset.amount,
            ProofType::Transfer => 1,
        };
        Ok(UniverseLeafFacts {
            proof_type,
            asset_id,
            group_key: asset.group_key,
            universe_id,
            namespace: format!("{}-{}", proof_type.as_str(), hex::encode(universe_id)),
            anchor_outpoint,
            script_key: asset.script_key,
            leaf_key,
            asset_leaf_key,
            amount: asset.amount,
            sum,
        })
    }

    /// Decodes `bytes` as a proof and derives its facts.
    pub fn from_proof_bytes(bytes: &[u8]) -> Result<Self, FactsError> {
        Self::from_proof(&Proof::decode(bytes)?)
    }
}
