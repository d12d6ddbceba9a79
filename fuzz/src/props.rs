//! Properties of untrusted proofs, shared by the cargo-fuzz targets
//! (`fuzz/fuzz_targets/*.rs`) and the stable-Rust tests
//! `tests/proof_mutations.rs` and `tests/properties.rs` (which include this
//! file with `#[path]`; the latter for its reference strict decoder).
//!
//! Everything here is checked against an independent reference written from
//! the spec (§1 hashing, §4 proofs) with plain `sha2`, not with the crate's
//! own hashing:
//!
//! * [`check_decode`]: strict decoding never panics, agrees exactly (value
//!   and error) with a reference strict decoder, accepts only canonical
//!   bytes (decode → encode reproduces the input), and everything Go's
//!   lenient decoder accepts re-encodes to bytes the strict decoder accepts.
//! * [`check_verify`]: `Proof::root` and `Proof::verify` agree with a
//!   reference walk (hash, sum, and the level of a sum overflow), and a
//!   proof that verifies against a vector tree's root always names the leaf
//!   that tree really holds at that key (the empty leaf for absent keys).
//!   Since every walk has exactly 256 levels, this holds without
//!   assumptions beyond SHA-256 collision resistance: equal roots force
//!   equal preimages level by level down to the leaf (spec §9 C2's
//!   leaf/branch ambiguity cannot be used at a fixed depth).
//! * [`run_case`]: a vector proof under a list of mutations [`Op`]; with the
//!   key unchanged, a changed leaf or a changed proof must not verify.
//! * [`check_roundtrip`]: arbitrary 256-sibling proofs encode canonically,
//!   decode back, and verify only for the leaf and keys they commit to.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use ms_smt::proof::DecodeError;
use ms_smt::{CompressedProof, ComputedNode, Hash, Key, Leaf, Proof};
use sha2::{Digest, Sha256};

/// Levels below the root.
pub const LEVELS: usize = 256;
/// Bytes of one explicit node on the wire.
const NODE: usize = 40;
/// Bytes of the bitmap.
const BITMAP: usize = 32;

/// A sibling: hash and sum.
pub type Sib = ([u8; 32], u64);

/// A tree's non-empty leaves: key → (value, sum).
pub type Leaves = HashMap<[u8; 32], LeafParts>;

/// A leaf's value and sum.
pub type LeafParts = (Vec<u8>, u64);

// ---------------------------------------------------------------------------
// Reference hashing (spec §1.2-1.4), independent of the crate.

fn sha(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// `H(value || be64(sum))`.
pub fn ref_leaf_hash(value: &[u8], sum: u64) -> [u8; 32] {
    sha(&[value, &sum.to_be_bytes()])
}

/// `H(left || right || be64(sum))`.
pub fn ref_branch(left: &[u8; 32], right: &[u8; 32], sum: u64) -> [u8; 32] {
    sha(&[left, right, &sum.to_be_bytes()])
}

/// `EmptyTree[level]`, 0 = root, 256 = the empty leaf.
pub fn ref_empty(level: usize) -> [u8; 32] {
    static TABLE: OnceLock<Vec<[u8; 32]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = vec![[0u8; 32]; LEVELS + 1];
        t[LEVELS] = ref_leaf_hash(&[], 0);
        for level in (0..LEVELS).rev() {
            t[level] = ref_branch(&t[level + 1], &t[level + 1], 0);
        }
        t
    })[level]
}

/// Bit `d` of a key, LSB first (spec §1.1).
pub fn bit(key: &[u8; 32], d: usize) -> bool {
    (key[d / 8] >> (d % 8)) & 1 == 1
}

fn flip_bit(key: &mut [u8; 32], d: usize) {
    key[d / 8] ^= 1 << (d % 8);
}

/// The level of sibling `j` (index 0 is the leaf's sibling, level 256).
pub fn level_of(j: usize) -> usize {
    LEVELS - j
}

/// The walk of spec §4.2: the hash of the current node before each of the
/// 256 combinations (`path[j]` sits at level `256 - j`, `path[256]` is the
/// root) and the root sum, or the level whose sum overflowed.
pub fn ref_path(
    sibs: &[Sib],
    key: &[u8; 32],
    value: &[u8],
    sum: u64,
) -> Result<(Vec<[u8; 32]>, u64), usize> {
    assert_eq!(sibs.len(), LEVELS);
    let mut path = Vec::with_capacity(LEVELS + 1);
    let mut h = ref_leaf_hash(value, sum);
    let mut s = sum;
    for (j, (sh, ss)) in sibs.iter().enumerate() {
        path.push(h);
        let level = LEVELS - 1 - j;
        s = s.checked_add(*ss).ok_or(level)?;
        h = if bit(key, level) {
            ref_branch(sh, &h, s)
        } else {
            ref_branch(&h, sh, s)
        };
    }
    path.push(h);
    Ok((path, s))
}

/// The root of the walk, or the level whose sum overflowed: the last node
/// of [`ref_path`].
pub fn ref_root(sibs: &[Sib], key: &[u8; 32], value: &[u8], sum: u64) -> Result<Sib, usize> {
    let (path, s) = ref_path(sibs, key, value, sum)?;
    Ok((path[LEVELS], s))
}

// ---------------------------------------------------------------------------
// Reference wire format (spec §4.3-4.5).

/// The canonical encoding: a sibling is in the bitmap iff its hash is the
/// empty hash of its level.
pub fn ref_encode(sibs: &[Sib]) -> Vec<u8> {
    let mut bits = [0u8; BITMAP];
    let mut nodes = Vec::new();
    for (j, s) in sibs.iter().enumerate() {
        if s.0 == ref_empty(level_of(j)) {
            bits[j / 8] |= 1 << (j % 8);
        } else {
            nodes.push(*s);
        }
    }
    let mut out = (nodes.len() as u16).to_be_bytes().to_vec();
    for (h, s) in nodes {
        out.extend_from_slice(&h);
        out.extend_from_slice(&s.to_be_bytes());
    }
    out.extend_from_slice(&bits);
    out
}

fn read_node(chunk: &[u8]) -> Sib {
    let mut h = [0u8; 32];
    h.copy_from_slice(&chunk[..32]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&chunk[32..40]);
    (h, u64::from_be_bytes(s))
}

