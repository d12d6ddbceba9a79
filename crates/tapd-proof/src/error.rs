//! Why bytes are not a proof, an asset or a proof file.
//!
//! Every error carries typed fields only (offsets, TLV type numbers,
//! lengths, limits): no strings. Offsets count bytes from the start of the
//! slice handed to the `decode` call that failed (for a proof inside a
//! [`ProofFile`](crate::ProofFile), from the start of that proof's bytes).

use core::fmt;

/// Which structure was being decoded when an error occurred.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Context {
    /// The top-level proof TLV stream (`proof.Proof`).
    Proof,
    /// A proof file (`proof.File`).
    ProofFile,
    /// An asset TLV stream (`asset.Asset`).
    Asset,
    /// An alt leaf (an `asset.Asset` in its reduced alt-leaf encoding).
    AltLeaf,
    /// The list of alt leaves (proof type 27).
    AltLeaves,
    /// An asset witness TLV stream (`asset.Witness`).
    Witness,
    /// The list of previous witnesses (asset type 11).
    PrevWitnesses,
    /// A witness's previous asset ID (`asset.PrevID`).
    PrevId,
    /// A split commitment (`asset.SplitCommitment`).
    SplitCommitment,
    /// An asset genesis (`asset.Genesis`), in an asset or a genesis reveal.
    Genesis,
    /// A witness stack (`wire.TxWitness` in tapd's TLV encoding).
    TxWitness,
    /// A Taproot proof (`proof.TaprootProof`).
    TaprootProof,
    /// The list of exclusion proofs (proof type 13).
    ExclusionProofs,
    /// A commitment proof (`proof.CommitmentProof`).
    CommitmentProof,
    /// A Taproot Asset commitment proof (`commitment.Proof`), in an STXO map.
    TapCommitmentProof,
    /// The STXO proof map (commitment proof type 7).
    StxoProofs,
    /// An asset proof (`commitment.AssetProof`).
    AssetProof,
    /// A Taproot Asset proof (`commitment.TaprootAssetProof`).
    TaprootAssetProof,
    /// A tapscript proof (`proof.TapscriptProof`).
    TapscriptProof,
    /// A tapscript sibling preimage (`commitment.TapscriptPreimage`).
    TapscriptPreimage,
    /// A compressed MS-SMT proof (`mssmt.CompressedProof`).
    MsSmtProof,
    /// A transaction merkle proof (`proof.TxMerkleProof`).
    TxMerkleProof,
    /// A meta reveal (`proof.MetaReveal`).
    MetaReveal,
    /// The canonical universe URL list of a meta reveal.
    CanonicalUniverses,
    /// A group key reveal (`asset.GroupKeyRevealV0`/`V1`).
    GroupKeyReveal,
    /// The list of additional input proof files (proof type 19).
    AdditionalInputs,
    /// The anchor transaction (`wire.MsgTx`).
    AnchorTx,
    /// The block header (`wire.BlockHeader`).
    BlockHeader,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Context::Proof => "proof",
            Context::ProofFile => "proof file",
            Context::Asset => "asset",
            Context::AltLeaf => "alt leaf",
            Context::AltLeaves => "alt leaves",
            Context::Witness => "asset witness",
            Context::PrevWitnesses => "previous witnesses",
            Context::PrevId => "previous asset ID",
            Context::SplitCommitment => "split commitment",
            Context::Genesis => "genesis",
            Context::TxWitness => "witness stack",
            Context::TaprootProof => "taproot proof",
            Context::ExclusionProofs => "exclusion proofs",
            Context::CommitmentProof => "commitment proof",
            Context::TapCommitmentProof => "taproot asset commitment proof",
            Context::StxoProofs => "STXO proofs",
            Context::AssetProof => "asset proof",
            Context::TaprootAssetProof => "taproot asset proof",
            Context::TapscriptProof => "tapscript proof",
            Context::TapscriptPreimage => "tapscript preimage",
            Context::MsSmtProof => "MS-SMT proof",
            Context::TxMerkleProof => "transaction merkle proof",
            Context::MetaReveal => "meta reveal",
            Context::CanonicalUniverses => "canonical universes",
            Context::GroupKeyReveal => "group key reveal",
            Context::AdditionalInputs => "additional inputs",
            Context::AnchorTx => "anchor transaction",
            Context::BlockHeader => "block header",
        };
        f.write_str(name)
    }
}

