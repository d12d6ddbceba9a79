//! The proof of one asset state transition (`proof.Proof`) and the records
//! only it carries: the transaction merkle proof, the meta reveal and the
//! group key reveal.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use crate::asset::{AltLeaf, Asset, Genesis, encode_witness_stack, read_witness_stack};
use crate::btc::{BlockHeader, OutPoint, Transaction};
use crate::codec::{
    Reader, Record, Stream, TlvWriter, count, len_u64, put_bigsize, put_inline, required,
};
use crate::error::{Context, DecodeError, NonCanonicalReason};
use crate::file::ProofFile;
use crate::keys::{KeyRule, PublicKey, read_key};
use crate::limits::{
    FILE_MAX_SIZE, GROUP_KEY_REVEAL_V0_MAX, MAX_ASSET_ENCODE_SIZE, MAX_BLOCK_WEIGHT,
    MAX_CANONICAL_UNIVERSE_URL_LENGTH, MAX_NUM_CANONICAL_UNIVERSE_URLS, MAX_NUM_TAPROOT_PROOFS,
    MAX_RECORD_SIZE, MAX_TAPROOT_PROOF_SIZE, MAX_UINT16, MERKLE_PROOF_MAX_NODES,
    META_DATA_MAX_SIZE, MIN_ALT_LEAF_SIZE,
};
use crate::taproot::TaprootProof;
use crate::types::{group_key_reveal as gk, meta_reveal as mt, proof as pt};

/// The magic prefix of an encoded proof: `TAPP`.
pub const PROOF_MAGIC: [u8; 4] = *b"TAPP";

/// A transaction merkle proof (`proof.TxMerkleProof`): the siblings from
/// the transaction up to the block's merkle root, and for each whether the
/// running hash is on the left (`true`) or the right.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct TxMerkleProof {
    /// The sibling hashes, internal byte order.
    pub nodes: Vec<[u8; 32]>,
    /// One direction bit per node.
    pub bits: Vec<bool>,
}

impl TxMerkleProof {
    /// Reads the encoding: a BigSize node count (at most 15), the nodes,
    /// then the bits packed least significant first into `ceil(n / 8)`
    /// bytes, unused bits zero.
    fn read_exact(mut r: Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::TxMerkleProof;
        let (n, cap) = count(&mut r, MERKLE_PROOF_MAX_NODES, 32, c, true)?;
        let mut nodes = Vec::with_capacity(cap);
        for _ in 0..n {
            nodes.push(r.array(c)?);
        }
        let offset = r.offset();
        let packed = r.take(n.div_ceil(8), c)?;
        r.finish(c)?;
        let mut bits = Vec::with_capacity(nodes.len());
        for i in 0..nodes.len() {
            let byte = packed.get(i / 8).copied().unwrap_or(0);
            let shift = u32::try_from(i % 8).unwrap_or(0);
            bits.push(byte.checked_shr(shift).unwrap_or(0) & 1 == 1);
        }
        if packed != pack_bits(&bits).as_slice() {
            return Err(DecodeError::NonCanonical {
                context: c,
                offset,
                reason: NonCanonicalReason::PaddingBits,
            });
        }
        Ok(TxMerkleProof { nodes, bits })
    }

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_bigsize(&mut out, len_u64(self.nodes.len()));
        for node in &self.nodes {
            out.extend_from_slice(node);
        }
        out.extend_from_slice(&pack_bits(&self.bits));
        out
    }
}

fn pack_bits(bits: &[bool]) -> Vec<u8> {
    let mut out = alloc::vec![0u8; bits.len().div_ceil(8)];
    for (i, _) in bits.iter().enumerate().filter(|(_, b)| **b) {
        if let Some(byte) = out.get_mut(i / 8) {
            let shift = u32::try_from(i % 8).unwrap_or(0);
            *byte |= 1u8.checked_shl(shift).unwrap_or(0);
        }
    }
    out
}

