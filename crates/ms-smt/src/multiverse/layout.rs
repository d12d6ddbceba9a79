//! The names, keys and values of tapd's universe layout, as pure
//! functions (no store).
//!
//! Every definition here follows taproot-assets at 95bd8d41:
//! `universe/interface.go` (`Identifier.Bytes`, `Identifier.String`,
//! `BaseLeafKey.UniverseKey`, `Leaf.SmtLeafNode`, `ProofType.String`),
//! `tapdb/multiverse.go` (the two multiverse namespaces) and
//! `tapdb/universe.go` (`upsertMultiverseLeafEntry`: a multiverse leaf is
//! keyed by the universe's ID bytes and holds its root hash, summed 1 for
//! issuance and the universe's root sum for transfers).

use std::fmt;

use sha2::{Digest, Sha256};

use crate::hash::Hash;
use crate::key::Key;
use crate::leaf::Leaf;

/// The namespace of the issuance multiverse (tapd's `issuanceMultiverseNS`).
pub const ISSUANCE_MULTIVERSE: &str = "multiverse-issuance";

/// The namespace of the transfer multiverse (tapd's `transferMultiverseNS`).
pub const TRANSFER_MULTIVERSE: &str = "multiverse-transfer";

/// The namespace of this crate's universe directory: one leaf per universe
/// (at the SHA-256 of its namespace), holding its proof type and ID, so that
/// universes can be listed and a group key (which the multiverse keys only
/// by its hash) recovered. tapd keeps this in its `universe_roots` table.
pub const DIRECTORY: &str = "ms-smt-universe-directory";

/// The suffix of a universe's leaf-key index namespace (see
/// [`Universe::keys_namespace`]).
pub const KEYS_SUFFIX: &str = "-leaf-keys";

/// The kind of proofs a universe holds (tapd's `universe.ProofType`; only
/// the two kinds that have a multiverse).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProofType {
    /// Issuance proofs (tapd's `ProofTypeIssuance`, 1).
    Issuance,
    /// Transfer proofs (tapd's `ProofTypeTransfer`, 2).
    Transfer,
}

impl ProofType {
    /// Both kinds, issuance first.
    pub const ALL: [ProofType; 2] = [ProofType::Issuance, ProofType::Transfer];

    /// tapd's name of the kind (`ProofType.String`): `"issuance"` or
    /// `"transfer"`, the prefix of a universe's namespace.
    pub fn as_str(self) -> &'static str {
        match self {
            ProofType::Issuance => "issuance",
            ProofType::Transfer => "transfer",
        }
    }

    /// tapd's number of the kind (1 issuance, 2 transfer), which is also
    /// the number of the gRPC enum `universerpc.ProofType`.
    pub fn number(self) -> u8 {
        match self {
            ProofType::Issuance => 1,
            ProofType::Transfer => 2,
        }
    }

    /// The kind numbered `n` (1 or 2).
    pub fn from_number(n: u8) -> Option<ProofType> {
        match n {
            1 => Some(ProofType::Issuance),
            2 => Some(ProofType::Transfer),
            _ => None,
        }
    }

    /// The namespace of this kind's multiverse.
    pub fn multiverse(self) -> &'static str {
        match self {
            ProofType::Issuance => ISSUANCE_MULTIVERSE,
            ProofType::Transfer => TRANSFER_MULTIVERSE,
        }
    }
}

impl fmt::Display for ProofType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a universe is of: one asset, or an asset group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UniverseId {
    /// A 32-byte asset ID.
    Asset([u8; 32]),
    /// A group, by its 32-byte x-only (BIP-340) group key.
    Group([u8; 32]),
}

impl UniverseId {
    /// tapd's `Identifier.Bytes`: the asset ID, or the SHA-256 of the
    /// x-only group key. The key of the universe in its multiverse.
    pub fn bytes(&self) -> [u8; 32] {
        match self {
            UniverseId::Asset(id) => *id,
            UniverseId::Group(key) => Sha256::digest(key).into(),
        }
    }
}

