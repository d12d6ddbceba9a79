#!/usr/bin/env bash
#
# federation-campaign.sh -- the hostile-client campaign against the
# federation server (crates/server/examples/federation_campaign.rs; RELIABILITY.md,
# "Hostile clients"), on loopback only:
#
#   1. SQLite (a new file, the crate's durable defaults), over TCP and TLS;
#   2. Postgres with fsync on (scripts/pg-cluster.sh: a durable throwaway
#      cluster), over TCP and TLS;
#   3. the cost figures: TLS against plain HTTP, token cache off against on
#      (SQLite, then Postgres).
#
# Raises this shell's descriptor limit first: 10,000 half-open connections
# need 10,000 descriptors in the campaign and up to the server's connection
# cap in the server. Every log goes to target/federation-campaign/<UTC time>/.
#
# Usage: scripts/federation-campaign.sh [--phase-secs N] [--half-open N] [--cost-secs N] [--no-build]
# (--no-build: use the example binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."

PHASE=6
HALF_OPEN=10000
COST=5
BUILD=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --phase-secs) PHASE="$2"; shift 2 ;;
        --half-open) HALF_OPEN="$2"; shift 2 ;;
        --cost-secs) COST="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        *) echo "usage: $0 [--phase-secs N] [--half-open N] [--cost-secs N] [--no-build]" >&2; exit 2 ;;
    esac
done

want=$((HALF_OPEN + 4096))
if [[ "$(ulimit -n)" -lt "$want" ]] && ! ulimit -n "$want" 2>/dev/null; then
    # Over the hard limit: raise it too (root may).
    ulimit -Hn "$want"
    ulimit -n "$want"
fi
echo "descriptor limit: $(ulimit -n)" >&2

LOG_DIR="target/federation-campaign/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$LOG_DIR"
[[ $BUILD -eq 1 ]] && cargo build --release -p ms-smt-server --example federation_campaign >&2
BIN="${CARGO_TARGET_DIR:-target}/release/examples/federation_campaign"

WORK="$(mktemp -d /tmp/mssmt-fed-campaign.XXXXXX)"
PG_DIR=""
cleanup() {
    [[ -n "$PG_DIR" ]] && scripts/pg-cluster.sh destroy "$PG_DIR" >/dev/null 2>&1 || true
    rm -rf -- "$WORK"
}
trap cleanup EXIT

echo "machine: $(nproc) vCPUs, $(uname -sr); load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$LOG_DIR/machine.txt"
for tls in no yes; do
    "$BIN" --db "$WORK/campaign-$tls.db" --tls "$tls" --phase-secs "$PHASE" --half-open "$HALF_OPEN" \
        | tee "$LOG_DIR/sqlite-tls-$tls.md"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG_DIR/sqlite-tls-$tls.md"
done
"$BIN" --db "$WORK/cost.db" --cost "$COST" | tee "$LOG_DIR/cost-sqlite.md"

PG_DIR="$(scripts/pg-cluster.sh init)"
PG_URL="$(scripts/pg-cluster.sh start "$PG_DIR")"
for tls in no yes; do
    db="campaign_tls_$tls"
    psql "$PG_URL" -qc "CREATE DATABASE $db" >/dev/null
    "$BIN" --db "${PG_URL%/*}/$db" --tls "$tls" --phase-secs "$PHASE" --half-open "$HALF_OPEN" \
        | tee "$LOG_DIR/postgres-tls-$tls.md"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG_DIR/postgres-tls-$tls.md"
done
psql "$PG_URL" -qc "CREATE DATABASE cost" >/dev/null
"$BIN" --db "${PG_URL%/*}/cost" --cost "$COST" | tee "$LOG_DIR/cost-postgres.md"
echo "logs: $LOG_DIR" >&2
