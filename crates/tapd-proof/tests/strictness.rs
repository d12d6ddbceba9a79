//! Hand-made inputs, one per rule: each tapd limit and TLV rule, and each
//! encoding we refuse beyond tapd (`DIVERGENCES.md`), yields its typed
//! error; each optional structure the vectors lack round-trips.

mod common;

use common::*;
use ms_smt_tapd_proof::limits::{
    FILE_MAX_NUM_PROOFS, FILE_MAX_PROOF_SIZE, MAX_MESSAGE_PAYLOAD, MAX_TX_IN_PER_MESSAGE,
};
use ms_smt_tapd_proof::{
    Asset, Context, DecodeError, GroupKeyReveal, KeyError, MetaReveal, MsSmtNode, MsSmtProof,
    NonCanonicalReason, PrevId, Proof, ProofFile, PublicKey, SplitCommitment, TaprootProof,
    TapscriptPreimage, TapscriptProof, Transaction, Witness, double_sha256, empty_tree_hash,
};

const G: &str = "0279be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
const OFF_CURVE: &str = "02eefdea4cdb677750a420fee807eacf21eb9898ae79b9768766e4faa04a2d4a34";

fn generated(i: usize) -> Vec<u8> {
    valid_cases("proof_tlv_encoding_generated.json", "proof")
        .swap_remove(i)
        .1
}

fn regtest(comment: &str) -> Vec<u8> {
    valid_cases("proof_tlv_encoding_regtest.json", "proof")
        .into_iter()
        .find(|(c, _, _)| c == comment)
        .unwrap_or_else(|| panic!("no vector {comment}"))
        .1
}

/// "collectible genesis": has a group key reveal and alt leaves.
fn base() -> Vec<u8> {
    generated(0)
}

fn refuse(bytes: &[u8]) -> DecodeError {
    Proof::decode(bytes).expect_err("must be refused")
}

fn accept(bytes: &[u8]) -> Proof {
    let proof = Proof::decode(bytes).unwrap_or_else(|e| panic!("must be accepted: {e}"));
    assert_eq!(proof.encode(), bytes, "accepted bytes must round-trip");
    proof
}

/// The base proof with record `t` replaced.
fn base_with(t: u64, v: Vec<u8>) -> Vec<u8> {
    proof_from(&with_record(&proof_records(&base()), t, v))
}

fn key(hex: &str) -> PublicKey {
    PublicKey(unhex(hex).try_into().unwrap())
}

fn inline(v: &[u8]) -> Vec<u8> {
    [bigsize(v.len() as u64), v.to_vec()].concat()
}

/// A list value: count, then BigSize-prefixed items.
fn inline_list(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = bigsize(items.len() as u64);
    for item in items {
        out.extend(inline(item));
    }
    out
}

/// A list value's items.
fn items(list: &[u8]) -> Vec<Vec<u8>> {
    let mut i = 0;
    let n = read_bigsize(list, &mut i).unwrap();
    (0..n)
        .map(|_| {
            let l = read_bigsize(list, &mut i).unwrap() as usize;
            let v = list[i..i + l].to_vec();
            i += l;
            v
        })
        .collect()
}

fn is<T: std::fmt::Debug>(got: &T, pred: impl Fn(&T) -> bool) {
    assert!(pred(got), "unexpected: {got:?}");
}

#[test]
fn magic_is_checked() {
    assert_eq!(
        Proof::decode(b"TAP"),
        Err(DecodeError::Truncated {
            context: Context::Proof,
            offset: 0,
            needed: 4,
            available: 3
        })
    );
    let mut b = base();
    b[3] = b'F';
    assert_eq!(
        refuse(&b),
        DecodeError::BadMagic {
            context: Context::Proof,
            expected: *b"TAPP",
            found: *b"TAPF"
        }
    );
    is(
        &ProofFile::decode(&base()).unwrap_err(),
        |e| matches!(e, DecodeError::BadMagic { context: Context::ProofFile, found, .. } if found == b"TAPP"),
    );
}

#[test]
fn bigsize_must_be_shortest() {
    let body = &base()[4..];
    // Type 0 written as fd 00 00.
    let b = [b"TAPP".as_slice(), &[0xfd, 0, 0], &body[1..]].concat();
    assert_eq!(
        refuse(&b),
        DecodeError::NonCanonicalBigSize {
            context: Context::Proof,
            offset: 4
        }
    );
    // Length 4 written as fd 00 04.
    let b = [b"TAPP".as_slice(), &[0, 0xfd, 0, 4], &body[2..]].concat();
    assert_eq!(
        refuse(&b),
        DecodeError::NonCanonicalBigSize {
            context: Context::Proof,
            offset: 5
        }
    );
}

