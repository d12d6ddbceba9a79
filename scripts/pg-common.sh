# Shared by scripts/with-postgres.sh and scripts/pg-cluster.sh (sourced, not
# run): creating the server's system user and finding a free port. The
# sourcing script defines `die` and `PG_SYSTEM_USER`.

# ensure_pg_user: create the system user the server runs as (idempotent and
# tolerant of a concurrent invocation creating it at the same time).
ensure_pg_user() {
    local i
    for i in 1 2 3 4 5; do
        id -u "$PG_SYSTEM_USER" >/dev/null 2>&1 && return 0
        if command -v useradd >/dev/null 2>&1; then
            useradd --system --no-create-home --home-dir /nonexistent \
                --shell /usr/sbin/nologin --user-group "$PG_SYSTEM_USER" \
                >/dev/null 2>&1 || true
        elif command -v adduser >/dev/null 2>&1; then
            adduser --system --no-create-home --group "$PG_SYSTEM_USER" \
                >/dev/null 2>&1 || true
        else
            die "cannot create system user '$PG_SYSTEM_USER': neither useradd nor adduser is available"
        fi
        id -u "$PG_SYSTEM_USER" >/dev/null 2>&1 && return 0
        # Most likely /etc/passwd was locked by a parallel run; try again.
        sleep "0.$i"
    done
    die "could not create system user '$PG_SYSTEM_USER'"
}

# free_port: print a TCP port on 127.0.0.1 that nothing is listening on.
free_port() {
    if command -v python3 >/dev/null 2>&1 && python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
' 2>/dev/null; then
        return 0
    fi
    # Fallback without python3: random high ports until a connect fails.
    local port i
    for i in $(seq 1 100); do
        port=$(( 20000 + RANDOM % 40000 ))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            printf '%s\n' "$port"
            return 0
        fi
    done
    return 1
}
