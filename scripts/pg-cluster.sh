#!/usr/bin/env bash
#
# pg-cluster.sh -- a small, durable (fsync on) PostgreSQL cluster that tests
# can start, crash and restart.  Used by crates/sql/tests/crash.rs.
#
# Usage:
#   scripts/pg-cluster.sh init             create a cluster in a new temporary
#                                          directory; prints the directory
#   scripts/pg-cluster.sh start DIR [PORT] start it (crash recovery included) on
#                                          PORT if given and free, else on a free
#                                          port, and wait until it accepts
#                                          connections; prints the URL of
#                                          database `postgres`
#   scripts/pg-cluster.sh stop-immediate DIR
#                                          pg_ctl stop -m immediate (no shutdown
#                                          checkpoint: the next start recovers)
#   scripts/pg-cluster.sh stop DIR         pg_ctl stop -m fast
#   scripts/pg-cluster.sh destroy DIR      stop (immediate) if running, remove DIR
#   scripts/pg-cluster.sh standby PORT     create a streaming hot standby of the
#                                          server on 127.0.0.1:PORT in a new
#                                          temporary directory (pg_basebackup -R
#                                          as `postgres`, which needs a `host
#                                          replication` line in its pg_hba.conf);
#                                          prints the directory, which `start`,
#                                          `stop` and `destroy` then take
#
# Exit status 3 means the server binaries (initdb, pg_ctl, postgres) were not
# found in PATH or /usr/lib/postgresql/*/bin; nothing is installed here (see
# scripts/with-postgres.sh for that).
#
# Unlike with-postgres.sh's throwaway server this cluster keeps PostgreSQL's
# durability defaults: fsync, synchronous_commit and full_page_writes on
# (after a crash the data directory is synced with syncfs(2) where PostgreSQL
# 14+ on Linux allows it, instead of file by file: same guarantee).  It
# listens on 127.0.0.1 only, on the port given to `start` or a free one, with trust
# authentication for superuser `postgres` and its unix socket inside DIR.
# As root, the server runs as the system user `mssmt_pg` (created on demand),
# as with-postgres.sh does.  Messages go to stderr; stdout carries only the
# directory (init) or the URL (start).

set -euo pipefail

readonly PROG="pg-cluster"
readonly PG_SYSTEM_USER="mssmt_pg"
readonly DB_SUPERUSER="postgres"
readonly START_TIMEOUT=60
readonly START_ATTEMPTS=5

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ensure_pg_user, free_port
source "$(dirname "${BASH_SOURCE[0]}")/pg-common.sh"

usage() {
    printf 'usage: %s init | start DIR [PORT] | stop-immediate DIR | stop DIR | destroy DIR | standby PORT\n' "$0" >&2
    exit 2
}