/// A meta reveal (`proof.MetaReveal`): the preimage of a genesis asset's
/// meta hash (the hash is SHA-256 of this encoding).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct MetaReveal {
    /// Meta type (0 opaque, 1 JSON; tapd decodes any byte).
    pub meta_type: u8,
    /// The meta data (at most 1 MiB).
    pub data: Vec<u8>,
    /// Decimal display, when encoded.
    pub decimal_display: Option<u32>,
    /// Whether the group publishes universe commitments (encoded only when
    /// true).
    pub universe_commitments: bool,
    /// Canonical universe URLs (at most 16 of at most 255 bytes; none when
    /// empty), as raw bytes: tapd parses them with Go's
    /// `url.ParseRequestURI`, of which we check only the outline.
    pub canonical_universes: Vec<Vec<u8>>,
    /// The delegation key, when encoded.
    pub delegation_key: Option<PublicKey>,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

/// The outline of Go's `url.ParseRequestURI`: non-empty, no ASCII control
/// characters or spaces, and either an absolute path or a scheme
/// (`[A-Za-z][A-Za-z0-9+.-]*:`).
fn plausible_request_uri(url: &[u8]) -> bool {
    if url.is_empty() || url.iter().any(|&b| b < 0x21 || b == 0x7f) {
        return false;
    }
    if url.first() == Some(&b'/') {
        return true;
    }
    let scheme_end = url
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b"+-.".contains(&b)));
    match scheme_end {
        Some(end) if end > 0 => {
            url.get(end) == Some(&b':') && url.first().is_some_and(u8::is_ascii_alphabetic)
        }
        _ => false,
    }
}

fn read_canonical_universes(rec: Record<'_>) -> Result<Vec<Vec<u8>>, DecodeError> {
    let c = Context::CanonicalUniverses;
    let max = MAX_NUM_CANONICAL_UNIVERSE_URLS.saturating_mul(MAX_CANONICAL_UNIVERSE_URL_LENGTH);
    rec.max_len(Context::MetaReveal, max)?;
    if rec.len() == 0 {
        return Err(rec.non_canonical(Context::MetaReveal, NonCanonicalReason::EmptyRecord));
    }
    let mut v = rec.value;
    let (n, cap) = count(&mut v, MAX_NUM_CANONICAL_UNIVERSE_URLS, 1, c, true)?;
    if n == 0 {
        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyList));
    }
    let mut urls = Vec::with_capacity(cap);
    for _ in 0..n {
        let url = v.inline_bytes(MAX_CANONICAL_UNIVERSE_URL_LENGTH, c)?;
        if !plausible_request_uri(url.rest()) {
            return Err(DecodeError::InvalidUrl {
                offset: url.offset(),
            });
        }
        urls.push(url.rest().to_vec());
    }
    v.finish(c)?;
    Ok(urls)
}

impl MetaReveal {
    fn read_record(rec: Record<'_>) -> Result<Self, DecodeError> {
        let c = Context::MetaReveal;
        rec.max_len(Context::Proof, META_DATA_MAX_SIZE)?;
        let mut s = Stream::new(rec.value, c, false);
        let (mut meta_type, mut data) = (None, None);
        let mut m = MetaReveal::default();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                mt::TYPE => meta_type = Some(rec.byte(c)?),
                mt::DATA => {
                    rec.max_len(c, META_DATA_MAX_SIZE)?;
                    data = Some(rec.value.rest().to_vec());
                }
                mt::DECIMAL_DISPLAY => {
                    if rec.len() == 0 {
                        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyRecord));
                    }
                    m.decimal_display = Some(u32::from_be_bytes(rec.fixed(c)?));
                }
                mt::UNIVERSE_COMMITMENTS => {
                    if !rec.bool(c)? {
                        return Err(rec.non_canonical(c, NonCanonicalReason::DefaultValue));
                    }
                    m.universe_commitments = true;
                }
                mt::CANONICAL_UNIVERSES => m.canonical_universes = read_canonical_universes(rec)?,
                mt::DELEGATION_KEY => {
                    rec.max_len(c, 33)?;
                    if rec.len() == 0 {
                        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyRecord));
                    }
                    rec.expect_len(c, 33)?;
                    let mut v = rec.value;
                    m.delegation_key = Some(read_key(&mut v, KeyRule::Point, c)?);
                }
                _ => rec.keep_unknown(c, &mut m.unknown_odd_types)?,
            }
        }
        m.meta_type = required(meta_type, c, mt::TYPE)?;
        m.data = required(data, c, mt::DATA)?;
        Ok(m)
    }

    /// The meta reveal stream.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.push(mt::TYPE, alloc::vec![self.meta_type]);
        w.push(mt::DATA, self.data.clone());
        if let Some(d) = self.decimal_display {
            w.push(mt::DECIMAL_DISPLAY, d.to_be_bytes().to_vec());
        }
        if self.universe_commitments {
            w.push(mt::UNIVERSE_COMMITMENTS, alloc::vec![1]);
        }
        if !self.canonical_universes.is_empty() {
            let mut v = Vec::new();
            put_bigsize(&mut v, len_u64(self.canonical_universes.len()));
            for url in &self.canonical_universes {
                put_inline(&mut v, url);
            }
            w.push(mt::CANONICAL_UNIVERSES, v);
        }
        if let Some(key) = &self.delegation_key {
            w.push(mt::DELEGATION_KEY, key.as_bytes().to_vec());
        }
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }

    /// The meta hash this reveal opens: SHA-256 of its encoding (tapd's
    /// `MetaReveal.MetaHash`).
    pub fn meta_hash(&self) -> [u8; 32] {
        use sha2::Digest;
        sha2::Sha256::digest(self.encode()).into()
    }
}