#[test]
fn types_must_strictly_increase() {
    let mut records = proof_records(&base());
    records.swap(0, 1);
    is(&refuse(&proof_from(&records)), |e| {
        matches!(
            e,
            DecodeError::TypeOrder {
                context: Context::Proof,
                previous: 2,
                record_type: 0,
                ..
            }
        )
    });
    let mut records = proof_records(&base());
    records.insert(1, records[0].clone());
    is(&refuse(&proof_from(&records)), |e| {
        matches!(
            e,
            DecodeError::TypeOrder {
                previous: 0,
                record_type: 0,
                ..
            }
        )
    });
}

#[test]
fn unknown_even_types_are_refused_and_odd_ones_kept() {
    is(&refuse(&base_with(30, vec![1])), |e| {
        matches!(
            e,
            DecodeError::UnknownEvenType {
                context: Context::Proof,
                record_type: 30,
                ..
            }
        )
    });
    let proof = accept(&base_with(31, b"hi".to_vec()));
    assert_eq!(
        proof.unknown_odd_types.get(&31).map(Vec::as_slice),
        Some(&b"hi"[..])
    );
    // The largest type is odd, and is the last any stream can hold.
    let proof = accept(&base_with(u64::MAX, vec![]));
    assert!(proof.unknown_odd_types.contains_key(&u64::MAX));
}

#[test]
fn records_tapd_always_writes_are_required() {
    for t in [0, 2, 4, 6, 8, 10, 12, 22] {
        let b = proof_from(&without_record(&proof_records(&base()), t));
        assert_eq!(
            refuse(&b),
            DecodeError::MissingRecord {
                context: Context::Proof,
                record_type: t
            }
        );
    }
}

#[test]
fn fixed_size_records_have_their_size() {
    for (t, len, expected) in [(0u64, 3usize, 4u64), (2, 35, 36), (4, 79, 80), (22, 5, 4)] {
        is(&refuse(&base_with(t, vec![0; len])), |e| {
            matches!(e, DecodeError::InvalidLength { context: Context::Proof, record_type, expected: x, actual, .. }
                if *record_type == t && *x == expected && *actual == len as u64)
        });
    }
}

#[test]
fn truncation_and_trailing_bytes_are_refused() {
    let b = base();
    is(&refuse(&b[..b.len() - 1]), |e| {
        matches!(
            e,
            DecodeError::Truncated {
                context: Context::Proof,
                ..
            }
        )
    });
    let records = proof_records(&b);
    let tx = [record(&records, 6), vec![0]].concat();
    is(&refuse(&base_with(6, tx)), |e| {
        matches!(
            e,
            DecodeError::TrailingBytes {
                context: Context::AnchorTx,
                remaining: 1,
                ..
            }
        )
    });
    // One more byte in the asset record reads as a record of type 0.
    let asset = [record(&records, 10), vec![0]].concat();
    is(&refuse(&base_with(10, asset)), |e| {
        matches!(
            e,
            DecodeError::TypeOrder {
                context: Context::Asset,
                record_type: 0,
                ..
            }
        )
    });
}

#[test]
fn taproot_proofs_are_capped_at_the_p2p_record_size() {
    is(&refuse(&base_with(12, vec![0; 65_536])), |e| {
        matches!(
            e,
            DecodeError::RecordTooLarge {
                context: Context::Proof,
                record_type: 12,
                length: 65_536,
                max: 65_535,
                ..
            }
        )
    });
}

fn base_asset_records() -> Vec<(u64, Vec<u8>)> {
    split(&record(&proof_records(&base()), 10))
}

fn asset_err(records: &[(u64, Vec<u8>)]) -> DecodeError {
    Asset::decode(&join(records)).expect_err("asset must be refused")
}

