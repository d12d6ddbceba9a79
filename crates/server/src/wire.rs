//! The JSON bodies of the federation API and their hex codecs.
//!
//! Every hash, key, value and proof travels as lower-case hex; sums as JSON
//! numbers. A position travels as one hex string: its level as one byte,
//! then the `ceil(level / 8)` bytes of key path that lead there, with the
//! bits at and below the level zero (one spelling per position). Only
//! positions above the leaves (level < 256) are ever sent.
//!
//! ```text
//!   PUT  /v1/{ns}           (admin)                       -> {"namespace","created"}
//!   POST /v1/{ns}/leaves    [{"key","value","sum"}, ...]  -> {"root","sum"}
//!   GET  /v1/{ns}/root                                    -> {"root","sum"}
//!   GET  /v1/{ns}/proof/{key}     -> {"root","sum","leaf": {"value","sum"} | null,"proof"}
//!   POST /v1/{ns}/children  {"root","sum","prefixes": [pos, ...]}
//!                           -> {"children": [[sub, sub], ...]}
//!   GET  /v1/{ns}/changes?since=V | from=root hex [&limit=N] [&proof=1]
//!       -> {"from_version","from","to_version","to","head_version","head",
//!           "changes": [{"version","key","old","old_sum","new","new_sum"}, ...],
//!           with proof=1: "later": [{"key","value","sum"}, ...], "proof"}
//!       410 when the journal does not cover that version or root
//!   sub = null | {"hash","sum"} | {"key","value","sum"}
//!   errors: 4xx/5xx          -> {"error": "..."}
//! ```
//!
//! Requests carry `Authorization: Bearer <token>` where the route needs
//! more than public read (see [`access`](super::access)).

use serde::{Deserialize, Serialize};

use crate::descent::Subtree;
use crate::hash::Hash;
use crate::key::Key;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::position::Position;
use crate::store::{Change, ChangePage};
use ms_smt::{Proof, UpdateProof};

/// Prefixes at most in one `children` request, by default: the server's
/// limit and the client's split.
pub const DEFAULT_MAX_PREFIXES: usize = 8_192;

/// Longest namespace name the API accepts.
pub const MAX_NAMESPACE_LEN: usize = 64;

/// Why a body, a field or a name is not valid on the wire.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The body is not the JSON expected.
    #[error("malformed JSON body: {0}")]
    Json(#[from] serde_json::Error),
    /// A field is not valid hex.
    #[error("{field} is not valid hex: {source}")]
    Hex {
        /// The field.
        field: &'static str,
        /// What was wrong.
        #[source]
        source: hex::FromHexError,
    },
    /// A fixed-size field has the wrong length.
    #[error("{field} must be {expected} bytes, got {got}")]
    Length {
        /// The field.
        field: &'static str,
        /// Bytes it must have.
        expected: usize,
        /// Bytes it had.
        got: usize,
    },
    /// A position is not in its one spelling (level byte, path bytes, no
    /// bits below the level) or is at the leaves.
    #[error("position {index} is not a valid prefix (level byte, then its path bytes)")]
    Position {
        /// Its index in the list.
        index: usize,
    },
    /// A subtree is neither null, `{hash, sum}` nor `{key, value, sum}`.
    #[error("subtree {index} is neither null, a branch nor a leaf")]
    Subtree {
        /// Its index in the answer (two per prefix).
        index: usize,
    },
    /// A proof does not decode.
    #[error("proof does not decode: {0}")]
    Proof(#[from] crate::proof::DecodeError),
    /// An update proof does not decode.
    #[error("update proof does not decode: {0}")]
    UpdateProof(#[source] crate::proof::MultiDecodeError),
    /// A namespace name is empty, too long, or has characters other than
    /// ASCII letters, digits, `.`, `_` and `-`.
    #[error("namespace names are 1 to 64 of [A-Za-z0-9._-]")]
    Namespace,
}

/// Checks a namespace name: 1 to [`MAX_NAMESPACE_LEN`] of `[A-Za-z0-9._-]`,
/// so it is one URL path segment as it stands.
pub fn check_namespace(name: &str) -> Result<(), WireError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAMESPACE_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    ok.then_some(()).ok_or(WireError::Namespace)
}

/// Hex of any length.
fn bytes(field: &'static str, s: &str) -> Result<Vec<u8>, WireError> {
    hex::decode(s).map_err(|source| WireError::Hex { field, source })
}

/// Hex of exactly 32 bytes.
fn bytes32(field: &'static str, s: &str) -> Result<[u8; 32], WireError> {
    let b = bytes(field, s)?;
    b.as_slice().try_into().map_err(|_| WireError::Length {
        field,
        expected: 32,
        got: b.len(),
    })
}

/// A key from its hex.
pub fn decode_key(s: &str) -> Result<Key, WireError> {
    bytes32("key", s).map(Key)
}

/// A (hash, sum) from the hex hash `root` and `sum`.
fn decode_node(field: &'static str, hash: &str, sum: u64) -> Result<ComputedNode, WireError> {
    Ok(ComputedNode::new(Hash(bytes32(field, hash)?), sum))
}

/// A position's compact hex: level byte, then its path bytes; `None` at
/// the leaves (level 256), which have no children to ask for.
pub fn encode_position(pos: &Position) -> Option<String> {
    let level = u8::try_from(pos.level()).ok()?;
    let len = usize::from(level).div_ceil(8);
    let mut out = Vec::with_capacity(len.saturating_add(1));
    out.push(level);
    out.extend_from_slice(pos.path().0.get(..len)?);
    Some(hex::encode(out))
}

/// A position from [`encode_position`]'s hex (`index` names it in errors).
pub fn decode_position(index: usize, s: &str) -> Result<Position, WireError> {
    let bad = || WireError::Position { index };
    let raw = hex::decode(s).map_err(|_| bad())?;
    let (&level, path) = raw.split_first().ok_or_else(bad)?;
    let level = usize::from(level);
    if path.len() != level.div_ceil(8) {
        return Err(bad());
    }
    let mut key = Key::default();
    key.0[..path.len()].copy_from_slice(path);
    let pos = Position::new(level, &key);
    (*pos.path() == key).then_some(pos).ok_or_else(bad)
}

/// A leaf as `POST /leaves` sends it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafIn {
    /// The key, 32 bytes of hex.
    pub key: String,
    /// The value, hex.
    pub value: String,
    /// The sum.
    pub sum: u64,
}

