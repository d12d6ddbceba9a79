//! Assets (`asset.Asset`), their genesis, witnesses and split commitments,
//! and alt leaves.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use sha2::{Digest, Sha256};

use crate::btc::OutPoint;
use crate::codec::{Reader, Record, Stream, TlvWriter, count, put_bigsize, put_inline, required};
use crate::error::{Context, DecodeError, NonCanonicalReason};
use crate::keys::{KeyRule, PublicKey, read_key};
use crate::limits::{MAX_ASSET_NAME_LENGTH, MAX_NESTING_DEPTH, MAX_RECORD_SIZE, MAX_UINT16};
use crate::mssmt::{MsSmtNode, MsSmtProof};
use crate::types::{asset as t, witness as wt};

/// An asset's genesis (`asset.Genesis`): what its ID commits to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Genesis {
    /// The first input of the genesis transaction.
    pub first_prev_out: OutPoint,
    /// The asset's name (tapd's `Tag`: a Go string, so any bytes, at most
    /// 64).
    pub tag: Vec<u8>,
    /// Hash of the asset's meta data.
    pub meta_hash: [u8; 32],
    /// Index of the genesis output carrying the asset commitment.
    pub output_index: u32,
    /// Asset type (0 normal, 1 collectible; tapd decodes any byte).
    pub asset_type: u8,
}

impl Genesis {
    /// Reads the genesis encoding (tapd's `GenesisDecoder`): outpoint (hash,
    /// big-endian index), BigSize-prefixed tag, meta hash, big-endian output
    /// index, type byte.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::Genesis;
        let first_prev_out = OutPoint::read_tlv(r, c)?;
        let tag = r.inline_bytes(MAX_ASSET_NAME_LENGTH, c)?.rest().to_vec();
        let meta_hash = r.array(c)?;
        let output_index = r.u32_be(c)?;
        let asset_type = r.u8(c)?;
        Ok(Genesis {
            first_prev_out,
            tag,
            meta_hash,
            output_index,
            asset_type,
        })
    }

    /// Reads a record holding exactly one genesis.
    pub(crate) fn read_record(rec: Record<'_>) -> Result<Self, DecodeError> {
        let mut v = rec.value;
        let genesis = Genesis::read(&mut v)?;
        v.finish(Context::Genesis)?;
        Ok(genesis)
    }

    /// The genesis encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.first_prev_out.tlv_bytes());
        put_inline(&mut out, &self.tag);
        out.extend_from_slice(&self.meta_hash);
        out.extend_from_slice(&self.output_index.to_be_bytes());
        out.push(self.asset_type);
        out
    }

    /// The tag as text, when it is UTF-8.
    pub fn tag_str(&self) -> Option<&str> {
        core::str::from_utf8(&self.tag).ok()
    }

    /// The asset ID, as tapd's `Genesis.ID`:
    /// `sha256(outpoint || sha256(tag) || meta_hash || output_index || type)`
    /// where the outpoint is in Bitcoin's encoding (index little-endian) and
    /// the output index is big-endian.
    pub fn id(&self) -> [u8; 32] {
        let tag_hash: [u8; 32] = Sha256::digest(&self.tag).into();
        let mut h = Sha256::new();
        h.update(self.first_prev_out.bitcoin_bytes());
        h.update(tag_hash);
        h.update(self.meta_hash);
        h.update(self.output_index.to_be_bytes());
        h.update([self.asset_type]);
        h.finalize().into()
    }
}

/// A reference to an asset's previous input (`asset.PrevID`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PrevId {
    /// The anchor outpoint of the input.
    pub out_point: OutPoint,
    /// The input's asset ID.
    pub asset_id: [u8; 32],
    /// The input's script key (all zero in genesis and split witnesses).
    pub script_key: PublicKey,
}

impl PrevId {
    /// Encoded size: outpoint (36), asset ID (32), script key (33).
    pub const SIZE: u64 = 101;

    /// Whether this is tapd's `ZeroPrevID` (every field zero).
    pub fn is_zero(&self) -> bool {
        self.out_point.is_zero() && self.asset_id == [0; 32] && self.script_key.is_zero()
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::PrevId;
        Ok(PrevId {
            out_point: OutPoint::read_tlv(r, c)?,
            asset_id: r.array(c)?,
            script_key: read_key(r, KeyRule::PointOrZero, c)?,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.out_point.tlv_bytes());
        out.extend_from_slice(&self.asset_id);
        out.extend_from_slice(self.script_key.as_bytes());
        out
    }
}

/// A split commitment (`asset.SplitCommitment`): the proof of a split
/// output within the root asset's split commitment tree, and that root
/// asset.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SplitCommitment {
    /// The compressed MS-SMT proof.
    pub proof: MsSmtProof,
    /// The root asset of the split.
    pub root_asset: Asset,
}