/// A group key reveal: what derives a group key. tapd tells the versions
/// apart by length: at most 65 bytes is V0, longer is V1.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupKeyReveal {
    /// `asset.GroupKeyRevealV0`: the raw key, then the tapscript root.
    V0 {
        /// The raw (untweaked) key: a point, or all zero.
        raw_key: PublicKey,
        /// The tapscript root: tapd takes whatever 0 to 32 bytes follow the
        /// key (32 bytes or none in practice).
        tapscript_root: Vec<u8>,
    },
    /// `asset.GroupKeyRevealV1`, a TLV stream.
    V1 {
        /// The non-spendable leaf version (1 OP_RETURN, 2 Pedersen).
        version: u8,
        /// The internal key, taken raw as tapd does.
        internal_key: PublicKey,
        /// The final tapscript root.
        tapscript_root: [u8; 32],
        /// The custom subtree root, if any (tapd reads all zero as none).
        custom_subtree_root: Option<[u8; 32]>,
    },
}

impl GroupKeyReveal {
    fn read_record(rec: Record<'_>) -> Result<Self, DecodeError> {
        let c = Context::GroupKeyReveal;
        let length = rec.len();
        if length <= GROUP_KEY_REVEAL_V0_MAX {
            if length < 33 {
                return Err(DecodeError::GroupKeyRevealTooShort {
                    offset: rec.offset,
                    length,
                });
            }
            let mut v = rec.value;
            let raw_key = read_key(&mut v, KeyRule::PointOrZero, c)?;
            return Ok(GroupKeyReveal::V0 {
                raw_key,
                tapscript_root: v.rest().to_vec(),
            });
        }
        // tapd reads V1 with `DecodeWithParsedTypes` and ignores the parsed
        // types: unknown records vanish, so we refuse them.
        let mut s = Stream::new(rec.value, c, false);
        let (mut version, mut internal_key, mut tapscript_root) = (None, None, None);
        let mut custom_subtree_root = None;
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                gk::VERSION => version = Some(rec.byte(c)?),
                gk::INTERNAL_KEY => {
                    rec.expect_len(c, 33)?;
                    let mut v = rec.value;
                    internal_key = Some(read_key(&mut v, KeyRule::Raw, c)?);
                }
                gk::TAPSCRIPT_ROOT => tapscript_root = Some(rec.fixed(c)?),
                gk::CUSTOM_SUBTREE_ROOT => {
                    let root: [u8; 32] = rec.fixed(c)?;
                    if root == [0; 32] {
                        return Err(rec.non_canonical(c, NonCanonicalReason::ZeroHash));
                    }
                    custom_subtree_root = Some(root);
                }
                _ => return Err(rec.dropped(c)),
            }
        }
        Ok(GroupKeyReveal::V1 {
            version: required(version, c, gk::VERSION)?,
            internal_key: required(internal_key, c, gk::INTERNAL_KEY)?,
            tapscript_root: required(tapscript_root, c, gk::TAPSCRIPT_ROOT)?,
            custom_subtree_root,
        })
    }

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            GroupKeyReveal::V0 {
                raw_key,
                tapscript_root,
            } => {
                let mut out = raw_key.as_bytes().to_vec();
                out.extend_from_slice(tapscript_root);
                out
            }
            GroupKeyReveal::V1 {
                version,
                internal_key,
                tapscript_root,
                custom_subtree_root,
            } => {
                let mut w = TlvWriter::new();
                w.push(gk::VERSION, alloc::vec![*version]);
                w.push(gk::INTERNAL_KEY, internal_key.as_bytes().to_vec());
                w.push(gk::TAPSCRIPT_ROOT, tapscript_root.to_vec());
                if let Some(root) = custom_subtree_root {
                    w.push(gk::CUSTOM_SUBTREE_ROOT, root.to_vec());
                }
                w.finish()
            }
        }
    }
}