#[test]
fn asset_records_are_strict() {
    let r = base_asset_records();
    assert!(Asset::decode(&join(&r)).is_ok());
    // Optional numbers are written only when non-zero.
    is(&asset_err(&with_record(&r, 7, vec![0])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                context: Context::Asset,
                reason: NonCanonicalReason::DefaultValue,
                ..
            }
        )
    });
    let a = Asset::decode(&join(&with_record(&r, 7, vec![1]))).unwrap();
    assert_eq!(a.lock_time, 1);
    assert_eq!(a.encode(), join(&with_record(&r, 7, vec![1])));
    // The type record repeats the genesis type.
    let t = record(&r, 4)[0];
    is(&asset_err(&with_record(&r, 4, vec![t ^ 1])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                reason: NonCanonicalReason::GenesisTypeMismatch { .. },
                ..
            }
        )
    });
    is(&asset_err(&with_record(&r, 20, vec![])), |e| {
        matches!(
            e,
            DecodeError::UnknownEvenType {
                context: Context::Asset,
                record_type: 20,
                ..
            }
        )
    });
    // Keys.
    is(&asset_err(&with_record(&r, 16, vec![0; 33])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                reason: NonCanonicalReason::EmptyKey,
                ..
            }
        )
    });
    is(&asset_err(&with_record(&r, 16, unhex(OFF_CURVE))), |e| {
        matches!(
            e,
            DecodeError::InvalidPublicKey {
                context: Context::Asset,
                reason: KeyError::NotOnCurve,
                ..
            }
        )
    });
    let mut bad_prefix = unhex(G);
    bad_prefix[0] = 4;
    is(&asset_err(&with_record(&r, 17, bad_prefix)), |e| {
        matches!(
            e,
            DecodeError::InvalidPublicKey {
                reason: KeyError::BadPrefix { prefix: 4 },
                ..
            }
        )
    });
    // Amount: a BigSize filling its record.
    is(&asset_err(&with_record(&r, 6, vec![0xfd, 0, 1])), |e| {
        matches!(
            e,
            DecodeError::NonCanonicalBigSize {
                context: Context::Asset,
                ..
            }
        )
    });
    is(&asset_err(&with_record(&r, 6, vec![1, 0])), |e| {
        matches!(
            e,
            DecodeError::TrailingBytes {
                context: Context::Asset,
                ..
            }
        )
    });
}

#[test]
fn genesis_tags_are_capped_at_64_bytes() {
    let r = base_asset_records();
    let genesis = record(&r, 2);
    let tag_len = genesis[36] as usize;
    let with_tag = |tag: &[u8]| [&genesis[..36], &inline(tag), &genesis[37 + tag_len..]].concat();
    assert!(Asset::decode(&join(&with_record(&r, 2, with_tag(&[b'a'; 64])))).is_ok());
    is(
        &asset_err(&with_record(&r, 2, with_tag(&[b'a'; 65]))),
        |e| {
            matches!(
                e,
                DecodeError::BytesTooLong {
                    context: Context::Genesis,
                    length: 65,
                    max: 64,
                    ..
                }
            )
        },
    );
    is(
        &asset_err(&with_record(&r, 2, [genesis.clone(), vec![0]].concat())),
        |e| {
            matches!(
                e,
                DecodeError::TrailingBytes {
                    context: Context::Genesis,
                    ..
                }
            )
        },
    );
}

#[test]
fn witnesses_refuse_what_tapd_would_drop_or_never_write() {
    let r = base_asset_records();
    let witnesses = items(&record(&r, 11));
    let witness = split(&witnesses[0]);
    let with_witness =
        |w: Vec<(u64, Vec<u8>)>| join(&with_record(&r, 11, inline_list(&[join(&w)])));
    // tapd's witness decoder drops unknown records, of either parity.
    for t in [7, 8] {
        is(
            &Asset::decode(&with_witness(with_record(&witness, t, vec![]))).unwrap_err(),
            |e| matches!(e, DecodeError::UnknownDroppedType { context: Context::Witness, record_type, .. } if *record_type == t),
        );
    }
    is(
        &Asset::decode(&with_witness(with_record(&witness, 3, vec![0]))).unwrap_err(),
        |e| {
            matches!(
                e,
                DecodeError::NonCanonical {
                    context: Context::Witness,
                    reason: NonCanonicalReason::EmptyList,
                    ..
                }
            )
        },
    );
    is(&asset_err(&with_record(&r, 11, vec![0])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                context: Context::PrevWitnesses,
                reason: NonCanonicalReason::EmptyList,
                ..
            }
        )
    });
}

#[test]
fn mssmt_proofs_are_strict() {
    let empty = [vec![0, 0], vec![0xff; 32]].concat();
    let proof = MsSmtProof::decode(&empty).unwrap();
    assert!(proof.nodes.is_empty() && proof.encode() == empty);
    let node = |hash: [u8; 32]| [hash.to_vec(), 0u64.to_be_bytes().to_vec()].concat();
    let one_bit_clear = [vec![0xfe], vec![0xff; 31]].concat();
    assert_eq!(
        MsSmtProof::decode(&[vec![0, 1], node([7; 32]), vec![0xff; 32]].concat()),
        Err(DecodeError::NodeCountMismatch {
            offset: 0,
            nodes: 1,
            expected: 0
        })
    );
    let ok = [vec![0, 1], node([7; 32]), one_bit_clear.clone()].concat();
    let proof = MsSmtProof::decode(&ok).unwrap();
    assert_eq!(
        proof.nodes,
        vec![MsSmtNode {
            hash: [7; 32],
            sum: 0
        }]
    );
    assert!(!proof.is_empty_sibling(0) && proof.is_empty_sibling(1));
    let explicit_empty = [
        vec![0, 1],
        node(empty_tree_hash(256).unwrap()),
        one_bit_clear,
    ]
    .concat();
    assert_eq!(
        MsSmtProof::decode(&explicit_empty),
        Err(DecodeError::NonCanonical {
            context: Context::MsSmtProof,
            offset: 0,
            reason: NonCanonicalReason::ExplicitEmptyNode { index: 0 }
        })
    );
    is(
        &MsSmtProof::decode(&[empty.clone(), vec![0]].concat()).unwrap_err(),
        |e| {
            matches!(
                e,
                DecodeError::TrailingBytes {
                    context: Context::MsSmtProof,
                    ..
                }
            )
        },
    );
    is(&MsSmtProof::decode(&empty[..33]).unwrap_err(), |e| {
        matches!(
            e,
            DecodeError::Truncated {
                context: Context::MsSmtProof,
                ..
            }
        )
    });
}