fn unpack(bits: &[u8; BITMAP], nodes: &[Sib]) -> Option<Vec<Sib>> {
    let clear = (0..LEVELS)
        .filter(|j| (bits[j / 8] >> (j % 8)) & 1 == 0)
        .count();
    if clear != nodes.len() {
        return None;
    }
    let mut it = nodes.iter();
    Some(
        (0..LEVELS)
            .map(|j| {
                if (bits[j / 8] >> (j % 8)) & 1 == 1 {
                    (ref_empty(level_of(j)), 0)
                } else {
                    *it.next().unwrap()
                }
            })
            .collect(),
    )
}

/// The strict decoder the crate documents (`CompressedProof::decode`), checks
/// in its order: empty, truncated, trailing, count mismatch, first explicit
/// empty-subtree node.
pub fn ref_decode_strict(b: &[u8]) -> Result<Vec<Sib>, DecodeError> {
    if b.is_empty() {
        return Err(DecodeError::Empty);
    }
    if b.len() < 2 {
        return Err(DecodeError::Truncated {
            needed: 2,
            got: b.len(),
        });
    }
    let count = usize::from(u16::from_be_bytes([b[0], b[1]]));
    let needed = 2 + NODE * count + BITMAP;
    if b.len() < needed {
        return Err(DecodeError::Truncated {
            needed,
            got: b.len(),
        });
    }
    if b.len() > needed {
        return Err(DecodeError::TrailingBytes {
            extra: b.len() - needed,
        });
    }
    let nodes: Vec<Sib> = b[2..2 + NODE * count]
        .chunks_exact(NODE)
        .map(read_node)
        .collect();
    let mut bits = [0u8; BITMAP];
    bits.copy_from_slice(&b[needed - BITMAP..]);
    let clear = (0..LEVELS)
        .filter(|j| (bits[j / 8] >> (j % 8)) & 1 == 0)
        .count();
    if clear != count {
        return Err(DecodeError::CountMismatch {
            nodes: count,
            expected: clear,
        });
    }
    let sibs = unpack(&bits, &nodes).expect("counts agree");
    for (j, s) in sibs.iter().enumerate() {
        let explicit = (bits[j / 8] >> (j % 8)) & 1 == 0;
        if explicit && s.0 == ref_empty(level_of(j)) {
            return Err(DecodeError::NonCanonicalEmpty { index: j });
        }
    }
    Ok(sibs)
}

/// Go's `Decode` + `Decompress` (spec §4.5): a bitmap cut short by 1-31
/// bytes is zero-filled, trailing bytes are ignored, explicit nodes equal to
/// an empty subtree are kept.
pub fn go_decode(b: &[u8]) -> Option<Vec<Sib>> {
    if b.len() < 2 {
        return None;
    }
    let count = usize::from(u16::from_be_bytes([b[0], b[1]]));
    let end = 2 + NODE * count;
    if b.len() < end {
        return None; // a short hash read leaves the sum read at EOF
    }
    let nodes: Vec<Sib> = b[2..end].chunks_exact(NODE).map(read_node).collect();
    let rest = &b[end..];
    if rest.is_empty() {
        return None; // the bitmap read hits EOF
    }
    let mut bits = [0u8; BITMAP];
    let n = rest.len().min(BITMAP);
    bits[..n].copy_from_slice(&rest[..n]);
    unpack(&bits, &nodes)
}

/// Siblings whose hash is the empty hash of their level get sum 0: what an
/// encode/decode round trip does to a proof (compression compares hashes
/// only, spec §4.3).
pub fn normalise(sibs: &[Sib]) -> Vec<Sib> {
    sibs.iter()
        .enumerate()
        .map(|(j, s)| {
            if s.0 == ref_empty(level_of(j)) {
                (s.0, 0)
            } else {
                *s
            }
        })
        .collect()
}

/// The siblings of a crate proof.
pub fn sibs_of(p: &Proof) -> Vec<Sib> {
    p.nodes().iter().map(|n| (n.hash.0, n.sum)).collect()
}

/// A crate proof from siblings.
pub fn proof_of(sibs: &[Sib]) -> Proof {
    Proof::new(
        sibs.iter()
            .map(|(h, s)| ComputedNode::new(Hash(*h), *s))
            .collect(),
    )
    .expect("256 siblings")
}

// ---------------------------------------------------------------------------
// Reference trees and the vector corpus.

/// A tree whose full contents are known.
#[derive(Debug, Clone)]
pub struct VecTree {
    /// Where it comes from.
    pub name: String,
    /// The root (from the vector file, checked against the reference).
    pub root: ComputedNode,
    /// Every non-empty leaf.
    pub leaves: Leaves,
}

impl VecTree {
    /// The leaf the tree holds at `key`: the empty leaf when absent.
    pub fn truth(&self, key: &Key) -> Leaf {
        self.leaves
            .get(&key.0)
            .map_or_else(Leaf::empty, |(v, s)| Leaf::new(v.clone(), *s))
    }
}

/// A real proof: verifies `leaf` at `key` under `trees[tree].root`.
#[derive(Debug, Clone)]
pub struct Case {
    /// Index into [`Corpus::trees`].
    pub tree: usize,
    /// The key.
    pub key: Key,
    /// The leaf at that key (empty for exclusion proofs).
    pub leaf: Leaf,
    /// The canonical encoding.
    pub bytes: Vec<u8>,
    /// The 256 siblings.
    pub sibs: Vec<Sib>,
    /// "vector" (from the file) or "reference" (built here).
    pub origin: &'static str,
}

/// Trees and proofs from the official vectors, plus one synthetic tree.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// The trees.
    pub trees: Vec<VecTree>,
    /// Real proofs, `mssmt_tree_proofs.json`'s 1,010 first.
    pub cases: Vec<Case>,
}

fn subtree(leaves: &[&([u8; 32], Vec<u8>, u64)], level: usize) -> Sib {
    match leaves {
        [] => (ref_empty(level), 0),
        [(key, value, sum)] => {
            let mut h = ref_leaf_hash(value, *sum);
            for lv in (level..LEVELS).rev() {
                let e = ref_empty(lv + 1);
                h = if bit(key, lv) {
                    ref_branch(&e, &h, *sum)
                } else {
                    ref_branch(&h, &e, *sum)
                };
            }
            (h, *sum)
        }
        _ => {
            assert!(level < LEVELS, "duplicate keys");
            let (right, left): (Vec<_>, Vec<_>) = leaves.iter().partition(|l| bit(&l.0, level));
            let l = subtree(&left, level + 1);
            let r = subtree(&right, level + 1);
            let s =
                l.1.checked_add(r.1)
                    .expect("reference trees do not overflow");
            (ref_branch(&l.0, &r.0, s), s)
        }
    }
}