/// The proof of one asset state transition (`proof.Proof`): a minting
/// (issuance) or a transfer, with everything needed to verify it against
/// the chain. This crate decodes it; it verifies nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Proof {
    /// Transition proof version (0 or 1 today; tapd decodes any u32).
    pub version: u32,
    /// The outpoint of the anchor transaction's first input.
    pub prev_out: OutPoint,
    /// The header of the block holding the anchor transaction.
    pub block_header: BlockHeader,
    /// The anchor transaction.
    pub anchor_tx: Transaction,
    /// The anchor transaction's merkle proof in the block.
    pub tx_merkle_proof: TxMerkleProof,
    /// The asset after the transition.
    pub asset: Asset,
    /// The proof of the asset's inclusion in its anchor output.
    pub inclusion_proof: TaprootProof,
    /// The proofs of its exclusion from the other Taproot outputs.
    pub exclusion_proofs: Vec<TaprootProof>,
    /// For a split output, the inclusion proof of the split root asset.
    pub split_root_proof: Option<TaprootProof>,
    /// The meta reveal of a genesis asset.
    pub meta_reveal: Option<MetaReveal>,
    /// Proof files of the other inputs of the transfer (their proofs are
    /// kept as bytes, as tapd's `File.Decode` does).
    pub additional_inputs: Vec<ProofFile>,
    /// An ownership-proof witness (may be an empty stack).
    pub challenge_witness: Option<Vec<Vec<u8>>>,
    /// The height of the block.
    pub block_height: u32,
    /// The genesis reveal of a minting proof.
    pub genesis_reveal: Option<Genesis>,
    /// The group key reveal of a group anchor.
    pub group_key_reveal: Option<GroupKeyReveal>,
    /// Alt leaves committed next to the asset.
    pub alt_leaves: Vec<AltLeaf>,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

fn read_taproot_record(rec: Record<'_>) -> Result<TaprootProof, DecodeError> {
    rec.max_len(Context::Proof, MAX_TAPROOT_PROOF_SIZE)?;
    TaprootProof::read_stream(rec.value)
}

fn read_exclusion_proofs(rec: Record<'_>) -> Result<Vec<TaprootProof>, DecodeError> {
    let c = Context::ExclusionProofs;
    let mut v = rec.value;
    let (n, cap) = count(&mut v, MAX_NUM_TAPROOT_PROOFS, 1, c, true)?;
    if n == 0 {
        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyList));
    }
    let mut proofs = Vec::with_capacity(cap);
    for _ in 0..n {
        proofs.push(TaprootProof::read_stream(
            v.inline_bytes(MAX_TAPROOT_PROOF_SIZE, c)?,
        )?);
    }
    v.finish(c)?;
    Ok(proofs)
}

fn read_additional_inputs(rec: Record<'_>) -> Result<Vec<ProofFile>, DecodeError> {
    let c = Context::AdditionalInputs;
    rec.max_len(Context::Proof, FILE_MAX_SIZE)?;
    let mut v = rec.value;
    let (n, cap) = count(&mut v, MAX_UINT16, 1, c, true)?;
    if n == 0 {
        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyList));
    }
    let mut files = Vec::with_capacity(cap);
    for _ in 0..n {
        files.push(ProofFile::read_exact(v.inline_bytes(FILE_MAX_SIZE, c)?)?);
    }
    v.finish(c)?;
    Ok(files)
}