#[test]
fn empty_tree_hashes_match_the_ms_smt_reference() {
    // The values ms-smt-core's table holds (EmptyTree[0] and [256]).
    assert_eq!(
        hex::encode(empty_tree_hash(0).unwrap()),
        "b1e8e8f2dc3b266452988cfe169aa73be25405eeead02ab5dd6b3c6fd0ca8d67"
    );
    assert_eq!(
        hex::encode(empty_tree_hash(256).unwrap()),
        "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc"
    );
    assert_eq!(empty_tree_hash(257), None);
}

#[test]
fn tx_merkle_proofs_are_strict() {
    let node = [9u8; 32];
    let proof = accept(&base_with(8, [vec![1], node.to_vec(), vec![0x01]].concat()));
    assert_eq!(proof.tx_merkle_proof.bits, vec![true]);
    is(
        &refuse(&base_with(8, [vec![1], node.to_vec(), vec![0x03]].concat())),
        |e| {
            matches!(
                e,
                DecodeError::NonCanonical {
                    context: Context::TxMerkleProof,
                    reason: NonCanonicalReason::PaddingBits,
                    ..
                }
            )
        },
    );
    let sixteen = [vec![16], vec![0; 16 * 32 + 2]].concat();
    is(&refuse(&base_with(8, sixteen)), |e| {
        matches!(
            e,
            DecodeError::CountTooLarge {
                context: Context::TxMerkleProof,
                count: 16,
                max: 15,
                ..
            }
        )
    });
    is(
        &refuse(&base_with(8, [vec![1], node.to_vec()].concat())),
        |e| {
            matches!(
                e,
                DecodeError::Truncated {
                    context: Context::TxMerkleProof,
                    ..
                }
            )
        },
    );
}

fn legacy_tx() -> Vec<u8> {
    let mut tx = 2i32.to_le_bytes().to_vec();
    tx.push(1);
    tx.extend([3u8; 32]);
    tx.extend(1u32.to_le_bytes());
    tx.push(0);
    tx.extend(u32::MAX.to_le_bytes());
    tx.push(1);
    tx.extend(1000i64.to_le_bytes());
    tx.extend([1, 0x51]);
    tx.extend(0u32.to_le_bytes());
    tx
}

/// The legacy transaction with the segwit marker and a witness of `items`.
fn segwit_tx(items: &[&[u8]]) -> Vec<u8> {
    let legacy = legacy_tx();
    let (body, lock_time) = legacy[4..].split_at(legacy.len() - 8);
    let mut tx = [&legacy[..4], &[0, 1], body].concat();
    tx.push(items.len() as u8);
    for item in items {
        tx.push(item.len() as u8);
        tx.extend_from_slice(item);
    }
    tx.extend_from_slice(lock_time);
    tx
}