impl LeafIn {
    /// The wire form of one leaf.
    pub fn new(key: &Key, leaf: &Leaf) -> Self {
        LeafIn {
            key: key.to_hex(),
            value: hex::encode(leaf.value()),
            sum: leaf.sum(),
        }
    }

    /// The key and leaf (the empty value with sum 0 deletes).
    pub fn decode(&self) -> Result<(Key, Leaf), WireError> {
        Ok((
            decode_key(&self.key)?,
            Leaf::new(bytes("value", &self.value)?, self.sum),
        ))
    }
}

/// A root: `{"root": hex32, "sum": u64}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootOut {
    /// The root hash.
    pub root: String,
    /// The root sum.
    pub sum: u64,
}

impl RootOut {
    /// The wire form of `root`.
    pub fn new(root: &ComputedNode) -> Self {
        RootOut {
            root: root.hash.to_hex(),
            sum: root.sum,
        }
    }

    /// The root it names.
    pub fn decode(&self) -> Result<ComputedNode, WireError> {
        decode_node("root", &self.root, self.sum)
    }
}

/// A leaf in a proof answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafOut {
    /// The value, hex.
    pub value: String,
    /// The sum.
    pub sum: u64,
}

/// `GET /proof/{key}`: root, leaf (null when absent) and the Go
/// compressed proof, all from one read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofOut {
    /// The root hash the proof is against.
    pub root: String,
    /// The root sum.
    pub sum: u64,
    /// The leaf at the key; null when absent.
    pub leaf: Option<LeafOut>,
    /// The compressed proof (Go `mssmt` encoding), hex.
    pub proof: String,
}

impl ProofOut {
    /// The wire form of one consistent read.
    pub fn new(root: &ComputedNode, leaf: &Leaf, proof: &Proof) -> Self {
        ProofOut {
            root: root.hash.to_hex(),
            sum: root.sum,
            leaf: (!leaf.is_empty()).then(|| LeafOut {
                value: hex::encode(leaf.value()),
                sum: leaf.sum(),
            }),
            proof: hex::encode(proof.to_bytes()),
        }
    }

    /// The root, the leaf (empty when absent) and the proof.
    pub fn decode(&self) -> Result<(ComputedNode, Leaf, Proof), WireError> {
        let root = decode_node("root", &self.root, self.sum)?;
        let leaf = match &self.leaf {
            None => Leaf::empty(),
            Some(l) => Leaf::new(bytes("value", &l.value)?, l.sum),
        };
        let proof = Proof::from_bytes(&bytes("proof", &self.proof)?)?;
        Ok((root, leaf, proof))
    }
}

/// `POST /children`: the root the asker holds and the prefixes whose
/// children it wants.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildrenIn {
    /// The root hash.
    pub root: String,
    /// The root sum.
    pub sum: u64,
    /// Positions, compact hex ([`encode_position`]).
    pub prefixes: Vec<String>,
}

