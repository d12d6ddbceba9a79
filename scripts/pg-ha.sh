#!/usr/bin/env bash
#
# pg-ha.sh -- a real PostgreSQL high-availability cluster on 127.0.0.1 for
# failover tests: one etcd member, three Patroni nodes each managing a
# PostgreSQL data directory, and HAProxy in front of them.
#
# Usage:
#   scripts/pg-ha.sh up [--async]   start the cluster in a new state directory
#                                   (${MSSMT_HA_DIR:-/tmp/mssmt-ha}) and wait
#                                   until it is healthy (below); prints, one
#                                   per line and shell-sourceable:
#                                     MSSMT_HA_URL=postgres://postgres@127.0.0.1:RW/postgres
#                                     MSSMT_HA_RO_URL=postgres://postgres@127.0.0.1:RO/postgres
#                                     MSSMT_HA_HOSTS=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#                                     MSSMT_HA_DIR=<state directory>
#                                   (also kept in DIR/ha.env).  Synchronous
#                                   replication (Patroni synchronous_mode) by
#                                   default, asynchronous with --async.
#   scripts/pg-ha.sh down           stop everything `up` started, remove DIR
#   scripts/pg-ha.sh status         `patronictl list`, the processes of every
#                                   node, and where HAProxy routes
#   scripts/pg-ha.sh leader         prints "NAME PID": the node holding the
#                                   leader key and its postmaster's pid ("-"
#                                   if it has none running)
#   scripts/pg-ha.sh kill-leader    SIGKILL the leader's postmaster: Patroni
#                                   stays up, sees PostgreSQL crashed and
#                                   (primary_start_timeout 0) fails over to
#                                   a replica (in sync mode the sync standby)
#                                   rather than restart it
#   scripts/pg-ha.sh stop-leader    stop the leader's node the way an operator
#                                   does (`systemctl stop patroni`): SIGTERM to
#                                   its Patroni, which shuts PostgreSQL down
#                                   (fast mode, shutdown checkpoint streamed to
#                                   the replicas) and then deletes the leader
#                                   key itself; Patroni stays stopped
#   scripts/pg-ha.sh poweroff-leader
#                                   the leader's machine losing power: SIGKILL
#                                   to its Patroni, postmaster and every
#                                   PostgreSQL child at once; nobody releases
#                                   the leader key, it expires after the TTL
#   scripts/pg-ha.sh freeze-leader  cut the leader off: SIGSTOP its Patroni,
#                                   its postmaster and every child of the
#                                   postmaster (the backends and walsenders
#                                   too: stopping the postmaster alone leaves
#                                   them serving a client connected directly
#                                   and streaming to the replicas; frozen,
#                                   the node answers nothing, as after a
#                                   network partition); the leader key
#                                   expires after the TTL.  After `thaw` its
#                                   Patroni finds the key gone or taken and
#                                   demotes it
#   scripts/pg-ha.sh thaw           SIGCONT every process a freeze stopped
#   scripts/pg-ha.sh wait-leader OLD
#                                   wait until a node other than OLD holds the
#                                   leader key and HAProxy's read-write port
#                                   routes to it (a primary); prints the
#                                   seconds since the last fault of OLD (since
#                                   the wait began if there was none)
#   scripts/pg-ha.sh rejoin         thaw, start every stopped/killed Patroni
#                                   again, and wait until the cluster is
#                                   healthy again; prints the seconds it took
#                                   and, for each node, whether pg_rewind ran
#                                   (or a re-clone) since the last fault
#
# "Healthy" (what `up` and `rejoin` wait for): a leader in etcd that is a
# primary; the two other nodes connected to it as streaming replicas with a
# replay lag of at most MSSMT_HA_MAX_LAG bytes (default 1 MiB, Patroni's
# maximum_lag_on_failover: caught up enough to be promoted; 0 waits for
# replay to catch up exactly, which a steady write load may never show) and
# receiving from it; with synchronous replication one of them is the
# sync_standby (in pg_stat_replication and in Patroni's /cluster); every
# Patroni reports `running`; HAProxy has exactly the leader UP on the
# read-write port and exactly the replicas UP on the read-only port, and a
# connection through each port reaches a primary / a replica.
#
# Every fault command prints on stdout one line
#   <UTC timestamp> <command> <node> <what was signalled>
# and records the time in DIR/last_fault for wait-leader and rejoin.
#
# Settings (environment):
#   MSSMT_HA_DIR        state directory (default /tmp/mssmt-ha); `down`
#                       removes it, so it is refused unless `up` made it
#   MSSMT_HA_TIMEOUT    bound of every wait in seconds (default 120)
#   MSSMT_HA_MAX_LAG    replay lag in bytes counted as caught up (default
#                       1048576)
#   MSSMT_HA_PATRONI_FIXES=0
#                       run Debian's Patroni 3.0.2 without the backported
#                       fixes (see the Patroni launcher below)
#
# Timings (Patroni dynamic configuration, in etcd): ttl 10 s, loop_wait 2 s,
# retry_timeout 4 s.  Patroni requires loop_wait + 2 * retry_timeout <= ttl
# (a primary that cannot reach etcd must demote itself before its key can
# expire and another node take over); with loop_wait 2 that leaves
# retry_timeout 4 for ttl 10.  loop_wait 2 s bounds how late a Patroni
# notices a crash; ttl 10 s is the time a frozen / powered-off leader keeps
# its key (a leader renews it every 2 s, so it tolerates 4 missed renewals
# on a busy 2-CPU machine before a spurious failover).  primary_start_timeout
# is 0: a crashed primary (kill-leader) fails over to a healthy replica at
# once instead of being restarted in place (Patroni's default waits 300 s).
#
# Everything listens on 127.0.0.1 only, on free ports in 15000-31999 (never
# in the kernel's ephemeral range).  Authentication is `trust` for every
# user on loopback (superuser `postgres`, replication user `replicator`):
# fine for tests on this machine, never for anything else.  PostgreSQL
# keeps its durability defaults (fsync, synchronous_commit, full_page_writes
# on), wal_log_hints is on (pg_rewind needs it), and the old primary rejoins
# with pg_rewind (use_pg_rewind: true; if pg_rewind fails Patroni re-clones
# it from the leader, which `rejoin` reports).
#
# Clients: MSSMT_HA_URL goes through HAProxy, whose read-write port routes
# to the node whose Patroni REST API answers 200 to OPTIONS /primary, i.e.
# that holds the leader key (Patroni answers 200 only while it holds and
# keeps renewing the key, so a primary that lost its key is not routed to),
# checked every second (fall 2, rise 2); sessions to a node marked down are
# cut.  A client keeps one address and only has to reconnect.
# MSSMT_HA_HOSTS is for clients that do their own multi-host failover
# (libpq's target_session_attrs=read-write): they may reach a primary that
# Patroni is about to demote.
#
# Failover times measured here (fault to writes routed to the new leader by
# HAProxy; sync mode, ~30 one-row write transactions/s through HAProxy, no
# acknowledged write lost in any of them): kill-leader 3.5-3.9 s (Patroni
# notices within loop_wait, demotes and releases the key, a replica promotes
# within ~0.1 s, and HAProxy needs rise 2 x inter 1 s), stop-leader
# 3.4-3.8 s, poweroff-leader 9.6-11 s (the ttl), freeze-leader 11.6-14 s
# (the ttl, plus the 2 s connect timeout the replicas spend on the frozen
# node's REST API).  rejoin takes 3-10 s.  The old primary needed pg_rewind
# after every freeze and poweroff, never after kill (its walsenders outlive
# the postmaster long enough to ship all its WAL) or stop (shutdown
# checkpoint).
#
# As root, missing packages are installed with apt (patroni, python3-etcd,
# etcd-server, etcd-client, haproxy; without starting their system
# services) and every daemon runs as the system user `mssmt_pg` (created on
# demand): PostgreSQL refuses root, and Patroni starts PostgreSQL itself.
# Every daemon is a child of one small supervisor process (Python, a "child
# subreaper", DIR/supervisor.log): the postmasters Patroni starts (which
# leave Patroni's process tree) are reparented to it and reaped at once.
# PID 1 on these machines reaps orphans only a second or two late, and until
# then a killed postmaster is a zombie that Patroni takes for a running
# server.  Logs: DIR/nodeN/patroni.log (Patroni), DIR/nodeN/stderr.log
# (PostgreSQL), DIR/etcd/etcd.log, DIR/haproxy.log (server UP/DOWN).
#
# Messages go to stderr; stdout carries only the data described above.

