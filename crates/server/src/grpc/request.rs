//! Requests read as tapd's RPC server reads them (taproot-assets
//! `rpcserver/rpcserver.go` at 95bd8d41: `UnmarshalUniID`,
//! `unmarshalLeafKey`, `unmarshalUniverseKey`, `validatePage`,
//! `unmarshalUniSortDirection`, `rpcutils.ParseUserKey`), with its error
//! words.

use ms_smt::multiverse::{LeafKey, OutPoint, ProofType, Universe, UniverseId, hash_from_str};

use super::proto::taprpc::SortDirection;
use super::proto::universerpc::{self as rpc, asset_key, id};

/// tapd's `universe.MaxPageSize` (taproot-assets `universe/interface.go`):
/// the largest `limit` a paged request may ask for.
pub const MAX_PAGE_SIZE: i32 = 16384;

/// tapd's `universe.RequestPageSize` (`universe/interface.go`): the page
/// served when a request's `limit` is 0.
pub const DEFAULT_PAGE_SIZE: i32 = 512;

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
pub(crate) fn proof_type(number: i32) -> Result<Option<ProofType>, String> {
    match rpc::ProofType::try_from(number) {
        Ok(rpc::ProofType::Unspecified) => Ok(None),
        Ok(rpc::ProofType::Issuance) => Ok(Some(ProofType::Issuance)),
        Ok(rpc::ProofType::Transfer) => Ok(Some(ProofType::Transfer)),
        Err(_) => Err(format!("unknown universe proof type: {number}")),
    }
}

/// Go's `encoding/hex.DecodeString`, with its error words.
fn go_hex(s: &str) -> Result<Vec<u8>, String> {
    // Go reports the first byte that is not a hex digit, and an odd
    // length only when every byte is one.
    if let Some(b) = s.bytes().find(|b| !b.is_ascii_hexdigit()) {
        return Err(format!(
            "encoding/hex: invalid byte: U+{:04X} {:?}",
            u32::from(b),
            char::from(b)
        ));
    }
    if s.len() % 2 == 1 {
        return Err("encoding/hex: odd length hex string".to_owned());
    }
    hex::decode(s).map_err(|e| e.to_string())
}

/// `rpcutils.ParseUserKey`: a 32-byte x-only key, or a 33-byte compressed
/// one whose first byte is dropped. Unlike tapd, the point is not checked
/// to be on secp256k1: a key that is not one names no universe and no
/// leaf that a write made.
fn user_key(bytes: &[u8]) -> Result<[u8; 32], String> {
    match bytes.len() {
        32 | 33 => <[u8; 32]>::try_from(&bytes[bytes.len() - 32..])
            .map_err(|_| format!("unknown key length: {}", bytes.len())),
        n => Err(format!("unknown key length: {n}")),
    }
}

/// tapd's `UnmarshalUniID`.
pub(crate) fn universe_id(id: Option<&rpc::Id>) -> Result<RequestId, String> {
    let Some(id) = id else {
        return Err("id must be set".to_owned());
    };
    let proof_type = proof_type(id.proof_type)
        .map_err(|e| format!("unable to unmarshal id.proof_type ({}): {e}", id.proof_type))?;
    let at = |id| Ok(RequestId { id, proof_type });
    match &id.id {
        Some(id::Id::AssetId(bytes)) => {
            // Go's copy into a 32-byte array: short IDs are zero-padded,
            // long ones cut.
            let mut asset = [0u8; 32];
            let n = bytes.len().min(32);
            asset[..n].copy_from_slice(&bytes[..n]);
            at(UniverseId::Asset(asset))
        }
        Some(id::Id::AssetIdStr(s)) if !s.is_empty() => {
            let bytes =
                go_hex(s).map_err(|e| format!("hex-decode id.asset_id_str ({s:?}): {e}"))?;
            let mut asset = [0u8; 32];
            let n = bytes.len().min(32);
            asset[..n].copy_from_slice(&bytes[..n]);
            at(UniverseId::Asset(asset))
        }
        Some(id::Id::GroupKey(bytes)) => {
            let key = user_key(bytes)
                .map_err(|e| format!("parse id.group_key ({}): {e}", hex::encode(bytes)))?;
            at(UniverseId::Group(key))
        }
        Some(id::Id::GroupKeyStr(s)) if !s.is_empty() => {
            let bytes =
                go_hex(s).map_err(|e| format!("hex-decode id.group_key_str ({s:?}): {e}"))?;
            let key =
                user_key(&bytes).map_err(|e| format!("parse id.group_key_str ({s:?}): {e}"))?;
            at(UniverseId::Group(key))
        }
        _ => {
            Err("id must set one of {asset_id, asset_id_str, group_key, group_key_str}".to_owned())
        }
    }
}