/// The reference root of a set of leaves.
pub fn ref_tree_root(leaves: &Leaves) -> Sib {
    let all: Vec<([u8; 32], Vec<u8>, u64)> = leaves
        .iter()
        .map(|(k, (v, s))| (*k, v.clone(), *s))
        .collect();
    let refs: Vec<_> = all.iter().collect();
    subtree(&refs, 0)
}

/// The reference proof (256 siblings) of `key` in a set of leaves.
pub fn ref_proof(leaves: &Leaves, key: &[u8; 32]) -> Vec<Sib> {
    let all: Vec<([u8; 32], Vec<u8>, u64)> = leaves
        .iter()
        .map(|(k, (v, s))| (*k, v.clone(), *s))
        .collect();
    let mut cur: Vec<_> = all.iter().collect();
    let mut sibs = vec![([0u8; 32], 0u64); LEVELS];
    for d in 0..LEVELS {
        let (same, other): (Vec<_>, Vec<_>) = cur.iter().partition(|l| bit(&l.0, d) == bit(key, d));
        sibs[LEVELS - 1 - d] = subtree(&other, d + 1);
        cur = same;
    }
    sibs
}

fn json(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn hex32(v: &serde_json::Value) -> Result<[u8; 32], String> {
    let s = v.as_str().ok_or("expected a hex string")?;
    let b = hex::decode(s).map_err(|e| e.to_string())?;
    b.try_into().map_err(|_| format!("not 32 bytes: {s}"))
}

fn dec64(v: &serde_json::Value) -> Result<u64, String> {
    v.as_str()
        .ok_or("expected a decimal string")?
        .parse()
        .map_err(|e| format!("{e}"))
}

fn leaf_of(node: &serde_json::Value) -> Result<(Vec<u8>, u64), String> {
    let value = hex::decode(node["value"].as_str().ok_or("value")?).map_err(|e| e.to_string())?;
    Ok((value, dec64(&node["sum"])?))
}

fn list(v: &serde_json::Value) -> &[serde_json::Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// Replays a vector file's first valid case (spec §6.3) into a leaf map.
fn replay(file: &serde_json::Value) -> Result<(Leaves, Sib), String> {
    let all: Vec<([u8; 32], LeafParts)> = list(&file["all_tree_leaves"])
        .iter()
        .map(|l| Ok((hex32(&l["key"])?, leaf_of(&l["node"])?)))
        .collect::<Result<_, String>>()?;
    let case = &list(&file["valid_test_cases"])[0];
    let inserted: std::collections::HashSet<[u8; 32]> = list(&case["inserted_leaves"])
        .iter()
        .map(hex32)
        .collect::<Result<_, _>>()?;
    let mut leaves = HashMap::new();
    let put = |leaves: &mut HashMap<_, _>, k: [u8; 32], l: (Vec<u8>, u64)| {
        if l.0.is_empty() && l.1 == 0 {
            leaves.remove(&k);
        } else {
            leaves.insert(k, l);
        }
    };
    for (k, l) in &all {
        if inserted.contains(k) {
            put(&mut leaves, *k, l.clone());
        }
    }
    for k in list(&case["deleted_leaves"]) {
        leaves.remove(&hex32(k)?);
    }
    for r in list(&case["replaced_leaves"]) {
        put(&mut leaves, hex32(&r["key"])?, leaf_of(&r["node"])?);
    }
    let root = (hex32(&case["root_hash"])?, dec64(&case["root_sum"])?);
    Ok((leaves, root))
}

fn pseudo_key(tag: &str, i: u64) -> [u8; 32] {
    sha(&[tag.as_bytes(), &i.to_be_bytes()])
}

impl Corpus {
    /// Loads the four official vector files from `dir`, checks every root
    /// and every vector proof against the reference, and adds reference
    /// proofs (inclusion and exclusion) for the smaller trees and a
    /// synthetic tree with twin leaves and total sum `u64::MAX`.
    pub fn load(dir: &Path) -> Result<Corpus, String> {
        let mut corpus = Corpus {
            trees: Vec::new(),
            cases: Vec::new(),
        };
        // The 10,000-leaf tree and its 1,010 vector proofs.
        let file = json(&dir.join("mssmt_tree_proofs.json"))?;
        let (leaves, root) = replay(&file)?;
        if ref_tree_root(&leaves) != root {
            return Err("mssmt_tree_proofs.json: reference root differs".into());
        }
        corpus.add_tree("mssmt_tree_proofs.json", leaves, root);
        let case = &list(&file["valid_test_cases"])[0];
        for (kind, field) in [
            ("inclusion", "inclusion_proofs"),
            ("exclusion", "exclusion_proofs"),
        ] {
            for p in list(&case[field]) {
                let key = Key(hex32(&p["proof_key"])?);
                let bytes = hex::decode(p["compressed_proof"].as_str().ok_or("proof")?)
                    .map_err(|e| e.to_string())?;
                let leaf = corpus.trees[0].truth(&key);
                if (kind == "exclusion") != leaf.is_empty() {
                    return Err(format!("{kind} proof for {key}: wrong kind"));
                }
                corpus.add_case(0, key, leaf, Some(bytes), "vector")?;
            }
        }
        // The other three files: reference proofs.
        for name in [
            "mssmt_tree_replacement.json",
            "mssmt_tree_deletion.json",
            "mssmt_tree_error_cases.json",
        ] {
            let file = json(&dir.join(name))?;
            let (leaves, root) = replay(&file)?;
            if ref_tree_root(&leaves) != root {
                return Err(format!("{name}: reference root differs"));
            }
            let mut keys: Vec<[u8; 32]> = leaves.keys().copied().collect();
            // Keys the file names that the tree no longer (or never) holds.
            for l in list(&file["all_tree_leaves"]) {
                let k = hex32(&l["key"])?;
                if !leaves.contains_key(&k) {
                    keys.push(k);
                }
            }
            keys.sort();
            keys.dedup();
            for i in 0..4 {
                keys.push(pseudo_key(name, i));
            }
            let t = corpus.add_tree(name, leaves, root);
            for k in keys {
                let leaf = corpus.trees[t].truth(&Key(k));
                corpus.add_case(t, Key(k), leaf, None, "reference")?;
            }
        }
        // Twins: identical leaves at keys that differ only in bit 255 (so the
        // same proof is valid for both keys), and a total sum of u64::MAX.
        let a = pseudo_key("twin", 0);
        let mut b = a;
        flip_bit(&mut b, 255);
        let mut c = a;
        flip_bit(&mut c, 0);
        let half = u64::MAX / 2;
        let leaves: HashMap<_, _> = [
            (a, (b"twin".to_vec(), half)),
            (b, (b"twin".to_vec(), half)),
            (c, (b"c".to_vec(), 1)),
        ]
        .into_iter()
        .collect();
        let root = ref_tree_root(&leaves);
        assert_eq!(root.1, u64::MAX);
        let t = corpus.add_tree("synthetic twins", leaves, root);
        let mut d = a;
        flip_bit(&mut d, 254);
        for k in [a, b, c, d, pseudo_key("twin", 1)] {
            let leaf = corpus.trees[t].truth(&Key(k));
            corpus.add_case(t, Key(k), leaf, None, "reference")?;
        }
        Ok(corpus)
    }

    fn add_tree(&mut self, name: &str, leaves: Leaves, root: Sib) -> usize {
        self.trees.push(VecTree {
            name: name.to_string(),
            root: ComputedNode::new(Hash(root.0), root.1),
            leaves,
        });
        self.trees.len() - 1
    }

    fn add_case(
        &mut self,
        tree: usize,
        key: Key,
        leaf: Leaf,
        bytes: Option<Vec<u8>>,
        origin: &'static str,
    ) -> Result<(), String> {
        let t = &self.trees[tree];
        let (sibs, bytes) = match bytes {
            Some(b) => (
                ref_decode_strict(&b).map_err(|e| format!("vector proof for {key}: {e}"))?,
                b,
            ),
            None => {
                let sibs = ref_proof(&t.leaves, &key.0);
                let b = ref_encode(&sibs);
                (sibs, b)
            }
        };
        let root = ref_root(&sibs, &key.0, leaf.value(), leaf.sum());
        if root != Ok((t.root.hash.0, t.root.sum)) {
            return Err(format!("{}: proof for {key} does not verify", t.name));
        }
        self.cases.push(Case {
            tree,
            key,
            leaf,
            bytes,
            sibs,
            origin,
        });
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Counters.

/// What the checks saw; printed by the stable test.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Byte strings decoded.
    pub inputs: u64,
    /// Accepted by the strict decoder (each re-encoded byte for byte).
    pub decoded: u64,
    /// Rejections: Empty.
    pub rej_empty: u64,
    /// Rejections: Truncated.
    pub rej_truncated: u64,
    /// Rejections: TrailingBytes.
    pub rej_trailing: u64,
    /// Rejections: CountMismatch.
    pub rej_count: u64,
    /// Rejections: NonCanonicalEmpty.
    pub rej_noncanonical: u64,
    /// Rejected strictly but accepted by Go's lenient decoder.
    pub go_only: u64,
    /// Calls of `verify` checked against the reference and the tree.
    pub verify_checks: u64,
    /// Of which verified.
    pub verified: u64,
    /// Verified although key, leaf or proof differ from the seed case
    /// (legitimate: the tree holds that leaf there).
    pub verified_other: u64,
    /// Verified with the seed case's own inputs.
    pub verified_seed: u64,
    /// Walks that overflowed a sum (verify false).
    pub overflows: u64,
    /// Mutated inputs that must not verify (same key, other leaf or proof).
    pub must_fail: u64,
    /// Round-trip checks of arbitrary proofs.
    pub roundtrips: u64,
    /// Key-swap checks in round trips that were legitimately accepted.
    pub key_swaps_accepted: u64,
}

impl Stats {
    /// Adds another counter set.
    pub fn merge(&mut self, o: &Stats) {
        self.inputs += o.inputs;
        self.decoded += o.decoded;
        self.rej_empty += o.rej_empty;
        self.rej_truncated += o.rej_truncated;
        self.rej_trailing += o.rej_trailing;
        self.rej_count += o.rej_count;
        self.rej_noncanonical += o.rej_noncanonical;
        self.go_only += o.go_only;
        self.verify_checks += o.verify_checks;
        self.verified += o.verified;
        self.verified_other += o.verified_other;
        self.verified_seed += o.verified_seed;
        self.overflows += o.overflows;
        self.must_fail += o.must_fail;
        self.roundtrips += o.roundtrips;
        self.key_swaps_accepted += o.key_swaps_accepted;
    }

    fn reject(&mut self, e: &DecodeError) {
        match e {
            DecodeError::Empty => self.rej_empty += 1,
            DecodeError::Truncated { .. } => self.rej_truncated += 1,
            DecodeError::TrailingBytes { .. } => self.rej_trailing += 1,
            DecodeError::CountMismatch { .. } => self.rej_count += 1,
            DecodeError::NonCanonicalEmpty { .. } => self.rej_noncanonical += 1,
        }
    }
}

// ---------------------------------------------------------------------------
// Decoding properties.

fn short_hex(b: &[u8]) -> String {
    if b.len() <= 4096 {
        hex::encode(b)
    } else {
        format!("{}… ({} bytes)", hex::encode(&b[..4096]), b.len())
    }
}

/// Fails with `what` and the input's hex (`bytes`) unless `ok`.
#[track_caller]
fn holds(ok: bool, what: &str, bytes: &[u8]) {
    assert!(ok, "{what}: {}", short_hex(bytes));
}

/// Decodes untrusted bytes and checks every decoding property. Returns the
/// strict decoding and, when Go's lenient decoder accepts the bytes, the
/// proof Go would use.
pub fn check_decode(bytes: &[u8], stats: &mut Stats) -> (Option<Proof>, Option<Proof>) {
    stats.inputs += 1;
    let strict = Proof::from_bytes(bytes);
    let compressed = CompressedProof::decode(bytes);
    let reference = ref_decode_strict(bytes);
    let go = go_decode(bytes);
    match (&strict, &reference) {
        (Ok(p), Ok(sibs)) => {
            stats.decoded += 1;
            holds(
                sibs_of(p) == *sibs,
                "decoded siblings differ from the reference",
                bytes,
            );
            holds(
                p.to_bytes() == bytes,
                "non-canonical encoding accepted",
                bytes,
            );
            let c = compressed.as_ref().unwrap_or_else(|e| {
                panic!(
                    "Proof::from_bytes accepts, CompressedProof::decode says {e}: {}",
                    short_hex(bytes)
                )
            });
            holds(c.encode() == bytes, "decode→encode differs", bytes);
            holds(
                c.decompress().as_ref() == Ok(p),
                "decompress differs",
                bytes,
            );
            holds(p.compress() == *c, "decompress→compress differs", bytes);
            let bitmap = &bytes[bytes.len() - BITMAP..];
            for j in 0..LEVELS {
                assert_eq!(
                    c.is_empty_sibling(j),
                    (bitmap[j / 8] >> (j % 8)) & 1 == 1,
                    "bit {j}: {}",
                    short_hex(bytes)
                );
            }
            assert_eq!(c.bitmap()[..], *bitmap);
            holds(
                go.as_ref() == Some(sibs),
                "Go's decoder disagrees on a canonical proof",
                bytes,
            );
        }
        (Err(e), Err(re)) => {
            stats.reject(e);
            assert!(
                e == re,
                "error {e:?}, reference {re:?}: {}",
                short_hex(bytes)
            );
            assert!(
                compressed.as_ref().err() == Some(e),
                "CompressedProof::decode gives {compressed:?}, Proof::from_bytes {e:?}: {}",
                short_hex(bytes)
            );
            if go.is_some() {
                stats.go_only += 1;
            }
        }
        (s, r) => panic!(
            "strict decoder {:?}, reference {:?}: {}",
            s.as_ref().map(|_| "Ok"),
            r.as_ref().map(|_| "Ok"),
            short_hex(bytes)
        ),
    }
    // What Go accepts has one canonical encoding, which decodes strictly.
    let lenient = go.map(|sibs| {
        let p = proof_of(&sibs);
        let enc = p.to_bytes();
        assert!(
            enc == ref_encode(&sibs),
            "Proof::to_bytes is not the canonical encoding of the Go decoding of {}",
            short_hex(bytes)
        );
        let back = Proof::from_bytes(&enc).unwrap_or_else(|e| {
            panic!("canonical re-encoding rejected ({e}): {}", short_hex(&enc))
        });
        holds(
            sibs_of(&back) == normalise(&sibs),
            "re-encoding changed the proof",
            bytes,
        );
        p
    });
    (strict.ok(), lenient)
}

// ---------------------------------------------------------------------------
// Verification properties.

/// Checks `proof.root`/`proof.verify` for (key, leaf) against the reference
/// walk and `tree`: verification must hold exactly when the reference root is
/// the tree's root, and then the leaf must be the one the tree holds.
pub fn check_verify(
    proof: &Proof,
    key: &Key,
    leaf: &Leaf,
    tree: &VecTree,
    stats: &mut Stats,
) -> bool {
    stats.verify_checks += 1;
    let v = proof.verify(key, leaf, &tree.root);
    let root = proof.root(key, leaf);
    let sibs = sibs_of(proof);
    let reference = ref_root(&sibs, &key.0, leaf.value(), leaf.sum());
    match (&root, &reference) {
        (Ok(n), Ok((h, s))) => assert!(
            n.hash.0 == *h && n.sum == *s,
            "Proof::root differs from the reference: key {key}, leaf {leaf:?}, proof {}",
            short_hex(&ref_encode(&sibs))
        ),
        (Err(o), Err(level)) => {
            stats.overflows += 1;
            assert_eq!(o.level, *level, "overflow level");
        }
        _ => panic!(
            "Proof::root {root:?}, reference {reference:?}: key {key}, leaf {leaf:?}, proof {}",
            short_hex(&ref_encode(&sibs))
        ),
    }
    assert_eq!(
        v,
        root.as_ref().is_ok_and(|n| *n == tree.root),
        "verify disagrees with root"
    );
    if v {
        stats.verified += 1;
        assert!(
            tree.truth(key) == *leaf,
            "proof verifies a wrong leaf: tree {}, key {key}, leaf {leaf:?} (the tree holds {:?}), proof {}",
            tree.name,
            tree.truth(key),
            short_hex(&ref_encode(&sibs))
        );
    }
    v
}

// ---------------------------------------------------------------------------
// Mutations.

/// One change to a (proof bytes, key, leaf) triple. Node indices pick an
/// explicit node record (modulo the header's count), `j` a sibling index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Flip one bit of the bytes.
    FlipBit { pos: u32, bit: u8 },
    /// Overwrite one byte.
    SetByte { pos: u32, val: u8 },
    /// Drop `n` bytes from the end.
    Truncate { n: u16 },
    /// Append bytes.
    Extend { bytes: Vec<u8> },
    /// Insert bytes.
    Insert { pos: u32, bytes: Vec<u8> },
    /// Remove a range.
    Remove { pos: u32, n: u16 },
    /// Overwrite the node count.
    SetCount { count: u16 },
    /// Flip bit `j` of the bitmap (the last 32 bytes).
    FlipBitmapBit { j: u8 },
    /// Swap two node records.
    SwapNodes { a: u16, b: u16 },
    /// Duplicate a node record and bump the count.
    DuplicateNode { a: u16 },
    /// Remove a node record and lower the count.
    DropNode { a: u16 },
    /// Set a node's sum.
    SetNodeSum { a: u16, sum: u64 },
    /// Add to a node's sum (wrapping).
    AddNodeSum { a: u16, delta: u64 },
    /// Move `delta` of sum from node `a` to node `b` (wrapping).
    MoveSum { a: u16, b: u16, delta: u64 },
    /// Flip a bit of a node's hash.
    FlipNodeHashBit { a: u16, bit: u8 },
    /// Set a node's hash to an empty-subtree hash (`level % 257`).
    NodeHashToEmpty { a: u16, level: u16 },
    /// Make an empty sibling explicit (a Go-accepted non-canonical form).
    ExpandEmpty { j: u8 },
    /// Replace an explicit node by an empty sibling (canonical, other proof).
    CollapseNode { a: u16 },
    /// Set sibling `j` and re-encode canonically.
    SetSibling { j: u8, hash: [u8; 32], sum: u64 },
    /// Take sibling `j` from another case's proof, re-encode.
    SiblingFrom { j: u8, case: u16 },
    /// Spec §9 C2: the level-255 node as a 64-byte leaf, siblings and key
    /// shifted one level down. Never valid at a fixed depth of 256.
    ShiftUp,
    /// Flip a key bit.
    KeyFlipBit { bit: u8 },
    /// Use another case's key.
    KeyFrom { case: u16 },
    /// Use these key bytes.
    KeySet { key: [u8; 32] },
    /// Set the leaf sum.
    LeafSumSet { sum: u64 },
    /// Add to the leaf sum (wrapping).
    LeafSumAdd { delta: u64 },
    /// Add `delta` to the leaf sum and subtract it from node `a`.
    LeafSumShift { a: u16, delta: u64 },
    /// Flip a bit of the leaf value.
    LeafValueFlip { pos: u16, bit: u8 },
    /// Drop bytes from the end of the leaf value.
    LeafValueTruncate { n: u16 },
    /// Append to the leaf value.
    LeafValueExtend { bytes: Vec<u8> },
    /// Use the empty leaf.
    LeafEmpty,
    /// Use another case's leaf.
    LeafFrom { case: u16 },
    /// Use another case's proof bytes.
    ProofFrom { case: u16 },
}

/// Number of [`Op`] kinds (for generators).
pub const OP_KINDS: u8 = 33;

/// What is being mutated.
#[derive(Debug, Clone)]
pub struct State {
    /// Proof bytes.
    pub bytes: Vec<u8>,
    /// Key.
    pub key: Key,
    /// Leaf.
    pub leaf: Leaf,
}

fn count_of(b: &[u8]) -> usize {
    if b.len() < 2 {
        0
    } else {
        usize::from(u16::from_be_bytes([b[0], b[1]]))
    }
}

fn set_count(b: &mut [u8], n: usize) {
    if b.len() >= 2 {
        b[..2].copy_from_slice(&(n as u16).to_be_bytes());
    }
}

/// The byte range of node record `a % count`, when present in full.
fn record(b: &[u8], a: u16) -> Option<std::ops::Range<usize>> {
    let n = count_of(b);
    if n == 0 {
        return None;
    }
    let start = 2 + NODE * (usize::from(a) % n);
    (start + NODE <= b.len()).then(|| start..start + NODE)
}

fn sum_at(b: &[u8], r: &std::ops::Range<usize>) -> u64 {
    u64::from_be_bytes(b[r.end - 8..r.end].try_into().unwrap())
}

fn put_sum(b: &mut [u8], r: &std::ops::Range<usize>, s: u64) {
    b[r.end - 8..r.end].copy_from_slice(&s.to_be_bytes());
}

/// Records and bitmap of bytes whose length matches their count.
fn exact_parts(b: &[u8]) -> Option<(Vec<[u8; NODE]>, [u8; BITMAP])> {
    let n = count_of(b);
    if b.len() < 2 || b.len() != 2 + NODE * n + BITMAP {
        return None;
    }
    let recs = b[2..2 + NODE * n]
        .chunks_exact(NODE)
        .map(|c| c.try_into().unwrap())
        .collect();
    Some((recs, b[b.len() - BITMAP..].try_into().unwrap()))
}

fn build(recs: &[[u8; NODE]], bits: &[u8; BITMAP]) -> Vec<u8> {
    let mut out = (recs.len() as u16).to_be_bytes().to_vec();
    for r in recs {
        out.extend_from_slice(r);
    }
    out.extend_from_slice(bits);
    out
}

fn is_set(bits: &[u8; BITMAP], j: usize) -> bool {
    (bits[j / 8] >> (j % 8)) & 1 == 1
}

/// Keeps mutated inputs bounded (a proof is at most 10,274 bytes).
const MAX_BYTES: usize = 1 << 16;

fn shl1(key: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut carry = 0u8;
    for i in 0..32 {
        out[i] = (key[i] << 1) | carry;
        carry = key[i] >> 7;
    }
    out
}

/// Applies one mutation.
pub fn apply(op: &Op, st: &mut State, corpus: &Corpus) {
    let b = &mut st.bytes;
    let case = |i: u16| &corpus.cases[usize::from(i) % corpus.cases.len()];
    match op {
        Op::FlipBit { pos, bit } => {
            if !b.is_empty() {
                let i = *pos as usize % b.len();
                b[i] ^= 1 << (bit % 8);
            }
        }
        Op::SetByte { pos, val } => {
            if !b.is_empty() {
                let i = *pos as usize % b.len();
                b[i] = *val;
            }
        }
        Op::Truncate { n } => {
            let keep = b.len().saturating_sub(usize::from(*n));
            b.truncate(keep);
        }
        Op::Extend { bytes } => {
            if b.len() + bytes.len() <= MAX_BYTES {
                b.extend_from_slice(bytes);
            }
        }
        Op::Insert { pos, bytes } => {
            if b.len() + bytes.len() <= MAX_BYTES {
                let i = *pos as usize % (b.len() + 1);
                b.splice(i..i, bytes.iter().copied());
            }
        }
        Op::Remove { pos, n } => {
            if !b.is_empty() {
                let i = *pos as usize % b.len();
                let end = (i + usize::from(*n)).min(b.len());
                b.drain(i..end);
            }
        }
        Op::SetCount { count } => set_count(b, usize::from(*count)),
        Op::FlipBitmapBit { j } => {
            if b.len() >= BITMAP {
                let at = b.len() - BITMAP + usize::from(*j) / 8;
                b[at] ^= 1 << (j % 8);
            }
        }
        Op::SwapNodes { a, b: c } => {
            if let (Some(x), Some(y)) = (record(b, *a), record(b, *c))
                && x != y
            {
                let tmp = b[x.clone()].to_vec();
                b.copy_within(y.clone(), x.start);
                b[y].copy_from_slice(&tmp);
            }
        }
        Op::DuplicateNode { a } => {
            if let Some(r) = record(b, *a)
                && b.len() + NODE <= MAX_BYTES
            {
                let rec = b[r.clone()].to_vec();
                b.splice(r.end..r.end, rec);
                let n = count_of(b);
                set_count(b, n + 1);
            }
        }
        Op::DropNode { a } => {
            if let Some(r) = record(b, *a) {
                b.drain(r);
                let n = count_of(b);
                set_count(b, n - 1);
            }
        }
        Op::SetNodeSum { a, sum } => {
            if let Some(r) = record(b, *a) {
                put_sum(b, &r, *sum);
            }
        }
        Op::AddNodeSum { a, delta } => {
            if let Some(r) = record(b, *a) {
                let s = sum_at(b, &r).wrapping_add(*delta);
                put_sum(b, &r, s);
            }
        }
        Op::MoveSum { a, b: c, delta } => {
            if let (Some(x), Some(y)) = (record(b, *a), record(b, *c)) {
                let s = sum_at(b, &x).wrapping_sub(*delta);
                put_sum(b, &x, s);
                let s = sum_at(b, &y).wrapping_add(*delta);
                put_sum(b, &y, s);
            }
        }
        Op::FlipNodeHashBit { a, bit } => {
            if let Some(r) = record(b, *a) {
                b[r.start + usize::from(*bit) / 8] ^= 1 << (bit % 8);
            }
        }
        Op::NodeHashToEmpty { a, level } => {
            if let Some(r) = record(b, *a) {
                b[r.start..r.start + 32].copy_from_slice(&ref_empty(usize::from(*level) % 257));
            }
        }
        Op::ExpandEmpty { j } => {
            let j = usize::from(*j);
            if let Some((mut recs, mut bits)) = exact_parts(b)
                && is_set(&bits, j)
            {
                let at = (0..j).filter(|i| !is_set(&bits, *i)).count();
                if at <= recs.len() {
                    bits[j / 8] &= !(1 << (j % 8));
                    let mut rec = [0u8; NODE];
                    rec[..32].copy_from_slice(&ref_empty(level_of(j)));
                    recs.insert(at, rec);
                    *b = build(&recs, &bits);
                }
            }
        }
        Op::CollapseNode { a } => {
            if let Some((mut recs, mut bits)) = exact_parts(b)
                && !recs.is_empty()
            {
                let i = usize::from(*a) % recs.len();
                if let Some(j) = (0..LEVELS).filter(|j| !is_set(&bits, *j)).nth(i) {
                    bits[j / 8] |= 1 << (j % 8);
                    recs.remove(i);
                    *b = build(&recs, &bits);
                }
            }
        }
        Op::SetSibling { j, hash, sum } => {
            if let Some(mut sibs) = go_decode(b) {
                sibs[usize::from(*j)] = (*hash, *sum);
                *b = ref_encode(&sibs);
            }
        }
        Op::SiblingFrom { j, case: c } => {
            if let Some(mut sibs) = go_decode(b) {
                let j = usize::from(*j);
                sibs[j] = case(*c).sibs[j];
                *b = ref_encode(&sibs);
            }
        }
        Op::ShiftUp => {
            if let Some(sibs) = go_decode(b) {
                let lh = ref_leaf_hash(st.leaf.value(), st.leaf.sum());
                if let Some(s) = st.leaf.sum().checked_add(sibs[0].1) {
                    let (l, r) = if bit(&st.key.0, LEVELS - 1) {
                        (sibs[0].0, lh)
                    } else {
                        (lh, sibs[0].0)
                    };
                    let mut value = l.to_vec();
                    value.extend_from_slice(&r);
                    let mut shifted: Vec<Sib> = sibs[1..].to_vec();
                    shifted.push((ref_empty(1), 0));
                    *b = ref_encode(&shifted);
                    st.leaf = Leaf::new(value, s);
                    st.key = Key(shl1(&st.key.0));
                }
            }
        }
        Op::KeyFlipBit { bit } => flip_bit(&mut st.key.0, usize::from(*bit)),
        Op::KeyFrom { case: c } => st.key = case(*c).key,
        Op::KeySet { key } => st.key = Key(*key),
        Op::LeafSumSet { sum } => st.leaf = Leaf::new(st.leaf.value().to_vec(), *sum),
        Op::LeafSumAdd { delta } => {
            st.leaf = Leaf::new(st.leaf.value().to_vec(), st.leaf.sum().wrapping_add(*delta))
        }
        Op::LeafSumShift { a, delta } => {
            if let Some(r) = record(b, *a) {
                let s = sum_at(b, &r).wrapping_sub(*delta);
                put_sum(b, &r, s);
                st.leaf = Leaf::new(st.leaf.value().to_vec(), st.leaf.sum().wrapping_add(*delta));
            }
        }
        Op::LeafValueFlip { pos, bit } => {
            let mut v = st.leaf.value().to_vec();
            if !v.is_empty() {
                let i = usize::from(*pos) % v.len();
                v[i] ^= 1 << (bit % 8);
                st.leaf = Leaf::new(v, st.leaf.sum());
            }
        }
        Op::LeafValueTruncate { n } => {
            let mut v = st.leaf.value().to_vec();
            v.truncate(v.len().saturating_sub(usize::from(*n)));
            st.leaf = Leaf::new(v, st.leaf.sum());
        }
        Op::LeafValueExtend { bytes } => {
            let mut v = st.leaf.value().to_vec();
            if v.len() + bytes.len() <= MAX_BYTES {
                v.extend_from_slice(bytes);
                st.leaf = Leaf::new(v, st.leaf.sum());
            }
        }
        Op::LeafEmpty => st.leaf = Leaf::empty(),
        Op::LeafFrom { case: c } => st.leaf = case(*c).leaf.clone(),
        Op::ProofFrom { case: c } => st.bytes = case(*c).bytes.clone(),
    }
}

/// Mutates case `case_index` with `ops` and checks every property on the
/// result: decoding, canonicality, the reference walk, and soundness against
/// the tree. With the key unchanged, a different leaf or a different proof
/// must not verify; the seed itself must verify.
pub fn run_case(corpus: &Corpus, case_index: usize, ops: &[Op], stats: &mut Stats) {
    let case = &corpus.cases[case_index % corpus.cases.len()];
    let tree = &corpus.trees[case.tree];
    let mut st = State {
        bytes: case.bytes.clone(),
        key: case.key,
        leaf: case.leaf.clone(),
    };
    for op in ops {
        apply(op, &mut st, corpus);
    }
    let (strict, lenient) = check_decode(&st.bytes, stats);
    // The strict decoding, or else the proof Go would accept.
    let Some(proof) = strict.or(lenient) else {
        return;
    };
    let same_key = st.key == case.key;
    let same_leaf = st.leaf == case.leaf;
    let same_proof = sibs_of(&proof) == case.sibs;
    let v = check_verify(&proof, &st.key, &st.leaf, tree, stats);
    if same_key && same_leaf && same_proof {
        assert!(v, "a real proof does not verify: case {case_index}");
        stats.verified_seed += 1;
    } else if same_key {
        stats.must_fail += 1;
        assert!(
            !v,
            "mutated input verifies: case {case_index}, ops {ops:?}, key {}, leaf {:?}, bytes {}",
            st.key,
            st.leaf,
            short_hex(&st.bytes)
        );
    } else if v {
        stats.verified_other += 1;
    }
    if v {
        // The same proof with a neighbouring leaf: never valid.
        let mut value = st.leaf.value().to_vec();
        let other = Leaf::new(value.clone(), st.leaf.sum() ^ 1);
        assert!(!check_verify(&proof, &st.key, &other, tree, stats));
        value.push(0);
        let other = Leaf::new(value, st.leaf.sum());
        assert!(!check_verify(&proof, &st.key, &other, tree, stats));
    }
}

// ---------------------------------------------------------------------------
// Arbitrary proofs: encode → decode, and exact key-swap acceptance.

/// How to pick a sibling's hash in [`RoundtripInput`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SibHash {
    /// These bytes.
    Bytes([u8; 32]),
    /// The empty hash of its own level (compression drops it).
    OwnEmpty,
    /// The empty hash of another level.
    OtherEmpty(u16),
    /// The previous sibling's hash (or the leaf's for sibling 0).
    Previous,
}

/// An arbitrary 256-sibling proof, a key, a leaf, and mutations to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundtripInput {
    /// Bit j set: sibling j is the empty subtree (sum from `empty_sums`).
    pub bitmap: [u8; 32],
    /// Explicit siblings, taken in order for the clear bits (repeated as needed).
    pub nodes: Vec<(SibHash, u64)>,
    /// Sums for empty siblings (mostly 0; non-zero ones the encoding drops).
    pub empty_sums: Vec<u64>,
    /// The key.
    pub key: [u8; 32],
    /// Leaf value.
    pub value: Vec<u8>,
    /// Leaf sum.
    pub sum: u64,
    /// Key bits to flip, one at a time and all together.
    pub flips: Vec<u8>,
}

