//! Untrusted proofs on stable Rust: the fuzz targets' properties
//! (`fuzz/src/props.rs`, compiled in here) on a few hundred thousand
//! mutations of the official vectors' proofs, with a fixed seed.
//!
//! * `systematic_mutations`: for a sample of real proofs, every truncation,
//!   every bitmap bit, every explicit node (sum +1, a hash bit, collapsed to
//!   empty, set to an empty hash), every empty sibling written out
//!   explicitly, every key bit, and leaf edits.
//! * `random_mutations`: 1-4 random mutations (bytes, counts, bitmap, node
//!   swaps, sums, C2 level shifts, keys, leaves, splices) of random proofs.
//! * `arbitrary_proofs_round_trip`: random 256-sibling proofs encode
//!   canonically, decode back, and verify for nothing else.
//!
//! Each checks: no panic; strict decoding equals a reference decoder, value
//! and error; accepted bytes re-encode to themselves (no non-canonical
//! encoding accepted); root/verify equal a reference walk; a proof verifies
//! only the leaf its tree holds at that key; with the key unchanged a
//! changed leaf or proof never verifies; every real proof verifies. Counts
//! are printed (`-- --nocapture`) and checked against minimums, so a
//! mutation engine that stopped reaching a case fails.
//!
//! `MSSMT_PROOF_MUTATIONS` scales the random test (default 150,000).

use crate::props;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use props::{Corpus, OP_KINDS, Op, RoundtripInput, SibHash, Stats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn vectors_dir() -> PathBuf {
    std::env::var_os("MSSMT_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::support::repo_root().join("../shared/vectors"))
}

fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let c = Corpus::load(&vectors_dir()).unwrap_or_else(|e| panic!("vectors: {e}"));
        // 1,010 vector proofs, then reference proofs of the other trees.
        assert_eq!(
            c.cases.iter().filter(|c| c.origin == "vector").count(),
            1010
        );
        assert_eq!(c.trees.len(), 5);
        c
    })
}

fn report(name: &str, s: &Stats, started: Instant) {
    eprintln!(
        "{name}: {:.1} s\n  decoded {} inputs: {} accepted (each re-encoded byte for byte), rejected: \
         Empty {}, Truncated {}, TrailingBytes {}, CountMismatch {}, NonCanonicalEmpty {} \
         ({} of the rejected accepted by Go's lenient decoder)\n  verify checks {}: {} verified \
         ({} real proofs, {} other legitimate leaves), {} mutated inputs that must fail (all did), \
         {} sum overflows\n  round trips {} ({} flipped keys legitimately accepted)",
        started.elapsed().as_secs_f64(),
        s.inputs,
        s.decoded,
        s.rej_empty,
        s.rej_truncated,
        s.rej_trailing,
        s.rej_count,
        s.rej_noncanonical,
        s.go_only,
        s.verify_checks,
        s.verified,
        s.verified_seed,
        s.verified_other,
        s.must_fail,
        s.overflows,
        s.roundtrips,
        s.key_swaps_accepted,
    );
}

fn sum(rng: &mut StdRng) -> u64 {
    match rng.gen_range(0..16) {
        0..=3 => 0,
        4 => 1,
        5..=7 => rng.gen_range(0..256),
        8 | 9 => rng.gen_range(0..65536),
        10 => rng.gen_range(0..1 << 32),
        11 => u64::MAX,
        12 => u64::MAX - rng.gen_range(0..256),
        13 => u64::MAX / 2 + rng.gen_range(0..256),
        _ => rng.r#gen(),
    }
}

fn bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let n = rng.gen_range(0..=max);
    (0..n).map(|_| rng.r#gen()).collect()
}

