#!/usr/bin/env bash
#
# ci-repeat.sh -- run .ci/run N times in a row, each time on a fresh clone:
# the flake hunt's loop (a test that fails once in ten runs costs a whole
# submission).
#
# Usage: scripts/ci-repeat.sh [N] [REV]
#   N    how many runs (default 10); the loop stops at the first failure
#   REV  the commit to clone (default HEAD of this repository)
#
# Each run removes the previous clone, clones REV into the same directory
# ($CI_REPEAT_DIR/ms-smt, default /tmp/ms-smt-ci-repeat/ms-smt), links the
# repository's ../shared beside it, and runs `.ci/run` there with nothing
# carried over from the last run except the compiled artifacts
# ($CARGO_TARGET_DIR, default $CI_REPEAT_DIR/target). Cargo decides whether
# a path crate is fresh by comparing its sources' mtimes with its last
# build, and a clone's files are all new, so every tracked file is dated
# back to the commit's time: the first run builds, the others reuse the
# build (the same sources at the same path). Without that each run here
# would spend ~10 of its ~15 minutes rebuilding the same commit.
#
# Logs: $CI_REPEAT_DIR/logs/run-K.log; a summary line per run goes to
# stdout (status, minutes, tests passed and failed in that run).
set -euo pipefail

runs="${1:-10}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
rev="$(git -C "$repo" rev-parse "${2:-HEAD}")"
dir="${CI_REPEAT_DIR:-/tmp/ms-smt-ci-repeat}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$dir/target}"
clone="$dir/ms-smt"
mkdir -p "$dir/logs"
if [ -e "$repo/../shared" ] && [ ! -e "$dir/shared" ]; then
    ln -s "$(cd "$repo/../shared" && pwd)" "$dir/shared"
fi

echo "ci-repeat: $runs runs of .ci/run on clean clones of ${rev:0:12}, target $CARGO_TARGET_DIR"
for k in $(seq 1 "$runs"); do
    rm -rf "$clone"
    git clone --quiet --no-local "$repo" "$clone"
    git -C "$clone" checkout --quiet --detach "$rev"
    stamp="$(git -C "$clone" log -1 --format=%ct)"
    (cd "$clone" && git ls-files -z | xargs -0 touch -h -d "@$stamp")
    log="$dir/logs/run-$k.log"
    start="$(date +%s)"
    status=0
    (cd "$clone" && .ci/run) >"$log" 2>&1 || status=$?
    secs=$(( $(date +%s) - start ))
    passed="$(grep -o '[0-9]* passed' "$log" | awk '{s += $1} END {print s + 0}')"
    failed="$(grep -o '[0-9]* failed' "$log" | awk '{s += $1} END {print s + 0}')"
    printf 'run %d: %s, %d m %02d s, %s passed, %s failed (%s)\n' "$k" \
        "$([ "$status" -eq 0 ] && echo green || echo "FAILED (exit $status)")" \
        $((secs / 60)) $((secs % 60)) "$passed" "$failed" "$log"
    if [ "$status" -ne 0 ]; then
        grep -E '^test .* FAILED|panicked at|^error' "$log" | head -20 || true
        exit 1
    fi
done
echo "ci-repeat: $runs green runs in a row"
