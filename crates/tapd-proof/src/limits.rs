//! tapd's (and btcd's) size and count limits, with the Go names they come
//! from. The decoder applies each where tapd applies it.
// Constant expressions: an overflow here is a compile error, not a panic.
#![allow(clippy::arithmetic_side_effects)]

/// lnd `tlv.MaxRecordSize`: the cap on every record of a P2P-decoded stream
/// (Taproot, commitment, tapscript, asset and Taproot Asset proofs) and on
/// several nested records.
pub const MAX_RECORD_SIZE: u64 = 65_535;

/// btcd `blockchain.MaxBlockWeight`: the cap on the anchor transaction
/// record (proof type 6).
pub const MAX_BLOCK_WEIGHT: u64 = 4_000_000;

/// tapd `asset.MaxAssetEncodeSizeBytes` (= `MaxBlockWeight`): the cap on the
/// asset record (proof type 10).
pub const MAX_ASSET_ENCODE_SIZE: u64 = MAX_BLOCK_WEIGHT;

/// tapd `proof.MaxTaprootProofSizeBytes` (= `tlv.MaxRecordSize`): the cap on
/// inclusion, split root and each exclusion proof.
pub const MAX_TAPROOT_PROOF_SIZE: u64 = MAX_RECORD_SIZE;

/// tapd `proof.MaxNumTaprootProofs` = btcd `MaxBlockBaseSize` (1,000,000) /
/// lnd `input.P2TRSize` (43): the cap on exclusion proofs and STXO proofs.
pub const MAX_NUM_TAPROOT_PROOFS: u64 = 1_000_000 / 43;

/// tapd `proof.MerkleProofMaxNodes`.
pub const MERKLE_PROOF_MAX_NODES: u64 = 15;

/// tapd `proof.MetaDataMaxSizeBytes` (1 MiB): the cap on the meta reveal
/// record and on its data.
pub const META_DATA_MAX_SIZE: u64 = 1024 * 1024;

/// tapd `proof.MaxNumCanonicalUniverseURLs`.
pub const MAX_NUM_CANONICAL_UNIVERSE_URLS: u64 = 16;

/// tapd `proof.MaxCanonicalUniverseURLLength`.
pub const MAX_CANONICAL_UNIVERSE_URL_LENGTH: u64 = 255;

/// tapd `asset.MaxAssetNameLength`: the cap on a genesis tag.
pub const MAX_ASSET_NAME_LENGTH: u64 = 64;

/// tapd's cap (`math.MaxUint16`) on previous witnesses, on the items of a
/// witness stack, on additional inputs, and on the encoded size of one
/// previous witness, one witness item and one alt leaf.
pub const MAX_UINT16: u64 = 65_535;

/// tapd `proof.FileMaxNumProofs`.
pub const FILE_MAX_NUM_PROOFS: u64 = 420_000;

/// tapd `proof.FileMaxProofSizeBytes` (128 MiB): the cap on one proof in a
/// proof file.
pub const FILE_MAX_PROOF_SIZE: u64 = 128 * META_DATA_MAX_SIZE;

/// tapd `proof.FileMaxSizeBytes` (500 MiB): the cap on the additional
/// inputs record and on each proof file in it.
pub const FILE_MAX_SIZE: u64 = 500 * 1024 * 1024;

/// tapd's bound on alt leaves (`AltLeavesDecoder`): a count above the
/// record length divided by this is refused.
pub const MIN_ALT_LEAF_SIZE: u64 = 40;

/// The longest V0 group key reveal: a 33-byte key and a 32-byte root; longer
/// reveals are V1 (tapd `GroupKeyRevealDecoder`).
pub const GROUP_KEY_REVEAL_V0_MAX: u64 = 33 + 32;

/// btcd `wire.MaxMessagePayload` (32 MiB): the cap on a signature or
/// public key script.
pub const MAX_MESSAGE_PAYLOAD: u64 = 32 * 1024 * 1024;

/// btcd `maxTxInPerMessage`.
pub const MAX_TX_IN_PER_MESSAGE: u64 = MAX_MESSAGE_PAYLOAD / (9 + 32) + 1;

/// btcd `maxTxOutPerMessage`.
pub const MAX_TX_OUT_PER_MESSAGE: u64 = MAX_MESSAGE_PAYLOAD / 9 + 1;

/// btcd `maxWitnessItemsPerInput` (current btcd; see `DIVERGENCES.md`).
pub const MAX_WITNESS_ITEMS_PER_INPUT: u64 = 4_000_000;

/// btcd `maxWitnessItemSize` (current btcd; see `DIVERGENCES.md`).
pub const MAX_WITNESS_ITEM_SIZE: u64 = 4_000_000;

/// Our own guard (tapd has none): how deep split commitments may nest
/// (an asset's witness holding a split commitment whose root asset has a
/// witness holding a split commitment, ...). Real proofs nest once.
pub const MAX_NESTING_DEPTH: usize = 32;
