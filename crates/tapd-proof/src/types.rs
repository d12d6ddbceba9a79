//! TLV type numbers of each stream, named after tapd's constants.

/// `proof.Proof` (tapd `proof/records.go`).
pub mod proof {
    /// `VersionType`.
    pub const VERSION: u64 = 0;
    /// `PrevOutType`.
    pub const PREV_OUT: u64 = 2;
    /// `BlockHeaderType`.
    pub const BLOCK_HEADER: u64 = 4;
    /// `AnchorTxType`.
    pub const ANCHOR_TX: u64 = 6;
    /// `TxMerkleProofType`.
    pub const TX_MERKLE_PROOF: u64 = 8;
    /// `AssetLeafType`.
    pub const ASSET_LEAF: u64 = 10;
    /// `InclusionProofType`.
    pub const INCLUSION_PROOF: u64 = 12;
    /// `ExclusionProofsType`.
    pub const EXCLUSION_PROOFS: u64 = 13;
    /// `SplitRootProofType`.
    pub const SPLIT_ROOT_PROOF: u64 = 15;
    /// `MetaRevealType`.
    pub const META_REVEAL: u64 = 17;
    /// `AdditionalInputsType`.
    pub const ADDITIONAL_INPUTS: u64 = 19;
    /// `ChallengeWitnessType`.
    pub const CHALLENGE_WITNESS: u64 = 21;
    /// `BlockHeightType`.
    pub const BLOCK_HEIGHT: u64 = 22;
    /// `GenesisRevealType`.
    pub const GENESIS_REVEAL: u64 = 23;
    /// `GroupKeyRevealType`.
    pub const GROUP_KEY_REVEAL: u64 = 25;
    /// `AltLeavesType`.
    pub const ALT_LEAVES: u64 = 27;
}

/// `asset.Asset` (tapd `asset/records.go`, `Leaf*`).
pub mod asset {
    /// `LeafVersion`.
    pub const VERSION: u64 = 0;
    /// `LeafGenesis`.
    pub const GENESIS: u64 = 2;
    /// `LeafType`.
    pub const TYPE: u64 = 4;
    /// `LeafAmount`.
    pub const AMOUNT: u64 = 6;
    /// `LeafLockTime`.
    pub const LOCK_TIME: u64 = 7;
    /// `LeafRelativeLockTime`.
    pub const RELATIVE_LOCK_TIME: u64 = 9;
    /// `LeafPrevWitness`.
    pub const PREV_WITNESS: u64 = 11;
    /// `LeafSplitCommitmentRoot`.
    pub const SPLIT_COMMITMENT_ROOT: u64 = 13;
    /// `LeafScriptVersion`.
    pub const SCRIPT_VERSION: u64 = 14;
    /// `LeafScriptKey`.
    pub const SCRIPT_KEY: u64 = 16;
    /// `LeafGroupKey`.
    pub const GROUP_KEY: u64 = 17;
}

/// `asset.Witness` (tapd `Witness*`).
pub mod witness {
    /// `WitnessPrevID`.
    pub const PREV_ID: u64 = 1;
    /// `WitnessTxWitness`.
    pub const TX_WITNESS: u64 = 3;
    /// `WitnessSplitCommitment`.
    pub const SPLIT_COMMITMENT: u64 = 5;
}

/// `proof.TaprootProof` (tapd `TaprootProof*Type`).
pub mod taproot_proof {
    /// `TaprootProofOutputIndexType`.
    pub const OUTPUT_INDEX: u64 = 0;
    /// `TaprootProofInternalKeyType`.
    pub const INTERNAL_KEY: u64 = 2;
    /// `TaprootProofCommitmentProofType`.
    pub const COMMITMENT_PROOF: u64 = 3;
    /// `TaprootProofTapscriptProofType`.
    pub const TAPSCRIPT_PROOF: u64 = 5;
}

/// `proof.CommitmentProof`, which extends `commitment.Proof` (types 1, 2).
pub mod commitment_proof {
    /// `commitment.ProofAssetProofType`.
    pub const ASSET_PROOF: u64 = 1;
    /// `commitment.ProofTaprootAssetProofType`.
    pub const TAPROOT_ASSET_PROOF: u64 = 2;
    /// `CommitmentProofTapSiblingPreimageType`.
    pub const TAP_SIBLING_PREIMAGE: u64 = 5;
    /// `CommitmentProofSTXOProofsType`.
    pub const STXO_PROOFS: u64 = 7;
}

/// `commitment.AssetProof`.
pub mod asset_proof {
    /// `AssetProofVersionType`.
    pub const VERSION: u64 = 0;
    /// `AssetProofAssetIDType`.
    pub const ASSET_ID: u64 = 2;
    /// `AssetProofType`.
    pub const PROOF: u64 = 4;
}

/// `commitment.TaprootAssetProof`.
pub mod taproot_asset_proof {
    /// `TaprootAssetProofVersionType`.
    pub const VERSION: u64 = 0;
    /// `TaprootAssetProofType`.
    pub const PROOF: u64 = 2;
}

/// `proof.TapscriptProof`.
pub mod tapscript_proof {
    /// `TapscriptProofTapPreimage1`.
    pub const TAP_PREIMAGE_1: u64 = 1;
    /// `TapscriptProofTapPreimage2`.
    pub const TAP_PREIMAGE_2: u64 = 3;
    /// `TapscriptProofBip86`.
    pub const BIP86: u64 = 4;
}

/// `proof.MetaReveal`.
pub mod meta_reveal {
    /// `MetaRevealEncodingType`.
    pub const TYPE: u64 = 0;
    /// `MetaRevealDataType`.
    pub const DATA: u64 = 2;
    /// `MetaRevealDecimalDisplay`.
    pub const DECIMAL_DISPLAY: u64 = 5;
    /// `MetaRevealUniverseCommitments`.
    pub const UNIVERSE_COMMITMENTS: u64 = 7;
    /// `MetaRevealCanonicalUniversesType`.
    pub const CANONICAL_UNIVERSES: u64 = 9;
    /// `MetaRevealDelegationKeyType`.
    pub const DELEGATION_KEY: u64 = 11;
}

/// `asset.GroupKeyRevealV1` (tapd `GKR*`).
pub mod group_key_reveal {
    /// `GKRVersion`.
    pub const VERSION: u64 = 0;
    /// `GKRInternalKey`.
    pub const INTERNAL_KEY: u64 = 2;
    /// `GKRTapscriptRoot`.
    pub const TAPSCRIPT_ROOT: u64 = 4;
    /// `GKRCustomSubtreeRoot`.
    pub const CUSTOM_SUBTREE_ROOT: u64 = 7;
}
