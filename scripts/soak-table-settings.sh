#!/usr/bin/env bash
#
# soak-table-settings.sh -- the Postgres table settings for the strata,
# compared under the same churn: three durable clusters of
# scripts/pg-cluster.sh (fsync on), one soak (crates/sql/examples/soak.rs) each, all
# at once so that they share the machine's load alike:
#   ff100  fillfactor 100, autovacuum_vacuum_scale_factor 0.2 (PostgreSQL's defaults)
#   ff85   fillfactor 85 (room in each page for HOT updates), scale factor 0.2
#   av05   fillfactor 100, autovacuum_vacuum_scale_factor 0.05 (what schema
#          version 8 sets; the other two put PostgreSQL's default back)
# Each run starts from a big tree of 500,000 leaves and 500 small trees,
# applies its settings to ms_smt_strata before the build, churns for
# MINUTES (default 12), checks every acknowledged leaf, and builds the
# same leaves fresh for the bytes per leaf (BENCHMARKS.md, "Table settings
# for the strata").
#
# Usage: scripts/soak-table-settings.sh [MINUTES]
# Environment: OUT (default ./soak-out/table-settings-<UTC date>),
#              CARGO_TARGET_DIR as cargo takes it.
set -euo pipefail

MINUTES="${1:-12}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="${OUT:-$ROOT/soak-out/table-settings-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"

(cd "$ROOT" && cargo build --release -p ms-smt-sql --example soak) >&2
SOAK="$TARGET/release/examples/soak"

run() {
    local name="$1" settings="$2" dir url
    dir="$("$ROOT/scripts/pg-cluster.sh" init)"
    url="$("$ROOT/scripts/pg-cluster.sh" start "$dir")"
    mkdir -p "$OUT/$name"
    "$SOAK" --engine postgres --pg-url "$url" --out "$OUT/$name" --minutes "$MINUTES" \
        --big-initial 500000 --small-trees 500 --pg-strata "$settings" --fresh yes \
        >"$OUT/$name/summary.txt" 2>"$OUT/$name/soak.log" ||
        echo "soak-table-settings: $name failed (see $OUT/$name/soak.log)" >&2
    "$ROOT/scripts/pg-cluster.sh" destroy "$dir"
}

run ff100 "fillfactor=100,autovacuum_vacuum_scale_factor=0.2" &
run ff85 "fillfactor=85,autovacuum_vacuum_scale_factor=0.2" &
run av05 "fillfactor=100,autovacuum_vacuum_scale_factor=0.05" &
wait
echo "soak-table-settings: done: $OUT" >&2
