#!/usr/bin/env bash
#
# dependents.sh -- every crate of the workspace built as a crate that
# depends on it builds it (.ci/run's step after the tests):
#
#   * without dev-dependencies (so no `test-utils`, which the workspace's
#     own tests, benches and examples switch on through them), with no
#     features, the default set, every feature on its own and all of them
#     (the SQL stores: every set of their features with an engine in it),
#     each with clippy and warnings as errors (`cargo hack clippy
#     --each-feature --no-dev-deps`); cargo-hack is installed from
#     crates.io (pinned version, --locked) when this machine lacks it, as
#     scripts/deny.sh installs cargo-deny.
#
# The operator binary is checked here as `cargo install --path crates/cli`
# takes it (the CLI crate alone, its default features, no dev-deps) and
# linked by the test build (its tests run the binary); linking it once more
# in this feature set took 104 s of a 1,427 s CI run (with the gRPC client
# and server in it) for what the two already show, and is not done.
#
# A library item used outside its `cfg` (the `has_kernel` break of issue
# 57), or one that only a test build uses, fails here. (No `--locked` on
# the cargo-hack run: dropping the dev-dependencies changes the lock file
# while it runs, and cargo-hack puts both files back afterwards.)
set -euo pipefail
cd "$(dirname "$0")/.."

readonly HACK_VERSION="0.6.46"

if ! cargo hack --version >/dev/null 2>&1; then
    echo "dependents.sh: installing cargo-hack $HACK_VERSION from crates.io" >&2
    cargo install cargo-hack --version "$HACK_VERSION" --locked
fi

cargo hack clippy --workspace --exclude ms-smt-sql --each-feature --no-dev-deps \
    -- -D warnings
# The SQL stores need an engine: every set of their features with one.
cargo hack clippy -p ms-smt-sql --feature-powerset --at-least-one-of sqlite,postgres \
    --no-dev-deps -- -D warnings
