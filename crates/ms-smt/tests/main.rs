//! The integration suite of the trees on the memory store and the proofs
//! they give, as one test binary (`cargo test -p ms-smt --test suite
//! properties::` runs one module).

use ms_smt_test_support as support;

/// The fuzz targets' properties, shared with `properties` and
/// `proof_mutations`.
#[path = "../../../fuzz/src/props.rs"]
mod props;

mod multiproof;
mod proof_mutations;
mod proof_reader;
mod properties;
mod spec_examples;
mod sum_proofs;