#[test]
fn transactions_decode_as_btcd_does() {
    let legacy = legacy_tx();
    let tx = Transaction::decode(&legacy).unwrap();
    assert_eq!(tx.encode(), legacy);
    assert_eq!(tx.txid(), double_sha256(&legacy));
    assert_eq!(tx.inputs[0].previous_output.index, 1);
    assert_eq!(tx.outputs[0].value, 1000);

    let segwit = segwit_tx(&[&[0xaa, 0xbb]]);
    let tx = Transaction::decode(&segwit).unwrap();
    assert_eq!(tx.encode(), segwit);
    assert_eq!(tx.inputs[0].witness, vec![vec![0xaa, 0xbb]]);
    assert_eq!(
        tx.txid(),
        double_sha256(&legacy),
        "the txid ignores the witness"
    );

    let mut bad_flag = segwit.clone();
    bad_flag[5] = 2;
    assert_eq!(
        Transaction::decode(&bad_flag),
        Err(DecodeError::WitnessFlag { offset: 5, flag: 2 })
    );
    assert_eq!(
        Transaction::decode(&segwit_tx(&[])),
        Err(DecodeError::NonCanonical {
            context: Context::AnchorTx,
            offset: 4,
            reason: NonCanonicalReason::SuperfluousWitness
        })
    );
    let non_canonical = [&legacy[..4], &[0xfd, 1, 0], &legacy[5..]].concat();
    assert_eq!(
        Transaction::decode(&non_canonical),
        Err(DecodeError::NonCanonicalCompactSize {
            context: Context::AnchorTx,
            offset: 4
        })
    );
    is(
        &Transaction::decode(&[legacy.clone(), vec![0]].concat()).unwrap_err(),
        |e| {
            matches!(
                e,
                DecodeError::TrailingBytes {
                    context: Context::AnchorTx,
                    ..
                }
            )
        },
    );
    // A script longer than btcd's message payload limit.
    let long_script = [
        &legacy[..41],
        &[0xfe][..],
        &(MAX_MESSAGE_PAYLOAD as u32 + 1).to_le_bytes(),
    ]
    .concat();
    is(
        &Transaction::decode(&long_script).unwrap_err(),
        |e| matches!(e, DecodeError::BytesTooLong { context: Context::AnchorTx, max, .. } if *max == MAX_MESSAGE_PAYLOAD),
    );
    let many_inputs = [&legacy[..4], &[0xff][..], &u64::MAX.to_le_bytes()].concat();
    is(
        &Transaction::decode(&many_inputs).unwrap_err(),
        |e| matches!(e, DecodeError::CountTooLarge { context: Context::AnchorTx, max, .. } if *max == MAX_TX_IN_PER_MESSAGE),
    );
}

#[test]
fn proof_files_are_checked() {
    let proof = base();
    let file = ProofFile::from_proofs(
        0,
        [
            proof.clone(),
            regtest("valid regtest genesis proof with meta reveal"),
        ],
    );
    let bytes = file.encode();
    assert_eq!(ProofFile::decode(&bytes).unwrap(), file);
    let mut tampered = bytes.clone();
    let at = tampered.len() - 1;
    tampered[at] ^= 1;
    is(&ProofFile::decode(&tampered).unwrap_err(), |e| {
        matches!(e, DecodeError::ChecksumMismatch { index: 1, .. })
    });
    is(
        &ProofFile::decode(&[bytes.clone(), vec![0]].concat()).unwrap_err(),
        |e| {
            matches!(
                e,
                DecodeError::TrailingBytes {
                    context: Context::ProofFile,
                    ..
                }
            )
        },
    );
    let empty = ProofFile::default().encode();
    assert_eq!(empty, b"TAPF\0\0\0\0\0");
    assert!(ProofFile::decode(&empty).unwrap().entries.is_empty());
    let too_many = [b"TAPF\0\0\0\0".to_vec(), bigsize(FILE_MAX_NUM_PROOFS + 1)].concat();
    is(&ProofFile::decode(&too_many).unwrap_err(), |e| {
        matches!(
            e,
            DecodeError::CountTooLarge {
                context: Context::ProofFile,
                ..
            }
        )
    });
    let too_big = [
        b"TAPF\0\0\0\0\x01".to_vec(),
        bigsize(FILE_MAX_PROOF_SIZE + 1),
    ]
    .concat();
    is(
        &ProofFile::decode(&too_big).unwrap_err(),
        |e| matches!(e, DecodeError::BytesTooLong { context: Context::ProofFile, max, .. } if *max == FILE_MAX_PROOF_SIZE),
    );

    // As an additional input of a proof.
    let mut p = Proof::decode(&proof).unwrap();
    p.additional_inputs = vec![file];
    let with_input = p.encode();
    assert_eq!(accept(&with_input), p);
    let records = proof_records(&with_input);
    let mut input = record(&records, 19);
    let at = input.len() - 1;
    input[at] ^= 1;
    is(
        &refuse(&proof_from(&with_record(&records, 19, input))),
        |e| matches!(e, DecodeError::ChecksumMismatch { .. }),
    );
    is(&refuse(&base_with(19, vec![0])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                context: Context::AdditionalInputs,
                reason: NonCanonicalReason::EmptyList,
                ..
            }
        )
    });
}

