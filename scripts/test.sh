#!/usr/bin/env bash
#
# test.sh -- every test of the workspace's root crate, PostgreSQL included:
# the README's test command, and the first step of .ci/run.
#
# Unit, integration and doc tests, in release, under scripts/with-postgres.sh
# (a throwaway local PostgreSQL unless MSSMT_PG_URL is set). Examples are not
# linked here: `cargo test` alone would build all of them in release (15
# binaries, ~4 minutes of a clean CI build) only to check that they compile,
# which .ci/run's `cargo clippy --all-targets` does already.
#
# Arguments go to the first cargo invocation's test binaries, e.g.
#   scripts/test.sh --test suite -- changes::
# runs one module of the suite (doc tests are then skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -gt 0 ]; then
    exec scripts/with-postgres.sh cargo test --release --all-features "$@"
fi
exec scripts/with-postgres.sh bash -c \
    'cargo test --release --all-features --lib --bins --tests &&
     cargo test --release --all-features --doc'
