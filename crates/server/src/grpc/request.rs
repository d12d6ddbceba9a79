//! Requests read as tapd's RPC server reads them (taproot-assets
//! `rpcserver/rpcserver.go` at 95bd8d41: `UnmarshalUniID`,
//! `unmarshalLeafKey`, `unmarshalUniverseKey`, `validatePage`,
//! `unmarshalUniSortDirection`, `rpcutils.ParseUserKey`), with its error
//! words.

use ms_smt::multiverse::{
    LeafKey, OutPoint, OutPointError, ProofType, Universe, UniverseId, hash_from_str,
};

use super::proto::taprpc::SortDirection;
use super::proto::universerpc::{self as rpc, asset_key, id};

/// tapd's `universe.MaxPageSize` (taproot-assets `universe/interface.go`):
/// the largest `limit` a paged request may ask for.
pub const MAX_PAGE_SIZE: i32 = 16384;

/// tapd's `universe.RequestPageSize` (`universe/interface.go`): the page
/// served when a request's `limit` is 0.
pub const DEFAULT_PAGE_SIZE: i32 = 512;

/// Why Go's `encoding/hex.DecodeString` refuses a string, in its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HexError {
    /// The first byte that is not a hex digit.
    #[error("encoding/hex: invalid byte: U+{:04X} {:?}", u32::from(*.0), char::from(*.0))]
    InvalidByte(u8),
    /// Hex digits only, an odd number of them.
    #[error("encoding/hex: odd length hex string")]
    OddLength,
}

/// Which paged request bound is out of range (tapd's `validatePage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PageProblem {
    /// A negative offset.
    #[error("invalid request offset: {0}")]
    Offset(i32),
    /// A limit below 0 or above [`MAX_PAGE_SIZE`].
    #[error("invalid request limit: {0}")]
    Limit(i32),
}

/// Why a request's field is refused, with tapd's words for it (its RPC
/// server's unmarshal errors, which its client shows as they are). The
/// values carried are the request's own, as tapd quotes them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RequestError {
    /// A proof type number that is not one.
    #[error("unknown universe proof type: {0}")]
    ProofType(i32),
    /// No universe ID.
    #[error("id must be set")]
    NoId,
    /// The ID's proof type is not one.
    #[error("unable to unmarshal id.proof_type ({0}): unknown universe proof type: {0}")]
    IdProofType(i32),
    /// None of the ID's four forms is set.
    #[error("id must set one of {{asset_id, asset_id_str, group_key, group_key_str}}")]
    NoIdKind,
    /// `id.asset_id_str` is not hex.
    #[error("hex-decode id.asset_id_str ({text:?}): {source}")]
    AssetIdHex {
        /// The string sent.
        text: String,
        /// Why.
        source: HexError,
    },
    /// `id.group_key` is not a key.
    #[error("parse id.group_key ({}): unknown key length: {}", hex::encode(.bytes), .bytes.len())]
    GroupKey {
        /// The bytes sent.
        bytes: Vec<u8>,
    },
    /// `id.group_key_str` is not hex.
    #[error("hex-decode id.group_key_str ({text:?}): {source}")]
    GroupKeyHex {
        /// The string sent.
        text: String,
        /// Why.
        source: HexError,
    },
    /// `id.group_key_str` is hex of no key.
    #[error("parse id.group_key_str ({text:?}): unknown key length: {len}")]
    GroupKeyStr {
        /// The string sent.
        text: String,
        /// Bytes it decodes to.
        len: usize,
    },
    /// `leaf_key.script_key_bytes` is not a key.
    #[error(
        "parse leaf_key.script_key_bytes ({}): unknown key length: {}",
        hex::encode(.bytes),
        .bytes.len()
    )]
    ScriptKey {
        /// The bytes sent.
        bytes: Vec<u8>,
    },
    /// `leaf_key.script_key_str` is not hex.
    #[error("hex-decode leaf_key.script_key_str ({text:?}): {source}")]
    ScriptKeyHex {
        /// The string sent.
        text: String,
        /// Why.
        source: HexError,
    },
    /// `leaf_key.script_key_str` is hex of no key.
    #[error("parse leaf_key.script_key_str ({text:?}): unknown key length: {len}")]
    ScriptKeyStr {
        /// The string sent.
        text: String,
        /// Bytes it decodes to.
        len: usize,
    },
    /// No script key.
    #[error("leaf_key.script_key (one of script_key_bytes, script_key_str) must be set")]
    NoScriptKey,
    /// `leaf_key.op_str` is not an outpoint.
    #[error("parse leaf_key.op_str ({text:?}): {source}")]
    OpStr {
        /// The string sent.
        text: String,
        /// Why.
        source: OutPointError,
    },
    /// `leaf_key.op.hash_str` is not a transaction ID.
    #[error("parse leaf_key.op.hash_str ({text:?}): {source}")]
    OpHash {
        /// The string sent.
        text: String,
        /// Why.
        source: OutPointError,
    },
    /// No outpoint.
    #[error("leaf_key.outpoint (one of op_str, op) must be set")]
    NoOutpoint,
    /// The universe key's ID is refused.
    #[error("universe_key.id: {0}")]
    KeyId(Box<RequestError>),
    /// The universe key's leaf key is refused.
    #[error("universe_key.leaf_key: {0}")]
    KeyLeaf(Box<RequestError>),
    /// A page out of bounds.
    #[error("invalid page (offset={offset}, limit={limit}): {problem}")]
    Page {
        /// The offset asked for.
        offset: i32,
        /// The limit asked for.
        limit: i32,
        /// Which is out of range.
        problem: PageProblem,
    },
}

