//! Merkle proofs (spec §4): 256 siblings, verification, compression and the
//! Go wire format; multi-key proofs and update proofs for batches; nested
//! proofs up a chain of parent trees; sum proofs of a prefix or a key
//! range. The proofs themselves are re-exported at the crate root; this module holds
//! their errors. All of them are ms-smt-core's.

pub use ms_smt_core::proof::{
    DecodeError, MAX_NESTED_LEVELS, MultiDecodeError, MultiProofError, NestedDecodeError,
    SumDecodeError, SumProofError, UpdateProofError, WrongLength,
};