/// tapd's `unmarshalLeafKey`.
pub(crate) fn leaf_key(key: Option<&rpc::AssetKey>) -> Result<LeafKey, String> {
    let script_key = match key.and_then(|k| k.script_key.as_ref()) {
        Some(asset_key::ScriptKey::ScriptKeyBytes(bytes)) => user_key(bytes).map_err(|e| {
            format!(
                "parse leaf_key.script_key_bytes ({}): {e}",
                hex::encode(bytes)
            )
        })?,
        Some(asset_key::ScriptKey::ScriptKeyStr(s)) if !s.is_empty() => {
            let bytes = go_hex(s)
                .map_err(|e| format!("hex-decode leaf_key.script_key_str ({s:?}): {e}"))?;
            user_key(&bytes).map_err(|e| format!("parse leaf_key.script_key_str ({s:?}): {e}"))?
        }
        _ => {
            return Err(
                "leaf_key.script_key (one of script_key_bytes, script_key_str) must be set"
                    .to_owned(),
            );
        }
    };
    let outpoint = match key.and_then(|k| k.outpoint.as_ref()) {
        Some(asset_key::Outpoint::OpStr(s)) if !s.is_empty() => {
            OutPoint::parse(s).map_err(|e| format!("parse leaf_key.op_str ({s:?}): {e}"))?
        }
        Some(asset_key::Outpoint::Op(op)) => {
            let txid = hash_from_str(&op.hash_str)
                .map_err(|e| format!("parse leaf_key.op.hash_str ({:?}): {e}", op.hash_str))?;
            // Go's uint32(op.Index): a negative index wraps.
            OutPoint {
                txid,
                index: u32::from_ne_bytes(op.index.to_ne_bytes()),
            }
        }
        _ => return Err("leaf_key.outpoint (one of op_str, op) must be set".to_owned()),
    };
    Ok(LeafKey {
        outpoint,
        script_key,
    })
}

/// tapd's `unmarshalUniverseKey`.
pub(crate) fn universe_key(key: &rpc::UniverseKey) -> Result<(RequestId, LeafKey), String> {
    let id = universe_id(key.id.as_ref()).map_err(|e| format!("universe_key.id: {e}"))?;
    let leaf =
        leaf_key(key.leaf_key.as_ref()).map_err(|e| format!("universe_key.leaf_key: {e}"))?;
    Ok((id, leaf))
}

/// tapd's `validatePage`, wrapped as its paged methods wrap it; the
/// page's offset and limit (0 read as [`DEFAULT_PAGE_SIZE`]).
pub(crate) fn page(offset: i32, limit: i32) -> Result<(u64, u64), String> {
    let problem = if offset < 0 {
        Some(format!("invalid request offset: {offset}"))
    } else if !(0..=MAX_PAGE_SIZE).contains(&limit) {
        Some(format!("invalid request limit: {limit}"))
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(format!(
            "invalid page (offset={offset}, limit={limit}): {problem}"
        ));
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
        assert_eq!(universe_id(None), Err("id must be set".to_owned()));
        let bad_type = rpc::Id {
            id: None,
            proof_type: 9,
        };
        assert_eq!(
            universe_id(Some(&bad_type)),
            Err("unable to unmarshal id.proof_type (9): unknown universe proof type: 9".to_owned())
        );
        let short_group = rpc::Id {
            id: Some(id::Id::GroupKey(vec![1; 5])),
            proof_type: 2,
        };
        assert_eq!(
            universe_id(Some(&short_group)),
            Err("parse id.group_key (0101010101): unknown key length: 5".to_owned())
        );
        let none = rpc::Id {
            id: Some(id::Id::AssetIdStr(String::new())),
            proof_type: 2,
        };
        assert!(
            universe_id(Some(&none))
                .expect_err("empty")
                .starts_with("id must set one of")
        );
    }

    #[test]
    fn pages_are_bounded_as_tapd_bounds_them() {
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
