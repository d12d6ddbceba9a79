#!/usr/bin/env bash
#
# with-postgres.sh -- run a command with MSSMT_PG_URL pointing at PostgreSQL.
#
# Usage: scripts/with-postgres.sh CMD [ARGS...]
#
# If MSSMT_PG_URL is already set (and non-empty) the command is simply exec'd
# with the environment unchanged, so a developer or CI job can point the tests
# at an existing server (and, with MSSMT_PG_STANDBY_URL, at a hot standby of
# it; without that no standby is started).
#
# Otherwise a throwaway PostgreSQL server is started just for this command:
#   * the server binaries (initdb, pg_ctl, postgres) are looked up in PATH,
#     then in /usr/lib/postgresql/*/bin (highest version first); if none are
#     found and we are root, the Debian `postgresql` package is installed;
#   * a fresh cluster is created with initdb in a new temporary directory
#     (trust authentication, superuser `postgres`, UTF8, no fsync);
#   * the server listens on 127.0.0.1 only, on a free TCP port (retrying with
#     another port if it loses a race for it), with its unix socket inside the
#     temporary directory, and is tuned for speed rather than durability
#     (fsync, synchronous_commit and full_page_writes off, 200 connections);
#   * once it accepts connections (at most 30 s), a database `mssmt_test` is
#     created and
#       MSSMT_PG_URL=postgres://postgres@127.0.0.1:PORT/mssmt_test
#     is exported to the command;
#   * then a streaming hot standby of that server is made with
#     `scripts/pg-cluster.sh standby` (pg_basebackup -R over the primary's
#     `host replication` line, hot_standby and hot_standby_feedback on) and
#     started on a second free port, and
#       MSSMT_PG_STANDBY_URL=postgres://postgres@127.0.0.1:PORT2/mssmt_test
#       MSSMT_PG_STANDBY_DIR=<its directory, for scripts/pg-cluster.sh stop/start>
#     are exported too (MSSMT_PG_STANDBY=0 skips the standby);
#   * when the command finishes (or the script gets SIGINT/SIGTERM) both
#     servers are stopped (pg_ctl stop -m immediate) and their temporary
#     directories removed.  The exit status of the script is that of the command (130/143
#     when interrupted).  As usual in bash, a signal that arrives while the
#     command runs is acted on once the command exits; Ctrl-C and CI
#     timeouts signal the whole process group, so the command gets it too.
#     Nothing can clean up after SIGKILL, though.
#
# PostgreSQL refuses to run as root, so when this script runs as root the
# server is run as a dedicated system user (`mssmt_pg`, created on demand).
#
# Status messages go to stderr; stdout belongs to the command.  The script
# never reads from stdin, so it works in CI jobs without standard input.

set -euo pipefail

readonly PROG="with-postgres"
readonly PG_SYSTEM_USER="mssmt_pg"   # unprivileged user for the server (root only)
readonly DB_NAME="mssmt_test"        # database created for the command
readonly DB_SUPERUSER="postgres"     # cluster superuser (trust auth, no password)
readonly START_TIMEOUT=30            # seconds to wait for the server to accept connections
readonly START_ATTEMPTS=5            # retries with a new port if the server fails to start

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ensure_pg_user, free_port
source "$(dirname "${BASH_SOURCE[0]}")/pg-common.sh"