/// Builds the proof of a [`RoundtripInput`] and checks: canonical encoding
/// (equal to the reference), strict decoding back to the normalised proof,
/// root/verify against the reference, no other leaf verifying, and a flipped
/// key verifying exactly when, at every flipped level, the path node equals
/// its sibling (then both orders hash alike).
pub fn check_roundtrip(input: &RoundtripInput, stats: &mut Stats) {
    stats.roundtrips += 1;
    let leaf = Leaf::new(input.value.clone(), input.sum);
    let leaf_hash = ref_leaf_hash(&input.value, input.sum);
    let mut sibs: Vec<Sib> = Vec::with_capacity(LEVELS);
    let (mut n, mut e) = (0usize, 0usize);
    for j in 0..LEVELS {
        let level = level_of(j);
        if is_set(&input.bitmap, j) || input.nodes.is_empty() {
            let s = if input.empty_sums.is_empty() {
                0
            } else {
                input.empty_sums[e % input.empty_sums.len()]
            };
            e += 1;
            sibs.push((ref_empty(level), s));
        } else {
            let (h, s) = &input.nodes[n % input.nodes.len()];
            n += 1;
            let hash = match h {
                SibHash::Bytes(b) => *b,
                SibHash::OwnEmpty => ref_empty(level),
                SibHash::OtherEmpty(l) => ref_empty(usize::from(*l) % 257),
                SibHash::Previous => sibs.last().map_or(leaf_hash, |p| p.0),
            };
            sibs.push((hash, *s));
        }
    }
    let proof = proof_of(&sibs);
    let bytes = proof.to_bytes();
    assert!(
        bytes == ref_encode(&sibs),
        "Proof::to_bytes is not canonical"
    );
    let explicit = (0..LEVELS)
        .filter(|j| sibs[*j].0 != ref_empty(level_of(*j)))
        .count();
    assert_eq!(bytes.len(), 34 + 40 * explicit);
    let (strict, _) = check_decode(&bytes, stats);
    let back = strict.unwrap_or_else(|| panic!("own encoding rejected: {}", short_hex(&bytes)));
    assert!(
        sibs_of(&back) == normalise(&sibs),
        "round trip changed the proof"
    );
    assert!(proof.compress() == back.compress());

    let key = Key(input.key);
    let walk = ref_path(&sibs, &input.key, &input.value, input.sum);
    let root = proof.root(&key, &leaf);
    match (&root, &walk) {
        (Err(o), Err(level)) => {
            stats.overflows += 1;
            assert_eq!(o.level, *level);
            let any = ComputedNode::new(Hash([0; 32]), 0);
            assert!(!proof.verify(&key, &leaf, &any));
        }
        (Ok(r), Ok((path, s))) => {
            assert!(
                r.hash.0 == path[LEVELS] && r.sum == *s,
                "root differs from the reference"
            );
            let r = *r;
            assert!(proof.verify(&key, &leaf, &r));
            stats.verify_checks += 5;
            stats.verified += 1;
            let mut wrong = r;
            wrong.sum ^= 1;
            assert!(
                !proof.verify(&key, &leaf, &wrong),
                "verify ignores the root sum"
            );
            let mut wrong = r;
            wrong.hash.0[31] ^= 1;
            assert!(
                !proof.verify(&key, &leaf, &wrong),
                "verify ignores the root hash"
            );
            let other = Leaf::new(input.value.clone(), input.sum ^ 1);
            assert!(!proof.verify(&key, &other, &r), "a wrong leaf sum verifies");
            let mut value = input.value.clone();
            value.push(input.sum as u8);
            let other = Leaf::new(value, input.sum);
            assert!(
                !proof.verify(&key, &other, &r),
                "a wrong leaf value verifies"
            );
            // Flipping key bit d swaps the children at level d: the same root
            // iff the path node at level d+1 equals the sibling there.
            let same_at = |d: usize| path[LEVELS - 1 - d] == sibs[LEVELS - 1 - d].0;
            let mut all = input.key;
            let mut all_same = true;
            let mut flipped = [false; LEVELS];
            for f in input.flips.iter().take(8) {
                let d = usize::from(*f);
                let mut k = input.key;
                flip_bit(&mut k, d);
                let accepted = proof.verify(&Key(k), &leaf, &r);
                stats.verify_checks += 1;
                assert_eq!(
                    accepted,
                    same_at(d),
                    "key bit {d} flipped: verify {accepted}"
                );
                stats.key_swaps_accepted += u64::from(accepted);
                if !flipped[d] {
                    flipped[d] = true;
                    flip_bit(&mut all, d);
                    all_same &= same_at(d);
                }
            }
            if flipped.iter().any(|f| *f) {
                stats.verify_checks += 1;
                assert_eq!(
                    proof.verify(&Key(all), &leaf, &r),
                    all_same,
                    "several key bits flipped"
                );
            }
            // The decoded (normalised) proof commits to its own sums.
            if back != proof {
                let nb = normalise(&sibs);
                let expect = ref_root(&nb, &input.key, &input.value, input.sum);
                let got = back.root(&key, &leaf).map(|n| (n.hash.0, n.sum));
                assert_eq!(got.map_err(|o| o.level), expect);
            }
        }
        _ => panic!(
            "Proof::root {root:?} but the reference {:?}",
            walk.map(|w| w.1)
        ),
    }
}
