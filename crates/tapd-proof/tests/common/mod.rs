//! What the test files share: finding and reading the official vectors,
//! hex and base64, and a small TLV splicer for hand-made inputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ms_smt_tapd_proof::OutPoint;
use serde_json::Value;

/// Where the vectors live below a repository root.
const VECTORS_SUBDIR: &str = "shared/vectors/tapd-proof";

/// The vectors directory: `$MSSMT_TAPD_PROOF_VECTORS`, or the first
/// ancestor of the crate directory that holds `shared/vectors/tapd-proof`
/// (a clone beside `shared/`, as the other crates' vectors are found).
/// Panics when there is none: a missing
/// vectors directory fails the tests, it never skips them.
pub fn vectors_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MSSMT_TAPD_PROOF_VECTORS") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.is_dir(),
            "MSSMT_TAPD_PROOF_VECTORS={} is not a directory",
            dir.display()
        );
        return dir;
    }
    // Read at run time (cargo sets it for test binaries too), falling back
    // to the build-time value.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let mut dir: Option<&Path> = Some(&manifest);
    while let Some(d) = dir {
        let candidate = d.join(VECTORS_SUBDIR);
        if candidate.is_dir() {
            return candidate;
        }
        dir = d.parent();
    }
    panic!(
        "no {VECTORS_SUBDIR} above {} and MSSMT_TAPD_PROOF_VECTORS is unset: \
         the tapd proof vectors are required",
        manifest.display()
    );
}

/// A vector file's text.
pub fn read(name: &str) -> String {
    let path = vectors_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A vector JSON file.
pub fn json(name: &str) -> Value {
    serde_json::from_str(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A `.hex` vector file's bytes.
pub fn hex_file(name: &str) -> Vec<u8> {
    unhex(read(name).trim())
}

/// Hex to bytes.
pub fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_else(|e| panic!("bad hex {s:.40}: {e}"))
}

/// A valid case's `(comment, expected bytes, decoded JSON)` triples, under
/// `key` (`"proof"` or `"asset"`).
pub fn valid_cases(name: &str, key: &str) -> Vec<(String, Vec<u8>, Value)> {
    let file = json(name);
    let cases = file["valid_test_cases"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: no valid cases"));
    cases
        .iter()
        .map(|c| {
            let comment = c["comment"].as_str().unwrap_or("").to_string();
            let bytes = unhex(
                c["expected"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{comment}: no expected")),
            );
            (comment, bytes, c[key].clone())
        })
        .collect()
}

/// Every valid encoded proof of the official vectors, labelled.
pub fn all_proof_vectors() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for name in [
        "proof_tlv_encoding_generated.json",
        "proof_tlv_encoding_regtest.json",
    ] {
        for (comment, bytes, _) in valid_cases(name, "proof") {
            out.push((format!("{name}: {comment}"), bytes));
        }
    }
    out.push(("proof.hex".to_string(), hex_file("proof.hex")));
    out
}

/// Every valid encoded asset of the official vectors, labelled.
pub fn all_asset_vectors() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = valid_cases("asset_tlv_encoding_generated.json", "asset")
        .into_iter()
        .map(|(c, b, _)| (format!("asset vector: {c}"), b))
        .collect();
    out.push(("asset.hex".to_string(), hex_file("asset.hex")));
    out
}

/// `"<display txid>:<index>"` as btcd prints an outpoint.
pub fn outpoint(s: &str) -> OutPoint {
    let (hash, index) = s
        .split_once(':')
        .unwrap_or_else(|| panic!("bad outpoint {s}"));
    let mut txid: [u8; 32] = unhex(hash)
        .try_into()
        .unwrap_or_else(|_| panic!("bad txid {hash}"));
    txid.reverse();
    OutPoint {
        txid,
        index: index
            .parse()
            .unwrap_or_else(|e| panic!("bad index {index}: {e}")),
    }
}

/// Standard base64 (Go's `encoding/json` encoding of `[]byte`).
pub fn unbase64(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 {s}"),
        }
    };
    let data: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in data.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c) << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// A BigSize integer.
pub fn bigsize(v: u64) -> Vec<u8> {
    match v {
        0..=0xfc => vec![v as u8],
        0xfd..=0xffff => [&[0xfd][..], &(v as u16).to_be_bytes()].concat(),
        0x1_0000..=0xffff_ffff => [&[0xfe][..], &(v as u32).to_be_bytes()].concat(),
        _ => [&[0xff][..], &v.to_be_bytes()].concat(),
    }
}

/// Reads a BigSize at `*i`, moving `*i` past it.
pub fn read_bigsize(b: &[u8], i: &mut usize) -> Option<u64> {
    let d = *b.get(*i)?;
    let (v, n) = match d {
        0xfd => (
            u64::from(u16::from_be_bytes(b.get(*i + 1..*i + 3)?.try_into().ok()?)),
            3,
        ),
        0xfe => (
            u64::from(u32::from_be_bytes(b.get(*i + 1..*i + 5)?.try_into().ok()?)),
            5,
        ),
        0xff => (
            u64::from_be_bytes(b.get(*i + 1..*i + 9)?.try_into().ok()?),
            9,
        ),
        d => (u64::from(d), 1),
    };
    *i += n;
    Some(v)
}

/// A TLV stream split into `(type, value)` records (panics on a bad one).
pub fn split(stream: &[u8]) -> Vec<(u64, Vec<u8>)> {
    try_split(stream).unwrap_or_else(|| panic!("not a TLV stream"))
}

/// A TLV stream split into records, if it is one.
pub fn try_split(stream: &[u8]) -> Option<Vec<(u64, Vec<u8>)>> {
    let mut i = 0;
    let mut out = Vec::new();
    while i < stream.len() {
        let t = read_bigsize(stream, &mut i)?;
        let l = usize::try_from(read_bigsize(stream, &mut i)?).ok()?;
        let v = stream.get(i..i.checked_add(l)?)?.to_vec();
        i += l;
        out.push((t, v));
    }
    Some(out)
}

/// Records joined into a stream, in the order given.
pub fn join(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (t, v) in records {
        out.extend(bigsize(*t));
        out.extend(bigsize(v.len() as u64));
        out.extend_from_slice(v);
    }
    out
}

/// Replaces (or, when absent, inserts in type order) record `t`.
pub fn with_record(records: &[(u64, Vec<u8>)], t: u64, v: Vec<u8>) -> Vec<(u64, Vec<u8>)> {
    let mut out: Vec<_> = records.iter().filter(|(rt, _)| *rt != t).cloned().collect();
    let at = out.iter().position(|(rt, _)| *rt > t).unwrap_or(out.len());
    out.insert(at, (t, v));
    out
}

/// Drops record `t`.
pub fn without_record(records: &[(u64, Vec<u8>)], t: u64) -> Vec<(u64, Vec<u8>)> {
    records.iter().filter(|(rt, _)| *rt != t).cloned().collect()
}

/// A record's value.
pub fn record(records: &[(u64, Vec<u8>)], t: u64) -> Vec<u8> {
    records
        .iter()
        .find(|(rt, _)| *rt == t)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no record {t}"))
}

/// The proof body (after `TAPP`) split into records.
pub fn proof_records(proof: &[u8]) -> Vec<(u64, Vec<u8>)> {
    assert_eq!(&proof[..4], b"TAPP");
    split(&proof[4..])
}

/// A proof from records.
pub fn proof_from(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
    [b"TAPP".to_vec(), join(records)].concat()
}