#[test]
fn alt_leaves_are_strict() {
    let leaves = items(&record(&proof_records(&base()), 27));
    assert_eq!(leaves.len(), 3);
    is(
        &refuse(&base_with(
            27,
            inline_list(&[leaves[0].clone(), leaves[0].clone()]),
        )),
        |e| {
            matches!(
                e,
                DecodeError::DuplicateKey {
                    context: Context::AltLeaves,
                    ..
                }
            )
        },
    );
    let with_amount = join(&with_record(&split(&leaves[0]), 6, vec![0]));
    is(&refuse(&base_with(27, inline_list(&[with_amount]))), |e| {
        matches!(
            e,
            DecodeError::UnexpectedRecord {
                context: Context::AltLeaf,
                record_type: 6,
                ..
            }
        )
    });
    is(&refuse(&base_with(27, vec![0])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                context: Context::AltLeaves,
                reason: NonCanonicalReason::EmptyList,
                ..
            }
        )
    });
    // tapd bounds the count by the record length over 40.
    let mut one = inline_list(&[leaves[0].clone()]);
    one[0] = 5;
    is(&refuse(&base_with(27, one)), |e| {
        matches!(
            e,
            DecodeError::CountTooLarge {
                context: Context::AltLeaves,
                count: 5,
                max: 1,
                ..
            }
        )
    });
    let keyless = with_record(&without_record(&split(&leaves[0]), 16), 101, vec![0; 40]);
    is(
        &refuse(&base_with(27, inline_list(&[join(&keyless)]))),
        |e| {
            matches!(
                e,
                DecodeError::MissingRecord {
                    context: Context::AltLeaf,
                    record_type: 16
                }
            )
        },
    );
}

fn nested(levels: usize) -> Asset {
    let minimal = valid_cases("asset_tlv_encoding_generated.json", "asset")
        .into_iter()
        .find(|(c, _, _)| c == "minimal asset")
        .unwrap()
        .1;
    let leaf = Asset::decode(&minimal).unwrap();
    let empty_proof = MsSmtProof::decode(&[vec![0, 0], vec![0xff; 32]].concat()).unwrap();
    let mut asset = leaf.clone();
    for _ in 0..levels {
        let mut outer = leaf.clone();
        outer.prev_witnesses = vec![Witness {
            prev_id: Some(PrevId::default()),
            tx_witness: vec![],
            split_commitment: Some(Box::new(SplitCommitment {
                proof: empty_proof.clone(),
                root_asset: asset,
            })),
        }];
        asset = outer;
    }
    asset
}

#[test]
fn split_commitment_nesting_is_bounded() {
    let ok = nested(32);
    let bytes = ok.encode();
    let decoded = Asset::decode(&bytes).unwrap();
    assert_eq!(decoded, ok);
    assert!(decoded.has_split_commitment_witness() && !decoded.is_genesis_asset());
    is(&Asset::decode(&nested(33).encode()).unwrap_err(), |e| {
        matches!(e, DecodeError::NestingTooDeep { max: 32, .. })
    });
}

#[test]
fn group_key_reveals_follow_tapds_length_rule() {
    assert_eq!(
        refuse(&base_with(25, vec![2; 32])),
        DecodeError::GroupKeyRevealTooShort {
            offset: refuse_offset(25),
            length: 32
        }
    );
    // V0 takes any 0 to 32 root bytes after the key.
    let v0 = [unhex(G), vec![5; 10]].concat();
    let p = accept(&base_with(25, v0));
    assert_eq!(
        p.group_key_reveal,
        Some(GroupKeyReveal::V0 {
            raw_key: key(G),
            tapscript_root: vec![5; 10]
        })
    );
    is(&refuse(&base_with(25, unhex(OFF_CURVE))), |e| {
        matches!(
            e,
            DecodeError::InvalidPublicKey {
                context: Context::GroupKeyReveal,
                ..
            }
        )
    });
    // V1 round-trips.
    let mut proof = Proof::decode(&base()).unwrap();
    let v1 = GroupKeyReveal::V1 {
        version: 2,
        internal_key: key(G),
        tapscript_root: [7; 32],
        custom_subtree_root: Some([9; 32]),
    };
    proof.group_key_reveal = Some(v1.clone());
    let bytes = proof.encode();
    assert_eq!(accept(&bytes).group_key_reveal, Some(v1));
    let v1_records = split(&record(&proof_records(&bytes), 25));
    is(
        &refuse(&base_with(25, join(&with_record(&v1_records, 9, vec![1])))),
        |e| {
            matches!(
                e,
                DecodeError::UnknownDroppedType {
                    context: Context::GroupKeyReveal,
                    record_type: 9,
                    ..
                }
            )
        },
    );
    is(
        &refuse(&base_with(
            25,
            join(&with_record(&v1_records, 7, vec![0; 32])),
        )),
        |e| {
            matches!(
                e,
                DecodeError::NonCanonical {
                    context: Context::GroupKeyReveal,
                    reason: NonCanonicalReason::ZeroHash,
                    ..
                }
            )
        },
    );
    assert_eq!(
        refuse(&base_with(25, join(&without_record(&v1_records, 4)))),
        DecodeError::MissingRecord {
            context: Context::GroupKeyReveal,
            record_type: 4
        }
    );
}

/// Offset of record `t` in the base proof.
fn refuse_offset(t: u64) -> usize {
    let records = with_record(&proof_records(&base()), t, vec![]);
    let at = records.iter().position(|(rt, _)| *rt == t).unwrap();
    4 + join(&records[..at]).len()
}

