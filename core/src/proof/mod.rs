//! Merkle proofs (spec §4): 256 siblings, verification, compression and the
//! Go wire format; nested proofs up a chain of parent trees. The proofs
//! themselves are re-exported at the crate root; this module holds their
//! errors.

pub(crate) mod compressed;
mod decode_error;
pub(crate) mod nested;
pub(crate) mod single;

pub use decode_error::DecodeError;
pub use nested::{MAX_NESTED_LEVELS, NestedDecodeError};
pub use single::WrongLength;
