#!/usr/bin/env bash
#
# reliability-campaign.sh -- the long forms of the reliability tests
# (RELIABILITY.md). The README test command runs the same tests with small
# counts; this script runs them at the counts RELIABILITY.md reports and
# keeps every log under target/reliability/<UTC time>/.
#
# Usage: scripts/reliability-campaign.sh [--no-fuzz] [--fuzz-seconds N]
#
#   1. crash:        200 SIGKILLs on SQLite, 100 on Postgres, 20 immediate
#                    stops of an fsync-on Postgres (crates/sql/tests/crash.rs); 100
#                    SIGKILLs of a 64-submitter Writer on each engine
#                    (crates/sql/tests/crash_writer.rs); 100 SIGKILLs of a
#                    64-submitter ForestWriter over 16 trees and a parent
#                    on each engine (crates/sql/tests/crash_forest.rs)
#   2. contention:   4 processes on one SQLite file, 8 Postgres connections,
#                    60 batches each (crates/sql/tests/contention.rs)
#   3. cancellation: the drop-at-every-poll campaign 50 times over
#                    (crates/sql/tests/cancellation.rs)
#   4. corruption:   5,000 random corruptions per store and layout
#                    (crates/sql/tests/audit.rs)
#   5. faults:       failpoints, injected fsync EIO, ENOSPC, cut connections
#                    (crates/sql/tests/faults.rs, crates/sql/tests/io_faults.rs, crates/sql/tests/ambiguous.rs)
#   6. fuzzing:      every cargo-fuzz target for N seconds (default 3600)
#                    each, through scripts/fuzz-campaign.sh
#
# Postgres comes from scripts/with-postgres.sh (MSSMT_PG_URL, or a
# throwaway server). Stops at the first failure.

set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ=1
FUZZ_SECONDS=3600
while [[ $# -gt 0 ]]; do
    case "$1" in
        --no-fuzz) FUZZ=0; shift ;;
        --fuzz-seconds) FUZZ_SECONDS="$2"; shift 2 ;;
        *) echo "usage: $0 [--no-fuzz] [--fuzz-seconds N]" >&2; exit 2 ;;
    esac
done

LOG_DIR="target/reliability/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$LOG_DIR"
echo "logs: $LOG_DIR" >&2

# step NAME CMD...: runs CMD with its output in $LOG_DIR/NAME.log and the
# summary lines on the terminal; fails the script when CMD fails.
step() {
    local name="$1"; shift
    local start=$SECONDS
    echo "== $name" >&2
    if ! "$@" >"$LOG_DIR/$name.log" 2>&1; then
        tail -n 40 "$LOG_DIR/$name.log" >&2
        echo "== $name FAILED (log: $LOG_DIR/$name.log)" >&2
        exit 1
    fi
    grep -E '^(test result|[a-z_ ]+:)' "$LOG_DIR/$name.log" | grep -v '^test result: ok. 0 passed' >&2 || true
    echo "== $name ok in $((SECONDS - start)) s" >&2
}

cargo build --release --all-features -p ms-smt-sql --tests >/dev/null

step crash env MSSMT_CRASH_KILLS_SQLITE=200 MSSMT_CRASH_KILLS_PG=100 MSSMT_CRASH_PG_STOPS=20 \
    scripts/with-postgres.sh cargo test --release --all-features -p ms-smt-sql --test campaigns -- crash:: --nocapture
step crash-writer env MSSMT_CRASH_WRITER_KILLS=100 \
    scripts/with-postgres.sh cargo test --release --all-features -p ms-smt-sql --test campaigns -- crash_writer:: --nocapture
step crash-forest env MSSMT_CRASH_FOREST_KILLS=100 \
    scripts/with-postgres.sh cargo test --release --all-features -p ms-smt-sql --test campaigns -- crash_forest:: --nocapture

step contention env MSSMT_CONTENTION_BATCHES=60 \
    scripts/with-postgres.sh cargo test --release --all-features -p ms-smt-sql --test campaigns -- contention:: --nocapture

step cancellation scripts/with-postgres.sh bash -c \
    'for i in $(seq 1 50); do cargo test --release --all-features -p ms-smt-sql --test suite cancellation:: -- --nocapture || exit 1; done'

step corruption env MSSMT_AUDIT_CORRUPTIONS=5000 \
    scripts/with-postgres.sh cargo test --release --all-features -p ms-smt-sql --test suite audit:: -- --nocapture

step faults scripts/with-postgres.sh bash -c \
    'cargo test --release --all-features -p ms-smt-sql --test faults -- --nocapture &&
     cargo test --release --all-features -p ms-smt-sql --test campaigns -- io_faults:: --nocapture'
step ambiguous scripts/with-postgres.sh cargo test --release --all-features -p ms-smt-sql \
    --test suite ambiguous:: -- --nocapture

if [[ $FUZZ -eq 1 ]]; then
    step fuzz scripts/fuzz-campaign.sh -t "$FUZZ_SECONDS" -o "$LOG_DIR/fuzz"
fi
echo "all campaigns passed; logs in $LOG_DIR" >&2