/// A universe as a request names it: the proof type may be left
/// unspecified (tapd's `universe.Identifier` with `ProofTypeUnspecified`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestId {
    /// The asset or group.
    pub id: UniverseId,
    /// `None`: unspecified.
    pub proof_type: Option<ProofType>,
}

impl RequestId {
    /// The universe of this ID with proof type `proof_type`.
    pub fn universe(&self, proof_type: ProofType) -> Universe {
        Universe::new(self.id, proof_type)
    }

    /// tapd's `ProofType.String` of the proof type.
    fn type_str(proof_type: Option<ProofType>) -> &'static str {
        proof_type.map_or("unspecified", ProofType::as_str)
    }

    /// tapd's `Identifier.StringForLog`.
    pub fn for_log(&self) -> String {
        let (asset_id, group_key) = match self.id {
            UniverseId::Asset(id) => (hex::encode(id), "<nil>".to_owned()),
            UniverseId::Group(key) => (hex::encode([0u8; 32]), hex::encode(key)),
        };
        format!(
            "{}-{} (asset_id={asset_id}, group_key={group_key}, proof_type={})",
            Self::type_str(self.proof_type),
            hex::encode(self.id.bytes()),
            Self::type_str(self.proof_type),
        )
    }

    /// This ID with proof type `proof_type`.
    pub fn with_type(mut self, proof_type: ProofType) -> RequestId {
        self.proof_type = Some(proof_type);
        self
    }
}

/// tapd's `UnmarshalUniProofType`: `Ok(None)` for unspecified.
pub(crate) fn proof_type(number: i32) -> Result<Option<ProofType>, RequestError> {
    match rpc::ProofType::try_from(number) {
        Ok(rpc::ProofType::Unspecified) => Ok(None),
        Ok(rpc::ProofType::Issuance) => Ok(Some(ProofType::Issuance)),
        Ok(rpc::ProofType::Transfer) => Ok(Some(ProofType::Transfer)),
        Err(_) => Err(RequestError::ProofType(number)),
    }
}

/// Go's `encoding/hex.DecodeString`, with its error words.
fn go_hex(s: &str) -> Result<Vec<u8>, HexError> {
    // Go reports the first byte that is not a hex digit, and an odd
    // length only when every byte is one.
    if let Some(b) = s.bytes().find(|b| !b.is_ascii_hexdigit()) {
        return Err(HexError::InvalidByte(b));
    }
    if s.len() % 2 == 1 {
        return Err(HexError::OddLength);
    }
    // Every byte a hex digit, an even number of them: this decodes.
    hex::decode(s).map_err(|_| HexError::OddLength)
}