impl SplitCommitment {
    fn read(mut r: Reader<'_>, limit: u64, depth: usize) -> Result<Self, DecodeError> {
        let c = Context::SplitCommitment;
        let proof = MsSmtProof::read_exact(r.inline_bytes(limit, c)?)?;
        let root_asset = Asset::read_stream(r.inline_bytes(limit, c)?, depth.saturating_add(1))?;
        r.finish(c)?;
        Ok(SplitCommitment { proof, root_asset })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_inline(&mut out, &self.proof.encode());
        put_inline(&mut out, &self.root_asset.encode());
        out
    }
}

/// One previous witness of an asset (`asset.Witness`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Witness {
    /// The input it spends (absent only in a freshly built asset).
    pub prev_id: Option<PrevId>,
    /// The witness stack satisfying the input's script key.
    pub tx_witness: Vec<Vec<u8>>,
    /// The split commitment, for a split output.
    pub split_commitment: Option<Box<SplitCommitment>>,
}

/// Reads tapd's witness stack encoding (`asset.TxWitnessDecoder`): a BigSize
/// count (at most 65,535) of BigSize-prefixed items (each at most 65,535
/// bytes), filling `r`.
pub(crate) fn read_witness_stack(mut r: Reader<'_>) -> Result<Vec<Vec<u8>>, DecodeError> {
    let c = Context::TxWitness;
    let (n, cap) = count(&mut r, MAX_UINT16, 1, c, true)?;
    let mut items = Vec::with_capacity(cap);
    for _ in 0..n {
        items.push(r.inline_bytes(MAX_UINT16, c)?.rest().to_vec());
    }
    r.finish(c)?;
    Ok(items)
}

/// tapd's witness stack encoding.
pub(crate) fn encode_witness_stack(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    put_bigsize(&mut out, crate::codec::len_u64(items.len()));
    for item in items {
        put_inline(&mut out, item);
    }
    out
}

impl Witness {
    /// Decodes one witness stream. tapd decodes witnesses without its
    /// unknown-type rules, silently dropping any unknown record; such a
    /// record would not survive re-encoding, so we refuse it.
    pub(crate) fn read_stream(r: Reader<'_>, depth: usize) -> Result<Self, DecodeError> {
        let c = Context::Witness;
        let mut s = Stream::new(r, c, false);
        let mut w = Witness::default();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                wt::PREV_ID => {
                    rec.expect_len(c, PrevId::SIZE)?;
                    let mut v = rec.value;
                    w.prev_id = Some(PrevId::read(&mut v)?);
                }
                wt::TX_WITNESS => {
                    let stack = read_witness_stack(rec.value)?;
                    if stack.is_empty() {
                        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyList));
                    }
                    w.tx_witness = stack;
                }
                wt::SPLIT_COMMITMENT => {
                    rec.max_len(c, MAX_RECORD_SIZE)?;
                    let split = SplitCommitment::read(rec.value, rec.len(), depth)?;
                    w.split_commitment = Some(Box::new(split));
                }
                _ => return Err(rec.dropped(c)),
            }
        }
        Ok(w)
    }

    /// The witness stream.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        if let Some(prev_id) = &self.prev_id {
            w.push(wt::PREV_ID, prev_id.encode());
        }
        if !self.tx_witness.is_empty() {
            w.push(wt::TX_WITNESS, encode_witness_stack(&self.tx_witness));
        }
        if let Some(split) = &self.split_commitment {
            w.push(wt::SPLIT_COMMITMENT, split.encode());
        }
        w.finish()
    }

    /// tapd's `IsSplitCommitWitness`: a previous ID, no witness stack, and a
    /// split commitment.
    pub fn is_split_commit_witness(&self) -> bool {
        self.prev_id.is_some() && self.tx_witness.is_empty() && self.split_commitment.is_some()
    }
}

fn read_prev_witnesses(rec: Record<'_>, depth: usize) -> Result<Vec<Witness>, DecodeError> {
    let c = Context::PrevWitnesses;
    let mut v = rec.value;
    let (n, cap) = count(&mut v, MAX_UINT16, 1, c, true)?;
    if n == 0 {
        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyList));
    }
    let mut witnesses = Vec::with_capacity(cap);
    for _ in 0..n {
        witnesses.push(Witness::read_stream(v.inline_bytes(MAX_UINT16, c)?, depth)?);
    }
    v.finish(c)?;
    Ok(witnesses)
}

fn encode_prev_witnesses(witnesses: &[Witness]) -> Vec<u8> {
    let mut out = Vec::new();
    put_bigsize(&mut out, crate::codec::len_u64(witnesses.len()));
    for w in witnesses {
        put_inline(&mut out, &w.encode());
    }
    out
}

fn bigsize_bytes(v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_bigsize(&mut out, v);
    out
}

