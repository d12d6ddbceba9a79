#!/usr/bin/env bash
#
# test.sh -- every test of every crate of the workspace, PostgreSQL included:
# the README's test command, and the first step of .ci/run.
#
# Unit, integration and doc tests, in the `test-ci` profile (Cargo.toml: the
# release profile with the workspace's own crates at opt-level 1), under
# scripts/with-postgres.sh (a throwaway local PostgreSQL unless MSSMT_PG_URL
# is set). The unit and integration test binaries run three at a time
# (scripts/run-test-binaries.sh: `cargo test` runs them one by one); the
# doc tests then run through `cargo test --doc`. Examples are not linked here: `cargo test` alone would build all
# of them (15 binaries, ~4 minutes of a clean CI build) only to check that
# they compile, which .ci/run's `cargo clippy --all-targets` does already.
#
# Arguments go to one cargo invocation instead, e.g.
#   scripts/test.sh -p ms-smt-sql --test suite -- changes::
# runs one module of the SQL stores' suite (doc tests are then skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -gt 0 ]; then
    exec scripts/with-postgres.sh cargo test --profile test-ci --all-features "$@"
fi
exec scripts/with-postgres.sh bash -c \
    'scripts/run-test-binaries.sh &&
     cargo test --workspace --profile test-ci --all-features --no-fail-fast --doc'
