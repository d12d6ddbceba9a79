#!/usr/bin/env bash
#
# run-test-binaries.sh -- builds every unit and integration test binary of
# the workspace (scripts/test.sh's profile and features), then runs them
# three at a time, the longest first, each as `cargo test` would run it (from its
# package's directory, CARGO_MANIFEST_DIR set). Each binary's output is
# printed whole when it ends; the summary names every binary that failed,
# and the exit status is 1 if any did.
#
# Why not `cargo test` itself: it runs one binary after the other, and the
# SQL stores' suite (~250 s, mostly waiting on fsync) would leave the second
# vCPU idle beside it while the other binaries (~110 s together) wait their
# turn. Extra arguments go to every binary (e.g. `--test-threads=1`).
set -euo pipefail
cd "$(dirname "$0")/.."

# Three binaries at once: the run took 299 s against ~325 s with two (a
# clean clone, 2026-12-07), the SQL suite still the last to end, both vCPUs
# busy throughout (9.5 CPU-minutes in 5 minutes).
PARALLEL="${MSSMT_TEST_JOBS:-3}"
# The SQL suite's tests wait on disk and on the server more than they
# compute: four at a time finished it in 225 s against 289 s with two.
SQL_SUITE_THREADS="${MSSMT_SQL_SUITE_THREADS:-4}"

list="$(mktemp)"
logs="$(mktemp -d)"
trap 'rm -rf "$list" "$logs"' EXIT

# cargo's JSON messages on stdout (one per artifact), its usual progress and
# diagnostics on stderr.
cargo test --workspace --profile test-ci --all-features --lib --bins --tests --no-run \
    --message-format=json-render-diagnostics |
    grep '"reason":"compiler-artifact"' |
    grep '"profile":{[^}]*"test":true' |
    sed -n 's/.*"manifest_path":"\([^"]*\)\/Cargo.toml".*"target":{[^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2 \3/p' \
        >"$list"
[[ -s "$list" ]] || { echo "run-test-binaries.sh: cargo listed no test binary" >&2; exit 1; }

# The longest first: the SQL stores' suite, then the campaigns and the
# library's suite; the rest in cargo's order.
rank() {
    case "$1 $2" in
        */crates/sql\ suite) echo 0 ;;
        */crates/sql\ campaigns) echo 1 ;;
        */crates/ms-smt\ suite) echo 2 ;;
        *) echo 3 ;;
    esac
}
ordered="$(while read -r dir name exe; do
    echo "$(rank "$dir" "$name") $dir $name $exe"
done <"$list" | sort -s -k1,1n | cut -d' ' -f2-)"

failed=()
declare -A running=()  # pid -> "package/name"
declare -A logfile=()  # pid -> its log

# reap: waits for whichever running binary ends first (`wait -n -p`,
# bash >= 5.1, names it and gives its status), prints its log and records
# a failure.
reap() {
    local pid="" status=0
    wait -n -p pid "${!running[@]}" || status=$?
    cat "${logfile[$pid]}"
    if [[ $status -ne 0 ]]; then
        failed+=("${running[$pid]} (exit $status)")
    fi
    unset "running[$pid]" "logfile[$pid]"
}

n=0
start=$SECONDS
while read -r dir name exe; do
    while [[ ${#running[@]} -ge $PARALLEL ]]; do reap; done
    n=$((n + 1))
    log="$logs/$n.log"
    extra=()
    [[ "$dir" == */crates/sql && "$name" == suite ]] && extra=(--test-threads="$SQL_SUITE_THREADS")
    (
        cd "$dir"
        t0=$SECONDS
        echo "     Running $(basename "$dir")/$name ($exe)"
        status=0
        CARGO_MANIFEST_DIR="$dir" "$exe" "${extra[@]}" "$@" || status=$?
        echo "     $(basename "$dir")/$name took $((SECONDS - t0)) s (exit $status)"
        exit $status
    ) </dev/null >"$log" 2>&1 &
    running[$!]="$(basename "$dir")/$name"
    logfile[$!]="$log"
done <<<"$ordered"
while [[ ${#running[@]} -gt 0 ]]; do reap; done

echo "run-test-binaries.sh: $n test binaries in $((SECONDS - start)) s, ${#failed[@]} failed" >&2
if [[ ${#failed[@]} -gt 0 ]]; then
    printf '  FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
