//! Merkle proofs (spec §4): 256 siblings, verification, compression and the
//! Go wire format; multi-key proofs and update proofs for batches; nested
//! proofs up a chain of parent trees; sum proofs of a prefix or a key
//! range. The proofs themselves are re-exported at the crate root; this
//! module holds their errors.

pub(crate) mod compressed;
mod decode_error;
pub(crate) mod multi;
pub(crate) mod nested;
pub(crate) mod single;
pub(crate) mod sum;
pub(crate) mod update;

pub use decode_error::DecodeError;
pub use multi::{MultiDecodeError, MultiProofError};
pub use nested::{MAX_NESTED_LEVELS, NestedDecodeError};
pub use single::WrongLength;
pub use sum::{SumDecodeError, SumProofError};
pub use update::UpdateProofError;