fn meta_base() -> Vec<u8> {
    // "normal asset with all meta reveal fields".
    generated(13)
}

fn meta_with(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
    proof_from(&with_record(
        &proof_records(&meta_base()),
        17,
        join(records),
    ))
}

#[test]
fn meta_reveals_are_strict() {
    let p = accept(&meta_base());
    let meta = p.meta_reveal.clone().unwrap();
    assert!(
        meta.universe_commitments
            && meta.decimal_display.is_some()
            && meta.delegation_key.is_some()
    );
    assert_eq!(meta.meta_hash(), p.asset.genesis.meta_hash);
    let m = split(&record(&proof_records(&meta_base()), 17));
    let err = |records: Vec<(u64, Vec<u8>)>| refuse(&meta_with(&records));
    is(&err(with_record(&m, 7, vec![0])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                context: Context::MetaReveal,
                reason: NonCanonicalReason::DefaultValue,
                ..
            }
        )
    });
    is(&err(with_record(&m, 7, vec![2])), |e| {
        matches!(
            e,
            DecodeError::InvalidBool {
                context: Context::MetaReveal,
                value: 2,
                ..
            }
        )
    });
    is(&err(with_record(&m, 5, vec![])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                reason: NonCanonicalReason::EmptyRecord,
                ..
            }
        )
    });
    for url in [&b"not a url"[..], &b"example.com"[..], &b""[..], &b":x"[..]] {
        let urls = inline_list(&[url.to_vec()]);
        is(&err(with_record(&m, 9, urls)), |e| {
            matches!(e, DecodeError::InvalidUrl { .. })
        });
    }
    let fine = inline_list(&[
        b"https://universe.example:10029".to_vec(),
        b"/relative".to_vec(),
    ]);
    assert_eq!(
        accept(&meta_with(&with_record(&m, 9, fine)))
            .meta_reveal
            .unwrap()
            .canonical_universes
            .len(),
        2
    );
    is(&err(with_record(&m, 11, vec![])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                reason: NonCanonicalReason::EmptyRecord,
                ..
            }
        )
    });
    is(&err(with_record(&m, 11, vec![0; 33])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                reason: NonCanonicalReason::EmptyKey,
                ..
            }
        )
    });
    is(&err(with_record(&m, 11, vec![2; 34])), |e| {
        matches!(
            e,
            DecodeError::RecordTooLarge {
                context: Context::MetaReveal,
                record_type: 11,
                length: 34,
                max: 33,
                ..
            }
        )
    });
    assert_eq!(
        err(without_record(&m, 2)),
        DecodeError::MissingRecord {
            context: Context::MetaReveal,
            record_type: 2
        }
    );

    // Every field set, and an unknown odd record, round-trips.
    let mut proof = p;
    proof.meta_reveal = Some(MetaReveal {
        meta_type: 1,
        data: b"{}".to_vec(),
        decimal_display: Some(0),
        universe_commitments: true,
        canonical_universes: vec![b"https://a.example".to_vec()],
        delegation_key: Some(key(G)),
        unknown_odd_types: [(13, vec![1, 2])].into(),
    });
    let bytes = proof.encode();
    assert_eq!(accept(&bytes), proof);
}

/// A Taproot proof for output 1 with `tapscript` as its tapscript proof.
fn tapscript_exclusion(tapscript: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let taproot = join(&[
        (0, 1u32.to_be_bytes().to_vec()),
        (2, unhex(G)),
        (5, join(tapscript)),
    ]);
    base_with(13, inline_list(&[taproot]))
}

