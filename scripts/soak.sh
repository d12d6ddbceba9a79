#!/usr/bin/env bash
#
# soak.sh -- the soak campaign on one engine (crates/sql/examples/soak.rs): a short
# run that measures the writer's short-run rate, then the long run with the
# same settings, compared against it; each ends with the checks, the
# maintenance below, and a fresh build of the same leaves.
#
# Usage:
#   scripts/soak.sh ENGINE [MINUTES] [SHORT_MINUTES]
#     ENGINE          sqlite | postgres
#     MINUTES         the long run (default 60)
#     SHORT_MINUTES   the short run (default 3; 0 skips it)
#
# Environment:
#   SOAK_OUT            where the CSV, SVG, JSON and logs go
#                       (default ./soak-out/ENGINE-<UTC date>)
#   SOAK_DIR            where the SQLite database lives (default $SOAK_OUT)
#   SOAK_FLAGS          more flags for the harness (see `soak --help`),
#                       e.g. "--submitters 200 --big-initial 2000000"
#   SOAK_MAINTAIN       the maintenance run after each run, `;`-separated
#                       ms-smt command lines (default: the README's recipe,
#                       "maintain --vacuum plain;maintain --vacuum full")
#   MSSMT_BENCH_PG_URL  a durable Postgres (fsync on) to use; without it a
#                       cluster of scripts/pg-cluster.sh is started (fsync
#                       on, PostgreSQL's defaults otherwise) and destroyed
#                       at the end
#   SOAK_PG_CONF        lines added to that cluster's postgresql.conf before
#                       it starts, e.g. "shared_buffers = 6GB" (the README's
#                       advice past 10^6 leaves) or, with $'...' quoting,
#                       $'shared_buffers = 6GB\nmax_wal_size = 16GB\ncheckpoint_timeout = 15min'
#                       (its advice under sustained writes; default: none)
#   CARGO_TARGET_DIR    as cargo takes it
#   MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_
#                       glibc's allocator settings pass through to the
#                       harness (README, "Running it for months": memory);
#                       the summary lists them under "malloc_env"
#
# The short run's rate is its acknowledged leaves over its load time; the
# long run reports its own rate against it (`rate_vs_short` in
# summary-ENGINE.json). Nothing here needs root; the Postgres cluster
# does what scripts/pg-cluster.sh does.

set -euo pipefail

readonly PROG="soak"
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

ENGINE="${1:-}"
MINUTES="${2:-60}"
SHORT="${3:-3}"
case "$ENGINE" in
    sqlite | postgres) ;;
    *) die "usage: $0 sqlite|postgres [MINUTES] [SHORT_MINUTES]" ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="${SOAK_OUT:-$ROOT/soak-out/$ENGINE-$(date -u +%Y%m%dT%H%M%SZ)}"
DIR="${SOAK_DIR:-$OUT}"
MAINTAIN="${SOAK_MAINTAIN:-maintain --vacuum plain;maintain --vacuum full}"
mkdir -p "$OUT" "$DIR"

log "building the harness and the CLI"
(cd "$ROOT" && cargo build --release -p ms-smt-sql --example soak && cargo build --release -p ms-smt-cli --bin ms-smt) >&2
SOAK="$TARGET/release/examples/soak"
CLI="$TARGET/release/ms-smt"

PG_DIR=""
cleanup() {
    if [[ -n "$PG_DIR" ]]; then
        "$ROOT/scripts/pg-cluster.sh" destroy "$PG_DIR" || true
    fi
}
trap cleanup EXIT

ENGINE_FLAGS=()
if [[ "$ENGINE" == postgres ]]; then
    URL="${MSSMT_BENCH_PG_URL:-}"
    if [[ -z "$URL" ]]; then
        PG_DIR="$("$ROOT/scripts/pg-cluster.sh" init)"
        if [[ -n "${SOAK_PG_CONF:-}" ]]; then
            printf '%s\n' "$SOAK_PG_CONF" >>"$PG_DIR/data/postgresql.conf"
            log "postgresql.conf: $SOAK_PG_CONF"
        fi
        URL="$("$ROOT/scripts/pg-cluster.sh" start "$PG_DIR")"
        log "durable cluster $PG_DIR at $URL"
    fi
    ENGINE_FLAGS=(--engine postgres --pg-url "$URL")
else
    ENGINE_FLAGS=(--engine sqlite)
fi

# run NAME MINUTES [FLAGS...]: one run of the harness into $OUT/NAME.
run() {
    local name="$1" minutes="$2"
    shift 2
    local out="$OUT/$name"
    mkdir -p "$out"
    local db=()
    [[ "$ENGINE" == sqlite ]] && db=(--db "$DIR/$name.db")
    log "$name: $minutes min (log in $out/soak.log)"
    # shellcheck disable=SC2086 # SOAK_FLAGS is a list of flags
    "$SOAK" "${ENGINE_FLAGS[@]}" "${db[@]}" --out "$out" --minutes "$minutes" \
        --cli "$CLI" "$@" ${SOAK_FLAGS:-} >"$out/summary.txt" 2>"$out/soak.log"
    [[ "$ENGINE" == sqlite ]] && rm -f "$DIR/$name.db" "$DIR/$name.db-wal" "$DIR/$name.db-shm"
    return 0
}

SHORT_RATE=()
if [[ "$SHORT" != 0 ]]; then
    # The short run only measures the rate: no maintenance, no fresh build.
    run short "$SHORT" --fresh no
    RATE="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["leaves_per_s"])' \
        "$OUT/short/summary-$ENGINE.json")"
    log "short-run rate: $RATE leaves/s"
    SHORT_RATE=(--short-rate "$RATE")
fi
run long "$MINUTES" --maintain "$MAINTAIN" "${SHORT_RATE[@]}"
log "done: $OUT/long/soak-$ENGINE.csv, soak-$ENGINE.svg, summary-$ENGINE.json"