if [[ $# -eq 0 ]]; then
    printf 'usage: %s CMD [ARGS...]\n' "$0" >&2
    exit 2
fi

# ---------------------------------------------------------------------------
# An externally provided server wins: nothing to start, nothing to clean up.
# ---------------------------------------------------------------------------
if [[ -n "${MSSMT_PG_URL:-}" ]]; then
    export MSSMT_REQUIRE_PG=1  # tests must not skip Postgres when we provide it
    exec "$@"
fi

IS_ROOT=0
[[ "$(id -u)" -eq 0 ]] && IS_ROOT=1

# ---------------------------------------------------------------------------
# Locating the PostgreSQL server binaries.
# ---------------------------------------------------------------------------
PG_BIN=""      # directory holding the server binaries (if they share one)
INITDB=""
PG_CTL=""
POSTGRES=""

# has_server_bins DIR: true if DIR holds initdb, pg_ctl and postgres.
has_server_bins() {
    [[ -x "$1/initdb" && -x "$1/pg_ctl" && -x "$1/postgres" ]]
}

# find_pg_bins: sets PG_BIN/INITDB/PG_CTL/POSTGRES, returns 1 if not found.
find_pg_bins() {
    local initdb_path dir
    local -a candidates=()

    # 1. PATH.  Resolve symlinks (e.g. /usr/local/bin/initdb ->
    #    /usr/lib/postgresql/15/bin/initdb) so that the sibling tools (psql,
    #    pg_isready) of the *same* installation are found as well.
    if initdb_path="$(command -v initdb 2>/dev/null)"; then
        dir="$(dirname -- "$(readlink -f -- "$initdb_path")")"
        if has_server_bins "$dir"; then
            candidates+=("$dir")
        elif command -v pg_ctl >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
            # Tools are in PATH but scattered over several directories.
            INITDB="$initdb_path"
            PG_CTL="$(command -v pg_ctl)"
            POSTGRES="$(command -v postgres)"
            PG_BIN="$(dirname -- "$initdb_path")"
            return 0
        fi
    fi

    # 2. Debian/Ubuntu layout, highest major version first.
    local d
    while IFS= read -r d; do
        [[ -n "$d" ]] && candidates+=("$d")
    done < <(
        shopt -s nullglob
        for d in /usr/lib/postgresql/*/bin; do printf '%s\n' "$d"; done | sort -rV
    )

    for dir in "${candidates[@]}"; do
        if has_server_bins "$dir"; then
            PG_BIN="$dir"
            INITDB="$dir/initdb"
            PG_CTL="$dir/pg_ctl"
            POSTGRES="$dir/postgres"
            return 0
        fi
    done
    return 1
}

# find_client_tool NAME: prints the path of a client tool, preferring the one
# belonging to the same installation as the server.
find_client_tool() {
    if [[ -n "$PG_BIN" && -x "$PG_BIN/$1" ]]; then
        printf '%s\n' "$PG_BIN/$1"
    else
        command -v "$1" 2>/dev/null
    fi
}

if ! find_pg_bins; then
    if [[ $IS_ROOT -eq 1 ]] && command -v apt-get >/dev/null 2>&1; then
        log "PostgreSQL server binaries not found; installing the Debian 'postgresql' package"
        export DEBIAN_FRONTEND=noninteractive
        # apt output goes to stderr so stdout stays clean for the command.
        apt-get update -q </dev/null >&2 \
            || die "apt-get update failed"
        apt-get install -y -q --no-install-recommends postgresql </dev/null >&2 \
            || die "apt-get install postgresql failed"
        find_pg_bins \
            || die "PostgreSQL server binaries (initdb, pg_ctl, postgres) still not found after installing 'postgresql'"
    else
        die "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in PATH or /usr/lib/postgresql/*/bin; install PostgreSQL (e.g. 'apt-get install postgresql') or set MSSMT_PG_URL to an existing server"
    fi
fi

# The I/O fault tests (tests/io_faults.rs) inject syscall errors with strace.
if ! command -v strace >/dev/null 2>&1; then
    if [[ $IS_ROOT -eq 1 ]] && command -v apt-get >/dev/null 2>&1; then
        log "strace not found; installing the Debian 'strace' package (tests/io_faults.rs needs it)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends strace </dev/null >&2 \
            || die "apt-get install strace failed"
    else
        log "warning: strace not found; tests/io_faults.rs will fail (apt-get install strace)"
    fi
fi

PSQL="$(find_client_tool psql)" \
    || die "psql not found (needed to create the test database)"
PG_ISREADY="$(find_client_tool pg_isready)" || PG_ISREADY=""

# ---------------------------------------------------------------------------
# Running server-side commands as an unprivileged user when we are root.
# ---------------------------------------------------------------------------

# pg_argv CMD [ARGS...]: set the array PG_ARGV to a command line that runs
# CMD as the server's user.  As root that is $PG_SYSTEM_USER (via runuser,
# or su as a fallback); otherwise it is ourselves and CMD is used unchanged.
PG_ARGV=()
pg_argv() {
    if [[ $IS_ROOT -eq 0 ]]; then
        PG_ARGV=("$@")
    elif command -v runuser >/dev/null 2>&1; then
        PG_ARGV=(runuser -u "$PG_SYSTEM_USER" -- "$@")
    else
        # su needs a single shell command string: quote every argument.
        PG_ARGV=(su -s /bin/sh "$PG_SYSTEM_USER" -c "$(printf '%q ' "$@")")
    fi
}

# as_pg CMD [ARGS...]: run CMD as the server's user and wait for it.  It runs
# from / so that tools do not complain about an inaccessible working
# directory (e.g. /root).
as_pg() {
    pg_argv "$@"
    (cd / && exec "${PG_ARGV[@]}")
}

# ---------------------------------------------------------------------------
# Cleanup: stop the server and remove the temporary directory.  Installed
# before anything is created; safe to run more than once.
# ---------------------------------------------------------------------------
TMP_DIR=""
DATA_DIR=""
SERVER_PID=""       # pid of the background job running the postmaster
STANDBY_DIR=""      # the standby's directory (scripts/pg-cluster.sh standby)
CLEANED_UP=0
readonly CLUSTER_SCRIPT="$(dirname "${BASH_SOURCE[0]}")/pg-cluster.sh"

# pid_alive PID: true if PID exists and is not a zombie.
pid_alive() {
    local state=""
    kill -0 "$1" 2>/dev/null || return 1
    # Field 3 of /proc/PID/stat is the state; "Z" means exited, not yet reaped.
    if [[ -r "/proc/$1/stat" ]]; then
        state="$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$1/stat" 2>/dev/null)" || true
    fi
    [[ "$state" != "Z" ]]
}

# stop_server: stop the postmaster if one runs in our data directory
# (immediate shutdown: the data is thrown away anyway), escalating to SIGKILL
# if pg_ctl fails, then reap our background job.
stop_server() {
    local i pid=""
    if [[ -n "$DATA_DIR" && -f "$DATA_DIR/postmaster.pid" ]]; then
        # First line of postmaster.pid is the postmaster's pid.
        read -r pid <"$DATA_DIR/postmaster.pid" 2>/dev/null || true
        # pg_ctl -w returns once the postmaster has exited.
        as_pg "$PG_CTL" stop -D "$DATA_DIR" -m immediate -w -t 15 -s >/dev/null 2>&1 || true
        if [[ "$pid" =~ ^[0-9]+$ ]] && pid_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
            for i in $(seq 1 50); do
                pid_alive "$pid" || break
                sleep 0.1
            done
        fi
    fi
    if [[ -n "$SERVER_PID" ]]; then
        # The wrapper (runuser/su) exits right after the postmaster; give it a
        # moment, kill it if need be, and reap it.
        for i in $(seq 1 50); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            kill -KILL "$SERVER_PID" 2>/dev/null || true
        fi
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
    return 0
}

cleanup() {
    set +e   # best effort: never abort half-way through the cleanup
    [[ $CLEANED_UP -eq 1 ]] && return 0
    CLEANED_UP=1
    # The standby first: stopped after its primary it would keep retrying
    # the replication connection until the immediate stop.
    [[ -n "$STANDBY_DIR" ]] && "$CLUSTER_SCRIPT" destroy "$STANDBY_DIR" 2>/dev/null
    stop_server
    [[ -n "$TMP_DIR" && -d "$TMP_DIR" ]] && rm -rf -- "$TMP_DIR"
    return 0
}

trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# ---------------------------------------------------------------------------
# Creating the cluster.
# ---------------------------------------------------------------------------
[[ $IS_ROOT -eq 1 ]] && ensure_pg_user

TMP_DIR="$(mktemp -d "${TMPDIR:-/tmp}/with-postgres.XXXXXX")"
if [[ $IS_ROOT -eq 1 ]]; then
    chown "$PG_SYSTEM_USER:" "$TMP_DIR"
    # $TMPDIR may live somewhere the server user cannot reach (e.g. /root);
    # fall back to /tmp in that case.
    if ! as_pg test -w "$TMP_DIR" 2>/dev/null; then
        rm -rf -- "$TMP_DIR"
        TMP_DIR="$(mktemp -d /tmp/with-postgres.XXXXXX)"
        chown "$PG_SYSTEM_USER:" "$TMP_DIR"
    fi
fi
DATA_DIR="$TMP_DIR/data"
LOG_FILE="$TMP_DIR/server.log"

# --locale=C keeps initdb independent of whatever locales the host has.
if ! as_pg "$INITDB" -D "$DATA_DIR" --auth=trust -U "$DB_SUPERUSER" \
        --encoding=UTF8 --locale=C --no-sync >"$TMP_DIR/initdb.log" 2>&1; then
    cat "$TMP_DIR/initdb.log" >&2
    die "initdb failed"
fi

# Server settings: loopback only, socket in our private directory, and no
# durability (this data is thrown away anyway).  Single quotes in the path
# are doubled as postgresql.conf requires.
SOCKET_DIR_ESCAPED="${TMP_DIR//\'/\'\'}"
cat >>"$DATA_DIR/postgresql.conf" <<EOF

# --- added by scripts/with-postgres.sh (throwaway test server) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCKET_DIR_ESCAPED'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
# streaming replication to the hot standby made below
wal_level = replica
max_wal_senders = 10
wal_keep_size = 512MB
hot_standby = on
EOF
# The standby's base backup and WAL stream connect as the superuser over
# TCP (the initdb default has this line too; it is spelled out here).
printf 'host replication %s 127.0.0.1/32 trust\n' "$DB_SUPERUSER" >>"$DATA_DIR/pg_hba.conf"

# ---------------------------------------------------------------------------
# Starting the server on a free port.
# ---------------------------------------------------------------------------

# wait_ready PORT: wait until the server accepts connections; fails early if
# the server process has already exited (e.g. the port was taken).
wait_ready() {
    local port="$1" deadline=$(( SECONDS + START_TIMEOUT ))
    while (( SECONDS < deadline )); do
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        if [[ -n "$PG_ISREADY" ]]; then
            "$PG_ISREADY" -q -h 127.0.0.1 -p "$port" -U "$DB_SUPERUSER" -d postgres \
                </dev/null >/dev/null 2>&1 && return 0
        else
            "$PSQL" -X -q -h 127.0.0.1 -p "$port" -U "$DB_SUPERUSER" -d postgres \
                -c 'select 1' </dev/null >/dev/null 2>&1 && return 0
        fi
        sleep 0.1
    done
    return 1
}

PORT=""
for attempt in $(seq 1 "$START_ATTEMPTS"); do
    PORT="$(free_port)" || die "could not find a free TCP port"
    # The postmaster is started directly as a background job of this script
    # rather than via `pg_ctl start`: pg_ctl daemonizes it, leaving it to init
    # to reap, whereas as our own descendant we can `wait` for it and know for
    # sure it is gone before the directory is removed.  setsid puts it in a
    # session of its own, so a Ctrl-C or a signal sent to our process group
    # (e.g. by a CI timeout) does not hit it; cleanup stops it in order.
    # (In a background subshell setsid execs in place, so $! stays valid.)
    pg_argv "$POSTGRES" -D "$DATA_DIR" -p "$PORT"
    if command -v setsid >/dev/null 2>&1; then
        PG_ARGV=(setsid "${PG_ARGV[@]}")
    fi
    (cd / && exec "${PG_ARGV[@]}") </dev/null >>"$LOG_FILE" 2>&1 &
    SERVER_PID=$!
    # Another process may grab the port between free_port and the server's
    # bind; in that case the server exits and we retry with a new port.
    if wait_ready "$PORT"; then
        break
    fi
    stop_server
    if [[ $attempt -eq $START_ATTEMPTS ]]; then
        log "server log ($LOG_FILE):"
        cat "$LOG_FILE" >&2 2>/dev/null || true
        die "PostgreSQL failed to start after $START_ATTEMPTS attempts"
    fi
    log "PostgreSQL failed to start on port $PORT (attempt $attempt), retrying"
done

if ! "$PSQL" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U "$DB_SUPERUSER" -d postgres \
        -c "CREATE DATABASE $DB_NAME" </dev/null >/dev/null; then
    die "could not create database $DB_NAME"
fi

export MSSMT_PG_URL="postgres://$DB_SUPERUSER@127.0.0.1:$PORT/$DB_NAME"
export MSSMT_REQUIRE_PG=1  # tests must not skip Postgres when we provide it

# "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)" -> "15.18"
PG_VERSION="$("$POSTGRES" --version 2>/dev/null | sed -n 's/^[^0-9]*\([0-9][0-9.]*\).*/\1/p')" || true
log "started throwaway PostgreSQL ${PG_VERSION:-?} on 127.0.0.1:$PORT"

# ---------------------------------------------------------------------------
# The streaming hot standby (the database above is already in its backup).
# ---------------------------------------------------------------------------
if [[ "${MSSMT_PG_STANDBY:-1}" != 0 ]]; then
    STANDBY_DIR="$("$CLUSTER_SCRIPT" standby "$PORT")" \
        || die "could not make a standby of 127.0.0.1:$PORT"
    STANDBY_URL="$("$CLUSTER_SCRIPT" start "$STANDBY_DIR")" \
        || die "the standby in $STANDBY_DIR did not start"
    export MSSMT_PG_STANDBY_URL="${STANDBY_URL%/postgres}/$DB_NAME"
    export MSSMT_PG_STANDBY_DIR="$STANDBY_DIR"
    STANDBY_ADDR="${STANDBY_URL#*@}"
    log "started its streaming hot standby on ${STANDBY_ADDR%%/*}"
fi

# ---------------------------------------------------------------------------
# Running the command.  Not exec'd, so that the EXIT trap can clean up; its
# exit status becomes ours.
# ---------------------------------------------------------------------------
status=0
"$@" || status=$?
exit "$status"
