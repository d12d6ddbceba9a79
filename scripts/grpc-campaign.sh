#!/usr/bin/env bash
#
# grpc-campaign.sh -- the hostile-client campaign against the gRPC universe
# server (crates/server/examples/grpc_campaign.rs; RELIABILITY.md,
# "Hostile clients, gRPC face"), on loopback only, over TLS:
#
#   1. SQLite (a new file, the crate's durable defaults);
#   2. Postgres with fsync on (scripts/pg-cluster.sh: a durable throwaway
#      cluster, destroyed at the end).
#
# Raises this shell's descriptor limit first: the slow-TLS phase holds
# --slow-conns connections in the campaign and up to the server's
# connection cap (1,024) in the server. Every log goes to
# target/grpc-campaign/<UTC time>/.
#
# Usage: scripts/grpc-campaign.sh [--phase-secs N] [--slow-conns N] [--no-build]
# (--no-build: use the example binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."

PHASE=6
SLOW=2000
BUILD=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --phase-secs) PHASE="$2"; shift 2 ;;
        --slow-conns) SLOW="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        *) echo "usage: $0 [--phase-secs N] [--slow-conns N] [--no-build]" >&2; exit 2 ;;
    esac
done

want=$((SLOW + 4096))
if [[ "$(ulimit -n)" -lt "$want" ]] && ! ulimit -n "$want" 2>/dev/null; then
    # Over the hard limit: raise it too (root may).
    ulimit -Hn "$want"
    ulimit -n "$want"
fi
echo "descriptor limit: $(ulimit -n)" >&2

LOG_DIR="target/grpc-campaign/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$LOG_DIR"
[[ $BUILD -eq 1 ]] && cargo build --release -p ms-smt-server --features grpc --example grpc_campaign >&2
BIN="${CARGO_TARGET_DIR:-target}/release/examples/grpc_campaign"

WORK="$(mktemp -d /tmp/mssmt-grpc-campaign.XXXXXX)"
PG_DIR=""
cleanup() {
    [[ -n "$PG_DIR" ]] && scripts/pg-cluster.sh destroy "$PG_DIR" >/dev/null 2>&1 || true
    rm -rf -- "$WORK"
}
trap cleanup EXIT

status=0
echo "machine: $(nproc) vCPUs, $(uname -sr); commit $(git rev-parse --short HEAD); start $(date -u +%FT%TZ); load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$LOG_DIR/machine.txt"
"$BIN" --db "$WORK/campaign.db" --phase-secs "$PHASE" --slow-conns "$SLOW" \
    | tee "$LOG_DIR/sqlite.md" || status=1
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG_DIR/sqlite.md"

PG_DIR="$(scripts/pg-cluster.sh init | tail -1)"
PG_URL="$(scripts/pg-cluster.sh start "$PG_DIR" | tail -1)"
psql "$PG_URL" -qc "CREATE DATABASE grpc_campaign" >/dev/null
"$BIN" --db "${PG_URL%/*}/grpc_campaign" --phase-secs "$PHASE" --slow-conns "$SLOW" \
    | tee "$LOG_DIR/postgres.md" || status=1
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); end $(date -u +%FT%TZ)" | tee -a "$LOG_DIR/postgres.md"
echo "logs: $LOG_DIR" >&2
exit "$status"