/// One universe: an ID and the kind of proofs it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Universe {
    /// The asset or group.
    pub id: UniverseId,
    /// Issuance or transfer.
    pub proof_type: ProofType,
}

impl Universe {
    /// The universe of `id` holding `proof_type` proofs.
    pub fn new(id: UniverseId, proof_type: ProofType) -> Universe {
        Universe { id, proof_type }
    }

    /// tapd's `Identifier.String`, the namespace of the universe's tree:
    /// `"<proof type>-<hex of the ID bytes>"`.
    pub fn namespace(&self) -> String {
        format!(
            "{}-{}",
            self.proof_type.as_str(),
            hex::encode(self.id.bytes())
        )
    }

    /// The key of the universe's leaf in its multiverse (the ID bytes).
    pub fn multiverse_key(&self) -> Key {
        Key(self.id.bytes())
    }

    /// The namespace of the universe's leaf-key index: one leaf per
    /// universe leaf, at the same key, holding what the key hashes
    /// ([`KeyRecord`]) and summed 1, so the index's sums count leaves.
    /// tapd keeps this in its `universe_leaves` table.
    pub fn keys_namespace(&self) -> String {
        format!("{}{KEYS_SUFFIX}", self.namespace())
    }

    /// The universe's key in the [`DIRECTORY`]: the SHA-256 of its
    /// namespace.
    pub fn directory_key(&self) -> Key {
        Key(Sha256::digest(self.namespace().as_bytes()).into())
    }

    /// The universe's leaf in the [`DIRECTORY`]: proof type number, ID
    /// kind (0 asset, 1 group), the 32 ID bytes (the asset ID or the
    /// x-only group key); sum 1.
    pub fn directory_leaf(&self) -> Leaf {
        let (kind, bytes) = match self.id {
            UniverseId::Asset(id) => (0u8, id),
            UniverseId::Group(key) => (1u8, key),
        };
        let mut value = Vec::with_capacity(34);
        value.push(self.proof_type.number());
        value.push(kind);
        value.extend_from_slice(&bytes);
        Leaf::new(value, 1)
    }

    /// The universe a [`DIRECTORY`] leaf value names; `None` when the
    /// value is not one.
    pub fn from_directory_value(value: &[u8]) -> Option<Universe> {
        let (&[number, kind], bytes) = value.split_first_chunk::<2>()?;
        let bytes: [u8; 32] = bytes.try_into().ok()?;
        let id = match kind {
            0 => UniverseId::Asset(bytes),
            1 => UniverseId::Group(bytes),
            _ => return None,
        };
        Some(Universe::new(id, ProofType::from_number(number)?))
    }
}

/// The universe namespace `name` names, as the multiverse links read it:
/// its proof type and its 32 ID bytes. Only the exact form
/// `"<proof type>-<64 lowercase hex digits>"` is a universe.
pub fn parse_namespace(name: &str) -> Option<(ProofType, [u8; 32])> {
    let (kind, hex_id) = name.split_once('-')?;
    let proof_type = ProofType::ALL.into_iter().find(|p| p.as_str() == kind)?;
    if hex_id.len() != 64 || hex_id.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(hex_id, &mut bytes).ok()?;
    Some((proof_type, bytes))
}

/// A Bitcoin outpoint: a transaction ID in internal byte order (as
/// `wire.OutPoint.Hash` holds it) and an output index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OutPoint {
    /// The transaction ID, internal byte order (the reverse of the hex
    /// that explorers show).
    pub txid: [u8; 32],
    /// The output index.
    pub index: u32,
}