fn read_alt_leaves(rec: Record<'_>) -> Result<Vec<AltLeaf>, DecodeError> {
    let c = Context::AltLeaves;
    rec.max_len(Context::Proof, MAX_UINT16)?;
    let max = rec.len().checked_div(MIN_ALT_LEAF_SIZE).unwrap_or(0);
    let mut v = rec.value;
    let (n, cap) = count(&mut v, max, 1, c, true)?;
    if n == 0 {
        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyList));
    }
    let mut leaves: Vec<AltLeaf> = Vec::with_capacity(cap);
    let mut keys = BTreeSet::new();
    for _ in 0..n {
        let item = v.inline_bytes(MAX_UINT16, c)?;
        let offset = item.offset();
        let leaf = AltLeaf::read_stream(item)?;
        if !keys.insert(leaf.script_key) {
            return Err(DecodeError::DuplicateKey { context: c, offset });
        }
        leaves.push(leaf);
    }
    v.finish(c)?;
    Ok(leaves)
}

fn read_sub<T>(
    rec: Record<'_>,
    max: u64,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
    context: Context,
) -> Result<T, DecodeError> {
    rec.max_len(Context::Proof, max)?;
    let mut v = rec.value;
    let value = read(&mut v)?;
    v.finish(context)?;
    Ok(value)
}

