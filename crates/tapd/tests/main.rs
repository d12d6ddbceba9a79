//! tapd interop against the reference's own databases (`../shared/fixtures/tapd`).

use ms_smt_test_support as support;

mod tapd;
