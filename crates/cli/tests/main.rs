//! The `ms-smt` binary as an operator runs it, as one test binary.

use ms_smt_test_support as support;

mod cli;
mod cli_support;
mod cli_tapd;
mod cli_universe;
