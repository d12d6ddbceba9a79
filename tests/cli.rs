//! End-to-end tests of the `ms-smt` binary.
