//! Taproot proofs (`proof.TaprootProof`) and what they carry: commitment
//! proofs with their asset and Taproot Asset MS-SMT proofs, STXO proofs,
//! tapscript proofs and tapscript preimages. Every stream here is decoded
//! with lnd's P2P record cap (65,535 bytes), as tapd does.

use alloc::collections::BTreeMap;
use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use crate::codec::{
    Reader, Record, Stream, TlvWriter, count, len_u64, put_bigsize, put_inline, required,
};
use crate::error::{Context, DecodeError, NonCanonicalReason};
use crate::keys::{KeyRule, PublicKey, read_key};
use crate::limits::{MAX_NUM_TAPROOT_PROOFS, MAX_RECORD_SIZE};
use crate::mssmt::MsSmtProof;
use crate::types::{
    asset_proof as ap, commitment_proof as cp, taproot_asset_proof as tap, taproot_proof as tp,
    tapscript_proof as tsp,
};

/// A tapscript sibling preimage (`commitment.TapscriptPreimage`): a type
/// byte (0 leaf, 1 branch; tapd decodes any byte and checks it only when
/// hashing) and the preimage bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct TapscriptPreimage {
    /// The sibling type.
    pub sibling_type: u8,
    /// The preimage.
    pub preimage: Vec<u8>,
}

impl TapscriptPreimage {
    /// Reads a preimage record (tapd's `TapscriptPreimageDecoder`): at most
    /// 65,535 bytes, at least the type byte.
    fn read_record(rec: Record<'_>, context: Context) -> Result<Self, DecodeError> {
        rec.max_len(context, MAX_RECORD_SIZE)?;
        let mut v = rec.value;
        if v.is_empty() {
            return Err(DecodeError::EmptyTapscriptPreimage {
                context,
                offset: rec.offset,
            });
        }
        let sibling_type = v.u8(Context::TapscriptPreimage)?;
        Ok(TapscriptPreimage {
            sibling_type,
            preimage: v.rest().to_vec(),
        })
    }

    /// The encoding: the type byte, then the preimage.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = alloc::vec![self.sibling_type];
        out.extend_from_slice(&self.preimage);
        out
    }
}

fn read_mssmt_record(rec: Record<'_>, context: Context) -> Result<MsSmtProof, DecodeError> {
    rec.max_len(context, MAX_RECORD_SIZE)?;
    MsSmtProof::read_exact(rec.value)
}

/// An asset proof (`commitment.AssetProof`): the MS-SMT proof of the asset
/// leaf in its asset commitment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AssetProof {
    /// The maximum asset version in the commitment.
    pub version: u8,
    /// The asset commitment's key: the asset ID, or for grouped assets the
    /// SHA-256 of the x-only group key (tapd's `TapCommitmentKey`).
    pub tap_key: [u8; 32],
    /// The MS-SMT proof.
    pub proof: MsSmtProof,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

