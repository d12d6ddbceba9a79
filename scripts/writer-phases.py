#!/usr/bin/env python3
"""Where a durable leaf's CPU time goes: reads `perf script` output (stacks
of a system-wide `perf record --call-graph dwarf` over a `load` cell) and
prints CPU microseconds per acknowledged leaf, by phase and kind.

    writer-phases.py PERF_SCRIPT_FILE SECONDS FREQUENCY LEAVES [STORE]

SECONDS and FREQUENCY are the recording's; LEAVES the leaves the writer
acknowledged while it ran (rate x seconds). Samples of the load process are
classified by the innermost frame that names a phase; a Postgres server's
samples (comm `postgres`) are one row: its binaries carry no unwind tables,
so their split by statement comes from pg_stat_statements instead
(scripts/writer-profile.sh prints it). Idle samples are not counted.
Run by scripts/writer-profile.sh.
"""

import collections
import re
import sys

# (phase, kind, pattern over the whole stack, leaf first); the first match
# wins, so the specific kinds come first.
RULES = [
    ("read", "row re-hash", r"path_nodes|walk_rows", r"Row::compute|Row::nodes|Row::hashes"),
    ("commit", "row re-hash", r"apply_keeping_rows|space::merge", r"Row::compute|Row::hashes"),
    ("plan", "hashing", None, r"climb_lanes|sha2::|shani"),
    ("engine", "SQLite: pager, WAL, fsync", None,
     r"sqlite3PagerCommit|pagerWalFrames|sqlite3WalFrames|walWrite|fdatasync|fsync|walCheckpoint"),
    ("engine", "SQLite: writes (b-tree insert/delete)", r"sqlite3_step", r"sqlite3BtreeInsert|sqlite3BtreeDelete|balance"),
    ("engine", "SQLite: reads and the rest of a step", None, r"sqlite3_step|sqlite3_prepare|sqlite3Prepare"),
    ("engine", "SQLite driver thread", None, r"sqlx_sqlite::connection::worker"),
    ("read", "row decode", r"path_nodes|walk_rows|read_group", r"Row::decode"),
    ("commit", "row decode", None, r"Row::decode"),
    ("read", "driver and rest", None, r"read_group|read_paths|walk_on|walk_paths|path_nodes"),
    ("commit", "merge", None, r"apply_keeping_rows|space::merge|touched_rows"),
    ("commit", "row encode", None, r"Row::encode"),
    ("commit", "statement parameters", None, r"packed::|PackedRows|slot_blob|PathParams"),
    ("commit", "driver and rest", None, r"commit_many_on|commit_in|several::commit|write_commits|OwnedTx"),
    ("plan", "remembered nodes", None, r"recent::"),
    ("plan", "descent", None, r"ms_smt_descent|plan_group|engine::plan|writer::group"),
    ("plan", "memory store", None, r"store::memory"),
    ("writer", "answers and queue", None, r"tree::writer"),
    ("bench", "submitters", None, r"load::"),
    ("runtime", "tokio and the rest", None, None),
]
RULES = [(p, k, re.compile(c) if c else None, re.compile(s) if s else None) for p, k, c, s in RULES]


def classify(stack):
    text = "\n".join(stack)
    for phase, kind, context, pattern in RULES:
        if (pattern is None or pattern.search(text)) and (context is None or context.search(text)):
            return phase, kind
    return "runtime", "tokio and the rest"


def main():
    path, secs, freq, leaves = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    store = sys.argv[5] if len(sys.argv) > 5 else ""
    tally = collections.Counter()
    comm, stack = None, []

    def flush():
        if comm is None:
            return
        if comm.startswith("postgres"):
            tally[("server", "Postgres backends")] += 1
        elif comm.startswith(("tokio", "load", "sqlx")):
            tally[classify(stack)] += 1

    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            comm, stack = None, []
        elif line[0] in "\t ":
            parts = line.strip().split(None, 1)
            stack.append(parts[1] if len(parts) > 1 else "")
        else:
            comm, stack = line.split()[0], []
    flush()
    total = sum(tally.values())
    per_leaf = 1e6 / freq / leaves
    print(f"<!-- {store}: {total} samples, {total / freq / secs:.2f} cores busy, "
          f"{leaves:.0f} leaves in {secs:.0f} s -->")
    print(f"| phase | kind | share | CPU µs/leaf ({store}) |")
    print("|---|---|---|---|")
    order = ["read", "plan", "commit", "engine", "server", "writer", "bench", "runtime"]
    for (phase, kind), n in sorted(tally.items(), key=lambda kv: (order.index(kv[0][0]), -kv[1])):
        if n:
            print(f"| {phase} | {kind} | {100 * n / total:.1f} % | {n * per_leaf:.1f} |")
    print(f"| **all** | | 100 % | **{total * per_leaf:.1f}** |")


if __name__ == "__main__":
    main()