set -euo pipefail

readonly PROG="pg-ha"
readonly PG_SYSTEM_USER="mssmt_pg"
readonly DIR="${MSSMT_HA_DIR:-/tmp/mssmt-ha}"
readonly TIMEOUT="${MSSMT_HA_TIMEOUT:-120}"
readonly MAX_LAG="${MSSMT_HA_MAX_LAG:-1048576}"
readonly SCOPE="mssmt"
readonly NAMESPACE="/mssmt-ha"
readonly NODES=(node1 node2 node3)
readonly TTL=10 LOOP_WAIT=2 RETRY_TIMEOUT=4
readonly MARKER=".mssmt-pg-ha"
readonly PY=/usr/bin/python3

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ensure_pg_user
source "$(dirname "${BASH_SOURCE[0]}")/pg-common.sh"

usage() {
    printf 'usage: %s up [--async] | down | status | leader | kill-leader | stop-leader | poweroff-leader | freeze-leader | thaw | wait-leader OLD | rejoin\n' "$0" >&2
    exit 2
}

[[ $# -ge 1 ]] || usage
CMD="$1"
shift

[[ "$TIMEOUT" =~ ^[0-9]+$ && "$TIMEOUT" -gt 0 ]] || die "MSSMT_HA_TIMEOUT must be a positive integer (seconds)"
[[ "$MAX_LAG" =~ ^[0-9]+$ ]] || die "MSSMT_HA_MAX_LAG must be a number of bytes"
[[ "$DIR" == /* && "$DIR" != / ]] || die "MSSMT_HA_DIR must be an absolute path other than /"
# (It goes unquoted into Patroni's YAML and HAProxy's configuration.)
[[ "$DIR" =~ ^[A-Za-z0-9._/+-]+$ ]] || die "MSSMT_HA_DIR may only contain letters, digits and . _ / + -"

IS_ROOT=0
[[ "$(id -u)" -eq 0 ]] && IS_ROOT=1

# now: seconds since the epoch, with nanoseconds; stamp EPOCH: UTC ISO-8601.
now() { date +%s.%N; }
stamp() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S.%3NZ; }

# ---------------------------------------------------------------------------
# The Python helper: supervisor, etcd / Patroni / HAProxy / PostgreSQL probes
# and the bounded waits.  /usr/bin/python3 is there (Patroni runs on it) with
# psycopg2 (a Patroni dependency).  Run as: "$PY" -c "$HA_PY" SUBCOMMAND ...
# with the cluster's coordinates in HA_* environment variables.
# ---------------------------------------------------------------------------
read -r -d '' HA_PY <<'PYEOF' || true
import base64, ctypes, json, os, random, select, signal, socket, sys, time
import urllib.request

def log(msg):
    sys.stderr.write('pg-ha: %s\n' % msg)
    sys.stderr.flush()

def die(msg):
    log('error: ' + msg)
    sys.exit(1)

def stamp(t=None):
    t = time.time() if t is None else t
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(t)) + '.%03dZ' % int((t % 1) * 1000)

def nodes():
    out = {}
    for item in os.environ['HA_NODES'].split(','):
        name, pg, rest = item.split(':')
        out[name] = (int(pg), int(rest))
    return out

# --- the supervisor --------------------------------------------------------

def recv_all(conn):
    chunks = []
    while True:
        b = conn.recv(65536)
        if not b:
            return b''.join(chunks)
        chunks.append(b)

def supervise(d):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        die('prctl(PR_SET_CHILD_SUBREAPER) failed')
    path = os.path.join(d, 'supervisor.sock')
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(16)
    names = {}

    def reap(*_):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            name = names.pop(pid, None)
            if name:
                if os.WIFSIGNALED(status):
                    how = 'killed by signal %d' % os.WTERMSIG(status)
                else:
                    how = 'exit status %d' % os.WEXITSTATUS(status)
                log('%s supervisor: %s (pid %d) ended, %s' % (stamp(), name, pid, how))

    signal.signal(signal.SIGCHLD, reap)
    log('%s supervisor: pid %d, subreaper, socket %s' % (stamp(), os.getpid(), path))
    while True:
        try:
            conn, _ = srv.accept()
        except InterruptedError:
            continue
        reap()
        with conn:
            conn.settimeout(10)
            try:
                req = json.loads(recv_all(conn) or b'{}')
            except Exception as e:
                log('supervisor: bad request: %r' % e)
                continue
            op = req.get('op')
            if op == 'ping':
                conn.sendall(json.dumps({'pid': os.getpid()}).encode())
            elif op == 'spawn':
                argv, logf, cwd = req['argv'], req['log'], req.get('cwd', '/')
                env = req.get('env', {})
                pid = os.fork()
                if pid == 0:
                    try:
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        os.setsid()
                        nul = os.open('/dev/null', os.O_RDONLY)
                        out = os.open(logf, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
                        os.dup2(nul, 0)
                        os.dup2(out, 1)
                        os.dup2(out, 2)
                        os.closerange(3, 65536)
                        os.chdir(cwd)
                        os.execve(argv[0], argv, env)
                    except BaseException as e:
                        os.write(2, ('pg-ha supervisor: cannot run %r: %r\n' % (argv, e)).encode())
                    os._exit(127)
                names[pid] = req.get('name', argv[0])
                log('%s supervisor: started %s (pid %d): %s' % (stamp(), names[pid], pid, ' '.join(argv)))
                conn.sendall(json.dumps({'pid': pid}).encode())
            elif op == 'quit':
                conn.sendall(b'{}')
                os.unlink(path)
                log('%s supervisor: quitting' % stamp())
                sys.exit(0)

def request(d, req):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(os.path.join(d, 'supervisor.sock'))
    s.sendall(json.dumps(req).encode())
    s.shutdown(socket.SHUT_WR)
    return json.loads(recv_all(s) or b'{}')

# --- probes ----------------------------------------------------------------

def http(port, path, body=None, timeout=1.0):
    req = urllib.request.Request('http://127.0.0.1:%d%s' % (port, path), data=body,
                                 headers={'Content-Type': 'application/json'} if body else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)

def etcd_get(key, timeout=1.0):
    body = json.dumps({'key': base64.b64encode(key.encode()).decode()}).encode()
    kvs = http(int(os.environ['HA_ETCD_PORT']), '/v3/kv/range', body, timeout).get('kvs') or []
    return base64.b64decode(kvs[0]['value']).decode() if kvs else None

def etcd_leader():
    return etcd_get(os.environ['HA_KEY'] + '/leader')

import psycopg2, psycopg2.extensions
_deadline = [0.0]

def _wait(conn):
    # Every connection and query is bounded (a frozen server never answers).
    while True:
        state = conn.poll()
        if state == psycopg2.extensions.POLL_OK:
            return
        left = _deadline[0] - time.monotonic()
        if left <= 0:
            raise psycopg2.OperationalError('timed out')
        if state == psycopg2.extensions.POLL_READ:
            select.select([conn.fileno()], [], [], left)
        elif state == psycopg2.extensions.POLL_WRITE:
            select.select([], [conn.fileno()], [], left)

psycopg2.extensions.set_wait_callback(_wait)

def pg(port, sql, timeout=2.0):
    _deadline[0] = time.monotonic() + timeout
    c = psycopg2.connect(host='127.0.0.1', port=port, user='postgres', dbname='postgres',
                         application_name='pg-ha-probe')
    try:
        cur = c.cursor()
        cur.execute(sql)
        return cur.fetchall()
    finally:
        c.close()

def route(port, timeout=2.0):
    """(server port, in recovery) of the server a new connection to port reaches."""
    try:
        return tuple(pg(port, 'select inet_server_port(), pg_is_in_recovery()', timeout)[0])
    except Exception:
        return None

def haproxy_up():
    """{'mssmt_rw': set of servers UP, 'mssmt_ro': ...}"""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(os.environ['HA_HAPROXY_SOCK'])
    s.sendall(b'show stat\n')
    lines = recv_all(s).decode().splitlines()
    s.close()
    header = lines[0].lstrip('# ').split(',')
    up = {'mssmt_rw': set(), 'mssmt_ro': set()}
    for line in lines[1:]:
        if not line:
            continue
        row = dict(zip(header, line.split(',')))
        if row['pxname'] in up and row['svname'] not in ('FRONTEND', 'BACKEND') \
                and row['status'].startswith('UP'):
            up[row['pxname']].add(row['svname'])
    return up

def port_node(port):
    for name, (pg_port, _) in nodes().items():
        if pg_port == port:
            return name
    return '?'

def check_healthy(sync, max_lag):
    """None if healthy, else what is missing."""
    nd = nodes()
    try:
        leader = etcd_leader()
    except Exception as e:
        return 'etcd not answering (%s)' % e
    if not leader:
        return 'no leader key in etcd'
    if leader not in nd:
        return 'unknown leader %r' % leader
    others = sorted(n for n in nd if n != leader)
    lport = nd[leader][0]
    try:
        if pg(lport, 'select pg_is_in_recovery()')[0][0]:
            return 'leader %s is still in recovery' % leader
        reps = pg(lport, 'select application_name, state, sync_state, '
                         'coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), -1)::bigint '
                         'from pg_stat_replication')
    except Exception as e:
        return 'leader %s not answering (%s)' % (leader, str(e).strip())
    by = {r[0]: r for r in reps}
    for n in others:
        r = by.get(n)
        if not r:
            return '%s is not connected to leader %s' % (n, leader)
        if r[1] != 'streaming':
            return '%s is %s, not streaming' % (n, r[1])
        if r[3] < 0 or r[3] > max_lag:
            return '%s replay lag %d bytes' % (n, r[3])
    if sync and not any(by[n][2] in ('sync', 'quorum') for n in others):
        return 'no synchronous standby in pg_stat_replication yet'
    for n in others:
        try:
            rec, status, sport = pg(nd[n][0], 'select pg_is_in_recovery(), status, sender_port '
                                              'from (select 1) x left join pg_stat_wal_receiver on true')[0]
        except Exception as e:
            return 'replica %s not answering (%s)' % (n, str(e).strip())
        if not rec or status != 'streaming' or sport != lport:
            return 'replica %s: in recovery %s, wal receiver %s from port %s' % (n, rec, status, sport)
    try:
        cluster = http(nd[leader][1], '/cluster')
    except Exception as e:
        return 'Patroni REST API of %s not answering (%s)' % (leader, e)
    roles = {m['name']: m for m in cluster.get('members', [])}
    for n in nd:
        m = roles.get(n)
        if not m or m.get('state') != 'running':
            return 'Patroni member %s not running (%s)' % (n, m and m.get('state'))
    if sync and not any(roles[n].get('role') == 'sync_standby' for n in others):
        return 'Patroni has no sync_standby yet'
    try:
        up = haproxy_up()
    except Exception as e:
        return 'HAProxy stats socket not answering (%s)' % e
    if up['mssmt_rw'] != {leader}:
        return 'HAProxy read-write UP: %s (want %s)' % (sorted(up['mssmt_rw']), leader)
    if up['mssmt_ro'] != set(others):
        return 'HAProxy read-only UP: %s (want %s)' % (sorted(up['mssmt_ro']), others)
    r = route(int(os.environ['HA_RW_PORT']))
    if r != (lport, False):
        return 'read-write port reaches %s' % (r and '%s (in recovery %s)' % (port_node(r[0]), r[1]))
    r = route(int(os.environ['HA_RO_PORT']))
    if not r or r[0] == lport or not r[1]:
        return 'read-only port reaches %s' % (r and '%s (in recovery %s)' % (port_node(r[0]), r[1]))
    return None

def wait_healthy(sync, max_lag, timeout, what):
    t0 = time.time()
    deadline = t0 + timeout
    last, last_print = None, 0.0
    while True:
        missing = check_healthy(sync, max_lag)
        if missing is None:
            return time.time() - t0
        now = time.time()
        if missing != last or now - last_print >= 10:
            log('%s %s: waiting: %s' % (stamp(now), what, missing))
            last, last_print = missing, now
        if now >= deadline:
            die('%s: not healthy after %d s: %s' % (what, timeout, missing))
        time.sleep(0.25)

def wait_leader(old, t_fault, timeout):
    nd = nodes()
    rw = int(os.environ['HA_RW_PORT'])
    t0 = time.time()
    deadline = t0 + timeout
    seen = None
    while True:
        try:
            leader = etcd_leader()
        except Exception:
            leader = None
        if leader != seen:
            log('%s leader key: %s' % (stamp(), leader or '(none)'))
            seen = leader
        if leader and leader != old and leader in nd:
            r = route(rw)
            if r == (nd[leader][0], False):
                t = time.time()
                return leader, t, t - (t_fault or t0)
        if time.time() >= deadline:
            die('no new leader routed by HAProxy within %d s (leader key: %s, read-write port reaches: %s)'
                % (timeout, leader or '(none)', route(rw)))
        time.sleep(0.1)

def free_ports(n):
    got = []
    for _ in range(5000):
        if len(got) == n:
            break
        p = random.randrange(15000, 32000)
        if p in got:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(('127.0.0.1', p))
        except OSError:
            continue
        finally:
            s.close()
        got.append(p)
    if len(got) < n:
        die('could not find %d free ports' % n)
    print(' '.join(map(str, got)))

def listening(ports):
    busy = []
    for p in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(0.5)
        try:
            s.connect(('127.0.0.1', p))
            busy.append(p)
        except OSError:
            pass
        finally:
            s.close()
    print(' '.join(map(str, busy)))

def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == 'supervise':
        supervise(args[0])
    elif cmd == 'ping':
        print(request(args[0], {'op': 'ping'})['pid'])
    elif cmd == 'spawn':
        # spawn DIR NAME LOG CWD ARGV...: environment from HA_SPAWN_ENV (JSON)
        d, name, logf, cwd, argv = args[0], args[1], args[2], args[3], args[4:]
        env = json.loads(os.environ.get('HA_SPAWN_ENV', '{}'))
        print(request(d, {'op': 'spawn', 'name': name, 'log': logf, 'cwd': cwd, 'argv': argv, 'env': env})['pid'])
    elif cmd == 'quit':
        request(args[0], {'op': 'quit'})
    elif cmd == 'free-ports':
        free_ports(int(args[0]))
    elif cmd == 'listening':
        listening([int(p) for p in args])
    elif cmd == 'etcd-healthy':
        try:
            sys.exit(0 if http(int(os.environ['HA_ETCD_PORT']), '/health').get('health') == 'true' else 1)
        except Exception:
            sys.exit(1)
    elif cmd == 'leader':
        try:
            print(etcd_leader() or '')
        except Exception as e:
            die('etcd not answering: %s' % e)
    elif cmd == 'wait-healthy':
        took = wait_healthy(args[0] == 'sync', int(args[1]), int(args[2]), args[3])
        print('%.2f' % took)
    elif cmd == 'wait-leader':
        leader, t, took = wait_leader(args[0], float(args[1]) if args[1] else None, int(args[2]))
        print('%s %s %.2f' % (leader, stamp(t), took))
    elif cmd == 'haproxy':
        up = haproxy_up()
        for px, port in (('mssmt_rw', 'HA_RW_PORT'), ('mssmt_ro', 'HA_RO_PORT')):
            r = route(int(os.environ[port]))
            print('%s (127.0.0.1:%s): servers UP %s; a new connection reaches %s' % (
                px, os.environ[port], ', '.join(sorted(up[px])) or '(none)',
                r and '%s (127.0.0.1:%d, %s)' % (port_node(r[0]), r[0], 'replica' if r[1] else 'primary')
                or 'nothing (no answer within 2 s)'))
    else:
        die('unknown helper command ' + cmd)

main()
PYEOF

# ---------------------------------------------------------------------------
# The Patroni launcher (written to DIR/patroni-launch.py by `up`): runs the
# installed Patroni, and for Debian 12's Patroni 3.0.2 first backports three
# upstream fixes for a leader that stalls past its TTL (exactly what
# freeze-leader does).  Without them a thawed old leader could, in one of
# four to five freezes here, overwrite the new leader's key, demote it and
# have it rewound, losing transactions the new leader had acknowledged in
# synchronous mode; or it kept a stale etcd cache and looped on "Synchronous
# replication key updated by someone else".  MSSMT_HA_PATRONI_FIXES=0 runs
# Patroni unpatched (to reproduce that).
#   patroni#2689 / #2693 (3.0.3): update the leader key only while it still
#       holds our name, or create it if absent; never overwrite another's.
#   patroni#2783 (3.1.0): a transaction that failed on a revision mismatch
#       restarts the etcd watcher (the cache it compared against was stale).
#   patroni#2787 (3.1.0): a running primary whose timeline is behind the
#       cluster's does not win a leader race.
# ---------------------------------------------------------------------------
read -r -d '' PATRONI_LAUNCH_PY <<'PYEOF' || true
import logging, os, sys, time

def apply_fixes():
    from patroni.version import __version__
    if os.environ.get('MSSMT_HA_PATRONI_FIXES', '1') == '0':
        sys.stderr.write('pg-ha: Patroni %s WITHOUT the backported fixes (MSSMT_HA_PATRONI_FIXES=0)\n' % __version__)
        return
    if __version__ != '3.0.2':
        if tuple(int(x) for x in __version__.split('.')[:2]) < (3, 1):
            sys.stderr.write('pg-ha: warning: Patroni %s lacks upstream fixes #2689, #2783 and #2787; '
                             'they are backported only to 3.0.2\n' % __version__)
        return
    from patroni.dcs import Leader
    from patroni.dcs import etcd3
    from patroni.ha import Ha
    log = logging.getLogger('patroni.dcs.etcd3')

    @etcd3.catch_return_false_exception
    def _update_leader(self):
        retry = self._retry.copy()

        def _retry(*args, **kwargs):
            kwargs['retry'] = retry
            return retry(*args, **kwargs)

        self._run_and_handle_exceptions(self._do_refresh_lease, True, retry=_retry)
        if not self._lease:
            return False
        cluster = self.cluster
        leader_lease = cluster and isinstance(cluster.leader, Leader) and cluster.leader.session
        if leader_lease == self._lease:
            return True
        # A new lease (ours expired): put it on the leader key only if the key
        # still holds our name, or create the key if nobody holds it.
        retry.deadline = retry.stoptime - time.time()
        if retry.deadline < 1:
            raise etcd3.Etcd3Error('update_leader timeout')
        fields = {'key': etcd3.base64_encode(self.leader_path),
                  'value': etcd3.base64_encode(self._name), 'lease': self._lease}
        put = {'request_put': fields}
        ret = self._run_and_handle_exceptions(self._client.call_rpc, '/kv/txn', {
            'compare': [{'key': fields['key'], 'target': 'VALUE', 'value': fields['value']}],
            'success': [put],
            'failure': [{'request_txn': {
                'compare': [{'key': fields['key'], 'target': 'CREATE', 'create_revision': '0'}],
                'success': [put]}}]}, retry=_retry)
        ok = bool(ret.get('succeeded')) or \
            bool(((ret.get('responses') or [{}])[0].get('response_txn') or {}).get('succeeded'))
        if not ok:
            log.warning('pg-ha fix (patroni#2689): another node holds the leader key now; not overwriting it')
            self._client._restart_watcher()
        return ok

    etcd3.Etcd3._update_leader = _update_leader

    orig_txn = etcd3.PatroniEtcd3Client.txn

    def txn(self, compare, success, retry=None):
        ret = orig_txn(self, compare, success, retry)
        if not ret:
            log.info('pg-ha fix (patroni#2783): a transaction failed on a revision mismatch; restarting the watcher')
            self._restart_watcher()
        return ret

    etcd3.PatroniEtcd3Client.txn = txn

    orig_is_healthiest_node = Ha.is_healthiest_node

    def is_healthiest_node(self):
        if not self.is_paused() and self.state_handler.is_leader():
            mine = self.state_handler.get_primary_timeline()
            theirs = self.cluster.timeline
            if mine and theirs and mine < theirs:
                logging.getLogger('patroni.ha').warning(
                    'pg-ha fix (patroni#2787): my timeline %s is behind the last known cluster timeline %s',
                    mine, theirs)
                return False
        return orig_is_healthiest_node(self)

    Ha.is_healthiest_node = is_healthiest_node
    sys.stderr.write('pg-ha: Patroni 3.0.2 with upstream fixes #2689, #2783, #2787 backported\n')

if __name__ == '__main__':
    apply_fixes()
    from patroni.__main__ import main
    sys.argv[0] = 'patroni'
    sys.exit(main())
PYEOF

# hapy SUBCOMMAND ARGS...: run the Python helper with the cluster's
# coordinates (load_state sets them) in its environment.
hapy() {
    HA_NODES="${HA_NODES:-}" HA_ETCD_PORT="${ETCD_PORT:-}" HA_KEY="$NAMESPACE/$SCOPE" \
        HA_RW_PORT="${RW_PORT:-}" HA_RO_PORT="${RO_PORT:-}" HA_HAPROXY_SOCK="$DIR/haproxy.sock" \
        "$PY" -c "$HA_PY" "$@"
}

# ---------------------------------------------------------------------------
# Packages.
# ---------------------------------------------------------------------------
PG_BIN=""
find_pg_bin() {
    local d
    while IFS= read -r d; do
        if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" && -x "$d/pg_rewind" ]]; then
            PG_BIN="$d"
            return 0
        fi
    done < <(
        shopt -s nullglob
        for d in /usr/lib/postgresql/*/bin; do printf '%s\n' "$d"; done | sort -rV
    )
    return 1
}

# missing_packages: prints the Debian packages whose programs are missing.
missing_packages() {
    local -a m=()
    find_pg_bin || m+=(postgresql)
    [[ -x /usr/bin/patroni && -x /usr/bin/patronictl ]] || m+=(patroni)
    # Patroni's etcd3 support imports python-etcd (the package only depends
    # on one of several DCS clients); psycopg2 comes with patroni.
    [[ -x "$PY" ]] && "$PY" -c 'import etcd' 2>/dev/null || m+=(python3-etcd)
    [[ -x /usr/bin/etcd ]] || m+=(etcd-server)
    command -v etcdctl >/dev/null 2>&1 || m+=(etcd-client)
    command -v haproxy >/dev/null 2>&1 || [[ -x /usr/sbin/haproxy ]] || m+=(haproxy)
    command -v setpriv >/dev/null 2>&1 || m+=(util-linux)
    command -v ps >/dev/null 2>&1 || m+=(procps)
    printf '%s\n' "${m[@]}"
}

POLICY_RC_MADE=0
ensure_packages() {
    local -a missing
    mapfile -t missing < <(missing_packages)
    [[ ${#missing[@]} -eq 0 || -z "${missing[0]}" ]] && return 0
    if [[ $IS_ROOT -eq 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        die "missing: ${missing[*]} (install these Debian packages, or run this script as root)"
    fi
    log "installing ${missing[*]}"
    # The packages' own services (a system etcd on :2379, a system haproxy)
    # must not start: a policy-rc.d that denies every start, only for this
    # install and only if the machine has none.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\n# temporary, scripts/pg-ha.sh: no service starts during its apt-get install\nexit 101\n' \
            >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        POLICY_RC_MADE=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    local ok=1
    apt-get update -q </dev/null >&2 || ok=0
    [[ $ok -eq 1 ]] && { apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >&2 || ok=0; }
    if [[ $POLICY_RC_MADE -eq 1 ]]; then
        rm -f /usr/sbin/policy-rc.d
        POLICY_RC_MADE=0
    fi
    [[ $ok -eq 1 ]] || die "apt-get install ${missing[*]} failed"
    mapfile -t missing < <(missing_packages)
    [[ ${#missing[@]} -eq 0 || -z "${missing[0]}" ]] || die "still missing after install: ${missing[*]}"
}

# ---------------------------------------------------------------------------
# Processes.
# ---------------------------------------------------------------------------

# pid_alive PID: PID exists and is not a zombie.
pid_alive() {
    local state=""
    [[ "${1:-}" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$1/stat" ]] || return 1
    state="$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

# pid_state PID: R, S, T (stopped), ... or "-" if gone.
pid_state() {
    local s
    if pid_alive "$1"; then
        s="$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$1/stat" 2>/dev/null)" || s="?"
        printf '%s\n' "$s"
    else
        printf -- '-\n'
    fi
}

# descendants PID...: every live descendant of the given processes.
descendants() {
    ps -e -o pid=,ppid=,stat= | awk -v roots="$*" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) want[r[i]] = 1 }
        $3 !~ /^Z/ { par[$1] = $2; all[++m] = $1 }
        END {
            do {
                changed = 0
                for (i = 1; i <= m; i++) {
                    p = all[i]
                    if (!(p in want) && (par[p] in want)) { want[p] = 1; out[p] = 1; changed = 1 }
                }
            } while (changed)
            for (p in out) print p
        }'
}

# children PID: live direct children of PID.
children() {
    ps -e -o pid=,ppid=,stat= | awk -v p="$1" '$2 == p && $3 !~ /^Z/ { print $1 }'
}

# wait_gone SECONDS PID...: wait until none of the PIDs is alive.
wait_gone() {
    local secs="$1" p any i
    shift
    for (( i = 0; i < secs * 10; i++ )); do
        any=0
        for p in "$@"; do pid_alive "$p" && { any=1; break; }; done
        [[ $any -eq 0 ]] && return 0
        sleep 0.1
    done
    return 1
}

# supervisor_pid: the live supervisor's pid (its pidfile, checked).
supervisor_pid() {
    local pid
    [[ -r "$DIR/supervisor.pid" ]] || return 1
    read -r pid <"$DIR/supervisor.pid" || return 1
    pid_alive "$pid" || return 1
    grep -qa -- 'supervise' "/proc/$pid/cmdline" 2>/dev/null || return 1
    printf '%s\n' "$pid"
}

# spawn NAME LOG CWD ARGV...: start ARGV under the supervisor (as the
# supervisor's user, in a session of its own, stdin /dev/null, stdout and
# stderr appended to LOG); writes DIR/NAME.pid and prints the pid.
spawn() {
    local name="$1" logf="$2" cwd="$3" pid
    shift 3
    pid="$(HA_SPAWN_ENV="$SPAWN_ENV_JSON" hapy spawn "$DIR" "$name" "$logf" "$cwd" "$@")" \
        || die "the supervisor did not start $name"
    printf '%s\n' "$pid" >"$DIR/$name.pid"
    printf '%s\n' "$pid"
}

# set_spawn_env: the environment of every daemon (SPAWN_ENV_JSON).
set_spawn_env() {
    SPAWN_ENV_JSON="$("$PY" -c 'import json, sys; print(json.dumps({"PATH": sys.argv[1], "HOME": sys.argv[2],
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "MSSMT_HA_PATRONI_FIXES": sys.argv[3]}))' \
        "$PG_BIN:/usr/sbin:/usr/bin:/sbin:/bin" "$DIR" "$PATRONI_FIXES")"
}

# read_pidfile FILE: print the pid in FILE if that process is alive.
read_pidfile() {
    local pid
    [[ -r "$1" ]] || return 1
    read -r pid <"$1" || return 1
    pid_alive "$pid" || return 1
    printf '%s\n' "$pid"
}

# patroni_pid NODE: the node's live Patroni.
patroni_pid() {
    local pid
    pid="$(read_pidfile "$DIR/$1.pid")" || return 1
    grep -qa -- "$DIR/$1/patroni.yml" "/proc/$pid/cmdline" 2>/dev/null || return 1
    printf '%s\n' "$pid"
}

# postmaster_pid NODE: the node's live postmaster (postmaster.pid, checked:
# the postmaster's working directory is its data directory).
postmaster_pid() {
    local pid
    pid="$(read_pidfile "$DIR/$1/data/postmaster.pid")" || return 1
    [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == "$DIR/$1/data" ]] || return 1
    printf '%s\n' "$pid"
}

# ---------------------------------------------------------------------------
# State.
# ---------------------------------------------------------------------------
ETCD_PORT="" ETCD_PEER_PORT="" RW_PORT="" RO_PORT="" HA_NODES="" MODE="" PATRONI_FIXES=1
declare -A PG_PORT=() REST_PORT=()

load_state() {
    [[ -f "$DIR/$MARKER" && -f "$DIR/state.env" ]] \
        || die "no cluster in $DIR (run '$0 up' first)"
    # shellcheck disable=SC1091
    source "$DIR/state.env"
    local n
    HA_NODES=""
    for n in "${NODES[@]}"; do
        PG_PORT[$n]="$(eval "printf '%s' \"\${PG_PORT_$n}\"")"
        REST_PORT[$n]="$(eval "printf '%s' \"\${REST_PORT_$n}\"")"
        HA_NODES+="${HA_NODES:+,}$n:${PG_PORT[$n]}:${REST_PORT[$n]}"
    done
    [[ -n "$PG_BIN" ]] || find_pg_bin || die "PostgreSQL binaries not found"
}

all_ports() {
    local n
    printf '%s ' "$ETCD_PORT" "$ETCD_PEER_PORT" "$RW_PORT" "$RO_PORT"
    for n in "${NODES[@]}"; do printf '%s %s ' "${PG_PORT[$n]}" "${REST_PORT[$n]}"; done
}

# current_leader: sets LEADER (etcd's leader key) or dies.
current_leader() {
    LEADER="$(hapy leader)" || die "cannot read the leader key from etcd"
    [[ -n "$LEADER" ]] || die "no node holds the leader key"
    [[ -n "${PG_PORT[$LEADER]:-}" ]] || die "unknown leader '$LEADER'"
}

# log_sizes: "node1=BYTES node2=..." of the Patroni logs (to find what
# happened after a fault).
log_sizes() {
    local n s
    for n in "${NODES[@]}"; do
        s="$(stat -c %s "$DIR/$n/patroni.log" 2>/dev/null)" || s=0
        printf '%s=%s ' "$n" "$s"
    done
}

# record_fault KIND NODE EPOCH DETAILS: DIR/last_fault, and the line on stdout.
record_fault() {
    local kind="$1" node="$2" t="$3" details="$4"
    {
        printf 'FAULT_KIND=%q\nFAULT_NODE=%q\nFAULT_EPOCH=%q\n' "$kind" "$node" "$t"
        printf 'FAULT_LOG_SIZES=%q\n' "$LOG_SIZES"
    } >"$DIR/last_fault"
    printf '%s %s %s %s\n' "$(stamp "$t")" "$kind" "$node" "$details"
}

# ---------------------------------------------------------------------------
# Teardown (down, and a failed up): everything under the supervisor, the
# pidfiles' processes if the supervisor is gone, then the directory.
# ---------------------------------------------------------------------------
teardown() (
    set +e
    local sup n pid pids=() rest=() busy
    sup="$(supervisor_pid)" || sup=""
    [[ -f "$DIR/state.env" ]] && { source "$DIR/state.env"; for n in "${NODES[@]}"; do
        PG_PORT[$n]="$(eval "printf '%s' \"\${PG_PORT_$n:-}\"")"
        REST_PORT[$n]="$(eval "printf '%s' \"\${REST_PORT_$n:-}\"")"
    done; }

    # Everything we may have started: the supervisor's descendants, and (in
    # case the supervisor died) the pidfiles and the postmasters.
    [[ -n "$sup" ]] && mapfile -t pids < <(descendants "$sup")
    for n in etcd haproxy "${NODES[@]}"; do
        pid="$(read_pidfile "$DIR/$n.pid")" && pids+=("$pid")
    done
    for n in "${NODES[@]}"; do
        pid="$(postmaster_pid "$n")" && { pids+=("$pid"); mapfile -t -O "${#pids[@]}" pids < <(children "$pid"); }
    done
    if [[ ${#pids[@]} -gt 0 ]]; then
        # Frozen processes first get SIGCONT, or they would not act on
        # SIGTERM / SIGQUIT.
        kill -CONT "${pids[@]}" 2>/dev/null
        # HAProxy and the Patroni processes: no graceful shutdown needed,
        # the data is thrown away.
        for n in haproxy "${NODES[@]}"; do
            pid="$(read_pidfile "$DIR/$n.pid")" && kill -KILL "$pid" 2>/dev/null
        done
        # PostgreSQL: immediate shutdown (SIGQUIT), then SIGKILL.
        rest=()
        for n in "${NODES[@]}"; do
            pid="$(postmaster_pid "$n")" && { kill -QUIT "$pid" 2>/dev/null; rest+=("$pid"); }
        done
        [[ ${#rest[@]} -gt 0 ]] && { wait_gone 10 "${rest[@]}" || kill -KILL "${rest[@]}" 2>/dev/null; }
        pid="$(read_pidfile "$DIR/etcd.pid")" && { kill -TERM "$pid" 2>/dev/null; wait_gone 10 "$pid" || kill -KILL "$pid" 2>/dev/null; }
        # Whatever is left (postgres children, a pg_rewind or pg_basebackup
        # in flight, ...).
        [[ -n "$sup" ]] && mapfile -t -O "${#pids[@]}" pids < <(descendants "$sup")
        kill -KILL "${pids[@]}" 2>/dev/null
        wait_gone 10 "${pids[@]}" || log "warning: still alive after SIGKILL: $(for p in "${pids[@]}"; do pid_alive "$p" && printf '%s ' "$p"; done)"
    fi
    if [[ -n "$sup" ]]; then
        hapy quit "$DIR" 2>/dev/null || kill -TERM "$sup" 2>/dev/null
        wait_gone 5 "$sup" || kill -KILL "$sup" 2>/dev/null
    fi
    # A last look: a process of the server user that runs from our
    # directory and that nothing above found (the supervisor died early).
    if [[ $IS_ROOT -eq 1 ]] && id -u "$PG_SYSTEM_USER" >/dev/null 2>&1; then
        rest=()
        for pid in $(ps -u "$PG_SYSTEM_USER" -o pid= 2>/dev/null); do
            if grep -qa -- "$DIR/" "/proc/$pid/cmdline" 2>/dev/null \
                    || [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == "$DIR/"* ]]; then
                rest+=("$pid")
            fi
        done
        if [[ ${#rest[@]} -gt 0 ]]; then
            log "killing leftover processes of $DIR: ${rest[*]}"
            kill -CONT "${rest[@]}" 2>/dev/null
            kill -KILL "${rest[@]}" 2>/dev/null
            wait_gone 5 "${rest[@]}"
        fi
    fi
    if [[ -n "${ETCD_PORT:-}" ]]; then
        busy="$(hapy listening $(all_ports))"
        [[ -z "$busy" ]] || log "warning: ports still listening: $busy"
    fi
    if [[ -d "$DIR" ]]; then
        if [[ -f "$DIR/$MARKER" ]]; then
            rm -rf -- "$DIR" || log "warning: could not remove $DIR"
        else
            log "warning: $DIR was not made by $0; not removed"
        fi
    fi
    return 0
)

# ---------------------------------------------------------------------------
# up
# ---------------------------------------------------------------------------
write_patroni_config() {
    local n="$1" nd="$DIR/$1" sync="$2"
    cat >"$nd/patroni.yml" <<EOF
# written by scripts/pg-ha.sh (Patroni $PATRONI_VERSION)
scope: $SCOPE
namespace: $NAMESPACE/
name: $n

log:
  level: INFO
  dir: $nd
  file_num: 4
  file_size: 26214400

restapi:
  listen: 127.0.0.1:${REST_PORT[$n]}
  connect_address: 127.0.0.1:${REST_PORT[$n]}

# etcd's v3 API (Patroni's 'etcd:' section speaks the v2 API, which etcd 3.4
# does not serve by default).
etcd3:
  hosts: 127.0.0.1:$ETCD_PORT
  protocol: http

bootstrap:
  # The dynamic configuration, written to etcd by the node that bootstraps.
  dcs:
    ttl: $TTL
    loop_wait: $LOOP_WAIT
    retry_timeout: $RETRY_TIMEOUT
    maximum_lag_on_failover: 1048576
    # A crashed primary fails over to a healthy replica instead of being
    # restarted in place.
    primary_start_timeout: 0
    synchronous_mode: $sync
    synchronous_mode_strict: false
    synchronous_node_count: 1
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        fsync: "on"
        synchronous_commit: "on"
        full_page_writes: "on"
        max_connections: 100
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        shared_buffers: 64MB
        hot_standby_feedback: "on"
        recovery_init_sync_method: syncfs
  initdb:
    - encoding: UTF8
    - locale: C

postgresql:
  listen: 127.0.0.1:${PG_PORT[$n]}
  connect_address: 127.0.0.1:${PG_PORT[$n]}
  data_dir: $nd/data
  bin_dir: $PG_BIN
  pgpass: $nd/pgpass
  use_pg_rewind: true
  remove_data_directory_on_rewind_failure: true
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '$nd'
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  basebackup:
    - checkpoint: fast

watchdog:
  mode: "off"
EOF
}

# haproxy_servers: one `server` line per node: its PostgreSQL port, checked
# on its Patroni REST port.
haproxy_servers() {
    local n
    for n in "${NODES[@]}"; do
        printf '    server %s 127.0.0.1:%s check port %s\n' "$n" "${PG_PORT[$n]}" "${REST_PORT[$n]}"
    done
}

write_haproxy_config() {
    local n
    {
        cat <<EOF
# written by scripts/pg-ha.sh (HAProxy $HAPROXY_VERSION)
global
    nbthread 1
    maxconn 1000
    stats socket $DIR/haproxy.sock mode 600 level admin
    log stderr format iso local0 info

defaults
    mode tcp
    log global
    option dontlognull
    option dontlog-normal
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    # A frozen Patroni accepts the check's TCP connection (the kernel does)
    # but never answers: the check fails after 1 s.
    timeout check 1s

# Read-write: the node whose Patroni says it is the primary (it holds the
# leader key); sessions to a node marked down are closed at once.
listen mssmt_rw
    bind 127.0.0.1:$RW_PORT
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
EOF
        haproxy_servers
        cat <<EOF

# Read-only: the running replicas, round robin.
listen mssmt_ro
    bind 127.0.0.1:$RO_PORT
    balance roundrobin
    option httpchk OPTIONS /replica
    http-check expect status 200
    default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
EOF
        haproxy_servers
    } >"$DIR/haproxy.cfg"
}

start_patroni() {
    local n="$1" pid
    pid="$(spawn "$n" "$DIR/$n/stderr.log" "$DIR/$n" "$PY" "$DIR/patroni-launch.py" "$DIR/$n/patroni.yml")"
    log "$(stamp "$(now)") started Patroni $n (pid $pid; REST 127.0.0.1:${REST_PORT[$n]}, PostgreSQL 127.0.0.1:${PG_PORT[$n]})"
}

UP_DONE=0
cmd_up() {
    local sync=true n pid i sup ports
    case "${1:-}" in
        "") ;;
        --async) sync=false ;;
        *) usage ;;
    esac
    [[ $# -le 1 ]] || usage

    ensure_packages
    find_pg_bin || die "PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin"
    PATRONI_VERSION="$(/usr/bin/patroni --version 2>/dev/null | awk '{print $2}')"
    HAPROXY_VERSION="$(haproxy -v 2>/dev/null | awk 'NR==1 {print $3}')"
    local etcd_version pg_version
    etcd_version="$(/usr/bin/etcd --version 2>/dev/null | awk '/etcd Version/ {print $3}')"
    pg_version="$("$PG_BIN/postgres" --version | awk '{print $3}')"

    # An earlier cluster in DIR: refuse if it runs, clean it up if it is
    # what a killed run left behind.
    if [[ -e "$DIR" ]]; then
        if [[ -f "$DIR/$MARKER" ]]; then
            if supervisor_pid >/dev/null; then
                die "a cluster is already running in $DIR ('$0 down' first)"
            fi
            log "removing what an earlier run left in $DIR"
            teardown
        elif [[ -d "$DIR" && -z "$(ls -A "$DIR")" ]]; then
            rmdir "$DIR"
        else
            die "$DIR exists and was not made by $0; set MSSMT_HA_DIR elsewhere"
        fi
    fi

    [[ $IS_ROOT -eq 1 ]] && ensure_pg_user
    trap 'if [[ $UP_DONE -eq 0 ]]; then log "up failed: tearing down"; show_logs; teardown; fi' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    mkdir -m 755 "$DIR"
    : >"$DIR/$MARKER"
    for n in "${NODES[@]}"; do mkdir -m 700 "$DIR/$n"; done
    mkdir -m 700 "$DIR/etcd"
    [[ $IS_ROOT -eq 1 ]] && chown -R "$PG_SYSTEM_USER:" "$DIR"

    read -r -a ports <<<"$(hapy free-ports 10)"
    ETCD_PORT="${ports[0]}" ETCD_PEER_PORT="${ports[1]}" RW_PORT="${ports[2]}" RO_PORT="${ports[3]}"
    i=4
    HA_NODES=""
    for n in "${NODES[@]}"; do
        PG_PORT[$n]="${ports[$i]}"
        REST_PORT[$n]="${ports[$((i + 1))]}"
        HA_NODES+="${HA_NODES:+,}$n:${PG_PORT[$n]}:${REST_PORT[$n]}"
        i=$((i + 2))
    done
    MODE="$([[ $sync == true ]] && echo sync || echo async)"
    PATRONI_FIXES="$([[ "${MSSMT_HA_PATRONI_FIXES:-1}" == 0 ]] && echo 0 || echo 1)"
    {
        printf 'MODE=%q\nPG_BIN=%q\nETCD_PORT=%q\nETCD_PEER_PORT=%q\nRW_PORT=%q\nRO_PORT=%q\nPATRONI_FIXES=%q\n' \
            "$MODE" "$PG_BIN" "$ETCD_PORT" "$ETCD_PEER_PORT" "$RW_PORT" "$RO_PORT" "$PATRONI_FIXES"
        for n in "${NODES[@]}"; do
            printf 'PG_PORT_%s=%q\nREST_PORT_%s=%q\n' "$n" "${PG_PORT[$n]}" "$n" "${REST_PORT[$n]}"
        done
    } >"$DIR/state.env"

    for n in "${NODES[@]}"; do write_patroni_config "$n" "$sync"; done
    write_haproxy_config
    haproxy -c -q -f "$DIR/haproxy.cfg" >&2 || die "HAProxy rejects $DIR/haproxy.cfg"
    [[ $IS_ROOT -eq 1 ]] && chown -R "$PG_SYSTEM_USER:" "$DIR"

    log "PostgreSQL $pg_version, Patroni $PATRONI_VERSION, etcd $etcd_version (v3 API), HAProxy $HAPROXY_VERSION; $MODE replication; state in $DIR"

    # The supervisor: a child subreaper that starts and reaps every daemon.
    # (From a file, so that ps shows a readable command line.)
    printf '%s\n' "$HA_PY" >"$DIR/pg-ha-helper.py"
    printf '%s\n' "$PATRONI_LAUNCH_PY" >"$DIR/patroni-launch.py"
    local -a sup_cmd=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$PY" "$DIR/pg-ha-helper.py" supervise "$DIR")
    if [[ $IS_ROOT -eq 1 ]]; then
        sup_cmd=(setpriv --reuid="$PG_SYSTEM_USER" --regid="$PG_SYSTEM_USER" --init-groups -- "${sup_cmd[@]}")
    fi
    (cd / && exec setsid "${sup_cmd[@]}") </dev/null >>"$DIR/supervisor.log" 2>&1 &
    local deadline=$(( SECONDS + 10 ))
    sup=""
    until [[ -S "$DIR/supervisor.sock" ]] && sup="$(hapy ping "$DIR" 2>/dev/null)"; do
        (( SECONDS < deadline )) || die "the supervisor did not start within 10 s (see $DIR/supervisor.log)"
        sleep 0.1
    done
    printf '%s\n' "$sup" >"$DIR/supervisor.pid"

    set_spawn_env

    pid="$(spawn etcd "$DIR/etcd/etcd.log" "$DIR/etcd" /usr/bin/etcd \
        --name mssmt-ha --data-dir "$DIR/etcd/data" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "mssmt-ha=http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster-state new --initial-cluster-token "mssmt-ha-$$-$RANDOM" \
        --logger zap --log-outputs stderr)"
    local deadline=$(( SECONDS + 30 ))
    until hapy etcd-healthy; do
        pid_alive "$pid" || die "etcd exited (see $DIR/etcd/etcd.log)"
        (( SECONDS < deadline )) || die "etcd not healthy after 30 s (see $DIR/etcd/etcd.log)"
        sleep 0.1
    done
    log "$(stamp "$(now)") etcd up (pid $pid, client 127.0.0.1:$ETCD_PORT)"

    for n in "${NODES[@]}"; do start_patroni "$n"; done
    pid="$(spawn haproxy "$DIR/haproxy.log" / "$(command -v haproxy || echo /usr/sbin/haproxy)" -db -f "$DIR/haproxy.cfg")"
    log "$(stamp "$(now)") started HAProxy (pid $pid; read-write 127.0.0.1:$RW_PORT, read-only 127.0.0.1:$RO_PORT)"

    local took
    took="$(hapy wait-healthy "$MODE" "$MAX_LAG" "$TIMEOUT" up)" || die "the cluster did not become healthy"
    local hosts="" url ro_url
    for n in "${NODES[@]}"; do hosts+="${hosts:+,}127.0.0.1:${PG_PORT[$n]}"; done
    url="postgres://postgres@127.0.0.1:$RW_PORT/postgres"
    ro_url="postgres://postgres@127.0.0.1:$RO_PORT/postgres"
    {
        printf 'MSSMT_HA_URL=%s\n' "$url"
        printf 'MSSMT_HA_RO_URL=%s\n' "$ro_url"
        printf 'MSSMT_HA_HOSTS=%s\n' "$hosts"
        printf 'MSSMT_HA_DIR=%s\n' "$DIR"
    } >"$DIR/ha.env"
    UP_DONE=1
    current_leader
    log "$(stamp "$(now)") cluster healthy after $took s (since Patroni start): leader $LEADER"
    cat "$DIR/ha.env"
}

show_logs() {
    local f
    for f in "$DIR/supervisor.log" "$DIR/etcd/etcd.log" "$DIR"/node?/patroni.log "$DIR"/node?/stderr.log "$DIR/haproxy.log"; do
        [[ -s "$f" ]] || continue
        log "--- last lines of $f:"
        tail -n 15 "$f" >&2
    done
}

# ---------------------------------------------------------------------------
# The other subcommands.
# ---------------------------------------------------------------------------
cmd_status() {
    local n pp pm
    load_state
    log "$MODE replication; state in $DIR"
    /usr/bin/patronictl -c "$DIR/${NODES[0]}/patroni.yml" list 2>&1 || log "patronictl list failed"
    for n in "${NODES[@]}"; do
        pp="$(patroni_pid "$n")" || pp=""
        pm="$(postmaster_pid "$n")" || pm=""
        [[ -n "$pp" ]] && pp="pid $pp ($(pid_state "$pp"))" || pp="not running"
        [[ -n "$pm" ]] && pm="pid $pm ($(pid_state "$pm"))" || pm="not running"
        printf '%s: Patroni %s, postmaster %s, PostgreSQL 127.0.0.1:%s, REST 127.0.0.1:%s\n' "$n" \
            "$pp" "$pm" "${PG_PORT[$n]}" "${REST_PORT[$n]}"
    done
    hapy haproxy || log "HAProxy not answering"
}

cmd_leader() {
    local pm
    load_state
    current_leader
    pm="$(postmaster_pid "$LEADER")" || pm="-"
    printf '%s %s\n' "$LEADER" "$pm"
}

cmd_fault() {
    local kind="$1" pm pp t kids=() all=()
    load_state
    current_leader
    pm="$(postmaster_pid "$LEADER")" || pm=""
    pp="$(patroni_pid "$LEADER")" || pp=""
    LOG_SIZES="$(log_sizes)"
    case "$kind" in
    kill-leader)
        [[ -n "$pm" ]] || die "the leader $LEADER has no running postmaster"
        t="$(now)"
        kill -KILL "$pm"
        record_fault "$kind" "$LEADER" "$t" "SIGKILL postmaster $pm"
        ;;
    stop-leader)
        [[ -n "$pp" ]] || die "the leader $LEADER has no running Patroni"
        t="$(now)"
        kill -TERM "$pp"
        record_fault "$kind" "$LEADER" "$t" "SIGTERM Patroni $pp (it stops postmaster ${pm:--} in fast mode and releases the leader key)"
        ;;
    poweroff-leader)
        [[ -n "$pm" ]] && mapfile -t kids < <(children "$pm")
        all=(${pp:+"$pp"} ${pm:+"$pm"} "${kids[@]}")
        [[ ${#all[@]} -gt 0 ]] || die "the leader $LEADER has no running process"
        t="$(now)"
        kill -KILL "${all[@]}" 2>/dev/null || true
        record_fault "$kind" "$LEADER" "$t" "SIGKILL Patroni ${pp:--}, postmaster ${pm:--} and its ${#kids[@]} children"
        ;;
    freeze-leader)
        [[ -n "$pp" && -n "$pm" ]] || die "the leader $LEADER has no running Patroni and postmaster"
        t="$(now)"
        # Patroni first: it must not see its postmaster stop and act on it.
        kill -STOP "$pp"
        kill -STOP "$pm"
        mapfile -t kids < <(children "$pm")
        [[ ${#kids[@]} -gt 0 ]] && kill -STOP "${kids[@]}" 2>/dev/null
        printf '%s\n' "$pp" "$pm" "${kids[@]}" >>"$DIR/frozen"
        record_fault "$kind" "$LEADER" "$t" "SIGSTOP Patroni $pp, postmaster $pm and its ${#kids[@]} children"
        ;;
    esac
}

# thaw_all: SIGCONT the processes a freeze stopped (and any other stopped
# process under the supervisor).
thaw_all() {
    local pids=() sup p stopped=()
    local -A seen=()
    [[ -f "$DIR/frozen" ]] && mapfile -t pids <"$DIR/frozen"
    sup="$(supervisor_pid)" && mapfile -t -O "${#pids[@]}" pids < <(descendants "$sup")
    for p in "${pids[@]}"; do
        [[ -n "$p" && -z "${seen[$p]:-}" ]] || continue
        seen[$p]=1
        [[ "$(pid_state "$p")" == [Tt] ]] && stopped+=("$p")
    done
    rm -f "$DIR/frozen"
    [[ ${#stopped[@]} -gt 0 ]] || return 1
    # Postgres before Patroni, so that Patroni finds its server running.
    kill -CONT "${stopped[@]}" 2>/dev/null || true
    THAWED="${stopped[*]}"
}

cmd_thaw() {
    local t
    load_state
    t="$(now)"
    if thaw_all; then
        printf '%s thaw SIGCONT %s\n' "$(stamp "$t")" "$THAWED"
    else
        printf '%s thaw nothing was stopped\n' "$(stamp "$t")"
    fi
}

cmd_wait_leader() {
    local old="${1:-}" t_fault="" out leader at took
    [[ -n "$old" && $# -eq 1 ]] || usage
    load_state
    [[ -n "${PG_PORT[$old]:-}" ]] || die "unknown node '$old' (nodes: ${NODES[*]})"
    if [[ -f "$DIR/last_fault" ]]; then
        local FAULT_NODE="" FAULT_EPOCH="" FAULT_KIND=""
        source "$DIR/last_fault"
        if [[ "$FAULT_NODE" == "$old" ]]; then
            t_fault="$FAULT_EPOCH"
        fi
    fi
    out="$(hapy wait-leader "$old" "$t_fault" "$TIMEOUT")" || exit 1
    read -r leader at took <<<"$out"
    if [[ -n "$t_fault" ]]; then
        log "$at new leader $leader (was $old), routed by HAProxy read-write $took s after $FAULT_KIND at $(stamp "$t_fault")"
    else
        log "$at new leader $leader (was $old), routed by HAProxy read-write after $took s of waiting (no fault of $old recorded)"
    fi
    printf '%s\n' "$took"
}

cmd_rejoin() {
    local t0 n took what off sizes=() FAULT_LOG_SIZES="" FAULT_KIND="" FAULT_NODE="" FAULT_EPOCH="" pm
    load_state
    t0="$(now)"
    if thaw_all; then log "$(stamp "$(now)") thawed $THAWED"; fi
    [[ -n "$(supervisor_pid)" ]] || die "the supervisor is gone; '$0 down' and '$0 up' again"
    set_spawn_env
    for n in "${NODES[@]}"; do
        if ! patroni_pid "$n" >/dev/null; then
            start_patroni "$n"
        fi
    done
    took="$(hapy wait-healthy "$MODE" "$MAX_LAG" "$TIMEOUT" rejoin)" || exit 1
    took="$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')"
    current_leader
    log "$(stamp "$(now)") all nodes streaming from leader $LEADER, caught up, routed"
    # What each node did since the last fault, from its Patroni log.
    [[ -f "$DIR/last_fault" ]] && source "$DIR/last_fault"
    for n in "${NODES[@]}"; do
        off="$(printf '%s\n' $FAULT_LOG_SIZES | sed -n "s/^$n=//p")"
        off="${off:-0}"
        what="$(tail -c +"$((off + 1))" "$DIR/$n/patroni.log" 2>/dev/null | awk '
            /running pg_rewind from/ { rw = 1 }
            /pg_rewind exit code=/ { code = $NF; sub(/.*=/, "", code) }
            /reinitializ|removing data directory|Removing data directory/ { re = 1 }
            /promoted self to leader|cleared rewind state after becoming the leader/ { pr = 1 }
            END {
                s = ""
                if (pr) s = s "promoted; "
                if (rw) s = s "pg_rewind ran (exit code " (code == "" ? "?" : code) "); "
                if (re) s = s "data directory re-cloned; "
                print (s == "" ? "no pg_rewind" : substr(s, 1, length(s) - 2))
            }')"
        log "  $n: $what"
    done
    printf '%s\n' "$took"
}

case "$CMD" in
    up) cmd_up "$@" ;;
    down)
        [[ $# -eq 0 ]] || usage
        if [[ ! -e "$DIR" ]]; then
            log "nothing in $DIR"
            exit 0
        fi
        [[ -f "$DIR/$MARKER" ]] || die "$DIR was not made by $0; not touching it"
        teardown
        log "$(stamp "$(now)") stopped and removed $DIR"
        ;;
    status) [[ $# -eq 0 ]] || usage; cmd_status ;;
    leader) [[ $# -eq 0 ]] || usage; cmd_leader ;;
    kill-leader|stop-leader|poweroff-leader|freeze-leader) [[ $# -eq 0 ]] || usage; cmd_fault "$CMD" ;;
    thaw) [[ $# -eq 0 ]] || usage; cmd_thaw ;;
    wait-leader) cmd_wait_leader "$@" ;;
    rejoin) [[ $# -eq 0 ]] || usage; cmd_rejoin ;;
    *) usage ;;
esac