fn read_key_record(rec: Record<'_>, context: Context) -> Result<PublicKey, DecodeError> {
    rec.expect_len(context, 33)?;
    let mut v = rec.value;
    read_key(&mut v, KeyRule::Point, context)
}

fn read_optional_varint(rec: Record<'_>, context: Context) -> Result<u64, DecodeError> {
    let v = rec.bigsize(context)?;
    if v == 0 {
        return Err(rec.non_canonical(context, NonCanonicalReason::DefaultValue));
    }
    Ok(v)
}

/// A Taproot asset (`asset.Asset`).
///
/// tapd's asset has a single type field shared by its genesis and the type
/// record (4); here it is [`Genesis::asset_type`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Asset {
    /// Asset version (0 or 1 today; tapd decodes any byte).
    pub version: u8,
    /// The genesis.
    pub genesis: Genesis,
    /// Units held.
    pub amount: u64,
    /// Absolute lock time (0: none).
    pub lock_time: u64,
    /// Relative lock time (0: none).
    pub relative_lock_time: u64,
    /// Witnesses of the previous transfer.
    pub prev_witnesses: Vec<Witness>,
    /// Root of the split commitment tree, if the transfer split the asset.
    pub split_commitment_root: Option<MsSmtNode>,
    /// Script version.
    pub script_version: u16,
    /// The script key.
    pub script_key: PublicKey,
    /// The group key, for a grouped asset.
    pub group_key: Option<PublicKey>,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

impl Asset {
    /// Decodes an asset TLV stream (tapd's `Asset.Decode`), strictly.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::read_stream(Reader::new(bytes), 0)
    }

    pub(crate) fn read_stream(r: Reader<'_>, depth: usize) -> Result<Self, DecodeError> {
        if depth > MAX_NESTING_DEPTH {
            return Err(DecodeError::NestingTooDeep {
                offset: r.offset(),
                max: MAX_NESTING_DEPTH,
            });
        }
        let c = Context::Asset;
        let mut s = Stream::new(r, c, false);
        let mut version = None;
        let mut genesis: Option<Genesis> = None;
        let mut asset_type = None;
        let mut amount = None;
        let mut lock_time = 0;
        let mut relative_lock_time = 0;
        let mut prev_witnesses = Vec::new();
        let mut split_commitment_root = None;
        let mut script_version = None;
        let mut script_key = None;
        let mut group_key = None;
        let mut unknown_odd_types = BTreeMap::new();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                t::VERSION => version = Some(rec.byte(c)?),
                t::GENESIS => genesis = Some(Genesis::read_record(rec)?),
                t::TYPE => {
                    let record = rec.byte(c)?;
                    if let Some(g) = &genesis
                        && g.asset_type != record
                    {
                        let reason = NonCanonicalReason::GenesisTypeMismatch {
                            genesis: g.asset_type,
                            record,
                        };
                        return Err(rec.non_canonical(c, reason));
                    }
                    asset_type = Some(record);
                }
                t::AMOUNT => amount = Some(rec.bigsize(c)?),
                t::LOCK_TIME => lock_time = read_optional_varint(rec, c)?,
                t::RELATIVE_LOCK_TIME => relative_lock_time = read_optional_varint(rec, c)?,
                t::PREV_WITNESS => prev_witnesses = read_prev_witnesses(rec, depth)?,
                t::SPLIT_COMMITMENT_ROOT => {
                    rec.expect_len(c, 40)?;
                    let mut v = rec.value;
                    split_commitment_root = Some(MsSmtNode::read(&mut v, c)?);
                }
                t::SCRIPT_VERSION => script_version = Some(u16::from_be_bytes(rec.fixed(c)?)),
                t::SCRIPT_KEY => script_key = Some(read_key_record(rec, c)?),
                t::GROUP_KEY => group_key = Some(read_key_record(rec, c)?),
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        let version = required(version, c, t::VERSION)?;
        let genesis = required(genesis, c, t::GENESIS)?;
        required(asset_type, c, t::TYPE)?;
        Ok(Asset {
            version,
            genesis,
            amount: required(amount, c, t::AMOUNT)?,
            lock_time,
            relative_lock_time,
            prev_witnesses,
            split_commitment_root,
            script_version: required(script_version, c, t::SCRIPT_VERSION)?,
            script_key: required(script_key, c, t::SCRIPT_KEY)?,
            group_key,
            unknown_odd_types,
        })
    }

    /// The asset TLV stream, as tapd's `Asset.Encode`.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.push(t::VERSION, alloc::vec![self.version]);
        w.push(t::GENESIS, self.genesis.encode());
        w.push(t::TYPE, alloc::vec![self.genesis.asset_type]);
        w.push(t::AMOUNT, bigsize_bytes(self.amount));
        if self.lock_time > 0 {
            w.push(t::LOCK_TIME, bigsize_bytes(self.lock_time));
        }
        if self.relative_lock_time > 0 {
            w.push(
                t::RELATIVE_LOCK_TIME,
                bigsize_bytes(self.relative_lock_time),
            );
        }
        if !self.prev_witnesses.is_empty() {
            w.push(t::PREV_WITNESS, encode_prev_witnesses(&self.prev_witnesses));
        }
        if let Some(root) = &self.split_commitment_root {
            let mut v = Vec::new();
            root.write(&mut v);
            w.push(t::SPLIT_COMMITMENT_ROOT, v);
        }
        w.push(
            t::SCRIPT_VERSION,
            self.script_version.to_be_bytes().to_vec(),
        );
        w.push(t::SCRIPT_KEY, self.script_key.as_bytes().to_vec());
        if let Some(group_key) = &self.group_key {
            w.push(t::GROUP_KEY, group_key.as_bytes().to_vec());
        }
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }

    /// The asset ID ([`Genesis::id`]).
    pub fn id(&self) -> [u8; 32] {
        self.genesis.id()
    }

    /// tapd's `HasGenesisWitness`: exactly one previous witness, with the
    /// zero previous ID, no witness stack and no split commitment.
    pub fn has_genesis_witness(&self) -> bool {
        match self.prev_witnesses.as_slice() {
            [w] => {
                w.prev_id.is_some_and(|id| id.is_zero())
                    && w.tx_witness.is_empty()
                    && w.split_commitment.is_none()
            }
            _ => false,
        }
    }

    /// tapd's `HasGenesisWitnessForGroup`: a group key and exactly one
    /// previous witness, with the zero previous ID, a non-empty witness stack
    /// (the group signature) and no split commitment.
    pub fn has_genesis_witness_for_group(&self) -> bool {
        match self.prev_witnesses.as_slice() {
            [w] if self.group_key.is_some() => {
                w.prev_id.is_some_and(|id| id.is_zero())
                    && !w.tx_witness.is_empty()
                    && w.split_commitment.is_none()
            }
            _ => false,
        }
    }

    /// tapd's `IsGenesisAsset`: one of the two genesis witness forms above.
    pub fn is_genesis_asset(&self) -> bool {
        self.has_genesis_witness() || self.has_genesis_witness_for_group()
    }

    /// tapd's `HasSplitCommitmentWitness`: exactly one previous witness, and
    /// it is a split commitment witness.
    pub fn has_split_commitment_witness(&self) -> bool {
        matches!(self.prev_witnesses.as_slice(), [w] if w.is_split_commit_witness())
    }
}