impl AssetProof {
    fn read_record(rec: Record<'_>) -> Result<Self, DecodeError> {
        let c = Context::AssetProof;
        rec.max_len(c, MAX_RECORD_SIZE)?;
        let mut s = Stream::new(rec.value, c, true);
        let (mut version, mut tap_key, mut proof) = (None, None, None);
        let mut unknown_odd_types = BTreeMap::new();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                ap::VERSION => version = Some(rec.byte(c)?),
                ap::ASSET_ID => tap_key = Some(rec.fixed(c)?),
                ap::PROOF => proof = Some(read_mssmt_record(rec, c)?),
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        Ok(AssetProof {
            version: required(version, c, ap::VERSION)?,
            tap_key: required(tap_key, c, ap::ASSET_ID)?,
            proof: required(proof, c, ap::PROOF)?,
            unknown_odd_types,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.push(ap::VERSION, alloc::vec![self.version]);
        w.push(ap::ASSET_ID, self.tap_key.to_vec());
        w.push(ap::PROOF, self.proof.encode());
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }
}

/// A Taproot Asset proof (`commitment.TaprootAssetProof`): the MS-SMT proof
/// of the asset commitment in the Taproot Asset commitment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaprootAssetProof {
    /// The Taproot Asset commitment version.
    pub version: u8,
    /// The MS-SMT proof.
    pub proof: MsSmtProof,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

impl TaprootAssetProof {
    fn read_record(rec: Record<'_>) -> Result<Self, DecodeError> {
        let c = Context::TaprootAssetProof;
        rec.max_len(c, MAX_RECORD_SIZE)?;
        let mut s = Stream::new(rec.value, c, true);
        let (mut version, mut proof) = (None, None);
        let mut unknown_odd_types = BTreeMap::new();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                tap::VERSION => version = Some(rec.byte(c)?),
                tap::PROOF => proof = Some(read_mssmt_record(rec, c)?),
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        Ok(TaprootAssetProof {
            version: required(version, c, tap::VERSION)?,
            proof: required(proof, c, tap::PROOF)?,
            unknown_odd_types,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.push(tap::VERSION, alloc::vec![self.version]);
        w.push(tap::PROOF, self.proof.encode());
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }
}

/// A Taproot Asset commitment proof (`commitment.Proof`), as the values of
/// the STXO proof map carry it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TapCommitmentProof {
    /// The asset proof (absent when the asset commitment is not in the
    /// Taproot Asset commitment).
    pub asset_proof: Option<AssetProof>,
    /// The Taproot Asset proof.
    pub taproot_asset_proof: TaprootAssetProof,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

impl TapCommitmentProof {
    fn read_stream(r: Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::TapCommitmentProof;
        let mut s = Stream::new(r, c, true);
        let (mut asset_proof, mut taproot_asset_proof) = (None, None);
        let mut unknown_odd_types = BTreeMap::new();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                cp::ASSET_PROOF => asset_proof = Some(AssetProof::read_record(rec)?),
                cp::TAPROOT_ASSET_PROOF => {
                    taproot_asset_proof = Some(TaprootAssetProof::read_record(rec)?)
                }
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        Ok(TapCommitmentProof {
            asset_proof,
            taproot_asset_proof: required(taproot_asset_proof, c, cp::TAPROOT_ASSET_PROOF)?,
            unknown_odd_types,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        if let Some(p) = &self.asset_proof {
            w.push(cp::ASSET_PROOF, p.encode());
        }
        w.push(cp::TAPROOT_ASSET_PROOF, self.taproot_asset_proof.encode());
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }
}

/// One entry of a commitment proof's STXO proof map: the proof that the
/// spent-output marker asset keyed by `key` is (inclusion proofs) or is not
/// (exclusion proofs) committed to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StxoProof {
    /// The map key: a 33-byte serialized key, taken raw as tapd does.
    pub key: PublicKey,
    /// The commitment proof.
    pub proof: TapCommitmentProof,
}

/// A commitment proof (`proof.CommitmentProof`): a [`TapCommitmentProof`]
/// extended with the tapscript sibling and the STXO proofs, in one stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CommitmentProof {
    /// The asset proof (absent for an exclusion proof whose asset
    /// commitment is absent).
    pub asset_proof: Option<AssetProof>,
    /// The Taproot Asset proof.
    pub taproot_asset_proof: TaprootAssetProof,
    /// The preimage of the tapscript sibling of the Taproot Asset
    /// commitment leaf, if any.
    pub tap_sibling_preimage: Option<TapscriptPreimage>,
    /// The STXO proofs, in encoded order (tapd writes its Go map in random
    /// order; duplicates are refused).
    pub stxo_proofs: Vec<StxoProof>,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

fn read_stxo_proofs(rec: Record<'_>) -> Result<Vec<StxoProof>, DecodeError> {
    let c = Context::StxoProofs;
    let mut v = rec.value;
    let (n, cap) = count(&mut v, MAX_NUM_TAPROOT_PROOFS, 34, c, true)?;
    if n == 0 {
        return Err(rec.non_canonical(c, NonCanonicalReason::EmptyList));
    }
    let mut proofs = Vec::with_capacity(cap);
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        let offset = v.offset();
        let key = read_key(&mut v, KeyRule::Raw, c)?;
        let proof = TapCommitmentProof::read_stream(v.inline_bytes(MAX_RECORD_SIZE, c)?)?;
        if !seen.insert(key) {
            return Err(DecodeError::DuplicateKey { context: c, offset });
        }
        proofs.push(StxoProof { key, proof });
    }
    v.finish(c)?;
    Ok(proofs)
}

impl CommitmentProof {
    fn read_record(rec: Record<'_>) -> Result<Self, DecodeError> {
        let c = Context::CommitmentProof;
        rec.max_len(c, MAX_RECORD_SIZE)?;
        let mut s = Stream::new(rec.value, c, true);
        let (mut asset_proof, mut taproot_asset_proof, mut tap_sibling_preimage) =
            (None, None, None);
        let mut stxo_proofs = Vec::new();
        let mut unknown_odd_types = BTreeMap::new();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                cp::ASSET_PROOF => asset_proof = Some(AssetProof::read_record(rec)?),
                cp::TAPROOT_ASSET_PROOF => {
                    taproot_asset_proof = Some(TaprootAssetProof::read_record(rec)?)
                }
                cp::TAP_SIBLING_PREIMAGE => {
                    tap_sibling_preimage = Some(TapscriptPreimage::read_record(rec, c)?);
                }
                cp::STXO_PROOFS => stxo_proofs = read_stxo_proofs(rec)?,
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        Ok(CommitmentProof {
            asset_proof,
            taproot_asset_proof: required(taproot_asset_proof, c, cp::TAPROOT_ASSET_PROOF)?,
            tap_sibling_preimage,
            stxo_proofs,
            unknown_odd_types,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        if let Some(p) = &self.asset_proof {
            w.push(cp::ASSET_PROOF, p.encode());
        }
        w.push(cp::TAPROOT_ASSET_PROOF, self.taproot_asset_proof.encode());
        if let Some(p) = &self.tap_sibling_preimage {
            w.push(cp::TAP_SIBLING_PREIMAGE, p.encode());
        }
        if !self.stxo_proofs.is_empty() {
            let mut v = Vec::new();
            put_bigsize(&mut v, len_u64(self.stxo_proofs.len()));
            for entry in &self.stxo_proofs {
                v.extend_from_slice(entry.key.as_bytes());
                put_inline(&mut v, &entry.proof.encode());
            }
            w.push(cp::STXO_PROOFS, v);
        }
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }
}

/// A tapscript proof (`proof.TapscriptProof`): that an output commits to
/// no Taproot Asset commitment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct TapscriptProof {
    /// Preimage of a node at depth 0 or 1.
    pub tap_preimage_1: Option<TapscriptPreimage>,
    /// Preimage of its sibling at depth 1.
    pub tap_preimage_2: Option<TapscriptPreimage>,
    /// The output is a BIP-86 key-spend-only output.
    pub bip86: bool,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

impl TapscriptProof {
    fn read_record(rec: Record<'_>) -> Result<Self, DecodeError> {
        let c = Context::TapscriptProof;
        rec.max_len(c, MAX_RECORD_SIZE)?;
        let mut s = Stream::new(rec.value, c, true);
        let (mut tap_preimage_1, mut tap_preimage_2, mut bip86) = (None, None, None);
        let mut unknown_odd_types = BTreeMap::new();
        let preimage = |rec: Record<'_>| {
            let p = TapscriptPreimage::read_record(rec, c)?;
            // tapd's encoder skips an empty preimage.
            if p.preimage.is_empty() {
                return Err(rec.non_canonical(c, NonCanonicalReason::EmptyPreimage));
            }
            Ok(p)
        };
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                tsp::TAP_PREIMAGE_1 => tap_preimage_1 = Some(preimage(rec)?),
                tsp::TAP_PREIMAGE_2 => tap_preimage_2 = Some(preimage(rec)?),
                tsp::BIP86 => bip86 = Some(rec.bool(c)?),
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        Ok(TapscriptProof {
            tap_preimage_1,
            tap_preimage_2,
            bip86: required(bip86, c, tsp::BIP86)?,
            unknown_odd_types,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        if let Some(p) = &self.tap_preimage_1 {
            w.push(tsp::TAP_PREIMAGE_1, p.encode());
        }
        if let Some(p) = &self.tap_preimage_2 {
            w.push(tsp::TAP_PREIMAGE_2, p.encode());
        }
        w.push(tsp::BIP86, alloc::vec![u8::from(self.bip86)]);
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }
}

/// A Taproot proof (`proof.TaprootProof`): about one output of the anchor
/// transaction, with at most one of a commitment proof (the output commits
/// to a Taproot Asset commitment) and a tapscript proof (it does not).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaprootProof {
    /// The output's index in the anchor transaction.
    pub output_index: u32,
    /// The output's Taproot internal key.
    pub internal_key: PublicKey,
    /// The commitment proof.
    pub commitment_proof: Option<CommitmentProof>,
    /// The tapscript proof (never together with a commitment proof).
    pub tapscript_proof: Option<TapscriptProof>,
    /// Unknown odd records, kept to be re-encoded.
    pub unknown_odd_types: BTreeMap<u64, Vec<u8>>,
}

impl TaprootProof {
    /// Decodes a Taproot proof stream.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::read_stream(Reader::new(bytes))
    }

    pub(crate) fn read_stream(r: Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::TaprootProof;
        let mut s = Stream::new(r, c, true);
        let (mut output_index, mut internal_key) = (None, None);
        let (mut commitment_proof, mut tapscript_proof) = (None, None);
        let mut unknown_odd_types = BTreeMap::new();
        while let Some(rec) = s.next_record()? {
            match rec.typ {
                tp::OUTPUT_INDEX => output_index = Some(u32::from_be_bytes(rec.fixed(c)?)),
                tp::INTERNAL_KEY => {
                    rec.expect_len(c, 33)?;
                    let mut v = rec.value;
                    internal_key = Some(read_key(&mut v, KeyRule::Point, c)?);
                }
                tp::COMMITMENT_PROOF => commitment_proof = Some(CommitmentProof::read_record(rec)?),
                tp::TAPSCRIPT_PROOF => {
                    if commitment_proof.is_some() {
                        return Err(rec.non_canonical(c, NonCanonicalReason::BothProofKinds));
                    }
                    tapscript_proof = Some(TapscriptProof::read_record(rec)?);
                }
                _ => rec.keep_unknown(c, &mut unknown_odd_types)?,
            }
        }
        Ok(TaprootProof {
            output_index: required(output_index, c, tp::OUTPUT_INDEX)?,
            internal_key: required(internal_key, c, tp::INTERNAL_KEY)?,
            commitment_proof,
            tapscript_proof,
            unknown_odd_types,
        })
    }

    /// The Taproot proof stream. With both proofs set, only the commitment
    /// proof is written, as tapd does.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.push(tp::OUTPUT_INDEX, self.output_index.to_be_bytes().to_vec());
        w.push(tp::INTERNAL_KEY, self.internal_key.as_bytes().to_vec());
        if let Some(p) = &self.commitment_proof {
            w.push(tp::COMMITMENT_PROOF, p.encode());
        } else if let Some(p) = &self.tapscript_proof {
            w.push(tp::TAPSCRIPT_PROOF, p.encode());
        }
        w.unknown(&self.unknown_odd_types);
        w.finish()
    }
}