#[test]
fn taproot_and_tapscript_proofs_are_strict() {
    let leaf_preimage = [vec![0, 0xc0, 1, 0x51]].concat();
    let p = accept(&tapscript_exclusion(&[
        (1, leaf_preimage.clone()),
        (4, vec![0]),
    ]));
    let tapscript = p.exclusion_proofs[0].tapscript_proof.clone().unwrap();
    assert_eq!(
        tapscript.tap_preimage_1,
        Some(TapscriptPreimage {
            sibling_type: 0,
            preimage: leaf_preimage[1..].to_vec()
        })
    );
    assert!(!tapscript.bip86);
    is(&refuse(&tapscript_exclusion(&[(4, vec![2])])), |e| {
        matches!(
            e,
            DecodeError::InvalidBool {
                context: Context::TapscriptProof,
                value: 2,
                ..
            }
        )
    });
    is(
        &refuse(&tapscript_exclusion(&[(1, vec![0]), (4, vec![1])])),
        |e| {
            matches!(
                e,
                DecodeError::NonCanonical {
                    context: Context::TapscriptProof,
                    reason: NonCanonicalReason::EmptyPreimage,
                    ..
                }
            )
        },
    );
    is(
        &refuse(&tapscript_exclusion(&[(1, vec![]), (4, vec![1])])),
        |e| {
            matches!(
                e,
                DecodeError::EmptyTapscriptPreimage {
                    context: Context::TapscriptProof,
                    ..
                }
            )
        },
    );
    assert_eq!(
        refuse(&tapscript_exclusion(&[])),
        DecodeError::MissingRecord {
            context: Context::TapscriptProof,
            record_type: 4
        }
    );
    is(&refuse(&base_with(13, vec![0])), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                context: Context::ExclusionProofs,
                reason: NonCanonicalReason::EmptyList,
                ..
            }
        )
    });

    // Both proof kinds in one Taproot proof.
    let inclusion = split(&record(&proof_records(&base()), 12));
    let both = with_record(&inclusion, 5, join(&[(4, vec![1])]));
    is(&refuse(&base_with(12, join(&both))), |e| {
        matches!(
            e,
            DecodeError::NonCanonical {
                context: Context::TaprootProof,
                reason: NonCanonicalReason::BothProofKinds,
                ..
            }
        )
    });
    is(
        &refuse(&base_with(
            12,
            join(&with_record(&inclusion, 2, vec![0; 33])),
        )),
        |e| {
            matches!(
                e,
                DecodeError::NonCanonical {
                    context: Context::TaprootProof,
                    reason: NonCanonicalReason::EmptyKey,
                    ..
                }
            )
        },
    );
    // A record past the P2P cap inside an exclusion proof's stream.
    let big = [bigsize(3), bigsize(65_536)].concat();
    let stream = [
        join(&[(0, 0u32.to_be_bytes().to_vec()), (2, unhex(G))]),
        big,
    ]
    .concat();
    is(&refuse(&base_with(13, inline_list(&[stream]))), |e| {
        matches!(
            e,
            DecodeError::RecordTooLarge {
                context: Context::TaprootProof,
                record_type: 3,
                ..
            }
        )
    });
}

#[test]
fn stxo_proofs_are_strict() {
    let bytes = regtest("valid regtest proof for split root");
    let mut proof = accept(&bytes);
    let cp = proof.inclusion_proof.commitment_proof.as_mut().unwrap();
    assert_eq!(cp.stxo_proofs.len(), 1);
    let entry = cp.stxo_proofs[0].clone();
    cp.stxo_proofs.push(entry);
    is(&refuse(&proof.encode()), |e| {
        matches!(
            e,
            DecodeError::DuplicateKey {
                context: Context::StxoProofs,
                ..
            }
        )
    });
    let records = proof_records(&bytes);
    let inclusion = split(&record(&records, 12));
    let commitment = split(&record(&inclusion, 3));
    let empty = with_record(&inclusion, 3, join(&with_record(&commitment, 7, vec![0])));
    is(
        &refuse(&proof_from(&with_record(&records, 12, join(&empty)))),
        |e| {
            matches!(
                e,
                DecodeError::NonCanonical {
                    context: Context::StxoProofs,
                    reason: NonCanonicalReason::EmptyList,
                    ..
                }
            )
        },
    );
}

#[test]
fn every_optional_structure_round_trips() {
    let mut proof = Proof::decode(&regtest("valid regtest proof for split root")).unwrap();
    let other = Proof::decode(&base()).unwrap();
    proof.exclusion_proofs.push(TaprootProof {
        output_index: 7,
        internal_key: key(G),
        commitment_proof: None,
        tapscript_proof: Some(TapscriptProof {
            tap_preimage_1: Some(TapscriptPreimage {
                sibling_type: 1,
                preimage: vec![3; 64],
            }),
            tap_preimage_2: Some(TapscriptPreimage {
                sibling_type: 0,
                preimage: vec![0xc0, 1, 0x51],
            }),
            bip86: false,
            unknown_odd_types: [(9, vec![])].into(),
        }),
        unknown_odd_types: [(1, vec![4])].into(),
    });
    proof.split_root_proof = Some(other.inclusion_proof.clone());
    proof.meta_reveal = other.meta_reveal.clone();
    proof.additional_inputs = vec![ProofFile::from_proofs(0, [base()])];
    proof.challenge_witness = Some(vec![]);
    proof.genesis_reveal = Some(other.asset.genesis.clone());
    proof.group_key_reveal = other.group_key_reveal.clone();
    proof.alt_leaves = other.alt_leaves.clone();
    proof.unknown_odd_types = [(29, vec![1]), (1001, vec![])].into();
    proof.asset.unknown_odd_types = [(15, vec![2])].into();
    let bytes = proof.encode();
    let decoded = accept(&bytes);
    assert_eq!(decoded, proof);
    assert_eq!(decoded.challenge_witness, Some(vec![]));
}
