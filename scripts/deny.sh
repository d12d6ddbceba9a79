#!/usr/bin/env bash
#
# deny.sh -- the supply-chain gate (.ci/run's first step): cargo-deny with
# the repository's deny.toml.
#
#   * cargo-deny is installed from crates.io (pinned version, --locked)
#     when this machine does not have it (a clean CI machine);
#   * licenses, bans and sources are always checked, and fail the gate;
#   * advisories need the RustSec database, fetched from the network: when
#     it cannot be fetched, the gate says so on stderr in one line that
#     starts with "cargo deny: advisories NOT CHECKED", and goes on; an
#     advisory found fails the gate.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly DENY_VERSION="0.20.2"

if ! cargo deny --version >/dev/null 2>&1; then
    echo "deny.sh: installing cargo-deny $DENY_VERSION from crates.io" >&2
    cargo install cargo-deny --version "$DENY_VERSION" --locked
fi

cargo deny check licenses bans sources

set +e
out="$(cargo deny check advisories 2>&1)"
status=$?
set -e
if [[ $status -eq 0 ]]; then
    printf '%s\n' "$out"
    echo "cargo deny: advisories ok"
elif grep -q "failed to fetch advisory database" <<<"$out"; then
    grep -m1 "failed to fetch advisory database" <<<"$out" >&2 || true
    echo "cargo deny: advisories NOT CHECKED: the RustSec advisory database could not be fetched from this machine (licenses, bans and sources were checked)" >&2
else
    printf '%s\n' "$out" >&2
    exit 1
fi