/// `rpcutils.ParseUserKey`: a 32-byte x-only key, or a 33-byte compressed
/// one whose first byte is dropped (`None` for any other length). Unlike
/// tapd, the point is not checked to be on secp256k1: a key that is not
/// one names no universe and no leaf that a write made.
fn user_key(bytes: &[u8]) -> Option<[u8; 32]> {
    match bytes.len() {
        32 | 33 => <[u8; 32]>::try_from(&bytes[bytes.len() - 32..]).ok(),
        _ => None,
    }
}

/// Go's copy of `bytes` into a 32-byte array: short IDs zero-padded, long
/// ones cut.
fn go_array(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let n = bytes.len().min(32);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

/// tapd's `UnmarshalUniID`.
pub(crate) fn universe_id(id: Option<&rpc::Id>) -> Result<RequestId, RequestError> {
    let Some(id) = id else {
        return Err(RequestError::NoId);
    };
    let proof_type =
        proof_type(id.proof_type).map_err(|_| RequestError::IdProofType(id.proof_type))?;
    let at = |id| Ok(RequestId { id, proof_type });
    match &id.id {
        Some(id::Id::AssetId(bytes)) => at(UniverseId::Asset(go_array(bytes))),
        Some(id::Id::AssetIdStr(s)) if !s.is_empty() => {
            let bytes = go_hex(s).map_err(|source| RequestError::AssetIdHex {
                text: s.clone(),
                source,
            })?;
            at(UniverseId::Asset(go_array(&bytes)))
        }
        Some(id::Id::GroupKey(bytes)) => {
            let key = user_key(bytes).ok_or_else(|| RequestError::GroupKey {
                bytes: bytes.clone(),
            })?;
            at(UniverseId::Group(key))
        }
        Some(id::Id::GroupKeyStr(s)) if !s.is_empty() => {
            let bytes = go_hex(s).map_err(|source| RequestError::GroupKeyHex {
                text: s.clone(),
                source,
            })?;
            let key = user_key(&bytes).ok_or_else(|| RequestError::GroupKeyStr {
                text: s.clone(),
                len: bytes.len(),
            })?;
            at(UniverseId::Group(key))
        }
        _ => Err(RequestError::NoIdKind),
    }
}

/// tapd's `unmarshalLeafKey`.
pub(crate) fn leaf_key(key: Option<&rpc::AssetKey>) -> Result<LeafKey, RequestError> {
    let script_key = match key.and_then(|k| k.script_key.as_ref()) {
        Some(asset_key::ScriptKey::ScriptKeyBytes(bytes)) => {
            user_key(bytes).ok_or_else(|| RequestError::ScriptKey {
                bytes: bytes.clone(),
            })?
        }
        Some(asset_key::ScriptKey::ScriptKeyStr(s)) if !s.is_empty() => {
            let bytes = go_hex(s).map_err(|source| RequestError::ScriptKeyHex {
                text: s.clone(),
                source,
            })?;
            user_key(&bytes).ok_or_else(|| RequestError::ScriptKeyStr {
                text: s.clone(),
                len: bytes.len(),
            })?
        }
        _ => return Err(RequestError::NoScriptKey),
    };
    let outpoint = match key.and_then(|k| k.outpoint.as_ref()) {
        Some(asset_key::Outpoint::OpStr(s)) if !s.is_empty() => {
            OutPoint::parse(s).map_err(|source| RequestError::OpStr {
                text: s.clone(),
                source,
            })?
        }
        Some(asset_key::Outpoint::Op(op)) => {
            let txid = hash_from_str(&op.hash_str).map_err(|source| RequestError::OpHash {
                text: op.hash_str.clone(),
                source,
            })?;
            // Go's uint32(op.Index): a negative index wraps.
            OutPoint {
                txid,
                index: u32::from_ne_bytes(op.index.to_ne_bytes()),
            }
        }
        _ => return Err(RequestError::NoOutpoint),
    };
    Ok(LeafKey {
        outpoint,
        script_key,
    })
}

/// tapd's `unmarshalUniverseKey`.
pub(crate) fn universe_key(key: &rpc::UniverseKey) -> Result<(RequestId, LeafKey), RequestError> {
    let id = universe_id(key.id.as_ref()).map_err(|e| RequestError::KeyId(Box::new(e)))?;
    let leaf = leaf_key(key.leaf_key.as_ref()).map_err(|e| RequestError::KeyLeaf(Box::new(e)))?;
    Ok((id, leaf))
}

/// tapd's `validatePage`, wrapped as its paged methods wrap it; the
/// page's offset and limit (0 read as [`DEFAULT_PAGE_SIZE`]).
pub(crate) fn page(offset: i32, limit: i32) -> Result<(u64, u64), RequestError> {
    let problem = if offset < 0 {
        Some(PageProblem::Offset(offset))
    } else if !(0..=MAX_PAGE_SIZE).contains(&limit) {
        Some(PageProblem::Limit(limit))
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(RequestError::Page {
            offset,
            limit,
            problem,
        });
    }
    let limit = if limit == 0 { DEFAULT_PAGE_SIZE } else { limit };
    Ok((
        u64::from(offset.unsigned_abs()),
        u64::from(limit.unsigned_abs()),
    ))
}

/// tapd's `unmarshalUniSortDirection`: true for descending
/// (`SORT_DIRECTION_DESC`, 0); ascending otherwise.
pub(crate) fn descending(direction: i32) -> bool {
    direction == SortDirection::Desc as i32
}

/// tapd's `MarshalUniID` of `universe`.
pub(crate) fn marshal_id(universe: &Universe) -> rpc::Id {
    let id = match universe.id {
        UniverseId::Asset(asset) => id::Id::AssetId(asset.to_vec()),
        UniverseId::Group(key) => id::Id::GroupKey(key.to_vec()),
    };
    let proof_type = match universe.proof_type {
        ProofType::Issuance => rpc::ProofType::Issuance,
        ProofType::Transfer => rpc::ProofType::Transfer,
    };
    rpc::Id {
        id: Some(id),
        proof_type: proof_type as i32,
    }
}

/// tapd's `marshalLeafKey`: the outpoint as a string, the script key as
/// its 32 x-only bytes.
pub(crate) fn marshal_leaf_key(key: &LeafKey) -> rpc::AssetKey {
    rpc::AssetKey {
        outpoint: Some(asset_key::Outpoint::OpStr(key.outpoint.to_string())),
        script_key: Some(asset_key::ScriptKey::ScriptKeyBytes(
            key.script_key.to_vec(),
        )),
    }
}

/// The leaf key a proof's facts name: its anchor outpoint and the x-only
/// bytes of its script key.
pub(crate) fn leaf_key_of(facts: &ms_smt_tapd_proof::UniverseLeafFacts) -> LeafKey {
    LeafKey {
        outpoint: OutPoint {
            txid: facts.anchor_outpoint.txid,
            index: facts.anchor_outpoint.index,
        },
        script_key: facts.script_key.x_only(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_as_tapd_reads_them() {
        let asset = rpc::Id {
            id: Some(id::Id::AssetIdStr("ab".repeat(32))),
            proof_type: 1,
        };
        let got = universe_id(Some(&asset)).expect("asset");
        assert_eq!(got.id, UniverseId::Asset([0xab; 32]));
        assert_eq!(got.proof_type, Some(ProofType::Issuance));
        let mut compressed = vec![2u8];
        compressed.extend_from_slice(&[5; 32]);
        let group = rpc::Id {
            id: Some(id::Id::GroupKey(compressed)),
            proof_type: 0,
        };
        let got = universe_id(Some(&group)).expect("group");
        assert_eq!(got.id, UniverseId::Group([5; 32]));
        assert_eq!(got.proof_type, None);
        let words = |r: Result<RequestId, RequestError>| r.map_err(|e| e.to_string());
        assert_eq!(words(universe_id(None)), Err("id must be set".to_owned()));
        let bad_type = rpc::Id {
            id: None,
            proof_type: 9,
        };
        assert_eq!(
            words(universe_id(Some(&bad_type))),
            Err("unable to unmarshal id.proof_type (9): unknown universe proof type: 9".to_owned())
        );
        let short_group = rpc::Id {
            id: Some(id::Id::GroupKey(vec![1; 5])),
            proof_type: 2,
        };
        assert_eq!(
            words(universe_id(Some(&short_group))),
            Err("parse id.group_key (0101010101): unknown key length: 5".to_owned())
        );
        let bad_hex = rpc::Id {
            id: Some(id::Id::GroupKeyStr("0g".to_owned())),
            proof_type: 1,
        };
        assert_eq!(
            words(universe_id(Some(&bad_hex))),
            Err(
                "hex-decode id.group_key_str (\"0g\"): encoding/hex: invalid byte: U+0067 'g'"
                    .to_owned()
            )
        );
        let odd = rpc::Id {
            id: Some(id::Id::AssetIdStr("abc".to_owned())),
            proof_type: 1,
        };
        assert_eq!(
            words(universe_id(Some(&odd))),
            Err(
                "hex-decode id.asset_id_str (\"abc\"): encoding/hex: odd length hex string"
                    .to_owned()
            )
        );
        let short_str = rpc::Id {
            id: Some(id::Id::GroupKeyStr("abcd".to_owned())),
            proof_type: 1,
        };
        assert_eq!(
            words(universe_id(Some(&short_str))),
            Err("parse id.group_key_str (\"abcd\"): unknown key length: 2".to_owned())
        );
        let none = rpc::Id {
            id: Some(id::Id::AssetIdStr(String::new())),
            proof_type: 2,
        };
        assert_eq!(
            words(universe_id(Some(&none))),
            Err("id must set one of {asset_id, asset_id_str, group_key, group_key_str}".to_owned())
        );
    }

    #[test]
    fn pages_are_bounded_as_tapd_bounds_them() {
        let page = |offset, limit| page(offset, limit).map_err(|e| e.to_string());
        assert_eq!(page(0, 0), Ok((0, 512)));
        assert_eq!(page(5, MAX_PAGE_SIZE), Ok((5, 16384)));
        assert_eq!(
            page(0, MAX_PAGE_SIZE + 1),
            Err("invalid page (offset=0, limit=16385): invalid request limit: 16385".to_owned())
        );
        assert_eq!(
            page(-1, 1),
            Err("invalid page (offset=-1, limit=1): invalid request offset: -1".to_owned())
        );
        assert!(descending(0) && !descending(1) && !descending(7));
    }

    #[test]
    fn leaf_keys_read_as_tapd_reads_them() {
        let op = OutPoint {
            txid: [3; 32],
            index: 4,
        };
        let key = LeafKey {
            outpoint: op,
            script_key: [9; 32],
        };
        let leaf_key = |k: Option<&rpc::AssetKey>| leaf_key(k).map_err(|e| e.to_string());
        assert_eq!(leaf_key(Some(&marshal_leaf_key(&key))), Ok(key));
        let unrolled = rpc::AssetKey {
            outpoint: Some(asset_key::Outpoint::Op(rpc::Outpoint {
                hash_str: op.txid_hex(),
                index: 4,
            })),
            script_key: Some(asset_key::ScriptKey::ScriptKeyStr(hex::encode([9u8; 32]))),
        };
        assert_eq!(leaf_key(Some(&unrolled)), Ok(key));
        assert_eq!(
            leaf_key(None),
            Err(
                "leaf_key.script_key (one of script_key_bytes, script_key_str) must be set"
                    .to_owned()
            )
        );
        let no_outpoint = rpc::AssetKey {
            outpoint: None,
            script_key: Some(asset_key::ScriptKey::ScriptKeyBytes(vec![1; 32])),
        };
        assert_eq!(
            leaf_key(Some(&no_outpoint)),
            Err("leaf_key.outpoint (one of op_str, op) must be set".to_owned())
        );
        let request = RequestId {
            id: UniverseId::Asset([1; 32]),
            proof_type: None,
        };
        assert_eq!(
            request.for_log(),
            format!(
                "unspecified-{0} (asset_id={0}, group_key=<nil>, proof_type=unspecified)",
                "01".repeat(32)
            )
        );
    }
}
