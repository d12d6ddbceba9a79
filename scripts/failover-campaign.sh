#!/usr/bin/env bash
#
# failover-campaign.sh -- the failover figures of RELIABILITY.md ("Failover
# under Patroni"): crates/sql/examples/failover.rs on a real HA cluster
# (scripts/pg-ha.sh), first with synchronous replication, then with
# asynchronous replication.
#
# Usage:
#   scripts/failover-campaign.sh [SYNC_ROUNDS [ASYNC_ROUNDS]]
#
# For each mode (sync with SYNC_ROUNDS rounds, default 52; async with
# ASYNC_ROUNDS, default 12): `pg-ha.sh up` (`up --async`), the writer's
# leaves/s with no fault (`--throughput-only`, MSSMT_FAILOVER_TPUT_SECS,
# default 30), the failover rounds (kinds kill, stop, freeze, poweroff in
# turn), `pg-ha.sh down`.  Prints both tables at the end and keeps every
# output in OUT (MSSMT_FAILOVER_OUT, default /tmp/mssmt-failover-<time>).
#
# Exit status: non-zero when the sync campaign lost an acknowledged leaf
# (or any audit problem, hung operation, or a set-up failure); the async
# campaign may lose acknowledged leaves (that is what it measures) and its
# status is only reported.
#
# Environment: CARGO_TARGET_DIR (where the example is built), MSSMT_HA_DIR
# (the cluster's state directory, as for pg-ha.sh).

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HA="$ROOT/scripts/pg-ha.sh"
SYNC_ROUNDS="${1:-52}"
ASYNC_ROUNDS="${2:-12}"
TPUT_SECS="${MSSMT_FAILOVER_TPUT_SECS:-30}"
OUT="${MSSMT_FAILOVER_OUT:-/tmp/mssmt-failover-$(date -u +%Y%m%dT%H%M%SZ)}"
KINDS="kill,stop,freeze,poweroff"

log() { printf 'failover-campaign: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$SYNC_ROUNDS" =~ ^[0-9]+$ && "$ASYNC_ROUNDS" =~ ^[0-9]+$ ]] || die "usage: $0 [SYNC_ROUNDS [ASYNC_ROUNDS]]"
[[ "$TPUT_SECS" =~ ^[0-9]+$ ]] || die "MSSMT_FAILOVER_TPUT_SECS must be a number of seconds"
mkdir -p "$OUT"

log "building crates/sql/examples/failover.rs"
(cd "$ROOT" && cargo build --release -p ms-smt-sql --all-features --example failover) >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/failover"
[[ -x "$BIN" ]] || die "$BIN was not built"

CLUSTER_UP=0
cleanup() {
    if [[ "$CLUSTER_UP" -eq 1 ]]; then
        "$HA" down >&2 || true
    fi
}
trap cleanup EXIT

# campaign MODE ROUNDS [up flags]: one cluster, throughput then failovers;
# the failover run's exit status.
campaign() {
    local mode="$1" rounds="$2"
    shift 2
    log "$mode: starting the cluster"
    "$HA" up "$@" >"$OUT/$mode.env" 2>"$OUT/$mode-up.log" || { cat "$OUT/$mode-up.log" >&2; die "$mode: pg-ha.sh up failed"; }
    CLUSTER_UP=1
    set -a
    # shellcheck disable=SC1090
    source "$OUT/$mode.env"
    set +a
    log "$mode: $TPUT_SECS s of load without faults"
    "$BIN" --throughput-only "$TPUT_SECS" >"$OUT/$mode-throughput.md" 2>"$OUT/$mode-throughput.log" \
        || { cat "$OUT/$mode-throughput.log" >&2; die "$mode: throughput run failed"; }
    log "$mode: $rounds failover rounds ($KINDS)"
    local status=0
    "$BIN" --rounds "$rounds" --kinds "$KINDS" --script "$HA" \
        >"$OUT/$mode-failover.md" 2>"$OUT/$mode-failover.log" || status=$?
    tail -n 1 "$OUT/$mode-failover.log" >&2
    log "$mode: stopping the cluster"
    "$HA" down >&2
    CLUSTER_UP=0
    return "$status"
}

sync_status=0
async_status=0
campaign sync "$SYNC_ROUNDS" || sync_status=$?
if [[ "$ASYNC_ROUNDS" -gt 0 ]]; then
    campaign async "$ASYNC_ROUNDS" --async || async_status=$?
fi

for mode in sync async; do
    [[ -f "$OUT/$mode-failover.md" ]] || continue
    printf '\n## %s replication\n\nThroughput without faults (%s s):\n\n' "$mode" "$TPUT_SECS"
    cat "$OUT/$mode-throughput.md"
    printf '\nFailover rounds:\n\n'
    cat "$OUT/$mode-failover.md"
done
printf '\nOutputs in %s; sync exit status %s, async exit status %s\n' "$OUT" "$sync_status" "$async_status"
exit "$sync_status"