impl ChildrenIn {
    /// The wire form of a request; refused for a prefix at the leaves.
    pub fn new(root: &ComputedNode, prefixes: &[Position]) -> Result<Self, WireError> {
        let prefixes = prefixes
            .iter()
            .enumerate()
            .map(|(index, p)| encode_position(p).ok_or(WireError::Position { index }))
            .collect::<Result<_, _>>()?;
        Ok(ChildrenIn {
            root: root.hash.to_hex(),
            sum: root.sum,
            prefixes,
        })
    }

    /// The root and prefixes.
    pub fn decode(&self) -> Result<(ComputedNode, Vec<Position>), WireError> {
        let root = decode_node("root", &self.root, self.sum)?;
        let prefixes = self
            .prefixes
            .iter()
            .enumerate()
            .map(|(i, p)| decode_position(i, p))
            .collect::<Result<_, _>>()?;
        Ok((root, prefixes))
    }
}

/// One subtree of a children answer: `{hash, sum}` (a branch) or
/// `{key, value, sum}` (a lone leaf); an empty subtree is `null`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubtreeOut {
    /// A branch's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// A leaf's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A leaf's value, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The branch's or the leaf's sum.
    pub sum: u64,
}

/// `POST /children`'s answer: two subtrees per prefix, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildrenOut {
    /// `[left, right]` per prefix.
    pub children: Vec<[Option<SubtreeOut>; 2]>,
}

fn encode_subtree(sub: &Subtree) -> Option<SubtreeOut> {
    match sub {
        Subtree::Empty => None,
        Subtree::Branch(c) => Some(SubtreeOut {
            hash: Some(c.hash.to_hex()),
            key: None,
            value: None,
            sum: c.sum,
        }),
        Subtree::Leaf { key, leaf } => Some(SubtreeOut {
            hash: None,
            key: Some(key.to_hex()),
            value: Some(hex::encode(leaf.value())),
            sum: leaf.sum(),
        }),
    }
}

fn decode_subtree(index: usize, sub: &Option<SubtreeOut>) -> Result<Subtree, WireError> {
    let Some(s) = sub else {
        return Ok(Subtree::Empty);
    };
    match (&s.hash, &s.key, &s.value) {
        (Some(hash), None, None) => Ok(Subtree::Branch(decode_node("hash", hash, s.sum)?)),
        (None, Some(key), Some(value)) => Ok(Subtree::Leaf {
            key: decode_key(key)?,
            leaf: Leaf::new(bytes("value", value)?, s.sum),
        }),
        _ => Err(WireError::Subtree { index }),
    }
}

impl ChildrenOut {
    /// The wire form of an answer.
    pub fn new(pairs: &[[Subtree; 2]]) -> Self {
        ChildrenOut {
            children: pairs
                .iter()
                .map(|[l, r]| [encode_subtree(l), encode_subtree(r)])
                .collect(),
        }
    }

    /// The pairs, as the asker checks them against their parents.
    pub fn decode(&self) -> Result<Vec<[Subtree; 2]>, WireError> {
        self.children
            .iter()
            .enumerate()
            .map(|(i, [l, r])| {
                let at = i.saturating_mul(2);
                Ok([
                    decode_subtree(at, l)?,
                    decode_subtree(at.saturating_add(1), r)?,
                ])
            })
            .collect()
    }
}

/// `PUT /v1/{ns}`'s answer: the namespace and whether this call made it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatedOut {
    /// The namespace.
    pub namespace: String,
    /// True when this request created it; false when it existed.
    pub created: bool,
}

impl CreatedOut {
    /// The answer for `namespace`.
    pub fn new(namespace: &str, created: bool) -> Self {
        CreatedOut {
            namespace: namespace.to_owned(),
            created,
        }
    }
}

