//! `InsertProof`'s check: the leaf a proof makes, derived from the proof
//! alone ([`UniverseLeafFacts`]), and refused unless it is the leaf the
//! request names: its universe (asset ID or group key, proof type) and its
//! key (anchor outpoint and script key). The words are tapd's
//! (`rpcserver.go` `unmarshalAssetLeaf`, `universe.ValidateProofUniverseType`,
//! `Archive.verifyIssuanceProof`) where tapd has them.
//!
//! What is not checked here, because tapd checks it against the chain and
//! this crate reads no chain: the block header, the anchor transaction's
//! inclusion in its block, the asset's witnesses and its previous state. An
//! operator who takes writes trusts the holders of its write tokens for
//! those.

use ms_smt::multiverse::{LeafKey, OutPoint, ProofType, Universe, UniverseId, UniverseLeaf};
use ms_smt_tapd_proof::{FactsError, UniverseLeafFacts};

use super::request::{self, RequestId};

/// Why a proof is not the leaf its request names.
#[derive(Debug, thiserror::Error)]
pub enum InsertRefusal {
    /// The request carries no `asset_leaf`.
    #[error("asset_leaf must be set")]
    NoLeaf,
    /// The proof does not decode (tapd: `sparse-decode asset_leaf.proof`).
    #[error("sparse-decode asset_leaf.proof ({len} bytes): {source}")]
    Decode {
        /// The proof's length.
        len: usize,
        /// What the decoder found.
        #[source]
        source: FactsError,
    },
    /// The universe's proof type is not the proof's.
    #[error("proof type mismatch: expected {expected}, got {got}")]
    ProofType {
        /// The proof's (issuance for a genesis asset).
        expected: ProofType,
        /// The request's.
        got: ProofType,
    },
    /// An asset universe, and the proof is of another asset.
    #[error("asset id mismatch: expected {expected}, got {got}")]
    AssetId {
        /// The universe's asset ID (hex).
        expected: String,
        /// The proof's (hex).
        got: String,
    },
    /// A group universe, and the proof's asset is of another group or
    /// none.
    #[error("group key mismatch: expected {expected}, got {got}")]
    GroupKey {
        /// The universe's x-only group key (hex).
        expected: String,
        /// The proof's (hex), or `none`.
        got: String,
    },
    /// The leaf key's script key is not the proof's asset's.
    #[error("script key mismatch: expected {expected}, got {got}")]
    ScriptKey {
        /// The key's (x-only, hex).
        expected: String,
        /// The proof's (x-only, hex).
        got: String,
    },
    /// The leaf key's outpoint is not where the proof anchors the asset
    /// (tapd leaves this to chain verification; here it is the key).
    #[error("outpoint mismatch: expected {expected}, got {got}")]
    Outpoint {
        /// The key's.
        expected: OutPoint,
        /// The proof's anchor.
        got: OutPoint,
    },
}

fn proof_type(facts: &UniverseLeafFacts) -> ProofType {
    match facts.proof_type {
        ms_smt_tapd_proof::ProofType::Issuance => ProofType::Issuance,
        ms_smt_tapd_proof::ProofType::Transfer => ProofType::Transfer,
    }
}

/// The universe and leaf that `proof` makes at `key` in `id`, or why it
/// does not belong there. An unspecified proof type is the proof's.
///
/// In a transfer universe the leaf sums 1, as a transfer does. tapd sums a
/// burn's amount instead; telling a burn needs its script key derived on
/// secp256k1, which this crate does not do, so a burn written here sums 1
/// where tapd's sums its amount.
pub(crate) fn leaf_from_proof(
    id: RequestId,
    key: LeafKey,
    proof: &[u8],
) -> Result<(Universe, UniverseLeaf), InsertRefusal> {
    let facts =
        UniverseLeafFacts::from_proof_bytes(proof).map_err(|source| InsertRefusal::Decode {
            len: proof.len(),
            source,
        })?;
    let expected = proof_type(&facts);
    let proof_type = id.proof_type.unwrap_or(expected);
    if proof_type != expected {
        return Err(InsertRefusal::ProofType {
            expected,
            got: proof_type,
        });
    }
    match id.id {
        UniverseId::Asset(asset) if asset != facts.asset_id => {
            return Err(InsertRefusal::AssetId {
                expected: hex::encode(asset),
                got: hex::encode(facts.asset_id),
            });
        }
        UniverseId::Group(group) => {
            let got = facts.group_key.map(|k| k.x_only());
            if got != Some(group) {
                return Err(InsertRefusal::GroupKey {
                    expected: hex::encode(group),
                    got: got.map_or_else(|| "none".to_owned(), hex::encode),
                });
            }
        }
        UniverseId::Asset(_) => {}
    }
    let named = request::leaf_key_of(&facts);
    if named.script_key != key.script_key {
        return Err(InsertRefusal::ScriptKey {
            expected: hex::encode(key.script_key),
            got: hex::encode(named.script_key),
        });
    }
    if named.outpoint != key.outpoint {
        return Err(InsertRefusal::Outpoint {
            expected: key.outpoint,
            got: named.outpoint,
        });
    }
    let leaf = UniverseLeaf {
        key,
        asset_id: facts.asset_id,
        proof: proof.to_vec(),
        amount: facts.amount,
        burn: false,
    };
    debug_assert_eq!(leaf.key.universe_key().0, facts.leaf_key);
    Ok((id.universe(proof_type), leaf))
}
