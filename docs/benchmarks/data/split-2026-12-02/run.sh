#!/usr/bin/env bash
# Issue 58's before/after: the last single-crate commit (4135d60, /work/old) against the
# workspace (main), same run, same machine, same Postgres cluster (fsync on, one database each).
set -uo pipefail
U=$(cat /tmp/pgurl); BASE=${U%/postgres}
OLD=/work/old/target/release/examples
NEW=/work/main/target/release/examples
out=/work/bench58; mkdir -p $out
run() { # name side bin env...
  local name=$1 side=$2 bin=$3; shift 3
  echo "== $name $side $(date +%T)" >&2
  ( cd /tmp && env "$@" MSSMT_BENCH_PG_URL=$BASE/$side $bin > $out/$name-$side.md 2> $out/$name-$side.err ); echo "rc $?" >&2
}
for side in old new; do d=$([ $side = old ] && echo $OLD || echo $NEW)
  run scale $side $d/scale MSSMT_SCALE_N=100000,1000000 MSSMT_SCALE_ROUNDS=3
done
for side in old new; do d=$([ $side = old ] && echo $OLD || echo $NEW)
  run load $side $d/load MSSMT_LOAD_N=100000 MSSMT_LOAD_WRITERS=1000 MSSMT_LOAD_LEAVES=1 MSSMT_LOAD_PATHS=writer
  run fload $side $d/forest_load MSSMT_FLOAD_TREES=1000 MSSMT_FLOAD_WRITERS=1000 MSSMT_FLOAD_KINDS=parent
done
for side in new old; do d=$([ $side = old ] && echo $OLD || echo $NEW)
  run load2 $side $d/load MSSMT_LOAD_N=100000 MSSMT_LOAD_WRITERS=1000 MSSMT_LOAD_LEAVES=1 MSSMT_LOAD_PATHS=writer
done
echo done >&2