/// Why a string is not an outpoint or a hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutPointError {
    /// Not `txid:index`.
    #[error("outpoint should be of the form txid:index")]
    Form,
    /// The txid of `txid:index` is not 64 characters.
    #[error("outpoint txid should be 64 hex chars")]
    TxidLength,
    /// A hash string longer than 64 characters.
    #[error("max hash string length is 64 bytes")]
    HashLength,
    /// A character that is not a hex digit.
    #[error("encoding/hex: invalid byte: {0:?}")]
    Hex(char),
    /// The index is not a decimal u32.
    #[error("invalid output index: {0:?}")]
    Index(String),
}

/// btcd's `chainhash.NewHashFromStr`: the hex of a byte-reversed hash, at
/// most 64 digits (an odd count gets a leading zero, a short one is
/// zero-padded).
pub fn hash_from_str(s: &str) -> Result<[u8; 32], OutPointError> {
    if s.len() > 64 {
        return Err(OutPointError::HashLength);
    }
    let mut digits: Vec<u8> = Vec::with_capacity(s.len() + 1);
    if s.len() % 2 == 1 {
        digits.push(b'0');
    }
    digits.extend_from_slice(s.as_bytes());
    let mut reversed = [0u8; 32];
    let start = 32 - digits.len() / 2;
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        let hi = hex_digit(pair[0])?;
        let lo = hex_digit(pair[1])?;
        reversed[start + i] = (hi << 4) | lo;
    }
    reversed.reverse();
    Ok(reversed)
}

fn hex_digit(b: u8) -> Result<u8, OutPointError> {
    match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        b'A'..=b'F' => Ok(b - b'A' + 10),
        other => Err(OutPointError::Hex(char::from(other))),
    }
}

impl OutPoint {
    /// btcd's `wire.NewOutPointFromString` (wire/v2): `"<txid>:<index>"`
    /// with a 64-digit byte-reversed txid and a decimal u32 index.
    pub fn parse(s: &str) -> Result<OutPoint, OutPointError> {
        let mut parts = s.split(':');
        let (Some(txid), Some(index), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(OutPointError::Form);
        };
        if txid.len() != 64 {
            return Err(OutPointError::TxidLength);
        }
        let txid = hash_from_str(txid)?;
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(OutPointError::Index(index.to_owned()));
        }
        let index = index
            .parse::<u32>()
            .map_err(|_| OutPointError::Index(index.to_owned()))?;
        Ok(OutPoint { txid, index })
    }

    /// The byte-reversed hex of the txid (btcd's `chainhash.Hash.String`).
    pub fn txid_hex(&self) -> String {
        let mut display = self.txid;
        display.reverse();
        hex::encode(display)
    }

    /// btcd's `wire.WriteOutPoint`: the txid as held, then the index as a
    /// little-endian u32.
    pub fn to_wire(&self) -> [u8; 36] {
        let mut out = [0u8; 36];
        out[..32].copy_from_slice(&self.txid);
        out[32..].copy_from_slice(&self.index.to_le_bytes());
        out
    }

    /// The outpoint [`to_wire`](Self::to_wire) wrote.
    pub fn from_wire(bytes: &[u8; 36]) -> OutPoint {
        let mut txid = [0u8; 32];
        txid.copy_from_slice(&bytes[..32]);
        let mut index = [0u8; 4];
        index.copy_from_slice(&bytes[32..]);
        OutPoint {
            txid,
            index: u32::from_le_bytes(index),
        }
    }
}

impl fmt::Display for OutPoint {
    /// btcd's `OutPoint.String`: `"<byte-reversed txid hex>:<index>"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.txid_hex(), self.index)
    }
}

/// Where a leaf sits in its universe: an outpoint and an x-only script
/// key (tapd's `BaseLeafKey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeafKey {
    /// The outpoint that anchors the asset.
    pub outpoint: OutPoint,
    /// The asset's script key, x-only (BIP-340).
    pub script_key: [u8; 32],
}

