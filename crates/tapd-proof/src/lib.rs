//! # ms-smt-tapd-proof: tapd's proofs, decoded strictly
//!
//! A universe leaf's value is a raw tapd proof. This crate decodes those
//! bytes, so a universe server can derive each leaf's facts (its universe,
//! proof type, key and sum) from the proof itself instead of trusting the
//! client that sent it:
//!
//! * [`Proof::decode`], [`Asset::decode`] and [`ProofFile::decode`] read
//!   tapd's encodings (`proof.Proof`, `asset.Asset`, `proof.File`) into
//!   plain structures, and their `encode` methods write them back byte for
//!   byte.
//! * [`UniverseLeafFacts::from_proof`] derives what tapd files the proof
//!   under: the universe ID and namespace, the issuance/transfer type, the
//!   leaf key and the leaf sum.
//!
//! **Nothing is verified.** The block header, the anchor transaction's
//! merkle proof, the Taproot commitments, the asset witnesses and
//! signatures, the meta and genesis reveals and the group key derivation
//! are decoded, not checked; a proof that decodes may still be invalid.
//! Verify it (tapd's `proof.Verifier`) before trusting the facts.
//!
//! ## Strictness
//!
//! The decoder accepts what tapd's decoder accepts and its encoder can
//! write, under tapd's size and count limits ([`limits`]): TLV types
//! strictly increasing, BigSize and CompactSize integers in shortest form,
//! unknown even types refused and unknown odd types kept (where tapd keeps
//! them), keys on the curve where tapd checks them. Beyond tapd it refuses
//! what would not survive tapd's own decode-and-re-encode (trailing bytes
//! in a record, default values written out, set padding bits, ...): such
//! bytes could never verify in tapd, which re-encodes assets, meta reveals
//! and MS-SMT proofs to check them. Each such case is listed in
//! `DIVERGENCES.md` and has a [`DecodeError`] variant; no input makes the
//! decoder panic, and no declared length or count makes it allocate more
//! than the input's size.
//!
//! ```
//! use ms_smt_tapd_proof::{DecodeError, Proof};
//!
//! assert!(matches!(Proof::decode(b"TAPF"), Err(DecodeError::BadMagic { .. })));
//! assert!(matches!(Proof::decode(b"TAP"), Err(DecodeError::Truncated { .. })));
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

extern crate alloc;

mod asset;
mod btc;
mod codec;
mod error;
mod facts;
mod file;
mod keys;
pub mod limits;
mod mssmt;
mod proof;
mod secp;
mod taproot;
pub mod types;

pub use asset::{AltLeaf, Asset, Genesis, PrevId, SplitCommitment, Witness};
pub use btc::{BlockHeader, OutPoint, Transaction, TxIn, TxOut, display_hash, double_sha256};
pub use error::{Context, DecodeError, FactsError, KeyError, NonCanonicalReason};
pub use facts::{ProofType, UniverseLeafFacts};
pub use file::{FILE_MAGIC, ProofFile, ProofFileEntry, chain_hash};
pub use keys::PublicKey;
pub use mssmt::{MAX_TREE_LEVELS, MsSmtNode, MsSmtProof, empty_tree_hash};
pub use proof::{GroupKeyReveal, MetaReveal, PROOF_MAGIC, Proof, TxMerkleProof};
pub use taproot::{
    AssetProof, CommitmentProof, StxoProof, TapCommitmentProof, TaprootAssetProof, TaprootProof,
    TapscriptPreimage, TapscriptProof,
};