fn random_op(rng: &mut StdRng, len: usize) -> Op {
    // Positions mostly inside the proof, so byte edits land.
    let pos = if len == 0 {
        0
    } else {
        rng.gen_range(0..len as u32 + 8)
    };
    match rng.gen_range(0..OP_KINDS) {
        0 => Op::FlipBit {
            pos,
            bit: rng.r#gen(),
        },
        1 => Op::SetByte {
            pos,
            val: rng.r#gen(),
        },
        2 => Op::Truncate {
            n: rng.gen_range(0..48),
        },
        3 => Op::Extend {
            bytes: bytes(rng, 48),
        },
        4 => Op::Insert {
            pos,
            bytes: bytes(rng, 48),
        },
        5 => Op::Remove {
            pos,
            n: rng.gen_range(0..48),
        },
        6 => Op::SetCount {
            count: if rng.r#gen() {
                rng.gen_range(0..300)
            } else {
                rng.r#gen()
            },
        },
        7 => Op::FlipBitmapBit { j: rng.r#gen() },
        8 => Op::SwapNodes {
            a: rng.r#gen(),
            b: rng.r#gen(),
        },
        9 => Op::DuplicateNode { a: rng.r#gen() },
        10 => Op::DropNode { a: rng.r#gen() },
        11 => Op::SetNodeSum {
            a: rng.r#gen(),
            sum: sum(rng),
        },
        12 => Op::AddNodeSum {
            a: rng.r#gen(),
            delta: sum(rng),
        },
        13 => Op::MoveSum {
            a: rng.r#gen(),
            b: rng.r#gen(),
            delta: sum(rng),
        },
        14 => Op::FlipNodeHashBit {
            a: rng.r#gen(),
            bit: rng.r#gen(),
        },
        15 => Op::NodeHashToEmpty {
            a: rng.r#gen(),
            level: rng.gen_range(0..300),
        },
        16 => Op::ExpandEmpty { j: rng.r#gen() },
        17 => Op::CollapseNode { a: rng.r#gen() },
        18 => Op::SetSibling {
            j: rng.r#gen(),
            hash: rng.r#gen(),
            sum: sum(rng),
        },
        19 => Op::SiblingFrom {
            j: rng.r#gen(),
            case: rng.r#gen(),
        },
        20 => Op::ShiftUp,
        21 => Op::KeyFlipBit { bit: rng.r#gen() },
        22 => Op::KeyFrom { case: rng.r#gen() },
        23 => Op::KeySet { key: rng.r#gen() },
        24 => Op::LeafSumSet { sum: sum(rng) },
        25 => Op::LeafSumAdd { delta: sum(rng) },
        26 => Op::LeafSumShift {
            a: rng.r#gen(),
            delta: sum(rng),
        },
        27 => Op::LeafValueFlip {
            pos: rng.r#gen(),
            bit: rng.r#gen(),
        },
        28 => Op::LeafValueTruncate {
            n: rng.gen_range(0..64),
        },
        29 => Op::LeafValueExtend {
            bytes: bytes(rng, 64),
        },
        30 => Op::LeafEmpty,
        31 => Op::LeafFrom { case: rng.r#gen() },
        _ => Op::ProofFrom { case: rng.r#gen() },
    }
}

/// Every single-step mutation of a sample of proofs: every 25th vector
/// inclusion proof, the 10 vector exclusion proofs, every 4th reference
/// proof of the small trees and all of the synthetic twin tree's.
#[test]
fn systematic_mutations() {
    let c = corpus();
    let started = Instant::now();
    let mut s = Stats::default();
    let twins = c.cases.len() - 5;
    let picks: Vec<usize> = (0..c.cases.len())
        .filter(|&i| match i {
            0..1000 => i % 25 == 0,
            1000..1010 => true,
            _ => (i - 1010) % 4 == 0 || i >= twins,
        })
        .collect();
    let mut runs = 0u64;
    for &i in &picks {
        let case = &c.cases[i];
        let len = case.bytes.len();
        let n = (len - 34) / 40;
        let mut ops: Vec<Op> = vec![Op::LeafEmpty, Op::ShiftUp];
        ops.extend((1..=len as u16).map(|n| Op::Truncate { n }));
        ops.extend((0..=255).map(|j| Op::FlipBitmapBit { j }));
        ops.extend((0..=255).map(|j| Op::ExpandEmpty { j }));
        ops.extend((0..=255).map(|bit| Op::KeyFlipBit { bit }));
        for a in 0..n as u16 {
            ops.push(Op::AddNodeSum { a, delta: 1 });
            ops.push(Op::FlipNodeHashBit {
                a,
                bit: (a as u8).wrapping_mul(37),
            });
            ops.push(Op::CollapseNode { a });
            ops.push(Op::NodeHashToEmpty { a, level: 256 - a });
            ops.push(Op::DuplicateNode { a });
            ops.push(Op::DropNode { a });
            ops.push(Op::LeafSumShift { a, delta: 1 });
            ops.push(Op::SwapNodes { a, b: a + 1 });
        }
        for d in [1, 2, 3, 255, u64::MAX] {
            ops.push(Op::LeafSumAdd { delta: d });
        }
        for k in [0u16, 1, 8, 33, 34, 255, 256, 257, 65535] {
            ops.push(Op::SetCount { count: k });
        }
        ops.push(Op::Extend { bytes: vec![0] });
        ops.push(Op::Extend {
            bytes: vec![0xff; 40],
        });
        ops.push(Op::LeafValueExtend { bytes: vec![0] });
        ops.push(Op::LeafValueTruncate { n: 1 });
        ops.push(Op::LeafValueFlip { pos: 0, bit: 0 });
        ops.push(Op::KeyFrom { case: i as u16 + 1 });
        ops.push(Op::ProofFrom { case: i as u16 + 1 });
        ops.push(Op::LeafFrom { case: i as u16 + 1 });
        // The seed itself, and Go's short-bitmap form of it.
        props::run_case(c, i, &[], &mut s);
        runs += 1;
        for op in &ops {
            props::run_case(c, i, std::slice::from_ref(op), &mut s);
            runs += 1;
        }
    }
    report(
        &format!("systematic: {runs} mutations of {} proofs", picks.len()),
        &s,
        started,
    );
    // Every seed verifies (and so do its Go-accepted re-encodings).
    assert!(s.verified_seed as usize >= picks.len());
    check_minimums(&s, runs);
}

fn check_minimums(s: &Stats, runs: u64) {
    assert_eq!(s.inputs, runs, "every mutation decoded once");
    assert!(s.decoded > 0 && s.rej_empty > 0 && s.rej_truncated > 0 && s.rej_trailing > 0);
    assert!(s.rej_count > 0 && s.rej_noncanonical > 0 && s.go_only > 0);
    assert!(s.verified_seed > 0 && s.must_fail > 0 && s.overflows > 0);
}

#[test]
fn random_mutations() {
    let c = corpus();
    let started = Instant::now();
    let n: u64 = std::env::var("MSSMT_PROOF_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150_000);
    let mut rng = StdRng::seed_from_u64(0x6d73_736d_745f_7072);
    let mut s = Stats::default();
    for _ in 0..n {
        let i = rng.gen_range(0..c.cases.len());
        let k = rng.gen_range(1..=4);
        let ops: Vec<Op> = (0..k)
            .map(|_| random_op(&mut rng, c.cases[i].bytes.len()))
            .collect();
        props::run_case(c, i, &ops, &mut s);
    }
    report(
        &format!("random: {n} mutated proofs (1-4 mutations each)"),
        &s,
        started,
    );
    check_minimums(&s, n);
    // Twins and spliced proofs legitimately verify other leaves.
    assert!(s.verified_other > 0);
}

#[test]
fn arbitrary_proofs_round_trip() {
    let c = corpus();
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(0x726f_756e_6474_7270);
    let mut s = Stats::default();
    let n = 10_000;
    for r in 0..n {
        // Half from a real proof's shape (bitmap, nodes), half random.
        let (bitmap, mut nodes, key, value, leaf_sum) = if r % 2 == 0 {
            let case = &c.cases[rng.gen_range(0..c.cases.len())];
            let b = &case.bytes;
            let bitmap: [u8; 32] = b[b.len() - 32..].try_into().unwrap();
            let nodes: Vec<(SibHash, u64)> = b[2..b.len() - 32]
                .chunks_exact(40)
                .map(|ch| {
                    let h: [u8; 32] = ch[..32].try_into().unwrap();
                    (
                        SibHash::Bytes(h),
                        u64::from_be_bytes(ch[32..].try_into().unwrap()),
                    )
                })
                .collect();
            (
                bitmap,
                nodes,
                case.key.0,
                case.leaf.value().to_vec(),
                case.leaf.sum(),
            )
        } else {
            let mut bitmap: [u8; 32] = rng.r#gen();
            for byte in bitmap.iter_mut() {
                // Mostly empty siblings, like real proofs.
                *byte |= rng.r#gen::<u8>() & rng.r#gen::<u8>();
            }
            let nodes = (0..rng.gen_range(0..40))
                .map(|_| (SibHash::Bytes(rng.r#gen()), sum(&mut rng)))
                .collect();
            (
                bitmap,
                nodes,
                rng.r#gen(),
                bytes(&mut rng, 80),
                sum(&mut rng),
            )
        };
        // Sprinkle empty hashes (own level: dropped by compression; other
        // levels: kept) and copies of the previous hash.
        for node in nodes.iter_mut() {
            match rng.gen_range(0..12) {
                0 => node.0 = SibHash::OwnEmpty,
                1 => node.0 = SibHash::OtherEmpty(rng.gen_range(0..257)),
                2 => node.0 = SibHash::Previous,
                _ => {}
            }
        }
        let empty_sums = match rng.gen_range(0..8) {
            0 => vec![sum(&mut rng)],
            1 => vec![0, 0, sum(&mut rng)],
            _ => vec![],
        };
        let mut flips: Vec<u8> = (0..rng.gen_range(0..4)).map(|_| rng.r#gen()).collect();
        let mut bitmap = bitmap;
        if rng.gen_range(0..8) == 0 && !nodes.is_empty() {
            // Sibling 0 equal to the leaf: key bit 255 does not matter.
            bitmap[0] &= !1;
            nodes[0].0 = SibHash::Previous;
            flips.push(255);
        }
        let input = RoundtripInput {
            bitmap,
            nodes,
            empty_sums,
            key,
            value,
            sum: leaf_sum,
            flips,
        };
        props::check_roundtrip(&input, &mut s);
    }
    report(&format!("round trip: {n} arbitrary proofs"), &s, started);
    assert_eq!(s.roundtrips, n);
    assert!(s.decoded == n && s.overflows > 0 && s.key_swaps_accepted > 0);
}
