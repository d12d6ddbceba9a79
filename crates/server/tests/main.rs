//! The federation server and its HTTP peer, as one test binary.

use ms_smt_test_support as support;

mod federation;
mod federation_access;
mod upgrade;