impl LeafKey {
    /// tapd's `BaseLeafKey.UniverseKey`: the SHA-256 of the outpoint in
    /// its wire encoding and the x-only script key, the leaf's key in the
    /// universe tree.
    pub fn universe_key(&self) -> Key {
        let mut h = Sha256::new();
        h.update(self.outpoint.to_wire());
        h.update(self.script_key);
        Key(h.finalize().into())
    }
}

/// One leaf for a universe: its key, the asset it is of, the raw proof
/// (the leaf's value) and the asset amount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniverseLeaf {
    /// Where it sits.
    pub key: LeafKey,
    /// The asset ID of the asset the proof is of (in an asset universe,
    /// the universe's own ID).
    pub asset_id: [u8; 32],
    /// The raw issuance or transfer proof: the leaf's value.
    pub proof: Vec<u8>,
    /// The asset amount the proof carries.
    pub amount: u64,
    /// True for a burn (its transfer leaf sums its amount, not 1).
    pub burn: bool,
}

impl UniverseLeaf {
    /// tapd's `Leaf.SmtLeafNode` sum: the amount in an issuance universe,
    /// and in a transfer universe 1 per transfer (the amount for a burn).
    pub fn sum(&self, proof_type: ProofType) -> u64 {
        match proof_type {
            ProofType::Transfer if !self.burn => 1,
            _ => self.amount,
        }
    }

    /// The leaf of the universe tree: the raw proof, summed by
    /// [`sum`](Self::sum).
    pub fn leaf(&self, proof_type: ProofType) -> Leaf {
        Leaf::new(self.proof.clone(), self.sum(proof_type))
    }
}

/// What a universe's leaf-key index holds for one leaf: the key's
/// preimage, the leaf's asset, and the leaf's hash and sum in the
/// universe tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRecord {
    /// The leaf's key (its universe key is [`LeafKey::universe_key`]).
    pub key: LeafKey,
    /// The asset the leaf is of.
    pub asset_id: [u8; 32],
    /// The leaf's own hash, `H(value ‖ sum)` (what tapd serves as
    /// `leaf_node_hash`).
    pub leaf_hash: Hash,
    /// The leaf's sum in the universe tree.
    pub leaf_sum: u64,
}

/// The length of an encoded [`KeyRecord`].
pub const KEY_RECORD_LEN: usize = 36 + 32 + 32 + 32 + 8;

impl KeyRecord {
    /// The record of `leaf` as written to a universe of `proof_type`.
    pub fn of(leaf: &UniverseLeaf, proof_type: ProofType) -> KeyRecord {
        let tree_leaf = leaf.leaf(proof_type);
        KeyRecord {
            key: leaf.key,
            asset_id: leaf.asset_id,
            leaf_hash: tree_leaf.hash(),
            leaf_sum: tree_leaf.sum(),
        }
    }

    /// The index leaf: outpoint (wire, 36 bytes), script key, asset ID,
    /// leaf hash, leaf sum (u64 big-endian); sum 1.
    pub fn to_leaf(&self) -> Leaf {
        let mut value = Vec::with_capacity(KEY_RECORD_LEN);
        value.extend_from_slice(&self.key.outpoint.to_wire());
        value.extend_from_slice(&self.key.script_key);
        value.extend_from_slice(&self.asset_id);
        value.extend_from_slice(&self.leaf_hash.0);
        value.extend_from_slice(&self.leaf_sum.to_be_bytes());
        Leaf::new(value, 1)
    }