[[ $# -ge 1 ]] || usage
CMD="$1"
shift

IS_ROOT=0
[[ "$(id -u)" -eq 0 ]] && IS_ROOT=1

PG_BIN=""
find_pg_bin() {
    local initdb_path dir d
    if initdb_path="$(command -v initdb 2>/dev/null)"; then
        dir="$(dirname -- "$(readlink -f -- "$initdb_path")")"
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" && -x "$dir/postgres" ]]; then
            PG_BIN="$dir"
            return 0
        fi
    fi
    while IFS= read -r d; do
        if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]]; then
            PG_BIN="$d"
            return 0
        fi
    done < <(
        shopt -s nullglob
        for d in /usr/lib/postgresql/*/bin; do printf '%s\n' "$d"; done | sort -rV
    )
    return 1
}

if ! find_pg_bin; then
    log "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in PATH or /usr/lib/postgresql/*/bin"
    exit 3
fi

# as_pg CMD [ARGS...]: run CMD as the server's user, from /.
as_pg() {
    if [[ $IS_ROOT -eq 0 ]]; then
        (cd / && exec "$@")
    elif command -v runuser >/dev/null 2>&1; then
        (cd / && exec runuser -u "$PG_SYSTEM_USER" -- "$@")
    else
        (cd / && exec su -s /bin/sh "$PG_SYSTEM_USER" -c "$(printf '%q ' "$@")")
    fi
}

# new_dir: sets DIR to a new temporary directory the server's user owns.
new_dir() {
    [[ $IS_ROOT -eq 1 ]] && ensure_pg_user
    DIR="$(mktemp -d /tmp/mssmt-pg-cluster.XXXXXX)"
    [[ $IS_ROOT -eq 1 ]] && chown "$PG_SYSTEM_USER:" "$DIR"
    return 0
}

# make_data LOG WHAT CMD [ARGS...]: run CMD (which fills $DIR/data) as the
# server's user with its output in $DIR/LOG; on failure show the log,
# remove DIR and die with WHAT.
make_data() {
    local log="$DIR/$1" what="$2"
    shift 2
    if ! as_pg "$@" </dev/null >"$log" 2>&1; then
        cat "$log" >&2
        rm -rf -- "$DIR"
        die "$what"
    fi
}

need_dir() {
    [[ -n "${1:-}" ]] || usage
    [[ -f "$1/data/PG_VERSION" ]] || die "$1 holds no cluster made by '$0 init'"
}

case "$CMD" in
init)
    new_dir
    make_data initdb.log "initdb failed" "$PG_BIN/initdb" -D "$DIR/data" --auth=trust \
        -U "$DB_SUPERUSER" --encoding=UTF8 --locale=C
    DIR_ESCAPED="${DIR//\'/\'\'}"
    cat >>"$DIR/data/postgresql.conf" <<EOF

# --- added by scripts/pg-cluster.sh (crash-test cluster: durable) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR_ESCAPED'
max_connections = 50
fsync = on
synchronous_commit = on
full_page_writes = on
EOF
    # After a crash the server syncs its whole data directory before
    # recovery; file by file (the default) that took ~4 s per restart here,
    # syncfs(2) does it in one call (PostgreSQL 14 and later, Linux).
    MAJOR="$("$PG_BIN/postgres" --version | sed -n 's/^[^0-9]*\([0-9]*\).*/\1/p')"
    if [[ "$MAJOR" =~ ^[0-9]+$ && "$MAJOR" -ge 14 && "$(uname -s)" == Linux ]]; then
        printf 'recovery_init_sync_method = syncfs\n' >>"$DIR/data/postgresql.conf"
    fi
    printf '%s\n' "$DIR"
    ;;
start)
    DIR="${1:-}"
    WANTED_PORT="${2:-}"
    need_dir "$DIR"
    for attempt in $(seq 1 "$START_ATTEMPTS"); do
        if [[ $attempt -eq 1 && "$WANTED_PORT" =~ ^[0-9]+$ ]]; then
            PORT="$WANTED_PORT"
        else
            PORT="$(free_port)" || die "no free TCP port"
        fi
        # -o passes the port to the postmaster; -w waits until it accepts
        # connections (after crash recovery).
        if as_pg "$PG_BIN/pg_ctl" start -D "$DIR/data" -l "$DIR/server.log" \
                -o "-p $PORT" -w -t "$START_TIMEOUT" -s </dev/null >/dev/null 2>&1; then
            printf 'postgres://%s@127.0.0.1:%s/postgres\n' "$DB_SUPERUSER" "$PORT"
            exit 0
        fi
        as_pg "$PG_BIN/pg_ctl" stop -D "$DIR/data" -m immediate -w -s >/dev/null 2>&1 || true
        log "start on port $PORT failed (attempt $attempt)"
    done
    tail -n 30 "$DIR/server.log" >&2 2>/dev/null || true
    die "PostgreSQL failed to start"
    ;;
stop-immediate)
    DIR="${1:-}"
    need_dir "$DIR"
    as_pg "$PG_BIN/pg_ctl" stop -D "$DIR/data" -m immediate -w -t 30 -s >/dev/null
    ;;
stop)
    DIR="${1:-}"
    need_dir "$DIR"
    as_pg "$PG_BIN/pg_ctl" stop -D "$DIR/data" -m fast -w -t 30 -s >/dev/null
    ;;
standby)
    PRIMARY_PORT="${1:-}"
    [[ "$PRIMARY_PORT" =~ ^[0-9]+$ ]] || usage
    new_dir
    # -R writes standby.signal and primary_conninfo; -X stream copies the WAL
    # the backup needs alongside it; -c fast does not wait for a checkpoint.
    make_data basebackup.log "pg_basebackup from 127.0.0.1:$PRIMARY_PORT failed" \
        "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY_PORT" -U "$DB_SUPERUSER" \
        -D "$DIR/data" -R -X stream -c fast --no-sync
    # The primary's postgresql.conf came along; the standby gets its own
    # socket directory and serves reads (feedback keeps the primary from
    # vacuuming rows a standby snapshot still reads).
    DIR_ESCAPED="${DIR//\'/\'\'}"
    cat >>"$DIR/data/postgresql.conf" <<EOF

# --- added by scripts/pg-cluster.sh standby (streaming hot standby) ---
unix_socket_directories = '$DIR_ESCAPED'
hot_standby = on
hot_standby_feedback = on
EOF
    printf '%s\n' "$DIR"
    ;;
destroy)
    DIR="${1:-}"
    [[ -n "$DIR" ]] || usage
    if [[ -f "$DIR/data/postmaster.pid" ]]; then
        as_pg "$PG_BIN/pg_ctl" stop -D "$DIR/data" -m immediate -w -t 30 -s >/dev/null 2>&1 || true
    fi
    case "$DIR" in
        /tmp/mssmt-pg-cluster.*) rm -rf -- "$DIR" ;;
        *) die "refusing to remove $DIR (not made by '$0 init')" ;;
    esac
    ;;
*)
    usage
    ;;
esac
