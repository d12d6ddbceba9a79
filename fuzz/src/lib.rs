//! Fuzzing support for `ms-smt` proofs: the shared properties ([`props`],
//! also compiled into `tests/proof_mutations.rs`), the vector corpus, and
//! the parsers that turn fuzzer bytes into structured inputs.

pub mod props;
pub mod sum;

use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::{Result, Unstructured};
use props::{Corpus, OP_KINDS, Op, RoundtripInput, SibHash};

/// The official vectors: `$MSSMT_VECTORS_DIR`, or `../../shared/vectors`
/// from this crate.
pub fn vectors_dir() -> PathBuf {
    std::env::var_os("MSSMT_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"))
}

/// The vector corpus, loaded and checked once per process.
pub fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(|| {
        Corpus::load(&vectors_dir()).unwrap_or_else(|e| panic!("loading the vectors: {e}"))
    })
}

/// A sum: mostly small (so walks rarely overflow), sometimes at the edges.
/// The selector byte is `b % 16`; arbitrary integers are little-endian.
fn sum(u: &mut Unstructured) -> Result<u64> {
    Ok(match u.int_in_range(0u8..=15)? {
        0..=3 => 0,
        4 => 1,
        5..=7 => u64::from(u.arbitrary::<u8>()?),
        8 | 9 => u64::from(u.arbitrary::<u16>()?),
        10 => u64::from(u.arbitrary::<u32>()?),
        11 => u64::MAX,
        12 => u64::MAX - u64::from(u.arbitrary::<u8>()?),
        13 => u64::MAX / 2 + u64::from(u.arbitrary::<u8>()?),
        _ => u.arbitrary()?,
    })
}

fn small_bytes(u: &mut Unstructured, max: usize) -> Result<Vec<u8>> {
    let n = u.int_in_range(0..=max)?.min(u.len());
    Ok(u.bytes(n)?.to_vec())
}

/// One mutation from fuzzer bytes.
pub fn arbitrary_op(u: &mut Unstructured) -> Result<Op> {
    Ok(match u.int_in_range(0..=OP_KINDS - 1)? {
        0 => Op::FlipBit {
            pos: u.arbitrary()?,
            bit: u.arbitrary()?,
        },
        1 => Op::SetByte {
            pos: u.arbitrary()?,
            val: u.arbitrary()?,
        },
        2 => Op::Truncate {
            n: u16::from(u.arbitrary::<u8>()?),
        },
        3 => Op::Extend {
            bytes: small_bytes(u, 48)?,
        },
        4 => Op::Insert {
            pos: u.arbitrary()?,
            bytes: small_bytes(u, 48)?,
        },
        5 => Op::Remove {
            pos: u.arbitrary()?,
            n: u16::from(u.arbitrary::<u8>()?),
        },
        6 => Op::SetCount {
            count: u.arbitrary()?,
        },
        7 => Op::FlipBitmapBit { j: u.arbitrary()? },
        8 => Op::SwapNodes {
            a: u.arbitrary()?,
            b: u.arbitrary()?,
        },
        9 => Op::DuplicateNode { a: u.arbitrary()? },
        10 => Op::DropNode { a: u.arbitrary()? },
        11 => Op::SetNodeSum {
            a: u.arbitrary()?,
            sum: sum(u)?,
        },
        12 => Op::AddNodeSum {
            a: u.arbitrary()?,
            delta: sum(u)?,
        },
        13 => Op::MoveSum {
            a: u.arbitrary()?,
            b: u.arbitrary()?,
            delta: sum(u)?,
        },
        14 => Op::FlipNodeHashBit {
            a: u.arbitrary()?,
            bit: u.arbitrary()?,
        },
        15 => Op::NodeHashToEmpty {
            a: u.arbitrary()?,
            level: u.arbitrary()?,
        },
        16 => Op::ExpandEmpty { j: u.arbitrary()? },
        17 => Op::CollapseNode { a: u.arbitrary()? },
        18 => Op::SetSibling {
            j: u.arbitrary()?,
            hash: u.arbitrary()?,
            sum: sum(u)?,
        },
        19 => Op::SiblingFrom {
            j: u.arbitrary()?,
            case: u.arbitrary()?,
        },
        20 => Op::ShiftUp,
        21 => Op::KeyFlipBit {
            bit: u.arbitrary()?,
        },
        22 => Op::KeyFrom {
            case: u.arbitrary()?,
        },
        23 => Op::KeySet {
            key: u.arbitrary()?,
        },
        24 => Op::LeafSumSet { sum: sum(u)? },
        25 => Op::LeafSumAdd { delta: sum(u)? },
        26 => Op::LeafSumShift {
            a: u.arbitrary()?,
            delta: sum(u)?,
        },
        27 => Op::LeafValueFlip {
            pos: u.arbitrary()?,
            bit: u.arbitrary()?,
        },
        28 => Op::LeafValueTruncate {
            n: u16::from(u.arbitrary::<u8>()?),
        },
        29 => Op::LeafValueExtend {
            bytes: small_bytes(u, 64)?,
        },
        30 => Op::LeafEmpty,
        31 => Op::LeafFrom {
            case: u.arbitrary()?,
        },
        _ => Op::ProofFrom {
            case: u.arbitrary()?,
        },
    })
}

/// Most mutations per `proof_verify` input.
pub const MAX_OPS: usize = 8;

/// `proof_verify` input: a little-endian u16 case index (modulo the number
/// of cases), then up to [`MAX_OPS`] mutations.
pub fn parse_verify(data: &[u8]) -> (usize, Vec<Op>) {
    let (case, rest) = match data {
        [] => (0, &[][..]),
        [a] => (usize::from(*a), &[][..]),
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
    };
    let mut u = Unstructured::new(rest);
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        match arbitrary_op(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    (case, ops)
}

fn sib_hash(u: &mut Unstructured) -> Result<SibHash> {
    Ok(match u.int_in_range(0u8..=7)? {
        0 => SibHash::OwnEmpty,
        1 => SibHash::OtherEmpty(u.arbitrary()?),
        2 => SibHash::Previous,
        _ => SibHash::Bytes(u.arbitrary()?),
    })
}

/// `proof_roundtrip` input.
pub fn parse_roundtrip(data: &[u8]) -> Result<RoundtripInput> {
    let mut u = Unstructured::new(data);
    let bitmap = u.arbitrary()?;
    let key = u.arbitrary()?;
    let sum_ = sum(&mut u)?;
    let value = small_bytes(&mut u, 80)?;
    let flips = small_bytes(&mut u, 8)?;
    let empty_sums = (0..u.int_in_range(0u8..=3)?)
        .map(|_| sum(&mut u))
        .collect::<Result<Vec<_>>>()?;
    let mut nodes = Vec::new();
    while !u.is_empty() && nodes.len() < 256 {
        nodes.push((sib_hash(&mut u)?, sum(&mut u)?));
    }
    Ok(RoundtripInput {
        bitmap,
        nodes,
        empty_sums,
        key,
        value,
        sum: sum_,
        flips,
    })
}