/// An alt leaf: an asset in tapd's reduced alt-leaf encoding
/// (`EncodeAltLeaf`), which carries only previous witnesses, the script
/// version, the script key and unknown odd records. The other asset fields
/// of an alt leaf are always their defaults (version 0, the empty genesis,
/// zero amount and lock times, no split root or group key).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AltLeaf {
    /// Previous witnesses.
    pub prev_witnesses: Vec<Witness>,
    /// Script version.
    pub script_version: u16,
    /// The script key (unique among a proof's alt leaves).
    pub script_key: PublicKey,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

impl AltLeaf {
    /// Decodes one alt leaf. tapd decodes it with the full asset decoder;
    /// any asset record its encoder never writes for an alt leaf is refused.
    pub(crate) fn read_stream(r: Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::AltLeaf;
        let mut s = Stream::new(r, c, false);
        let mut prev_witnesses = Vec::new();
        let mut script_version = None;
        let mut script_key = None;
        let mut unknown_odd_types = BTreeMap::new();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                t::PREV_WITNESS => prev_witnesses = read_prev_witnesses(rec, 0)?,
                t::SCRIPT_VERSION => script_version = Some(u16::from_be_bytes(rec.fixed(c)?)),
                t::SCRIPT_KEY => script_key = Some(read_key_record(rec, c)?),
                t::VERSION
                | t::GENESIS
                | t::TYPE
                | t::AMOUNT
                | t::LOCK_TIME
                | t::RELATIVE_LOCK_TIME
                | t::SPLIT_COMMITMENT_ROOT
                | t::GROUP_KEY => return Err(rec.unexpected(c)),
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        Ok(AltLeaf {
            prev_witnesses,
            script_version: required(script_version, c, t::SCRIPT_VERSION)?,
            script_key: required(script_key, c, t::SCRIPT_KEY)?,
            unknown_odd_types,
        })
    }

    /// The alt leaf encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        if !self.prev_witnesses.is_empty() {
            w.push(t::PREV_WITNESS, encode_prev_witnesses(&self.prev_witnesses));
        }
        w.push(
            t::SCRIPT_VERSION,
            self.script_version.to_be_bytes().to_vec(),
        );
        w.push(t::SCRIPT_KEY, self.script_key.as_bytes().to_vec());
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }
}