/// Why 33 bytes are not a public key (btcec's `ParsePubKey` rules for the
/// compressed form).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The first byte is neither `0x02` nor `0x03`.
    #[error("unsupported public key prefix {prefix:#04x}")]
    BadPrefix {
        /// The first byte.
        prefix: u8,
    },
    /// The x coordinate is not below the field prime.
    #[error("public key x coordinate is not below the field prime")]
    XOutOfRange,
    /// No point of secp256k1 has this x coordinate.
    #[error("public key x coordinate is not on the secp256k1 curve")]
    NotOnCurve,
}

/// Ways an encoding that tapd's decoder would accept is refused because
/// tapd's encoder never produces it: decoding and re-encoding (which is what
/// tapd does to check commitments and meta hashes) would change the bytes.
/// See `DIVERGENCES.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NonCanonicalReason {
    /// An optional numeric or boolean record encoded with its default value
    /// (tapd omits such a record).
    DefaultValue,
    /// A list record encoded with zero items (tapd omits such a record).
    EmptyList,
    /// An optional record encoded with zero length (tapd omits it).
    EmptyRecord,
    /// An all-zero compressed public key where tapd would decode the "empty"
    /// key and re-encode it as `0x02 || 0^32`.
    EmptyKey,
    /// An all-zero optional hash (tapd reads it as absent).
    ZeroHash,
    /// Bits set past the last used bit of a packed bit vector.
    PaddingBits,
    /// An explicit MS-SMT sibling equal to the empty subtree of its level
    /// (tapd's compression would mark it in the bitmap instead).
    ExplicitEmptyNode {
        /// Index of the sibling, leaf side first.
        index: usize,
    },
    /// A transaction with the segwit marker and flag but no witness data.
    SuperfluousWitness,
    /// A Taproot proof with both a commitment proof and a tapscript proof
    /// (tapd encodes only the commitment proof).
    BothProofKinds,
    /// The asset's type record (4) differs from the type inside its genesis
    /// record (2); tapd keeps only one of them.
    GenesisTypeMismatch {
        /// The type inside the genesis record.
        genesis: u8,
        /// The type record's value.
        record: u8,
    },
    /// A tapscript proof preimage record holding only the type byte.
    EmptyPreimage,
}

impl fmt::Display for NonCanonicalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NonCanonicalReason::DefaultValue => {
                f.write_str("optional record holds its default value")
            }
            NonCanonicalReason::EmptyList => f.write_str("list record holds no items"),
            NonCanonicalReason::EmptyRecord => f.write_str("optional record is empty"),
            NonCanonicalReason::EmptyKey => f.write_str("public key is all zero"),
            NonCanonicalReason::ZeroHash => f.write_str("optional hash is all zero"),
            NonCanonicalReason::PaddingBits => f.write_str("padding bits are set"),
            NonCanonicalReason::ExplicitEmptyNode { index } => {
                write!(
                    f,
                    "explicit sibling {index} is the empty subtree of its level"
                )
            }
            NonCanonicalReason::SuperfluousWitness => {
                f.write_str("segwit marker without any witness data")
            }
            NonCanonicalReason::BothProofKinds => {
                f.write_str("both a commitment proof and a tapscript proof")
            }
            NonCanonicalReason::GenesisTypeMismatch { genesis, record } => {
                write!(
                    f,
                    "genesis type {genesis} differs from type record {record}"
                )
            }
            NonCanonicalReason::EmptyPreimage => f.write_str("preimage holds only its type byte"),
        }
    }
}

