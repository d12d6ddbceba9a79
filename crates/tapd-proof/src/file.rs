//! Proof files (`proof.File`): an asset's proofs back to its genesis, each
//! chained to the one before by a hash.

use alloc::vec::Vec;

use sha2::{Digest, Sha256};

use crate::codec::{Reader, count, len_u64, put_bigsize};
use crate::error::{Context, DecodeError};
use crate::limits::{FILE_MAX_NUM_PROOFS, FILE_MAX_PROOF_SIZE};
use crate::proof::Proof;

/// The magic prefix of an encoded proof file: `TAPF`.
pub const FILE_MAGIC: [u8; 4] = *b"TAPF";

/// One proof of a file, as bytes, with its chain hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProofFileEntry {
    /// The encoded proof (not decoded by [`ProofFile::decode`], as in tapd;
    /// see [`ProofFileEntry::decode_proof`]).
    pub proof: Vec<u8>,
    /// `sha256(previous entry's hash || proof)`, the zero hash before the
    /// first entry.
    pub hash: [u8; 32],
}

impl ProofFileEntry {
    /// Decodes the entry's proof.
    pub fn decode_proof(&self) -> Result<Proof, DecodeError> {
        Proof::decode(&self.proof)
    }
}

/// The chain hash of a proof after `prev_hash` (tapd's `hashProof`).
pub fn chain_hash(prev_hash: &[u8; 32], proof: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prev_hash);
    h.update(proof);
    h.finalize().into()
}

/// A proof file.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ProofFile {
    /// The file version (0 today; tapd decodes any u32).
    pub version: u32,
    /// The proofs, genesis first.
    pub entries: Vec<ProofFileEntry>,
}

impl ProofFile {
    /// Decodes a proof file (tapd's `File.Decode`): the `TAPF` magic, a
    /// big-endian u32 version, a BigSize count (at most 420,000) of entries,
    /// each a BigSize length (at most 128 MiB), the proof and its 32-byte
    /// chain hash, which must match. Nothing may follow.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::read_exact(Reader::new(bytes))
    }

    pub(crate) fn read_exact(mut r: Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::ProofFile;
        let magic: [u8; 4] = r.array(c)?;
        if magic != FILE_MAGIC {
            return Err(DecodeError::BadMagic {
                context: c,
                expected: FILE_MAGIC,
                found: magic,
            });
        }
        let version = r.u32_be(c)?;
        let (n, cap) = count(&mut r, FILE_MAX_NUM_PROOFS, 33, c, true)?;
        let mut entries = Vec::with_capacity(cap);
        let mut prev_hash = [0u8; 32];
        for index in 0..n {
            let proof = r.inline_bytes(FILE_MAX_PROOF_SIZE, c)?.rest().to_vec();
            let offset = r.offset();
            let hash: [u8; 32] = r.array(c)?;
            if chain_hash(&prev_hash, &proof) != hash {
                return Err(DecodeError::ChecksumMismatch { index, offset });
            }
            prev_hash = hash;
            entries.push(ProofFileEntry { proof, hash });
        }
        r.finish(c)?;
        Ok(ProofFile { version, entries })
    }

    /// The encoded file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = FILE_MAGIC.to_vec();
        out.extend_from_slice(&self.version.to_be_bytes());
        put_bigsize(&mut out, len_u64(self.entries.len()));
        for entry in &self.entries {
            put_bigsize(&mut out, len_u64(entry.proof.len()));
            out.extend_from_slice(&entry.proof);
            out.extend_from_slice(&entry.hash);
        }
        out
    }

    /// A file of `proofs` (encoded proofs), with their chain hashes.
    pub fn from_proofs(version: u32, proofs: impl IntoIterator<Item = Vec<u8>>) -> Self {
        let mut prev_hash = [0u8; 32];
        let entries = proofs
            .into_iter()
            .map(|proof| {
                let hash = chain_hash(&prev_hash, &proof);
                prev_hash = hash;
                ProofFileEntry { proof, hash }
            })
            .collect();
        ProofFile { version, entries }
    }

    /// Decodes every proof of the file.
    pub fn decode_proofs(&self) -> Result<Vec<Proof>, DecodeError> {
        self.entries
            .iter()
            .map(ProofFileEntry::decode_proof)
            .collect()
    }

    /// Decodes the last proof, if the file has any.
    pub fn last_proof(&self) -> Option<Result<Proof, DecodeError>> {
        self.entries.last().map(ProofFileEntry::decode_proof)
    }
}