    /// The record an index leaf value holds; `None` when it is not one.
    pub fn from_value(value: &[u8]) -> Option<KeyRecord> {
        let value: &[u8; KEY_RECORD_LEN] = value.try_into().ok()?;
        let (outpoint, rest) = value.split_first_chunk::<36>()?;
        let (script_key, rest) = rest.split_first_chunk::<32>()?;
        let (asset_id, rest) = rest.split_first_chunk::<32>()?;
        let (leaf_hash, rest) = rest.split_first_chunk::<32>()?;
        let leaf_sum: [u8; 8] = rest.try_into().ok()?;
        Some(KeyRecord {
            key: LeafKey {
                outpoint: OutPoint::from_wire(outpoint),
                script_key: *script_key,
            },
            asset_id: *asset_id,
            leaf_hash: Hash(*leaf_hash),
            leaf_sum: u64::from_be_bytes(leaf_sum),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_tapds() {
        let asset = Universe::new(UniverseId::Asset([0xab; 32]), ProofType::Issuance);
        assert_eq!(asset.namespace(), format!("issuance-{}", "ab".repeat(32)));
        let group_key = [7u8; 32];
        let group = Universe::new(UniverseId::Group(group_key), ProofType::Transfer);
        let hashed: [u8; 32] = Sha256::digest(group_key).into();
        assert_eq!(
            group.namespace(),
            format!("transfer-{}", hex::encode(hashed))
        );
        assert_eq!(
            parse_namespace(&group.namespace()),
            Some((ProofType::Transfer, hashed))
        );
        assert_eq!(parse_namespace(&group.keys_namespace()), None);
        assert_eq!(parse_namespace(ISSUANCE_MULTIVERSE), None);
        assert_eq!(parse_namespace(DIRECTORY), None);
        assert_eq!(
            Universe::from_directory_value(group.directory_leaf().value()),
            Some(group)
        );
    }

    #[test]
    fn the_universe_key_hashes_the_wire_outpoint_and_the_script_key() {
        let key = LeafKey {
            outpoint: OutPoint {
                txid: [1; 32],
                index: 0x0102_0304,
            },
            script_key: [2; 32],
        };
        let mut preimage = vec![1u8; 32];
        preimage.extend_from_slice(&[4, 3, 2, 1]);
        preimage.extend_from_slice(&[2; 32]);
        assert_eq!(key.universe_key(), Key(Sha256::digest(&preimage).into()));
    }

    #[test]
    fn outpoints_parse_as_btcd_does() {
        let mut txid = [0u8; 32];
        txid[0] = 0x01;
        txid[31] = 0xff;
        let op = OutPoint { txid, index: 7 };
        let s = op.to_string();
        assert!(s.starts_with("ff") && s.ends_with("01:7"), "{s}");
        assert_eq!(OutPoint::parse(&s), Ok(op));
        assert_eq!(OutPoint::parse("ab:1"), Err(OutPointError::TxidLength));
        assert_eq!(OutPoint::parse("x"), Err(OutPointError::Form));
        let plus = format!("{}:+1", op.txid_hex());
        assert!(matches!(
            OutPoint::parse(&plus),
            Err(OutPointError::Index(_))
        ));
        // A short hash string fills the first bytes of the reversed hash.
        let short = hash_from_str("1").expect("short");
        assert_eq!(short[0], 1);
        assert_eq!(short[1..], [0u8; 31]);
        assert_eq!(
            hash_from_str(&"0".repeat(65)),
            Err(OutPointError::HashLength)
        );
    }

    #[test]
    fn sums_follow_smt_leaf_node() {
        let mut leaf = UniverseLeaf {
            key: LeafKey {
                outpoint: OutPoint {
                    txid: [0; 32],
                    index: 0,
                },
                script_key: [0; 32],
            },
            asset_id: [0; 32],
            proof: vec![1],
            amount: 500,
            burn: false,
        };
        assert_eq!(leaf.sum(ProofType::Issuance), 500);
        assert_eq!(leaf.sum(ProofType::Transfer), 1);
        leaf.burn = true;
        assert_eq!(leaf.sum(ProofType::Transfer), 500);
        let record = KeyRecord::of(&leaf, ProofType::Transfer);
        assert_eq!(
            KeyRecord::from_value(record.to_leaf().value()),
            Some(record)
        );
        assert_eq!(record.leaf_hash, Leaf::new(vec![1], 500).hash());
    }
}