impl Proof {
    /// Decodes an encoded proof: the `TAPP` magic, then the proof TLV stream
    /// (tapd's `Proof.Decode`), strictly.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let c = Context::Proof;
        let mut r = Reader::new(bytes);
        let magic: [u8; 4] = r.array(c)?;
        if magic != PROOF_MAGIC {
            return Err(DecodeError::BadMagic {
                context: c,
                expected: PROOF_MAGIC,
                found: magic,
            });
        }
        Self::read_stream(r)
    }

    fn read_stream(r: Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::Proof;
        let mut s = Stream::new(r, c, false);
        let (mut version, mut prev_out, mut block_header, mut anchor_tx) = (None, None, None, None);
        let (mut tx_merkle_proof, mut asset, mut inclusion_proof) = (None, None, None);
        let (mut exclusion_proofs, mut split_root_proof, mut meta_reveal) =
            (Vec::new(), None, None);
        let (mut additional_inputs, mut challenge_witness, mut block_height) =
            (Vec::new(), None, None);
        let (mut genesis_reveal, mut group_key_reveal, mut alt_leaves) = (None, None, Vec::new());
        let mut unknown_odd_types = BTreeMap::new();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                pt::VERSION => version = Some(u32::from_be_bytes(rec.fixed(c)?)),
                pt::PREV_OUT => {
                    rec.expect_len(c, 36)?;
                    let mut v = rec.value;
                    prev_out = Some(OutPoint::read_tlv(&mut v, c)?);
                }
                pt::BLOCK_HEADER => {
                    rec.expect_len(c, len_u64(BlockHeader::SIZE))?;
                    let mut v = rec.value;
                    block_header = Some(BlockHeader::read(&mut v)?);
                }
                pt::ANCHOR_TX => {
                    anchor_tx = Some(read_sub(
                        rec,
                        MAX_BLOCK_WEIGHT,
                        Transaction::read,
                        Context::AnchorTx,
                    )?);
                }
                pt::TX_MERKLE_PROOF => {
                    rec.max_len(c, MAX_RECORD_SIZE)?;
                    tx_merkle_proof = Some(TxMerkleProof::read_exact(rec.value)?);
                }
                pt::ASSET_LEAF => {
                    rec.max_len(c, MAX_ASSET_ENCODE_SIZE)?;
                    asset = Some(Asset::read_stream(rec.value, 0)?);
                }
                pt::INCLUSION_PROOF => inclusion_proof = Some(read_taproot_record(rec)?),
                pt::EXCLUSION_PROOFS => exclusion_proofs = read_exclusion_proofs(rec)?,
                pt::SPLIT_ROOT_PROOF => split_root_proof = Some(read_taproot_record(rec)?),
                pt::META_REVEAL => meta_reveal = Some(MetaReveal::read_record(rec)?),
                pt::ADDITIONAL_INPUTS => additional_inputs = read_additional_inputs(rec)?,
                pt::CHALLENGE_WITNESS => challenge_witness = Some(read_witness_stack(rec.value)?),
                pt::BLOCK_HEIGHT => block_height = Some(u32::from_be_bytes(rec.fixed(c)?)),
                pt::GENESIS_REVEAL => genesis_reveal = Some(Genesis::read_record(rec)?),
                pt::GROUP_KEY_REVEAL => group_key_reveal = Some(GroupKeyReveal::read_record(rec)?),
                pt::ALT_LEAVES => alt_leaves = read_alt_leaves(rec)?,
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        Ok(Proof {
            version: required(version, c, pt::VERSION)?,
            prev_out: required(prev_out, c, pt::PREV_OUT)?,
            block_header: required(block_header, c, pt::BLOCK_HEADER)?,
            anchor_tx: required(anchor_tx, c, pt::ANCHOR_TX)?,
            tx_merkle_proof: required(tx_merkle_proof, c, pt::TX_MERKLE_PROOF)?,
            asset: required(asset, c, pt::ASSET_LEAF)?,
            inclusion_proof: required(inclusion_proof, c, pt::INCLUSION_PROOF)?,
            exclusion_proofs,
            split_root_proof,
            meta_reveal,
            additional_inputs,
            challenge_witness,
            block_height: required(block_height, c, pt::BLOCK_HEIGHT)?,
            genesis_reveal,
            group_key_reveal,
            alt_leaves,
            unknown_odd_types,
        })
    }

    /// The encoded proof: the magic, then the TLV stream, as tapd's
    /// `Proof.Encode`.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.push(pt::VERSION, self.version.to_be_bytes().to_vec());
        w.push(pt::PREV_OUT, self.prev_out.tlv_bytes().to_vec());
        w.push(pt::BLOCK_HEADER, self.block_header.encode());
        w.push(pt::ANCHOR_TX, self.anchor_tx.encode());
        w.push(pt::TX_MERKLE_PROOF, self.tx_merkle_proof.encode());
        w.push(pt::ASSET_LEAF, self.asset.encode());
        w.push(pt::INCLUSION_PROOF, self.inclusion_proof.encode());
        if !self.exclusion_proofs.is_empty() {
            let mut v = Vec::new();
            put_bigsize(&mut v, len_u64(self.exclusion_proofs.len()));
            for p in &self.exclusion_proofs {
                put_inline(&mut v, &p.encode());
            }
            w.push(pt::EXCLUSION_PROOFS, v);
        }
        if let Some(p) = &self.split_root_proof {
            w.push(pt::SPLIT_ROOT_PROOF, p.encode());
        }
        if let Some(m) = &self.meta_reveal {
            w.push(pt::META_REVEAL, m.encode());
        }
        if !self.additional_inputs.is_empty() {
            let mut v = Vec::new();
            put_bigsize(&mut v, len_u64(self.additional_inputs.len()));
            for f in &self.additional_inputs {
                put_inline(&mut v, &f.encode());
            }
            w.push(pt::ADDITIONAL_INPUTS, v);
        }
        if let Some(stack) = &self.challenge_witness {
            w.push(pt::CHALLENGE_WITNESS, encode_witness_stack(stack));
        }
        w.push(pt::BLOCK_HEIGHT, self.block_height.to_be_bytes().to_vec());
        if let Some(g) = &self.genesis_reveal {
            w.push(pt::GENESIS_REVEAL, g.encode());
        }
        if let Some(g) = &self.group_key_reveal {
            w.push(pt::GROUP_KEY_REVEAL, g.encode());
        }
        if !self.alt_leaves.is_empty() {
            let mut v = Vec::new();
            put_bigsize(&mut v, len_u64(self.alt_leaves.len()));
            for leaf in &self.alt_leaves {
                put_inline(&mut v, &leaf.encode());
            }
            w.push(pt::ALT_LEAVES, v);
        }
        w.unknown(&self.unknown_odd_types);
        let mut out = PROOF_MAGIC.to_vec();
        out.extend_from_slice(&w.finish());
        out
    }

    /// The outpoint committing to the asset: the anchor transaction's ID and
    /// the inclusion proof's output index (tapd's `Proof.OutPoint`).
    pub fn outpoint(&self) -> OutPoint {
        OutPoint {
            txid: self.anchor_tx.txid(),
            index: self.inclusion_proof.output_index,
        }
    }
}
