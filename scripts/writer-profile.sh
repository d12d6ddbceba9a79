#!/usr/bin/env bash
# writer-profile.sh -- where a durable leaf's CPU time goes: runs the load
# example's writer cell (1,000 one-leaf submitters) on one store under a
# system-wide `perf record --call-graph dwarf`, then prints CPU µs per
# acknowledged leaf by phase and kind (scripts/writer-phases.py), and for
# Postgres the server's execution time per statement (pg_stat_statements).
#
#   scripts/writer-profile.sh memory|sqlite|postgres [LEAVES]   (default 100000)
#
# Needs perf (run as root), python3 and, for postgres, a durable cluster
# with pg_stat_statements preloaded: MSSMT_BENCH_PG_URL, or one this script
# starts with scripts/pg-cluster.sh. Figures go to BENCHMARKS.md by hand,
# beside the memory store's of the same session.
set -euo pipefail
cd "$(dirname "$0")/.."

store=${1:?usage: writer-profile.sh memory|sqlite|postgres [LEAVES]}
leaves=${2:-100000}
secs=${MSSMT_PROFILE_SECS:-8}
freq=${MSSMT_PROFILE_FREQ:-299}
command -v perf >/dev/null || { echo "writer-profile: perf is not installed" >&2; exit 1; }
command -v python3 >/dev/null || { echo "writer-profile: python3 is not installed" >&2; exit 1; }

cargo build -q --release -p ms-smt-sql --example load
bin=target/release/examples/load
work=$(mktemp -d /tmp/ms-smt-profile.XXXXXX)
cluster=
cleanup() {
    if [[ -n $cluster ]]; then scripts/pg-cluster.sh destroy "$cluster" >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

url=${MSSMT_BENCH_PG_URL:-}
psql=/usr/lib/postgresql/15/bin/psql
if [[ $store == postgres && -z $url ]]; then
    cluster=$(scripts/pg-cluster.sh init | tail -1)
    echo "shared_preload_libraries = 'pg_stat_statements'" >>"$cluster/data/postgresql.conf"
    url=$(scripts/pg-cluster.sh start "$cluster" | tail -1)
fi
if [[ $store == postgres ]]; then
    "$psql" "$url" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
fi

# The cell runs twice as long as the recording, which starts once the tree
# is built and the writer has run for two seconds.
MSSMT_LOAD_N=$leaves MSSMT_LOAD_WRITERS=1000 MSSMT_LOAD_LEAVES=1 MSSMT_LOAD_PATHS=writer \
    MSSMT_LOAD_SECS=$((secs * 2)) MSSMT_LOAD_STORES=$store MSSMT_BENCH_PG_URL=$url \
    "$bin" >"$work/load.out" 2>&1 &
load=$!
until grep -q "built" "$work/load.out" 2>/dev/null; do
    kill -0 "$load" 2>/dev/null || { cat "$work/load.out"; exit 1; }
    sleep 0.5
done
sleep 2
if [[ $store == postgres ]]; then
    "$psql" "$url" -qc "SELECT pg_stat_statements_reset()" >/dev/null
fi
perf record -q -a -F "$freq" --call-graph dwarf,32768 -o "$work/perf.data" -- sleep "$secs" 2>/dev/null
if [[ $store == postgres ]]; then
    "$psql" "$url" -At -F ' | ' -c "SELECT calls, round(total_exec_time::numeric, 0) AS ms, rows,
        left(regexp_replace(query, '\s+', ' ', 'g'), 90) FROM pg_stat_statements
        WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 8" \
        >"$work/statements.txt"
fi
wait "$load"
line=$(grep "^| $leaves |" "$work/load.out" | head -1)
rate=$(echo "$line" | awk -F'|' '{gsub(/ /, "", $7); print $7}')
echo "$line"
perf script -i "$work/perf.data" -F comm,tid,ip,sym --no-inline 2>/dev/null >"$work/stacks.txt"
python3 scripts/writer-phases.py "$work/stacks.txt" "$secs" "$freq" "$((rate * secs))" "$store"
if [[ $store == postgres ]]; then
    echo
    echo "Postgres statements while recording (calls | total ms | rows | statement):"
    cat "$work/statements.txt"
fi
