#!/usr/bin/env bash
#
# fuzz-campaign.sh -- run the cargo-fuzz targets in fuzz/ for a while and
# record what they did.
#
# Usage:
#   scripts/fuzz-campaign.sh [-t SECONDS] [-c CPU_SECONDS] [-j JOBS] [-n NICE]
#                            [-o DIR] [TARGET...]
#
#   -t SECONDS      wall-time limit per target (libFuzzer -max_total_time);
#                   default 3600
#   -c CPU_SECONDS  also stop a target (SIGINT, final stats still printed) once
#                   its process has used this much CPU time (user + system);
#                   default: no CPU limit.  Use it on a shared machine to give
#                   every target the same CPU budget whatever the load.
#   -j JOBS         targets run at once; default 1 (one after the other)
#   -n NICE         niceness of the fuzzers; default 10
#   -o DIR          log directory; default target/fuzz-campaign/<UTC time>
#   TARGET...       default: every target `cargo fuzz list` prints
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# The targets are built once (`cargo +nightly fuzz build -O`, AddressSanitizer
# on), then each fuzzer binary runs directly under /usr/bin/time -v, on
#   target/fuzz-campaign/corpus/<target>   (kept between campaigns; libFuzzer
#                                          adds its new inputs here)
#   fuzz/corpus/<target>                   (the committed seeds, read only)
# Crashes and property violations go to fuzz/artifacts/<target>/ (not
# committed); minimise one with
#   cd fuzz && cargo +nightly fuzz tmin -O <target> artifacts/<target>/<file>
#
# Records, in the log directory:
#   <target>.log    libFuzzer's output, then /usr/bin/time -v's report
#   summary.tsv     per target: wall seconds, CPU seconds (user+sys),
#                   executions (stat::number_of_executed_units), the `#N DONE`
#                   line, corpus files and bytes, new artifacts, exit status
# and prints summary.tsv at the end.  Exit status 1 when a target failed
# (crash, property violation, leak, timeout) or produced artifacts.

set -euo pipefail

wall=3600
cpu=""
jobs=1
niceness=10
logdir=""
while getopts "t:c:j:n:o:h" opt; do
    case "$opt" in
        t) wall=$OPTARG ;;
        c) cpu=$OPTARG ;;
        j) jobs=$OPTARG ;;
        n) niceness=$OPTARG ;;
        o) logdir=$OPTARG ;;
        h) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))

root=$(cd "$(dirname "$0")/.." && pwd)
fuzz="$root/fuzz"
[ -z "$logdir" ] || mkdir -p "$logdir"
[ -z "$logdir" ] || logdir=$(cd "$logdir" && pwd)
cd "$fuzz"

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz or the nightly toolchain is missing (cargo install cargo-fuzz)" >&2
    exit 3
fi

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
[ -n "$logdir" ] || logdir="$root/target/fuzz-campaign/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$logdir"
logdir=$(cd "$logdir" && pwd)

echo "building ${targets[*]} ..." >&2
nice -n "$niceness" cargo +nightly fuzz build -O >&2
bindir="$fuzz/target/x86_64-unknown-linux-gnu/release"

# libFuzzer limits per target: proofs are at most 10,274 bytes.
max_len() {
    case "$1" in
        proof_decode) echo 12288 ;;
        proof_verify) echo 1024 ;;
        *) echo 4096 ;;
    esac
}

# CPU seconds (user + system) used so far by process $1, or nothing.
cpu_of() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    # Fields after the command name: utime is 14th, stime 15th overall.
    echo "${stat##*) }" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f", ($12 + $13) / hz }'
}

run_target() {
    local t=$1 log="$logdir/$1.log"
    local corpus="$root/target/fuzz-campaign/corpus/$t" seeds="$fuzz/corpus/$t"
    local artifacts="$fuzz/artifacts/$t"
    mkdir -p "$corpus" "$seeds" "$artifacts"
    local before
    before=$(find "$artifacts" -type f | wc -l)
    local start end rc=0
    start=$(date +%s)
    nice -n "$niceness" /usr/bin/time -v -o "$logdir/$t.time" \
        "$bindir/$t" "$corpus" "$seeds" \
        -max_total_time="$wall" -max_len="$(max_len "$t")" -timeout=30 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" \
        >"$log" 2>&1 &
    local tpid=$!
    if [ -n "$cpu" ]; then
        # The fuzzer is /usr/bin/time's child.
        local fpid=""
        while kill -0 "$tpid" 2>/dev/null; do
            [ -n "$fpid" ] || fpid=$(pgrep -P "$tpid" | head -n 1 || true)
            if [ -n "$fpid" ]; then
                local used
                used=$(cpu_of "$fpid")
                if [ -n "$used" ] && [ "$used" -ge "$cpu" ]; then
                    kill -INT "$fpid" 2>/dev/null || true
                    break
                fi
            fi
            sleep 5
        done
    fi
    wait "$tpid" || rc=$?
    end=$(date +%s)
    cat "$logdir/$t.time" >>"$log"
    local user sys execs done_line files bytes after
    user=$(awk -F': ' '/User time \(seconds\)/ { print $2 }' "$logdir/$t.time")
    sys=$(awk -F': ' '/System time \(seconds\)/ { print $2 }' "$logdir/$t.time")
    execs=$(awk '/^stat::number_of_executed_units/ { print $NF }' "$log" | tail -n 1)
    # `#N DONE ...` when the time limit ended the run; after a SIGINT (CPU
    # limit) the last status line instead.
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
    [ -n "$done_line" ] || done_line=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -n 1 || true)
    done_line=$(echo "$done_line" | tr -s ' \t' ' ')
    files=$(find "$corpus" -type f | wc -l)
    bytes=$(du -sb "$corpus" | cut -f1)
    after=$(find "$artifacts" -type f | wc -l)
    # libFuzzer exits 72 (-interrupted_exitcode) after our SIGINT: not a failure.
    [ "$rc" -eq 72 ] && rc=0
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$((end - start))" \
        "$(echo "$user + $sys" | bc)" "${execs:-?}" "${done_line:-none}" "$files" "$bytes" \
        "$((after - before))" "$rc" >"$logdir/$t.tsv"
}

echo "logs in $logdir (wall limit ${wall}s, CPU limit ${cpu:-none}, jobs $jobs, nice $niceness)" >&2
running=0
for t in "${targets[@]}"; do
    echo "$(date -u +%H:%M:%S) start $t" >&2
    run_target "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait

status=0
{
    printf 'target\twall_s\tcpu_s\texecutions\tdone_line\tcorpus_files\tcorpus_bytes\tnew_artifacts\texit\n'
    for t in "${targets[@]}"; do
        cat "$logdir/$t.tsv"
        if [ "$(cut -f8 "$logdir/$t.tsv")" != 0 ] || [ "$(cut -f9 "$logdir/$t.tsv")" != 0 ]; then
            status=1
        fi
    done
} >"$logdir/summary.tsv"
column -t -s $'\t' "$logdir/summary.tsv" 2>/dev/null || cat "$logdir/summary.tsv"
exit "$status"