/// Every error answer: `{"error": "..."}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorOut {
    /// What went wrong.
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::MAX_LEVEL;

    #[test]
    fn positions_round_trip_in_one_spelling() {
        let key = Key([0xa5; 32]);
        for level in [0usize, 1, 7, 8, 9, 100, 255] {
            let pos = Position::new(level, &key);
            let hex = encode_position(&pos).expect("above the leaves");
            assert_eq!(hex.len(), 2 * (1 + level.div_ceil(8)));
            assert_eq!(decode_position(0, &hex).expect("decodes"), pos);
        }
        assert_eq!(encode_position(&Position::new(MAX_LEVEL, &key)), None);
        // A bit below the level, a short path, no level byte, bad hex, a
        // long path.
        for bad in ["0102", "09a5", "", "zz", "08", "01a500"] {
            assert!(decode_position(3, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn subtrees_round_trip_and_odd_shapes_are_refused() {
        let pairs = vec![[
            Subtree::Branch(ComputedNode::new(Hash([7; 32]), 9)),
            Subtree::Leaf {
                key: Key([1; 32]),
                leaf: Leaf::new(vec![1, 2], 3),
            },
        ]];
        let json = serde_json::to_string(&ChildrenOut::new(&pairs)).expect("json");
        let back: ChildrenOut = serde_json::from_str(&json).expect("parse");
        assert_eq!(back.decode().expect("decode"), pairs);
        let odd = r#"{"children": [[{"hash": "00", "key": "00", "sum": 1}, null]]}"#;
        let odd: ChildrenOut = serde_json::from_str(odd).expect("parse");
        assert!(matches!(odd.decode(), Err(WireError::Subtree { index: 0 })));
    }

    #[test]
    fn namespace_names_are_path_segments() {
        assert!(check_namespace("assets-1.v2_x").is_ok());
        for bad in ["", "a/b", "a b", "ü", &"n".repeat(65)] {
            assert!(check_namespace(bad).is_err(), "{bad}");
        }
    }
}

/// One change of a page: `{"version", "key", "old", "old_sum", "new",
/// "new_sum"}` (values as hex; an absent leaf is `""` with sum 0).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeOut {
    /// The version that made it.
    pub version: u64,
    /// The key, 32 bytes of hex.
    pub key: String,
    /// The old value, hex.
    pub old: String,
    /// The old sum.
    pub old_sum: u64,
    /// The new value, hex.
    pub new: String,
    /// The new sum.
    pub new_sum: u64,
}

/// A page of the change feed (`GET /v1/{ns}/changes`): its versions and
/// roots, its changes, and with `proof=1` the keys changed after it
/// (`later`, leaves at its last version) and the update proof's hex.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangesOut {
    /// The version the page starts after.
    pub from_version: u64,
    /// The root there.
    pub from: RootOut,
    /// The page's last version.
    pub to_version: u64,
    /// The root there.
    pub to: RootOut,
    /// The leader's version when the page was read.
    pub head_version: u64,
    /// The root there.
    pub head: RootOut,
    /// The changes, in version order.
    pub changes: Vec<ChangeOut>,
    /// With a proof: each later-changed key's leaf at `to_version`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub later: Vec<LeafIn>,
    /// With a proof: the [`UpdateProof`]'s encoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
}

impl ChangesOut {
    /// The wire form of `page` (and its proof, when given).
    pub fn new(page: &ChangePage, proof: Option<&UpdateProof>) -> Self {
        ChangesOut {
            from_version: page.from_version,
            from: RootOut::new(&page.from_root),
            to_version: page.to_version,
            to: RootOut::new(&page.to_root),
            head_version: page.head_version,
            head: RootOut::new(&page.head_root),
            changes: page
                .changes
                .iter()
                .map(|c| ChangeOut {
                    version: c.version,
                    key: c.key.to_hex(),
                    old: hex::encode(c.old.value()),
                    old_sum: c.old.sum(),
                    new: hex::encode(c.new.value()),
                    new_sum: c.new.sum(),
                })
                .collect(),
            later: match proof {
                Some(_) => page.later.iter().map(|(k, l)| LeafIn::new(k, l)).collect(),
                None => Vec::new(),
            },
            proof: proof.map(|p| hex::encode(p.encode())),
        }
    }

    /// The page, and its proof when one was sent.
    pub fn decode(&self) -> Result<(ChangePage, Option<UpdateProof>), WireError> {
        let changes = self
            .changes
            .iter()
            .map(|c| {
                Ok(Change {
                    version: c.version,
                    key: decode_key(&c.key)?,
                    old: Leaf::new(bytes("old", &c.old)?, c.old_sum),
                    new: Leaf::new(bytes("new", &c.new)?, c.new_sum),
                })
            })
            .collect::<Result<Vec<_>, WireError>>()?;
        let later = self
            .later
            .iter()
            .map(LeafIn::decode)
            .collect::<Result<Vec<_>, _>>()?;
        let proof = self
            .proof
            .as_deref()
            .map(|p| UpdateProof::decode(&bytes("proof", p)?).map_err(WireError::UpdateProof))
            .transpose()?;
        let page = ChangePage {
            from_version: self.from_version,
            from_root: self.from.decode()?,
            to_version: self.to_version,
            to_root: self.to.decode()?,
            changes,
            head_version: self.head_version,
            head_root: self.head.decode()?,
            later,
        };
        Ok((page, proof))
    }
}