/// Errors of strict decoding.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes remain than the encoding needs.
    #[error("{context}: truncated at offset {offset}: needs {needed} bytes, {available} remain")]
    Truncated {
        /// Where the error occurred.
        context: Context,
        /// Offset of the missing bytes.
        offset: usize,
        /// Bytes needed.
        needed: u64,
        /// Bytes remaining.
        available: usize,
    },
    /// The 4-byte prefix is not the expected magic (`TAPP` or `TAPF`).
    #[error("{context}: bad magic bytes {found:02x?}, expected {expected:02x?}")]
    BadMagic {
        /// Where the error occurred.
        context: Context,
        /// The expected magic.
        expected: [u8; 4],
        /// The bytes found.
        found: [u8; 4],
    },
    /// A BigSize integer not in its shortest form (lnd's
    /// `ErrVarIntNotCanonical`).
    #[error("{context}: non-canonical BigSize at offset {offset}")]
    NonCanonicalBigSize {
        /// Where the error occurred.
        context: Context,
        /// Offset of the integer.
        offset: usize,
    },
    /// A Bitcoin CompactSize integer not in its shortest form (btcd's
    /// `errNonCanonicalVarInt`).
    #[error("{context}: non-canonical CompactSize at offset {offset}")]
    NonCanonicalCompactSize {
        /// Where the error occurred.
        context: Context,
        /// Offset of the integer.
        offset: usize,
    },
    /// TLV types not strictly increasing (lnd's `ErrStreamNotCanonical`).
    #[error("{context}: TLV type {record_type} at offset {offset} follows type {previous}")]
    TypeOrder {
        /// Where the error occurred.
        context: Context,
        /// Offset of the record.
        offset: usize,
        /// The previous record's type.
        previous: u64,
        /// This record's type.
        record_type: u64,
    },
    /// An unknown even TLV type (tapd's `ErrUnknownType`).
    #[error("{context}: unknown even TLV type {record_type} at offset {offset}")]
    UnknownEvenType {
        /// Where the error occurred.
        context: Context,
        /// Offset of the record.
        offset: usize,
        /// The record's type.
        record_type: u64,
    },
    /// An unknown TLV type in a stream whose unknown records tapd silently
    /// drops (asset witnesses, V1 group key reveals): re-encoding would
    /// change the bytes, so it is refused whatever its parity.
    #[error("{context}: unknown TLV type {record_type} at offset {offset}, which tapd drops")]
    UnknownDroppedType {
        /// Where the error occurred.
        context: Context,
        /// Offset of the record.
        offset: usize,
        /// The record's type.
        record_type: u64,
    },
    /// A known TLV type that this encoding never carries (for example an
    /// amount in an alt leaf).
    #[error("{context}: TLV type {record_type} at offset {offset} is not allowed here")]
    UnexpectedRecord {
        /// Where the error occurred.
        context: Context,
        /// Offset of the record.
        offset: usize,
        /// The record's type.
        record_type: u64,
    },
    /// A record that tapd's encoder always writes is absent.
    #[error("{context}: required TLV type {record_type} is missing")]
    MissingRecord {
        /// Where the error occurred.
        context: Context,
        /// The missing record's type.
        record_type: u64,
    },
    /// A fixed-size record with the wrong length.
    #[error(
        "{context}: TLV type {record_type} at offset {offset} has length {actual}, expected {expected}"
    )]
    InvalidLength {
        /// Where the error occurred.
        context: Context,
        /// Offset of the record.
        offset: usize,
        /// The record's type.
        record_type: u64,
        /// The length it must have.
        expected: u64,
        /// The length it has.
        actual: u64,
    },
    /// A record longer than tapd's limit for it (lnd's `ErrRecordTooLarge`).
    #[error(
        "{context}: TLV type {record_type} at offset {offset} has length {length}, limit {max}"
    )]
    RecordTooLarge {
        /// Where the error occurred.
        context: Context,
        /// Offset of the record.
        offset: usize,
        /// The record's type.
        record_type: u64,
        /// Its length.
        length: u64,
        /// The limit.
        max: u64,
    },
    /// A length-prefixed byte string longer than tapd's limit for it
    /// (tapd's `ErrByteSliceTooLarge`, btcd's script size limits).
    #[error("{context}: byte string at offset {offset} has length {length}, limit {max}")]
    BytesTooLong {
        /// Where the error occurred.
        context: Context,
        /// Offset of the length prefix.
        offset: usize,
        /// The declared length.
        length: u64,
        /// The limit.
        max: u64,
    },
    /// An item count above tapd's (or btcd's) limit.
    #[error("{context}: count {count} at offset {offset} exceeds the limit {max}")]
    CountTooLarge {
        /// Where the error occurred.
        context: Context,
        /// Offset of the count.
        offset: usize,
        /// The declared count.
        count: u64,
        /// The limit.
        max: u64,
    },
    /// Bytes left over after a structure that must fill its container.
    #[error("{context}: {remaining} trailing bytes at offset {offset}")]
    TrailingBytes {
        /// Where the error occurred.
        context: Context,
        /// Offset of the first extra byte.
        offset: usize,
        /// How many extra bytes.
        remaining: usize,
    },
    /// A public key that does not parse.
    #[error("{context}: invalid public key at offset {offset}: {reason}")]
    InvalidPublicKey {
        /// Where the error occurred.
        context: Context,
        /// Offset of the key.
        offset: usize,
        /// Why it does not parse.
        reason: KeyError,
    },
    /// A boolean byte other than 0 or 1.
    #[error("{context}: boolean at offset {offset} is {value}, not 0 or 1")]
    InvalidBool {
        /// Where the error occurred.
        context: Context,
        /// Offset of the byte.
        offset: usize,
        /// The byte.
        value: u8,
    },
    /// An encoding tapd would accept but never writes (see
    /// [`NonCanonicalReason`] and `DIVERGENCES.md`).
    #[error("{context}: non-canonical encoding at offset {offset}: {reason}")]
    NonCanonical {
        /// Where the error occurred.
        context: Context,
        /// Offset of the offending record or field.
        offset: usize,
        /// What is non-canonical.
        reason: NonCanonicalReason,
    },
    /// A compressed MS-SMT proof whose bitmap does not match its node count
    /// (tapd's `ErrInvalidCompressedProof`).
    #[error(
        "MS-SMT proof at offset {offset} has {nodes} explicit nodes, its bitmap needs {expected}"
    )]
    NodeCountMismatch {
        /// Offset of the proof.
        offset: usize,
        /// Explicit nodes encoded.
        nodes: u64,
        /// Clear bits in the bitmap.
        expected: u64,
    },
    /// A segwit transaction whose flag byte is not 0x01 (btcd's "witness tx
    /// but flag byte is").
    #[error("anchor transaction: segwit flag byte {flag:#04x} at offset {offset}")]
    WitnessFlag {
        /// Offset of the flag byte.
        offset: usize,
        /// The flag byte.
        flag: u8,
    },
    /// A zero-length tapscript preimage record (tapd's
    /// `ErrInvalidTapscriptPreimageLen`).
    #[error("{context}: empty tapscript preimage at offset {offset}")]
    EmptyTapscriptPreimage {
        /// Where the error occurred.
        context: Context,
        /// Offset of the record.
        offset: usize,
    },
    /// A group key reveal shorter than a public key (tapd's "group key
    /// reveal too short").
    #[error("group key reveal at offset {offset} has length {length}, below 33")]
    GroupKeyRevealTooShort {
        /// Offset of the record.
        offset: usize,
        /// Its length.
        length: u64,
    },
    /// Two entries under the same key (alt leaf script keys: tapd's
    /// `ErrDuplicateScriptKeys`; STXO proof keys: tapd keeps the last).
    #[error("{context}: duplicate key at offset {offset}")]
    DuplicateKey {
        /// Where the error occurred.
        context: Context,
        /// Offset of the second entry.
        offset: usize,
    },
    /// A canonical universe URL that cannot be a request URI.
    #[error("canonical universe URL at offset {offset} is not a request URI")]
    InvalidUrl {
        /// Offset of the URL.
        offset: usize,
    },
    /// A proof file entry whose hash is not `sha256(prev_hash || proof)`
    /// (tapd's `ErrInvalidChecksum`).
    #[error("proof file entry {index} at offset {offset}: invalid checksum")]
    ChecksumMismatch {
        /// Index of the entry.
        index: u64,
        /// Offset of the stored hash.
        offset: usize,
    },
    /// Split commitments nested deeper than this decoder allows (a guard
    /// of ours against stack exhaustion; tapd has no such limit).
    #[error("split commitments nested deeper than {max} at offset {offset}")]
    NestingTooDeep {
        /// Offset of the too-deep asset.
        offset: usize,
        /// The limit.
        max: usize,
    },
}

/// Why [`UniverseLeafFacts`](crate::UniverseLeafFacts) could not be derived.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FactsError {
    /// The proof bytes do not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The inclusion proof's output index names no output of the anchor
    /// transaction (a sanity check; tapd leaves it to proof verification).
    #[error(
        "inclusion proof output index {index} but the anchor transaction has {outputs} outputs"
    )]
    AnchorOutputMissing {
        /// The inclusion proof's output index.
        index: u32,
        /// Outputs of the anchor transaction.
        outputs: usize,
    },
}
