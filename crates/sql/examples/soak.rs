//! Soak: a mixed workload for a set time (an hour by default; built to run
//! for days) on SQLite or Postgres, recording every minute what a
//! long-running server needs to know, and drawing the curves.
//!
//! The workload, all at once, until the time is up:
//! * **Writes:** `--submitters` tasks submit through ONE store writer
//!   (`ForestWriter`) over a big tree (`u-big`, `--big-initial` leaves to
//!   start with) and `--small-trees` small ones (`u-00001`, ...), all
//!   under a parent tree (`multiverse`, a leaf per child at the SHA-256 of
//!   its name, as tapd's multiverse). Each submission is `--leaves` new
//!   leaves, replacements or deletes at the `--ratio` (new:replace:delete),
//!   to the big tree with probability `--big-share`, else to a random
//!   small tree. A task writes only keys it owns (key = SHA-256 of seed,
//!   tree, task, index), so its acknowledged submissions, in its own
//!   order, are the model: per key one byte, the leaf's generation (0:
//!   absent); values and sums follow from key and generation.
//! * **Reads:** `--readers` tasks ask for leaf proofs (`leaf_with_proof`,
//!   each verified against the root it came with) at `--proof-rate` per
//!   second in all; one task iterates the big tree's leaves in pages of
//!   1,000 at `--page-rate` pages per second, from the start again at the
//!   end.
//! * **A delta-sync follower:** `f-big`, a copy of the big tree made at
//!   the start, follows the big tree's change journal every
//!   `--follow-every` seconds (`Tree::follow`; a diff walk if the journal
//!   no longer covers it).
//! * **Pins:** every `--pin-every` seconds a pin of the big tree and of a
//!   small one, read through (8 keys), released after `--pin-hold`
//!   seconds.
//! * **Journal pruning:** every `--prune-every` seconds the big tree's
//!   journal keeps its last `--journal-keep` versions.
//!
//! Every `--sample-secs` (60) it appends a row to `soak-<engine>.csv`:
//! throughput, p50/p99/max per operation, process RSS (one read at the row,
//! and the mean, least and most of reads every 250 ms in its minute), the
//! live heap (bytes the program holds through Rust's allocator, read with
//! the RSS: what the allocator keeps beyond it is RSS, not data), the
//! database's size on disk (tables, indexes, WAL), dead tuples and HOT
//! updates (Postgres, `pg_stat_user_tables`) or freelist pages (SQLite),
//! rows per live leaf, and the load average, so a disturbed minute shows;
//! and what separates the machine from the work: the process's CPU time per
//! leaf, its threads' waits for a CPU, the time of a fixed CPU probe, and,
//! timed in a child process (so their memory is in no RSS figure), a chain
//! of dependent loads over 32 MB and 2 KiB `pread`s of a page-cached file.
//! The compute probe alone does not see a neighbour slowing the memory or
//! the kernel's copies (BENCHMARKS.md: minute to minute the memory probe
//! moved ~2× while the compute probe held): a run whose rate falls with
//! all three probes unchanged slowed by its own work.
//! At the end it stops the load and checks: every acknowledged leaf reads
//! back (and every deleted one is absent), the follower equals the big
//! tree, every tree audits clean, every parent leaf matches its child, and
//! each listed leaf count equals the model's. Then it measures the bytes
//! per live leaf, runs `--maintain` (an `ms-smt maintain` command line,
//! e.g. the launcher's), measures again, builds the same leaves fresh in a
//! new database and measures that. It writes `summary-<engine>.json` and
//! the curves, `soak-<engine>.svg`.
//!
//! ```text
//! cargo run --release --example soak -- --engine sqlite --db /work/scratch/soak.db --minutes 60 --out out/
//! cargo run --release --example soak -- --engine postgres --pg-url postgres://postgres@127.0.0.1:5432/postgres --minutes 60 --out out/
//! scripts/soak.sh sqlite 60        # the campaign: a short run, then the long one (see the script)
//! ```
//!
//! Postgres must run with `fsync = on` (refused otherwise: see
//! `benches/support/durable.rs`); SQLite opens with the crate's defaults
//! (WAL, `synchronous=FULL`). `--minutes` takes fractions (0.5 = 30 s).

// The summary is one `serde_json::json!` of more keys than the default
// macro recursion limit takes.
#![recursion_limit = "256"]

/// Rust's allocator, counted: the live heap beside the RSS tells the
/// program's data from the free memory the C allocator keeps (arenas not
/// returned to the system), which RSS alone cannot.
#[global_allocator]
static HEAP: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

use ms_smt_test_support::durable;

use std::collections::{BTreeMap, VecDeque};
use std::error::Error;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ms_smt::store::{
    AuditStore, BulkStore, ForestStore, JournalStore, PinStore, Retention, TreeStore,
};

use ms_smt::{
    Compacted, Forest, ForestWriter, Key, Leaf, Link, SubmitError, Tree, WriterConfig, WriterStats,
};
use ms_smt_sql::{LeafCount, PostgresStore, SqlStoreError, SqliteStore};
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

const BIG: &str = "u-big";
const FOLLOWER: &str = "f-big";
const PARENT: &str = "multiverse";
const PAGE: usize = 1_000;
const BUILD_BATCH: usize = 50_000;

// ---------------------------------------------------------------------------
// Flags
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Args {
    engine: String,
    db: PathBuf,
    pg_url: Option<String>,
    minutes: f64,
    out: PathBuf,
    submitters: u32,
    leaves: usize,
    ratio: [u32; 3],
    small_trees: u32,
    big_share: f64,
    big_initial: u64,
    small_initial: u64,
    readers: u32,
    proof_rate: f64,
    page_rate: f64,
    follow_every: f64,
    pin_every: f64,
    pin_hold: f64,
    prune_every: f64,
    journal_keep: u64,
    sample_secs: f64,
    seed: u64,
    short_rate: Option<f64>,
    maintain: Option<String>,
    cli: Option<PathBuf>,
    fresh: bool,
    pg_strata: Option<String>,
    sqlite_pragmas: Vec<(String, String)>,
    dbstat_every: u32,
}

const USAGE: &str = "flags: --engine sqlite|postgres --db FILE --pg-url URL --minutes M --out DIR \
--submitters N --leaves N --ratio NEW:REPLACE:DELETE --small-trees N --big-share F \
--big-initial N --small-initial N --readers N --proof-rate R --page-rate R --follow-every S \
--pin-every S --pin-hold S --prune-every S --journal-keep N --sample-secs S --seed N \
--short-rate LEAVES_PER_S --maintain 'ARGS' --cli PATH --fresh yes|no \
--pg-strata 'fillfactor=90,...' --sqlite-pragma 'cache_size=-65536,...' --dbstat-every N";

/// True when `s` holds only ASCII letters, digits and `extra`: a flag's
/// value that goes into SQL text (table settings, pragmas) can carry
/// nothing else.
fn plain(s: &str, extra: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        engine: "sqlite".into(),
        db: PathBuf::from("soak.db"),
        pg_url: durable::bench_pg_url(),
        minutes: 60.0,
        out: PathBuf::from("soak-out"),
        submitters: 100,
        leaves: 1,
        ratio: [50, 30, 20],
        small_trees: 1_000,
        big_share: 0.5,
        big_initial: 1_000_000,
        small_initial: 100,
        readers: 2,
        proof_rate: 100.0,
        page_rate: 5.0,
        follow_every: 5.0,
        pin_every: 30.0,
        pin_hold: 120.0,
        prune_every: 60.0,
        journal_keep: 3_000,
        sample_secs: 60.0,
        seed: 0x736f_616b,
        short_rate: None,
        maintain: None,
        cli: None,
        fresh: true,
        pg_strata: None,
        sqlite_pragmas: Vec::new(),
        dbstat_every: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value ({USAGE})"))?;
        let num = |v: &str| -> Res<f64> { Ok(v.replace('_', "").parse::<f64>()?) };
        match flag.as_str() {
            "--engine" => a.engine = value,
            "--db" => a.db = value.into(),
            "--pg-url" => a.pg_url = Some(value),
            "--minutes" => a.minutes = num(&value)?,
            "--out" => a.out = value.into(),
            "--submitters" => a.submitters = num(&value)? as u32,
            "--leaves" => a.leaves = num(&value)? as usize,
            "--ratio" => {
                let parts: Vec<u32> = value
                    .split(':')
                    .map(|p| p.trim().parse::<u32>())
                    .collect::<Result<_, _>>()?;
                a.ratio =
                    <[u32; 3]>::try_from(parts).map_err(|_| "--ratio is NEW:REPLACE:DELETE")?;
            }
            "--small-trees" => a.small_trees = num(&value)? as u32,
            "--big-share" => a.big_share = num(&value)?,
            "--big-initial" => a.big_initial = num(&value)? as u64,
            "--small-initial" => a.small_initial = num(&value)? as u64,
            "--readers" => a.readers = num(&value)? as u32,
            "--proof-rate" => a.proof_rate = num(&value)?,
            "--page-rate" => a.page_rate = num(&value)?,
            "--follow-every" => a.follow_every = num(&value)?,
            "--pin-every" => a.pin_every = num(&value)?,
            "--pin-hold" => a.pin_hold = num(&value)?,
            "--prune-every" => a.prune_every = num(&value)?,
            "--journal-keep" => a.journal_keep = num(&value)? as u64,
            "--sample-secs" => a.sample_secs = num(&value)?,
            "--seed" => a.seed = value.parse()?,
            "--short-rate" => a.short_rate = Some(num(&value)?),
            "--maintain" => a.maintain = Some(value),
            "--cli" => a.cli = Some(value.into()),
            "--fresh" => a.fresh = value == "yes",
            "--pg-strata" => a.pg_strata = Some(value),
            "--sqlite-pragma" => {
                for pair in value.split(',') {
                    let (name, v) = pair
                        .split_once('=')
                        .filter(|(name, v)| {
                            !name.is_empty() && !v.is_empty() && plain(name, "_-") && plain(v, "_-")
                        })
                        .ok_or("--sqlite-pragma takes name=value pairs separated by commas")?;
                    a.sqlite_pragmas.push((name.to_owned(), v.to_owned()));
                }
            }
            "--dbstat-every" => a.dbstat_every = num(&value)? as u32,
            _ => return Err(format!("unknown flag {flag} ({USAGE})").into()),
        }
    }
    if a.submitters == 0 || a.leaves == 0 || a.ratio.iter().sum::<u32>() == 0 {
        return Err("submitters, leaves and the ratio must not be zero".into());
    }
    if !(0.0..=1.0).contains(&a.big_share) || (a.small_trees == 0 && a.big_share < 1.0) {
        return Err("--big-share must be in [0, 1] (1 without small trees)".into());
    }
    if let Some(s) = &a.pg_strata
        && !plain(s, "_=,.")
    {
        return Err("--pg-strata takes name=value pairs separated by commas".into());
    }
    Ok(a)
}

// ---------------------------------------------------------------------------
// Keys, leaves and the model
// ---------------------------------------------------------------------------

fn tree_name(tree: u32) -> String {
    if tree == 0 {
        BIG.to_owned()
    } else {
        format!("u-{tree:05}")
    }
}

/// The key `index` of `task` in `tree`.
fn key_of(seed: u64, tree: u32, task: u32, index: u32) -> Key {
    let mut h = Sha256::new();
    h.update(b"soak");
    h.update(seed.to_le_bytes());
    h.update(tree.to_le_bytes());
    h.update(task.to_le_bytes());
    h.update(index.to_le_bytes());
    Key(h.finalize().into())
}

/// The leaf of `key` at generation `generation` (0: absent): 8 to 40 value
/// bytes and a sum of 1 to 256, from the key and the generation.
fn leaf_of(key: &Key, generation: u8) -> Leaf {
    if generation == 0 {
        return Leaf::empty();
    }
    let mut h = Sha256::new();
    h.update(key.0);
    h.update([generation]);
    let d: [u8; 32] = h.finalize().into();
    let len = 8 + usize::from(d[0] % 33);
    let value: Vec<u8> = d.iter().cycle().take(len).copied().collect();
    Leaf::new(value, 1 + u64::from(d[1]))
}

/// One task's keys: per tree, the generation of each index it created.
#[derive(Debug, Default)]
struct TaskModel {
    trees: Vec<Vec<u8>>,
}

impl TaskModel {
    fn bytes(&self) -> usize {
        self.trees.iter().map(Vec::capacity).sum::<usize>() + self.trees.capacity() * 24
    }
}

/// The model of every task, with the pairs each tree must hold.
fn expected(seed: u64, models: &[TaskModel], tree: u32) -> Vec<(Key, Leaf)> {
    let mut out = Vec::new();
    for (task, m) in models.iter().enumerate() {
        if let Some(gens) = m.trees.get(tree as usize) {
            for (index, g) in gens.iter().enumerate() {
                let key = key_of(seed, tree, task as u32, index as u32);
                out.push((key, leaf_of(&key, *g)));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Latency histograms (log buckets, 10 µs to ~30 min, 10 % wide)
// ---------------------------------------------------------------------------

const BUCKETS: usize = 200;

struct Hist {
    counts: Vec<AtomicU64>,
}

fn bucket_ceiling_ms(i: usize) -> f64 {
    0.01 * 1.1f64.powi(i as i32)
}

impl Hist {
    fn new() -> Self {
        Hist {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn record(&self, d: Duration) {
        let ms = d.as_secs_f64() * 1e3;
        let i = if ms <= 0.01 {
            0
        } else {
            ((ms / 0.01).ln() / 1.1f64.ln()).ceil() as usize
        };
        self.counts[i.min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

/// Count, p50, p99 and max (ms, bucket ceilings) of the samples between
/// two snapshots.
fn quantiles(now: &[u64], before: &[u64]) -> (u64, f64, f64, f64) {
    let diff: Vec<u64> = now.iter().zip(before).map(|(a, b)| a - b).collect();
    let n: u64 = diff.iter().sum();
    if n == 0 {
        return (0, f64::NAN, f64::NAN, f64::NAN);
    }
    let at = |q: f64| {
        let want = ((n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in diff.iter().enumerate() {
            seen += c;
            if seen >= want {
                return bucket_ceiling_ms(i);
            }
        }
        bucket_ceiling_ms(BUCKETS - 1)
    };
    let max = diff
        .iter()
        .rposition(|c| *c > 0)
        .map_or(f64::NAN, bucket_ceiling_ms);
    (n, at(0.5), at(0.99), max)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Submit,
    Proof,
    Page,
    Follow,
    Pin,
    PinRead,
    Unpin,
    Prune,
}

const OPS: [Op; 8] = [
    Op::Submit,
    Op::Proof,
    Op::Page,
    Op::Follow,
    Op::Pin,
    Op::PinRead,
    Op::Unpin,
    Op::Prune,
];

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Submit => "submit",
        Op::Proof => "proof",
        Op::Page => "page",
        Op::Follow => "follow",
        Op::Pin => "pin",
        Op::PinRead => "pinread",
        Op::Unpin => "unpin",
        Op::Prune => "prune",
    }
}

// ---------------------------------------------------------------------------
// The stores
// ---------------------------------------------------------------------------

/// What the soak needs of a store (both SQL engines).
trait Store:
    TreeStore<Error = SqlStoreError>
    + ForestStore<Tree = Self, Error = SqlStoreError>
    + JournalStore
    + PinStore
    + BulkStore
    + AuditStore
    + Clone
    + Send
    + Sync
    + 'static
{
    fn named(&self, name: &str) -> Self;
    /// Nodes the memory this handle shares with the store's other
    /// handles holds now.
    fn recent_len(&self) -> usize;
}

impl Store for SqliteStore {
    fn named(&self, name: &str) -> Self {
        self.open_namespace(name)
    }
    fn recent_len(&self) -> usize {
        self.recent().len()
    }
}

impl Store for PostgresStore {
    fn named(&self, name: &str) -> Self {
        self.open_namespace(name)
    }
    fn recent_len(&self) -> usize {
        self.recent().len()
    }
}

/// The engine's side of the measurements: a pool of its own (so the
/// store's counters see none of it) and where the files are.
enum Probe {
    Sqlite {
        path: PathBuf,
        pool: sqlx::SqlitePool,
    },
    Postgres {
        pool: sqlx::PgPool,
    },
}

/// One sample of the database.
#[derive(Debug, Default, Clone)]
struct DbSample {
    live_leaves: i64,
    namespaces: i64,
    strata_rows: i64,
    history_rows: i64,
    change_rows: i64,
    version_rows: i64,
    pins: i64,
    db_bytes: i64,
    table_bytes: Option<i64>,
    index_bytes: Option<i64>,
    wal_bytes: i64,
    freelist_pages: Option<i64>,
    dead_tuples: Option<i64>,
    updates: Option<i64>,
    hot_updates: Option<i64>,
    autovacuums: Option<i64>,
    wal_lsn: Option<i64>,
    checkpoints: Option<i64>,
    heap_reads: Option<i64>,
    heap_hits: Option<i64>,
}

impl Probe {
    async fn sample(&self, dbstat: bool) -> Res<DbSample> {
        match self {
            Probe::Sqlite { path, pool } => sqlite_sample(path, pool, dbstat).await,
            Probe::Postgres { pool } => pg_sample(pool).await,
        }
    }
}

async fn sqlite_sample(path: &Path, pool: &sqlx::SqlitePool, dbstat: bool) -> Res<DbSample> {
    let mut s = DbSample::default();
    let one =
        |sql: &'static str| async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await };
    s.strata_rows = one("SELECT COUNT(*) FROM ms_smt_strata").await?;
    s.history_rows = one("SELECT COUNT(*) FROM ms_smt_history").await?;
    s.change_rows = one("SELECT COUNT(*) FROM ms_smt_changes").await?;
    s.version_rows = one("SELECT COUNT(*) FROM ms_smt_versions").await?;
    s.pins = one("SELECT COUNT(*) FROM ms_smt_pins").await?;
    s.live_leaves = one("SELECT COALESCE(SUM(leaves), 0) FROM ms_smt_namespaces").await?;
    s.namespaces = one("SELECT COUNT(*) FROM ms_smt_namespaces").await?;
    let pages = one("PRAGMA page_count").await?;
    let page = one("PRAGMA page_size").await?;
    s.db_bytes = pages * page;
    s.freelist_pages = Some(one("PRAGMA freelist_count").await?);
    s.wal_bytes = file_size(&with_suffix(path, "-wal")) as i64;
    if dbstat {
        // dbstat is compiled into the bundled SQLite; skip quietly if not.
        let rows: Result<Vec<(String, String, i64)>, _> = sqlx::query_as(
            "SELECT d.name, COALESCE(m.type, 'table'), SUM(d.pgsize) FROM dbstat d \
             LEFT JOIN sqlite_master m ON m.name = d.name GROUP BY d.name",
        )
        .fetch_all(pool)
        .await;
        if let Ok(rows) = rows {
            let (mut tables, mut indexes) = (0, 0);
            for (_, kind, bytes) in rows {
                if kind == "index" {
                    indexes += bytes;
                } else {
                    tables += bytes;
                }
            }
            s.table_bytes = Some(tables);
            s.index_bytes = Some(indexes);
        }
    }
    Ok(s)
}

async fn pg_sample(pool: &sqlx::PgPool) -> Res<DbSample> {
    let mut s = DbSample::default();
    type StatRow = (String, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);
    let rows: Vec<StatRow> = sqlx::query_as(
        "SELECT t.relname::text, pg_relation_size(t.relid), pg_indexes_size(t.relid), \
             pg_total_relation_size(t.relid), t.n_live_tup, t.n_dead_tup, t.n_tup_upd, \
             t.n_tup_hot_upd, t.autovacuum_count, COALESCE(io.heap_blks_read, 0), \
             COALESCE(io.heap_blks_hit, 0) \
         FROM pg_stat_user_tables t JOIN pg_statio_user_tables io ON io.relid = t.relid \
         WHERE t.relname LIKE 'ms\\_smt\\_%' AND t.schemaname = current_schema()",
    )
    .fetch_all(pool)
    .await?;
    let (mut tables, mut indexes, mut total) = (0, 0, 0);
    for (name, rel, idx, tot, live, dead, upd, hot, av, reads, hits) in rows {
        tables += rel;
        indexes += idx;
        total += tot;
        match name.as_str() {
            "ms_smt_strata" => {
                s.strata_rows = live;
                s.dead_tuples = Some(dead);
                s.updates = Some(upd);
                s.hot_updates = Some(hot);
                s.autovacuums = Some(av);
                s.heap_reads = Some(reads);
                s.heap_hits = Some(hits);
            }
            "ms_smt_history" => s.history_rows = live,
            "ms_smt_changes" => s.change_rows = live,
            "ms_smt_versions" => s.version_rows = live,
            "ms_smt_pins" => s.pins = live,
            _ => {}
        }
    }
    // Tables here include their TOAST (total less the heap and indexes).
    s.db_bytes = total;
    s.table_bytes = Some(total - indexes);
    s.index_bytes = Some(indexes);
    let _ = tables;
    let (leaves, namespaces): (i64, i64) =
        sqlx::query_as("SELECT COALESCE(SUM(leaves), 0)::int8, COUNT(*) FROM ms_smt_namespaces")
            .fetch_one(pool)
            .await?;
    s.live_leaves = leaves;
    s.namespaces = namespaces;
    s.wal_bytes =
        sqlx::query_scalar::<_, i64>("SELECT COALESCE(SUM(size), 0)::int8 FROM pg_ls_waldir()")
            .fetch_one(pool)
            .await?;
    s.wal_lsn = Some(
        sqlx::query_scalar::<_, i64>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8")
            .fetch_one(pool)
            .await?,
    );
    s.checkpoints = Some(
        sqlx::query_scalar::<_, i64>(
            "SELECT (checkpoints_timed + checkpoints_req)::int8 FROM pg_stat_bgwriter",
        )
        .fetch_one(pool)
        .await?,
    );
    Ok(s)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

// ---------------------------------------------------------------------------
// The shared state of a run
// ---------------------------------------------------------------------------

/// A submission answered `Indeterminate`: tree, task, index, and the
/// leaf's generation before and after.
type Uncertain = (u32, u32, u32, u8, u8);

struct Ctx<S: Store> {
    args: Args,
    forest: Forest<S, Compacted>,
    writer: ForestWriter<S, Compacted>,
    hists: BTreeMap<Op, Hist>,
    stop: AtomicBool,
    errors: Mutex<Vec<String>>,
    /// Submissions answered `Indeterminate`.
    uncertain: Mutex<Vec<Uncertain>>,
    follow_fallbacks: AtomicU64,
    pruned_rows: AtomicU64,
    /// Preloaded indices per task in the big tree and in each small one.
    big_per_task: u32,
    small_per_task: u32,
}

impl<S: Store> Ctx<S> {
    fn record(&self, op: Op, since: Instant) {
        if let Some(h) = self.hists.get(&op) {
            h.record(since.elapsed());
        }
    }

    fn error(&self, what: String) {
        eprintln!("soak: ERROR {what}");
        if let Ok(mut e) = self.errors.lock() {
            e.push(what);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps `secs` in short steps; false once the run is stopping.
    async fn nap(&self, secs: f64) -> bool {
        let until = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
        while Instant::now() < until {
            if self.stopped() {
                return false;
            }
            let left = until.saturating_duration_since(Instant::now());
            tokio::time::sleep(left.min(Duration::from_millis(200))).await;
        }
        !self.stopped()
    }
}

// ---------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------

/// One submitter: until stopped, one submission at a time of `--leaves`
/// changes to keys it owns; returns its model.
async fn submitter<S: Store>(ctx: Arc<Ctx<S>>, task: u32, mut model: TaskModel) -> TaskModel {
    let a = &ctx.args;
    let mut rng = StdRng::seed_from_u64(a.seed ^ (u64::from(task) << 32) ^ 0x5eed);
    let total: u32 = a.ratio.iter().sum();
    while !ctx.stopped() {
        let tree = if a.small_trees == 0 || rng.gen_bool(a.big_share) {
            0
        } else {
            rng.gen_range(1..=a.small_trees)
        };
        let name = tree_name(tree);
        let gens = &mut model.trees[tree as usize];
        let mut writes = Vec::with_capacity(a.leaves);
        let mut changes = Vec::with_capacity(a.leaves);
        for _ in 0..a.leaves {
            let roll = rng.gen_range(0..total);
            let existing = |rng: &mut StdRng, gens: &[u8]| -> Option<usize> {
                (!gens.is_empty())
                    .then(|| {
                        (0..8)
                            .map(|_| rng.gen_range(0..gens.len()))
                            .find(|&i| gens[i] != 0)
                    })
                    .flatten()
            };
            let (index, new) = if roll < a.ratio[0] {
                gens.push(0);
                (gens.len() - 1, 1u8)
            } else if let Some(i) = existing(&mut rng, gens)
                && !changes.iter().any(|(j, _, _)| *j == i)
            {
                if roll < a.ratio[0] + a.ratio[1] {
                    (i, gens[i] % 255 + 1)
                } else {
                    (i, 0)
                }
            } else {
                gens.push(0);
                (gens.len() - 1, 1)
            };
            let key = key_of(a.seed, tree, task, index as u32);
            writes.push((name.clone(), key, leaf_of(&key, new)));
            changes.push((index, gens[index], new));
        }
        let started = Instant::now();
        match ctx.writer.submit(writes).await {
            Ok(_) => {
                ctx.record(Op::Submit, started);
                for (index, _, new) in changes {
                    gens[index] = new;
                }
            }
            Err(SubmitError::Indeterminate { .. }) => {
                ctx.error(format!("submit to {name}: indeterminate"));
                if let Ok(mut u) = ctx.uncertain.lock() {
                    for (index, old, new) in changes {
                        u.push((tree, task, index as u32, old, new));
                    }
                }
            }
            Err(SubmitError::Stopped) if ctx.stopped() => break,
            Err(e) => ctx.error(format!("submit to {name}: {e}")),
        }
    }
    model
}

/// A proof reader: `leaf_with_proof` of a preloaded key (present, replaced
/// or deleted since), verified against the root it came with.
async fn reader<S: Store>(ctx: Arc<Ctx<S>>, id: u32) {
    let a = &ctx.args;
    if a.proof_rate <= 0.0 {
        return;
    }
    let mut rng = StdRng::seed_from_u64(a.seed ^ 0x7ead ^ u64::from(id));
    let period = f64::from(a.readers) / a.proof_rate;
    let mut next = Instant::now();
    while !ctx.stopped() {
        next += Duration::from_secs_f64(period);
        let tree = if a.small_trees == 0 || rng.gen_bool(a.big_share) {
            0
        } else {
            rng.gen_range(1..=a.small_trees)
        };
        let per = if tree == 0 {
            ctx.big_per_task
        } else {
            ctx.small_per_task
        };
        let task = rng.gen_range(0..a.submitters);
        let index = if per == 0 { 0 } else { rng.gen_range(0..per) };
        let key = key_of(a.seed, tree, task, index);
        let started = Instant::now();
        let t = match ctx.forest.tree(&tree_name(tree)) {
            Ok(t) => t,
            Err(e) => {
                ctx.error(format!("reader: tree: {e}"));
                continue;
            }
        };
        match t.view().leaf_with_proof(&key).await {
            Ok((root, leaf, proof)) => {
                ctx.record(Op::Proof, started);
                if !proof.verify(&key, &leaf, &root) {
                    ctx.error(format!("reader: a proof of {key} does not verify"));
                }
            }
            Err(e) => ctx.error(format!("reader: {e}")),
        }
        let wait = next.saturating_duration_since(Instant::now());
        if !ctx.nap(wait.as_secs_f64()).await {
            break;
        }
    }
}

/// Iterates the big tree's leaves a page at a time, from the start again
/// at the end.
async fn iterator<S: Store>(ctx: Arc<Ctx<S>>) {
    if ctx.args.page_rate <= 0.0 {
        return;
    }
    let tree = match ctx.forest.tree(BIG) {
        Ok(t) => t,
        Err(e) => return ctx.error(format!("iterator: {e}")),
    };
    let period = 1.0 / ctx.args.page_rate;
    'outer: while !ctx.stopped() {
        let mut leaves = tree.leaves(..).with_page(PAGE);
        loop {
            let started = Instant::now();
            match leaves.next_page().await {
                Ok(page) => {
                    ctx.record(Op::Page, started);
                    if page.is_empty() {
                        break;
                    }
                }
                Err(e) => {
                    ctx.error(format!("iterator: {e}"));
                    break;
                }
            }
            let wait = period - started.elapsed().as_secs_f64();
            if !ctx.nap(wait).await {
                break 'outer;
            }
        }
    }
}

/// The delta-sync follower of the big tree.
async fn follower<S: Store>(ctx: Arc<Ctx<S>>, follower: Tree<S, Compacted>) {
    let leader = match ctx.forest.tree(BIG) {
        Ok(t) => t,
        Err(e) => return ctx.error(format!("follower: {e}")),
    };
    while ctx.nap(ctx.args.follow_every).await {
        let started = Instant::now();
        follow_once(&ctx, &follower, &leader).await;
        ctx.record(Op::Follow, started);
    }
}

async fn follow_once<S: Store>(
    ctx: &Ctx<S>,
    follower: &Tree<S, Compacted>,
    leader: &Tree<S, Compacted>,
) {
    match follower.follow(leader, PAGE).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            // Not covered (pruned past it, or nothing new): a diff walk
            // when the roots differ.
            let (Ok(root), Ok(mine)) = (leader.root().await, follower.root().await) else {
                return ctx.error("follower: root".into());
            };
            if root != mine {
                ctx.follow_fallbacks.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = follower.sync_from(leader, &root).await {
                    ctx.error(format!("follower: sync_from: {e}"));
                }
            }
        }
        Err(e) => ctx.error(format!("follower: follow: {e}")),
    }
}

/// Takes pins, reads through them, releases them after `--pin-hold`.
async fn pinner<S: Store>(ctx: Arc<Ctx<S>>) {
    let a = &ctx.args;
    let mut rng = StdRng::seed_from_u64(a.seed ^ 0x9141);
    let mut held: VecDeque<(Instant, u32, String)> = VecDeque::new();
    let mut n = 0u64;
    while ctx.nap(a.pin_every).await {
        for tree in [
            0,
            if a.small_trees == 0 {
                0
            } else {
                rng.gen_range(1..=a.small_trees)
            },
        ] {
            n += 1;
            let name = format!("soak-{n}");
            let Ok(t) = ctx.forest.tree(&tree_name(tree)) else {
                continue;
            };
            let started = Instant::now();
            match t.pin(&name).await {
                Ok(_) => ctx.record(Op::Pin, started),
                Err(e) => {
                    ctx.error(format!("pin: {e}"));
                    continue;
                }
            }
            let per = if tree == 0 {
                ctx.big_per_task
            } else {
                ctx.small_per_task
            };
            let keys: Vec<Key> = (0..8)
                .map(|_| {
                    key_of(
                        a.seed,
                        tree,
                        rng.gen_range(0..a.submitters),
                        rng.gen_range(0..per.max(1)),
                    )
                })
                .collect();
            let started = Instant::now();
            match t.at_pin(&name).await {
                Ok(view) => match view.get_many(&keys).await {
                    Ok(_) => ctx.record(Op::PinRead, started),
                    Err(e) => ctx.error(format!("pinned read: {e}")),
                },
                Err(e) => ctx.error(format!("at_pin: {e}")),
            }
            held.push_back((Instant::now(), tree, name));
        }
        while held
            .front()
            .is_some_and(|(at, _, _)| at.elapsed().as_secs_f64() >= a.pin_hold)
        {
            let Some((_, tree, name)) = held.pop_front() else {
                break;
            };
            unpin(&ctx, tree, &name).await;
        }
    }
    for (_, tree, name) in held {
        unpin(&ctx, tree, &name).await;
    }
}

async fn unpin<S: Store>(ctx: &Ctx<S>, tree: u32, name: &str) {
    let Ok(t) = ctx.forest.tree(&tree_name(tree)) else {
        return;
    };
    let started = Instant::now();
    match t.unpin(name).await {
        Ok(true) => ctx.record(Op::Unpin, started),
        Ok(false) => ctx.error(format!("unpin {name}: no such pin")),
        Err(e) => ctx.error(format!("unpin {name}: {e}")),
    }
}

/// Prunes the big tree's journal to its last `--journal-keep` versions.
async fn pruner<S: Store>(ctx: Arc<Ctx<S>>) {
    let retention = Retention {
        versions: Some(ctx.args.journal_keep),
        ..Default::default()
    };
    let big = match ctx.forest.tree(BIG) {
        Ok(t) => t,
        Err(e) => return ctx.error(format!("pruner: {e}")),
    };
    while ctx.nap(ctx.args.prune_every).await {
        let started = Instant::now();
        match big.store().prune_journal(&retention).await {
            Ok(rows) => {
                ctx.record(Op::Prune, started);
                ctx.pruned_rows.fetch_add(rows, Ordering::Relaxed);
            }
            Err(e) => ctx.error(format!("prune: {e}")),
        }
    }
}

// ---------------------------------------------------------------------------
// Per-minute rows
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Default)]
struct Sample {
    minute: u32,
    t: f64,
    load1: f64,
    load5: f64,
    submissions: u64,
    leaves_per_s: f64,
    errors: u64,
    ops: BTreeMap<&'static str, (u64, f64, f64, f64)>,
    rss_mb: f64,
    /// The mean, least and most of the RSS read every `RSS_EVERY` in the
    /// minute: one read a minute lands anywhere on a saw-tooth of seconds.
    rss_in_minute: MinuteReads,
    /// The live heap read with each of those RSS reads.
    heap_in_minute: MinuteReads,
    model_mb: f64,
    /// Nodes the store's memory holds: every tree handle of the forest and
    /// the follower share it (one budget per store).
    recent_nodes: u64,
    db: DbSample,
    groups: u64,
    group_leaves: f64,
    planning_share: f64,
    committing_share: f64,
    waiting_share: f64,
    follow_fallbacks: u64,
    pruned_rows: u64,
    wal_written: Option<i64>,
    hot_share: Option<f64>,
    heap_hit_share: Option<f64>,
    /// The process's CPU time (all threads, user and system) per
    /// acknowledged leaf in the minute, in ms: the work a leaf costs this
    /// process, whatever the machine's speed (the database server's own
    /// processes are not in it).
    cpu_ms_per_leaf: f64,
    /// Seconds this process's live threads waited for a CPU per second of
    /// the minute (`/proc/self/task/*/schedstat`; threads that ended within
    /// the minute are not counted): how crowded the CPUs were.
    run_queue_wait: f64,
    /// The time of `machine_probe` at the minute's end, in ms: fixed work,
    /// so its change over a run is the machine's speed, not the tree's.
    probe_ms: f64,
    /// ns per dependent load over 32 MB (`memory_probe`, in a child
    /// process): the memory's speed as this machine gives it now.
    mem_ns: f64,
    /// µs per 2 KiB `pread` of a page-cached file (`memory_probe`): what
    /// the kernel's copy out of the page cache costs now.
    pread_us: f64,
}

/// How often the RSS and the live heap are read within a minute.
const RSS_EVERY: Duration = Duration::from_millis(250);

/// One figure's reads within a minute (RSS, live heap).
#[derive(Debug, Clone, Copy)]
struct MinuteReads {
    sum: f64,
    reads: u32,
    min: f64,
    max: f64,
}

impl Default for MinuteReads {
    fn default() -> Self {
        MinuteReads {
            sum: 0.0,
            reads: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl MinuteReads {
    fn add(&mut self, mb: f64) {
        if mb.is_finite() {
            self.sum += mb;
            self.reads += 1;
            self.min = self.min.min(mb);
            self.max = self.max.max(mb);
        }
    }

    fn mean(&self) -> f64 {
        ratio(self.sum, f64::from(self.reads))
    }

    /// The least read, NaN when nothing was read.
    fn least(&self) -> f64 {
        if self.reads == 0 { f64::NAN } else { self.min }
    }

    /// The most read, NaN when nothing was read.
    fn most(&self) -> f64 {
        if self.reads == 0 { f64::NAN } else { self.max }
    }
}

/// The bytes allocated through Rust's allocator and not yet freed, in MB
/// of 2^20 bytes as the RSS (the C libraries' own allocations, SQLite's
/// among them, are not in it).
fn heap_mb() -> f64 {
    let stats = HEAP.stats();
    stats
        .bytes_allocated
        .saturating_sub(stats.bytes_deallocated) as f64
        / 1_048_576.0
}

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The process's CPU time so far (every thread, ended ones included, user
/// and system), in seconds: fields 14 and 15 of `/proc/self/stat`, in the
/// kernel's fixed user-visible tick of 1/100 s.
fn cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // The command name (field 2) may hold spaces; fields after it
            // start at the state, field 3.
            let rest = &s[s.rfind(')')? + 1..];
            let mut it = rest.split_whitespace().skip(11);
            let utime: f64 = it.next()?.parse().ok()?;
            let stime: f64 = it.next()?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(f64::NAN)
}

/// Each live thread's wait on a run queue so far, in ns, by thread id (the
/// second field of `/proc/self/task/<tid>/schedstat`).
fn run_queue_waits() -> BTreeMap<u64, u64> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return BTreeMap::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            Some((tid, stat.split_whitespace().nth(1)?.parse().ok()?))
        })
        .collect()
}

/// The seconds the live threads of `now` waited since `before`: a thread
/// new since then counts from its start, one that ended is left out (so a
/// thread's exit never makes the figure negative).
fn run_queue_wait_since(before: &BTreeMap<u64, u64>, now: &BTreeMap<u64, u64>) -> f64 {
    let ns: u64 = now
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum();
    ns as f64 / 1e9
}

/// Fixed CPU work, timed: 100,000 chained SHA-256 digests of 32 bytes (each
/// the input of the next, so none can be skipped), five times; the least of
/// the five, in ms. The least leaves out most waits for a CPU (those are in
/// `run_queue_wait`), so what is left is the CPU's own speed.
fn machine_probe() -> f64 {
    (0..5)
        .map(|_| {
            let started = Instant::now();
            let mut digest = [0u8; 32];
            for _ in 0..100_000 {
                digest = Sha256::digest(digest).into();
            }
            std::hint::black_box(digest);
            started.elapsed().as_secs_f64() * 1000.0
        })
        .fold(f64::INFINITY, f64::min)
}

/// The file `memory_probe` reads: 32 MiB, written once per run.
const PREAD_FILE_BYTES: usize = 32 << 20;

/// The flag that makes this executable the memory probe's child.
const MEMORY_PROBE_FLAG: &str = "--memory-probe";

/// The memory and the kernel's copies, timed in a child process (so the
/// probe's 32 MB is never in this process's RSS): the child prints
/// `mem_ns pread_us` ([`memory_probe_child`]). NaN when it fails.
fn memory_probe(file: &Path) -> (f64, f64) {
    let out = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .arg(MEMORY_PROBE_FLAG)
            .arg(file)
            .output()
    });
    let text = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => return (f64::NAN, f64::NAN),
    };
    let mut it = text
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(f64::NAN));
    (it.next().unwrap_or(f64::NAN), it.next().unwrap_or(f64::NAN))
}

/// The child's side of [`memory_probe`]: 1,000,000 dependent loads over a
/// 32 MB array (each index the value of the last, in the order of a
/// full-period linear congruential step, so no prefetcher can run ahead),
/// and 20,000 `pread`s of 2 KiB at pseudo-random page offsets of `file`
/// (in the page cache after the first pass); each three times, the least,
/// as ns per load and µs per read.
fn memory_probe_child(file: &Path) -> Res<(f64, f64)> {
    use std::os::unix::fs::FileExt;
    const SLOTS: usize = 8 << 20; // u32 each: 32 MB
    // Hull-Dobell: c odd, a - 1 divisible by 4, so the step visits every
    // slot of the power-of-two array once per cycle.
    let step = |i: usize| (i.wrapping_mul(1_103_515_245).wrapping_add(12_345)) & (SLOTS - 1);
    let next: Vec<u32> = (0..SLOTS).map(|i| step(i) as u32).collect();
    let loads = 1_000_000u32;
    let mem_ns = (0..3)
        .map(|_| {
            let started = Instant::now();
            let mut at = 0usize;
            for _ in 0..loads {
                at = next[at] as usize;
            }
            std::hint::black_box(at);
            started.elapsed().as_secs_f64() * 1e9 / f64::from(loads)
        })
        .fold(f64::INFINITY, f64::min);
    drop(next);
    let f = std::fs::File::open(file)?;
    let pages = (PREAD_FILE_BYTES / 2048) as u64;
    let mut buf = [0u8; 2048];
    let reads = 20_000u64;
    let mut pread_us = f64::INFINITY;
    for pass in 0..4 {
        let started = Instant::now();
        for r in 0..reads {
            let page = (r.wrapping_mul(2_654_435_761)) % pages;
            f.read_exact_at(&mut buf, page * 2048)?;
        }
        std::hint::black_box(&buf);
        // The first pass brings the file into the page cache.
        if pass > 0 {
            pread_us = pread_us.min(started.elapsed().as_secs_f64() * 1e6 / reads as f64);
        }
    }
    Ok((mem_ns, pread_us))
}

fn loadavg() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(f64::NAN));
    (it.next().unwrap_or(f64::NAN), it.next().unwrap_or(f64::NAN))
}

const CSV_HEADER: &str = "minute,t_s,load1,load5,submissions,leaves_per_s,errors,\
submit_n,submit_p50_ms,submit_p99_ms,submit_max_ms,proof_n,proof_p50_ms,proof_p99_ms,\
page_n,page_p50_ms,page_p99_ms,follow_n,follow_p50_ms,follow_p99_ms,follow_fallbacks,\
pin_n,pin_p99_ms,pinread_p99_ms,unpin_p99_ms,prune_n,prune_p99_ms,pruned_rows,\
rss_mb,model_mb,live_leaves,namespaces,strata_rows,rows_per_leaf,history_rows,change_rows,\
version_rows,pins,db_bytes,table_bytes,index_bytes,wal_bytes,bytes_per_leaf,freelist_pages,\
dead_tuples,hot_share,autovacuums,wal_written_bytes,checkpoints,heap_hit_share,groups,\
mean_group_leaves,planning_share,committing_share,waiting_share,recent_nodes,\
rss_mean_mb,rss_min_mb,rss_max_mb,heap_mean_mb,heap_min_mb,heap_max_mb,\
cpu_ms_per_leaf,run_queue_wait,probe_ms,mem_ns,pread_us";

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

fn f(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.3}")
    }
}

impl Sample {
    fn op(&self, name: &str) -> (u64, f64, f64, f64) {
        self.ops
            .get(name)
            .copied()
            .unwrap_or((0, f64::NAN, f64::NAN, f64::NAN))
    }

    fn rows_per_leaf(&self) -> f64 {
        ratio(self.db.strata_rows as f64, self.db.live_leaves as f64)
    }

    fn bytes_per_leaf(&self) -> f64 {
        ratio(self.db.db_bytes as f64, self.db.live_leaves as f64)
    }

    fn csv(&self) -> String {
        let (sn, s50, s99, smax) = self.op("submit");
        let (pn, p50, p99, _) = self.op("proof");
        let (gn, g50, g99, _) = self.op("page");
        let (fn_, f50, f99, _) = self.op("follow");
        let (pinn, _, pin99, _) = self.op("pin");
        let (_, _, pr99, _) = self.op("pinread");
        let (_, _, up99, _) = self.op("unpin");
        let (prn, _, pru99, _) = self.op("prune");
        let d = &self.db;
        [
            self.minute.to_string(),
            format!("{:.1}", self.t),
            f(self.load1),
            f(self.load5),
            self.submissions.to_string(),
            f(self.leaves_per_s),
            self.errors.to_string(),
            sn.to_string(),
            f(s50),
            f(s99),
            f(smax),
            pn.to_string(),
            f(p50),
            f(p99),
            gn.to_string(),
            f(g50),
            f(g99),
            fn_.to_string(),
            f(f50),
            f(f99),
            self.follow_fallbacks.to_string(),
            pinn.to_string(),
            f(pin99),
            f(pr99),
            f(up99),
            prn.to_string(),
            f(pru99),
            self.pruned_rows.to_string(),
            f(self.rss_mb),
            f(self.model_mb),
            d.live_leaves.to_string(),
            d.namespaces.to_string(),
            d.strata_rows.to_string(),
            f(self.rows_per_leaf()),
            d.history_rows.to_string(),
            d.change_rows.to_string(),
            d.version_rows.to_string(),
            d.pins.to_string(),
            d.db_bytes.to_string(),
            opt(d.table_bytes),
            opt(d.index_bytes),
            d.wal_bytes.to_string(),
            f(self.bytes_per_leaf()),
            opt(d.freelist_pages),
            opt(d.dead_tuples),
            self.hot_share.map_or(String::new(), f),
            opt(d.autovacuums),
            opt(self.wal_written),
            opt(d.checkpoints),
            self.heap_hit_share.map_or(String::new(), f),
            self.groups.to_string(),
            f(self.group_leaves),
            f(self.planning_share),
            f(self.committing_share),
            f(self.waiting_share),
            self.recent_nodes.to_string(),
            f(self.rss_in_minute.mean()),
            f(self.rss_in_minute.least()),
            f(self.rss_in_minute.most()),
            f(self.heap_in_minute.mean()),
            f(self.heap_in_minute.least()),
            f(self.heap_in_minute.most()),
            f(self.cpu_ms_per_leaf),
            f(self.run_queue_wait),
            f(self.probe_ms),
            f(self.mem_ns),
            f(self.pread_us),
        ]
        .join(",")
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

fn delta(now: Option<i64>, before: Option<i64>) -> Option<i64> {
    Some(now? - before?)
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

/// Every task's preloaded share of the big tree and of each small tree,
/// written through the forest (so the parent starts in step).
async fn preload<S: Store>(
    args: &Args,
    forest: &Forest<S, Compacted>,
    models: &mut [TaskModel],
    big_per_task: u32,
    small_per_task: u32,
) -> Res<()> {
    let started = Instant::now();
    let mut batch: Vec<(String, Key, Leaf)> = Vec::with_capacity(BUILD_BATCH);
    let mut written = 0u64;
    let flush = |batch: &mut Vec<(String, Key, Leaf)>| std::mem::take(batch);
    for tree in 0..=args.small_trees {
        let per = if tree == 0 {
            big_per_task
        } else {
            small_per_task
        };
        let name = tree_name(tree);
        for index in 0..per {
            for (task, m) in models.iter_mut().enumerate() {
                let key = key_of(args.seed, tree, task as u32, index);
                batch.push((name.clone(), key, leaf_of(&key, 1)));
                m.trees[tree as usize].push(1);
                if batch.len() >= BUILD_BATCH {
                    written += batch.len() as u64;
                    forest.insert_many(flush(&mut batch)).await?;
                    eprintln!(
                        "soak: preload {written} leaves ({:.0} s)",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }
    }
    if !batch.is_empty() {
        written += batch.len() as u64;
        forest.insert_many(flush(&mut batch)).await?;
    }
    eprintln!(
        "soak: preloaded {written} leaves in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn multiverse() -> Link {
    Link::rule(PARENT, |name| {
        name.starts_with("u-")
            .then(|| Key(Sha256::digest(name.as_bytes()).into()))
    })
}

/// What the end of the run found.
#[derive(Debug, Default)]
struct Checks {
    acknowledged_checked: u64,
    lost: u64,
    resurrected: u64,
    uncertain: u64,
    audits: u64,
    audit_problems: u64,
    link_problems: u64,
    follower_equal: bool,
    count_mismatches: u64,
    check_secs: f64,
}

async fn run<S: Store>(args: Args, store: S, probe: Probe, spec: String) -> Res<()> {
    std::fs::create_dir_all(&args.out)?;
    let engine = args.engine.clone();
    let csv_path = args.out.join(format!("soak-{engine}.csv"));
    let mut csv = std::io::BufWriter::new(std::fs::File::create(&csv_path)?);
    writeln!(csv, "{CSV_HEADER}")?;
    csv.flush()?;

    let forest = Forest::<S, Compacted>::new(store.clone()).with_link(multiverse());
    let mut models: Vec<TaskModel> = (0..args.submitters)
        .map(|_| TaskModel {
            trees: (0..=args.small_trees).map(|_| Vec::new()).collect(),
        })
        .collect();
    let big_per_task = (args.big_initial / u64::from(args.submitters)) as u32;
    let small_per_task = (args.small_initial / u64::from(args.submitters)).max(1) as u32;
    preload(&args, &forest, &mut models, big_per_task, small_per_task).await?;

    // The follower starts as a copy of the big tree; the journal from there.
    let big_tree = forest.tree(BIG)?;
    let follower_tree: Tree<S, Compacted> = Tree::new(store.named(FOLLOWER));
    big_tree.view().copy_to(&follower_tree).await?;
    big_tree.store().enable_journal().await?;

    let writer = forest.writer(WriterConfig::default());
    let ctx = Arc::new(Ctx {
        args: args.clone(),
        forest: forest.clone(),
        writer: writer.clone(),
        hists: OPS.iter().map(|op| (*op, Hist::new())).collect(),
        stop: AtomicBool::new(false),
        errors: Mutex::new(Vec::new()),
        uncertain: Mutex::new(Vec::new()),
        follow_fallbacks: AtomicU64::new(0),
        pruned_rows: AtomicU64::new(0),
        big_per_task,
        small_per_task,
    });

    let first = probe.sample(true).await?;
    eprintln!(
        "soak: {} live leaves, {} strata rows, {:.1} MB; the load starts ({} submitters, {:.1} min)",
        first.live_leaves,
        first.strata_rows,
        first.db_bytes as f64 / 1e6,
        args.submitters,
        args.minutes
    );
    let started = Instant::now();
    let mut submitters = Vec::new();
    for (task, m) in std::mem::take(&mut models).into_iter().enumerate() {
        submitters.push(tokio::spawn(submitter(ctx.clone(), task as u32, m)));
    }
    let mut others = Vec::new();
    for id in 0..args.readers {
        others.push(tokio::spawn(reader(ctx.clone(), id)));
    }
    others.push(tokio::spawn(iterator(ctx.clone())));
    others.push(tokio::spawn(follower(ctx.clone(), follower_tree.clone())));
    others.push(tokio::spawn(pinner(ctx.clone())));
    others.push(tokio::spawn(pruner(ctx.clone())));

    // Samples until the time is up.
    let mut samples: Vec<Sample> = Vec::new();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let period = Duration::from_secs_f64(args.sample_secs);
    let mut before_h: BTreeMap<Op, Vec<u64>> = ctx
        .hists
        .iter()
        .map(|(op, h)| (*op, h.snapshot()))
        .collect();
    let mut before_w = writer.stats();
    let mut before_db = first.clone();
    let mut before_t = Instant::now();
    let mut before_errors = 0u64;
    let mut before_fallbacks = 0u64;
    let mut before_pruned = 0u64;
    let pread_file = args.out.join("memory-probe.bin");
    std::fs::write(&pread_file, vec![0x5au8; PREAD_FILE_BYTES])?;
    let mut before_cpu = cpu_secs();
    let mut before_wait = run_queue_waits();
    let mut minute = 0u32;
    while started.elapsed() < total {
        let next = started + period * (minute + 1);
        let end = (started + total).min(next);
        let mut rss_in_minute = MinuteReads::default();
        let mut heap_in_minute = MinuteReads::default();
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            tokio::time::sleep_until((now + RSS_EVERY).min(end).into()).await;
            rss_in_minute.add(rss_mb());
            heap_in_minute.add(heap_mb());
        }
        minute += 1;
        let now = Instant::now();
        let secs = now.duration_since(before_t).as_secs_f64();
        let w = writer.stats();
        let hs: BTreeMap<Op, Vec<u64>> = ctx
            .hists
            .iter()
            .map(|(op, h)| (*op, h.snapshot()))
            .collect();
        let mut ops = BTreeMap::new();
        for op in OPS {
            ops.insert(op_name(op), quantiles(&hs[&op], &before_h[&op]));
        }
        let db = match probe
            .sample(args.dbstat_every > 0 && minute.is_multiple_of(args.dbstat_every))
            .await
        {
            Ok(db) => db,
            Err(e) => {
                ctx.error(format!("sample: {e}"));
                before_db.clone()
            }
        };
        let errors = ctx.errors.lock().map(|e| e.len() as u64).unwrap_or(0);
        let fallbacks = ctx.follow_fallbacks.load(Ordering::Relaxed);
        let pruned = ctx.pruned_rows.load(Ordering::Relaxed);
        let (load1, load5) = loadavg();
        let (cpu, wait) = (cpu_secs(), run_queue_waits());
        let probe_ms = tokio::task::spawn_blocking(machine_probe).await?;
        let file = pread_file.clone();
        let (mem_ns, pread_us) = tokio::task::spawn_blocking(move || memory_probe(&file)).await?;
        let groups = w.groups - before_w.groups;
        let leaves = w.leaves - before_w.leaves;
        let share = |a: Duration, b: Duration| (a - b).as_secs_f64() / secs;
        let hot_share = match (
            delta(db.hot_updates, before_db.hot_updates),
            delta(db.updates, before_db.updates),
        ) {
            (Some(h), Some(u)) if u > 0 => Some(h as f64 / u as f64),
            _ => None,
        };
        let heap_hit_share = match (
            delta(db.heap_hits, before_db.heap_hits),
            delta(db.heap_reads, before_db.heap_reads),
        ) {
            (Some(h), Some(r)) if h + r > 0 => Some(h as f64 / (h + r) as f64),
            _ => None,
        };
        let sample = Sample {
            minute,
            t: now.duration_since(started).as_secs_f64(),
            load1,
            load5,
            submissions: w.acknowledged - before_w.acknowledged,
            leaves_per_s: leaves as f64 / secs,
            errors: errors - before_errors,
            ops,
            rss_mb: rss_mb(),
            rss_in_minute,
            heap_in_minute,
            model_mb: f64::NAN,
            recent_nodes: follower_tree.store().recent_len() as u64,
            wal_written: delta(db.wal_lsn, before_db.wal_lsn),
            hot_share,
            heap_hit_share,
            db: db.clone(),
            groups,
            group_leaves: ratio(leaves as f64, groups as f64),
            planning_share: share(w.planning, before_w.planning),
            committing_share: share(w.committing, before_w.committing),
            waiting_share: share(w.waiting, before_w.waiting),
            follow_fallbacks: fallbacks - before_fallbacks,
            pruned_rows: pruned - before_pruned,
            cpu_ms_per_leaf: ratio((cpu - before_cpu) * 1000.0, leaves as f64),
            run_queue_wait: run_queue_wait_since(&before_wait, &wait) / secs,
            probe_ms,
            mem_ns,
            pread_us,
        };
        writeln!(csv, "{}", sample.csv())?;
        csv.flush()?;
        let (_, s50, s99, _) = sample.op("submit");
        eprintln!(
            "soak: [{minute:>3}] {:>7.0} leaves/s, submit p50 {s50:.1} / p99 {s99:.1} ms, \
             RSS {:.0} MB (live heap {:.0} MB), {:.1} MB ({:.0} B/leaf, {:.2} rows/leaf), WAL {:.1} MB, load {load1:.2}, \
             probe {:.0} ms, mem {:.0} ns, pread {:.2} us, CPU {:.2} ms/leaf, errors {}",
            sample.leaves_per_s,
            sample.rss_mb,
            sample.heap_in_minute.mean(),
            db.db_bytes as f64 / 1e6,
            sample.bytes_per_leaf(),
            sample.rows_per_leaf(),
            db.wal_bytes as f64 / 1e6,
            sample.probe_ms,
            sample.mem_ns,
            sample.pread_us,
            sample.cpu_ms_per_leaf,
            errors
        );
        samples.push(sample);
        before_h = hs;
        before_w = w;
        before_db = db;
        before_t = now;
        before_errors = errors;
        before_fallbacks = fallbacks;
        before_pruned = pruned;
        // Read again after the probe, so its own CPU and waits are in no
        // minute's figures.
        before_cpu = cpu_secs();
        before_wait = run_queue_waits();
    }
    let load_secs = started.elapsed().as_secs_f64();
    let writer_stats = writer.stats();
    std::fs::remove_file(&pread_file)?;

    // Stop: the readers and the rest, then the submitters, then the writer.
    ctx.stop.store(true, Ordering::Relaxed);
    for h in others {
        h.await?;
    }
    let mut models = Vec::new();
    for h in submitters {
        models.push(h.await?);
    }
    writer.close().await;
    let model_bytes: usize = models.iter().map(TaskModel::bytes).sum();
    eprintln!(
        "soak: load stopped after {load_secs:.0} s; {} leaves acknowledged; checking",
        writer_stats.leaves
    );

    // The follower catches up.
    follow_once(&ctx, &follower_tree, &big_tree).await;
    let checks = check(&ctx, &store, &models, &follower_tree, &big_tree).await?;
    let errors: Vec<String> = ctx.errors.lock().map(|e| e.clone()).unwrap_or_default();

    // Size now, after the maintenance, and of a fresh build.
    let end = probe.sample(true).await?;
    // Each `;`-separated maintenance command in turn, measured after each.
    let mut maintenance = Vec::new();
    let mut after = end.clone();
    if let (Some(m), Some(cli)) = (&args.maintain, &args.cli) {
        for command in m.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            let mut done = maintain(cli, &spec, command)?;
            after = probe.sample(true).await?;
            done.bytes_per_leaf = ratio(after.db_bytes as f64, after.live_leaves as f64);
            done.wal_bytes = after.wal_bytes;
            maintenance.push(done);
        }
    }
    let fresh = if args.fresh {
        Some(fresh_build(&args, &models, &probe).await?)
    } else {
        None
    };
    let summary = summarize(
        &args,
        &samples,
        &checks,
        &errors,
        &writer_stats,
        load_secs,
        model_bytes,
        (&first, &end, &after),
        &maintenance,
        fresh.as_ref(),
    );
    std::fs::write(
        args.out.join(format!("summary-{engine}.json")),
        serde_json::to_string_pretty(&summary)?,
    )?;
    println!("{}", serde_json::to_string_pretty(&summary)?);
    let svg = args.out.join(format!("soak-{engine}.svg"));
    plot(&svg, &engine, &samples, args.short_rate)?;
    eprintln!(
        "soak: wrote {}, {} and the summary",
        csv_path.display(),
        svg.display()
    );
    let failed = checks.lost
        + checks.resurrected
        + checks.audit_problems
        + checks.link_problems
        + checks.count_mismatches
        + errors.len() as u64;
    if failed > 0 || !checks.follower_equal {
        return Err(format!(
            "the soak found problems: {checks:?}, {} errors",
            errors.len()
        )
        .into());
    }
    Ok(())
}

/// The end-of-run checks (the load stopped).
async fn check<S: Store>(
    ctx: &Ctx<S>,
    store: &S,
    models: &[TaskModel],
    follower: &Tree<S, Compacted>,
    big: &Tree<S, Compacted>,
) -> Res<Checks> {
    let started = Instant::now();
    let a = &ctx.args;
    let mut c = Checks::default();
    let uncertain = ctx.uncertain.lock().map(|u| u.clone()).unwrap_or_default();
    c.uncertain = uncertain.len() as u64;
    let listing = store_listing(store).await?;
    for tree in 0..=a.small_trees {
        let name = tree_name(tree);
        let t = ctx.forest.tree(&name)?;
        let pairs = expected(a.seed, models, tree);
        let mut live = 0u64;
        for chunk in pairs.chunks(10_000) {
            let keys: Vec<Key> = chunk.iter().map(|(k, _)| *k).collect();
            let got = t.get_many(&keys).await?;
            for ((key, want), have) in chunk.iter().zip(got) {
                if want.is_empty() {
                    if !have.is_empty() && !uncertain_key(&uncertain, a.seed, tree, key) {
                        c.resurrected += 1;
                    }
                } else {
                    live += 1;
                    c.acknowledged_checked += 1;
                    if have != *want && !uncertain_key(&uncertain, a.seed, tree, key) {
                        c.lost += 1;
                        if c.lost <= 5 {
                            eprintln!("soak: LOST {name} {key}: want {want:?}, have {have:?}");
                        }
                    }
                }
            }
        }
        match listing.get(&name) {
            Some(Some(n)) if *n == live => {}
            other => {
                c.count_mismatches += 1;
                eprintln!("soak: {name}: listed count {other:?}, model {live}");
            }
        }
        let report = t.audit().await?;
        c.audits += 1;
        if !report.is_clean() {
            c.audit_problems += report.problems.len() as u64;
            eprintln!("soak: audit of {name}: {:?}", report.problems);
        }
    }
    for t in [follower, &ctx.forest.tree(PARENT)?] {
        let report = t.audit().await?;
        c.audits += 1;
        c.audit_problems += report.problems.len() as u64;
    }
    let links = ctx.forest.audit_links().await?;
    c.link_problems = links.problems.len() as u64;
    c.follower_equal = follower.root().await? == big.root().await?;
    c.check_secs = started.elapsed().as_secs_f64();
    eprintln!("soak: checks {c:?}");
    Ok(c)
}

fn uncertain_key(u: &[(u32, u32, u32, u8, u8)], seed: u64, tree: u32, key: &Key) -> bool {
    u.iter()
        .any(|(t, task, index, _, _)| *t == tree && key_of(seed, tree, *task, *index) == *key)
}

/// Each namespace's exact leaf count (`None`: uncounted or damaged).
async fn store_listing<S: Store>(store: &S) -> Res<BTreeMap<String, Option<u64>>> {
    let any: &dyn std::any::Any = store;
    let listing = if let Some(s) = any.downcast_ref::<SqliteStore>() {
        s.namespaces().await?
    } else if let Some(s) = any.downcast_ref::<PostgresStore>() {
        s.namespaces().await?
    } else {
        return Err("an SQL store".into());
    };
    Ok(listing
        .into_iter()
        .map(|n| {
            let count = n.summary.ok().and_then(|s| match s.leaves {
                LeafCount::Exact(n) => Some(n),
                LeafCount::Uncounted { .. } => None,
            });
            (n.name, count)
        })
        .collect())
}

/// What `ms-smt maintain` did: its exit and output, and how long it took.
#[derive(Debug, serde::Serialize)]
struct Maintenance {
    command: String,
    secs: f64,
    status: i32,
    stdout: String,
    /// Database bytes per live leaf afterwards (WAL excluded).
    bytes_per_leaf: f64,
    /// The WAL on disk afterwards.
    wal_bytes: i64,
}

fn maintain(cli: &Path, spec: &str, args: &str) -> Res<Maintenance> {
    let mut cmd = std::process::Command::new(cli);
    cmd.args(["--db", spec, "--json"])
        .args(args.split_whitespace());
    let command = format!("ms-smt --db {} --json {args}", durable::masked(spec));
    eprintln!("soak: {command}");
    let started = Instant::now();
    let out = cmd.output()?;
    let m = Maintenance {
        command,
        secs: started.elapsed().as_secs_f64(),
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        bytes_per_leaf: f64::NAN,
        wal_bytes: 0,
    };
    if !out.status.success() {
        return Err(format!(
            "maintenance failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(m)
}

/// The same leaves built fresh: a new database with the final trees (the
/// big one and its follower, the small ones and their parent).
#[derive(Debug, serde::Serialize)]
struct Fresh {
    leaves: i64,
    db_bytes: i64,
    table_bytes: Option<i64>,
    index_bytes: Option<i64>,
    strata_rows: i64,
    build_secs: f64,
}

/// The crate's recommended SQLite options with the run's `--sqlite-pragma`
/// settings over them (a later value of a pragma replaces the earlier one).
fn sqlite_options(args: &Args, path: &Path) -> sqlx::sqlite::SqliteConnectOptions {
    args.sqlite_pragmas
        .iter()
        .fold(SqliteStore::connect_options(path), |o, (name, value)| {
            o.pragma(name.clone(), value.clone())
        })
}

async fn fresh_build(args: &Args, models: &[TaskModel], probe: &Probe) -> Res<Fresh> {
    let started = Instant::now();
    match probe {
        Probe::Sqlite { path, .. } => {
            let fresh = with_suffix(path, "-fresh");
            remove_sqlite(&fresh);
            let store = SqliteStore::open_with(sqlite_options(args, &fresh)).await?;
            fill_fresh(args, models, &store).await?;
            store.pool().close().await;
            let pool = probe_pool_sqlite(&fresh).await?;
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&pool)
                .await?;
            let s = sqlite_sample(&fresh, &pool, true).await?;
            pool.close().await;
            remove_sqlite(&fresh);
            Ok(fresh_of(s, started))
        }
        Probe::Postgres { pool } => {
            let name = format!("soak_fresh_{}", std::process::id());
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(pool)
                .await?;
            let url = args.pg_url.clone().ok_or("--pg-url")?;
            let (base, _) = url.rsplit_once('/').ok_or("a database in the URL")?;
            let fresh_url = format!("{base}/{name}");
            let store = PostgresStore::connect(&fresh_url).await?;
            fill_fresh(args, models, &store).await?;
            store.pool().close().await;
            let fresh_pool = sqlx::PgPool::connect(&fresh_url).await?;
            sqlx::query("VACUUM ANALYZE").execute(&fresh_pool).await?;
            let s = pg_sample(&fresh_pool).await?;
            fresh_pool.close().await;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE {name} WITH (FORCE)"
            )))
            .execute(pool)
            .await?;
            Ok(fresh_of(s, started))
        }
    }
}

fn fresh_of(s: DbSample, started: Instant) -> Fresh {
    Fresh {
        leaves: s.live_leaves,
        db_bytes: s.db_bytes,
        table_bytes: s.table_bytes,
        index_bytes: s.index_bytes,
        strata_rows: s.strata_rows,
        build_secs: started.elapsed().as_secs_f64(),
    }
}

async fn fill_fresh<S: Store>(args: &Args, models: &[TaskModel], store: &S) -> Res<()> {
    let forest = Forest::<S, Compacted>::new(store.clone()).with_link(multiverse());
    let mut batch = Vec::with_capacity(BUILD_BATCH);
    for tree in 0..=args.small_trees {
        let name = tree_name(tree);
        for (key, leaf) in expected(args.seed, models, tree) {
            if !leaf.is_empty() {
                batch.push((name.clone(), key, leaf));
            }
            if batch.len() >= BUILD_BATCH {
                forest.insert_many(std::mem::take(&mut batch)).await?;
            }
        }
    }
    if !batch.is_empty() {
        forest.insert_many(batch).await?;
    }
    let big = forest.tree(BIG)?;
    big.view()
        .copy_to(&Tree::<S, Compacted>::new(store.named(FOLLOWER)))
        .await?;
    Ok(())
}

fn remove_sqlite(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(with_suffix(path, suffix));
    }
}

async fn probe_pool_sqlite(path: &Path) -> Res<sqlx::SqlitePool> {
    Ok(sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .busy_timeout(Duration::from_secs(60)),
        )
        .await?)
}

// ---------------------------------------------------------------------------
// The summary and the targets
// ---------------------------------------------------------------------------

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn window(samples: &[Sample], from: u32, to: u32) -> Vec<&Sample> {
    samples
        .iter()
        .filter(|s| s.minute > from && s.minute <= to)
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    args: &Args,
    samples: &[Sample],
    checks: &Checks,
    errors: &[String],
    w: &WriterStats,
    load_secs: f64,
    model_bytes: usize,
    (first, end, after): (&DbSample, &DbSample, &DbSample),
    maintenance: &[Maintenance],
    fresh: Option<&Fresh>,
) -> serde_json::Value {
    let n = samples.len() as u32;
    // The windows of the targets, scaled down for a run shorter than an
    // hour: [5, 15] and the last 10 of 60 minutes.
    let scale = f64::from(n) / 60.0;
    let at = |m: f64| ((m * scale).round() as u32).min(n);
    let (early_from, early_to) = (at(5.0), at(15.0).max(at(5.0) + 1));
    let last_from = n.saturating_sub(at(10.0).max(1));
    let early = window(samples, early_from, early_to);
    let last = window(samples, last_from, n);
    let rate = |w: &[&Sample]| mean(w.iter().map(|s| s.leaves_per_s));
    let p99 = |w: &[&Sample]| mean(w.iter().map(|s| s.op("submit").2));
    let rss_mean = |w: &[&Sample]| mean(w.iter().map(|s| s.rss_mb));
    let cpu_per_leaf = |w: &[&Sample]| mean(w.iter().map(|s| s.cpu_ms_per_leaf));
    let run_wait = |w: &[&Sample]| mean(w.iter().map(|s| s.run_queue_wait));
    let probe = |w: &[&Sample]| mean(w.iter().map(|s| s.probe_ms));
    let mem_ns = |w: &[&Sample]| mean(w.iter().map(|s| s.mem_ns));
    let pread_us = |w: &[&Sample]| mean(w.iter().map(|s| s.pread_us));
    // Least, most and spread of per-minute memory figures after warm-up:
    // the least of `low`, the most of `high`.
    let range = |low: fn(&Sample) -> f64, high: fn(&Sample) -> f64| {
        let after: Vec<&Sample> = samples.iter().filter(|s| s.minute > at(5.0)).collect();
        let least = |v: f64| if v.is_finite() { v } else { f64::INFINITY };
        let most = |v: f64| if v.is_finite() { v } else { 0.0 };
        let min = after
            .iter()
            .map(|s| least(low(s)))
            .fold(f64::INFINITY, f64::min);
        let max = after.iter().map(|s| most(high(s))).fold(0.0f64, f64::max);
        let spread = if min.is_finite() {
            (max - min) / min
        } else {
            f64::NAN
        };
        (min, max, spread)
    };
    let (rss_min, rss_max, rss_spread) = range(|s| s.rss_mb, |s| s.rss_mb);
    // The same over the minutes' means of their in-minute reads, over every
    // in-minute read, and the live heap's.
    let mean_of = |s: &Sample| s.rss_in_minute.mean();
    let (means_min, means_max, means_spread) = range(mean_of, mean_of);
    let (reads_min, reads_max, reads_spread) =
        range(|s| s.rss_in_minute.least(), |s| s.rss_in_minute.most());
    let heap_of = |s: &Sample| s.heap_in_minute.mean();
    let (heap_means_min, heap_means_max, heap_means_spread) = range(heap_of, heap_of);
    let (heap_min, heap_max, _) = range(|s| s.heap_in_minute.least(), |s| s.heap_in_minute.most());
    // Postgres's WAL per acknowledged leaf and checkpoints per minute in a
    // window: full-page images after each checkpoint are what grows.
    let wal_per_leaf = |w: &[&Sample]| -> Option<f64> {
        let wal: i64 = w.iter().map(|s| s.wal_written).sum::<Option<i64>>()?;
        let leaves: u64 = w.iter().map(|s| s.submissions).sum();
        Some(ratio(wal as f64, leaves as f64))
    };
    let checkpoints_at = |m: u32| {
        if m == 0 {
            first.checkpoints
        } else {
            samples
                .iter()
                .find(|s| s.minute == m)
                .and_then(|s| s.db.checkpoints)
        }
    };
    let checkpoints_per_min = |from: u32, to: u32| -> Option<f64> {
        let count = checkpoints_at(to)? - checkpoints_at(from)?;
        let minutes = f64::from(to.saturating_sub(from).max(1)) * args.sample_secs / 60.0;
        Some(ratio(count as f64, minutes))
    };
    let overall = w.leaves as f64 / load_secs;
    let per_leaf = |s: &DbSample| ratio(s.db_bytes as f64, s.live_leaves as f64);
    let disturbed: Vec<u32> = samples
        .iter()
        .filter(|s| s.load1 > 2.5)
        .map(|s| s.minute)
        .collect();
    let mut text = String::new();
    let _ = write!(
        text,
        "{} min, {:.0} leaves/s overall; early window {:.0}, last window {:.0} leaves/s",
        args.minutes,
        overall,
        rate(&early),
        rate(&last)
    );
    serde_json::json!({
        "engine": args.engine,
        "args": format!("{args:?}"),
        // glibc's allocator settings from the environment (`MALLOC_*`):
        // they move the RSS, not the program's data.
        "malloc_env": std::env::vars()
            .filter(|(k, _)| k.starts_with("MALLOC_"))
            .collect::<BTreeMap<_, _>>(),
        "minutes": args.minutes,
        "load_secs": load_secs,
        "leaves": w.leaves,
        "submissions": w.acknowledged,
        "groups": w.groups,
        "leaves_per_s": overall,
        "short_rate": args.short_rate,
        "rate_vs_short": args.short_rate.map(|s| overall / s),
        "early_window_minutes": [early_from + 1, early_to],
        "early_rate": rate(&early),
        "last_rate": rate(&last),
        "last_vs_early_rate": rate(&last) / rate(&early),
        "early_submit_p99_ms": p99(&early),
        "last_submit_p99_ms": p99(&last),
        "last_vs_early_p99": p99(&last) / p99(&early),
        "early_cpu_ms_per_leaf": cpu_per_leaf(&early),
        "last_vs_early_cpu_per_leaf": cpu_per_leaf(&last) / cpu_per_leaf(&early),
        "early_run_queue_wait": run_wait(&early),
        "last_run_queue_wait": run_wait(&last),
        "early_probe_ms": probe(&early),
        "last_vs_early_probe": probe(&last) / probe(&early),
        "early_mem_ns": mem_ns(&early),
        "last_mem_ns": mem_ns(&last),
        "last_vs_early_mem_ns": mem_ns(&last) / mem_ns(&early),
        "early_pread_us": pread_us(&early),
        "last_pread_us": pread_us(&last),
        "last_vs_early_pread_us": pread_us(&last) / pread_us(&early),
        "rss_after_warmup_mb": [rss_min, rss_max],
        "early_rss_mb": rss_mean(&early),
        "last_rss_mb": rss_mean(&last),
        "last_vs_early_rss": rss_mean(&last) / rss_mean(&early),
        "rss_spread": rss_spread,
        "rss_minute_means_after_warmup_mb": [means_min, means_max],
        "rss_minute_means_spread": means_spread,
        "rss_reads_after_warmup_mb": [reads_min, reads_max],
        "rss_reads_spread": reads_spread,
        "heap_minute_means_after_warmup_mb": [heap_means_min, heap_means_max],
        "heap_minute_means_spread": heap_means_spread,
        "heap_reads_after_warmup_mb": [heap_min, heap_max],
        "early_wal_bytes_per_leaf": wal_per_leaf(&early),
        "last_wal_bytes_per_leaf": wal_per_leaf(&last),
        "early_checkpoints_per_min": checkpoints_per_min(early_from, early_to),
        "last_checkpoints_per_min": checkpoints_per_min(last_from, n),
        "model_mb": model_bytes as f64 / 1e6,
        "errors": errors.len(),
        "first_errors": errors.iter().take(10).collect::<Vec<_>>(),
        "disturbed_minutes_load_over_2_5": disturbed,
        "checks": {
            "acknowledged_live_leaves_checked": checks.acknowledged_checked,
            "lost": checks.lost,
            "resurrected": checks.resurrected,
            "uncertain": checks.uncertain,
            "audits": checks.audits,
            "audit_problems": checks.audit_problems,
            "link_problems": checks.link_problems,
            "follower_equal": checks.follower_equal,
            "listed_count_mismatches": checks.count_mismatches,
            "secs": checks.check_secs,
        },
        "bytes_per_leaf": {
            "start": per_leaf(first),
            "end": per_leaf(end),
            "after_maintenance": per_leaf(after),
            "fresh": fresh.map(|f| ratio(f.db_bytes as f64, f.leaves as f64)),
            "after_maintenance_vs_fresh": fresh.map(|f| per_leaf(after) / ratio(f.db_bytes as f64, f.leaves as f64)),
            "end_vs_fresh": fresh.map(|f| per_leaf(end) / ratio(f.db_bytes as f64, f.leaves as f64)),
        },
        "db": {
            "start": format!("{first:?}"),
            "end": format!("{end:?}"),
            "after_maintenance": format!("{after:?}"),
        },
        "maintenance": maintenance,
        "fresh": fresh,
        "text": text,
    })
}

// ---------------------------------------------------------------------------
// The curves
// ---------------------------------------------------------------------------

type Series<'a> = (&'a str, Vec<(f64, f64)>, RGBColor);

/// Eight panels over time (minutes): throughput, latency, RSS, bytes and
/// rows per live leaf, WAL, dead tuples or freelist pages, load.
fn plot(path: &Path, engine: &str, samples: &[Sample], short_rate: Option<f64>) -> Res<()> {
    let root = SVGBackend::new(path, (1400, 1600)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("ms-smt soak on {engine}: per-minute samples"),
        ("sans-serif", 24),
    )?;
    let panels = root.split_evenly((4, 2));
    let xs = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples
            .iter()
            .map(|s| (s.t / 60.0, f(s)))
            .filter(|(_, y)| y.is_finite())
            .collect()
    };
    let mut throughput = vec![("leaves/s acknowledged", xs(&|s| s.leaves_per_s), BLUE)];
    if let Some(r) = short_rate {
        throughput.push(("short-run rate", xs(&|_| r), RGBColor(150, 150, 150)));
        throughput.push(("50 % of it", xs(&|_| r / 2.0), RGBColor(200, 120, 120)));
    }
    let pg = engine == "postgres";
    let dead: Series = if pg {
        (
            "dead tuples in ms_smt_strata",
            xs(&|s| s.db.dead_tuples.map_or(f64::NAN, |v| v as f64)),
            RED,
        )
    } else {
        (
            "freelist pages",
            xs(&|s| s.db.freelist_pages.map_or(f64::NAN, |v| v as f64)),
            RED,
        )
    };
    let mut dead_panel = vec![dead];
    if pg {
        dead_panel.push((
            "HOT share of updates (x 10^6)",
            xs(&|s| s.hot_share.map_or(f64::NAN, |v| v * 1e6)),
            GREEN,
        ));
    }
    let charts: Vec<(&str, &str, Vec<Series>)> = vec![
        ("throughput", "leaves/s", throughput),
        (
            "submit latency",
            "ms",
            vec![
                ("submit p50", xs(&|s| s.op("submit").1), BLUE),
                ("submit p99", xs(&|s| s.op("submit").2), RED),
                ("proof p99", xs(&|s| s.op("proof").2), GREEN),
            ],
        ),
        (
            "process memory",
            "MB",
            vec![
                ("RSS, one read", xs(&|s| s.rss_mb), BLUE),
                (
                    "RSS, mean of the minute's reads",
                    xs(&|s| s.rss_in_minute.mean()),
                    RGBColor(200, 120, 40),
                ),
                (
                    "live heap (Rust's allocator), mean of the minute's reads",
                    xs(&|s| s.heap_in_minute.mean()),
                    GREEN,
                ),
            ],
        ),
        (
            "database bytes per live leaf (WAL excluded)",
            "bytes",
            vec![("bytes / live leaf", xs(&|s| s.bytes_per_leaf()), BLUE)],
        ),
        (
            "strata rows per live leaf",
            "rows",
            vec![("rows / live leaf", xs(&|s| s.rows_per_leaf()), BLUE)],
        ),
        (
            "WAL and database size",
            "MB",
            vec![
                ("WAL on disk", xs(&|s| s.db.wal_bytes as f64 / 1e6), RED),
                (
                    "database (tables + indexes)",
                    xs(&|s| s.db.db_bytes as f64 / 1e6),
                    BLUE,
                ),
            ],
        ),
        (
            if pg { "vacuum" } else { "free pages" },
            "count",
            dead_panel,
        ),
        (
            "machine load (2 vCPUs, shared)",
            "load",
            vec![
                ("load average, 1 min", xs(&|s| s.load1), BLUE),
                ("5 min", xs(&|s| s.load5), RGBColor(150, 150, 150)),
            ],
        ),
    ];
    let x_max = samples.last().map_or(1.0, |s| s.t / 60.0).max(1.0);
    for (area, (title, unit, series)) in panels.iter().zip(charts) {
        let y_max = series
            .iter()
            .flat_map(|(_, v, _)| v.iter().map(|(_, y)| *y))
            .fold(0.0f64, f64::max)
            * 1.1;
        let y_max = if y_max > 0.0 { y_max } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .y_desc(unit)
            .draw()?;
        for (label, points, color) in series {
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------

fn main() -> Res<()> {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some(MEMORY_PROBE_FLAG) {
        let file = argv.next().ok_or("--memory-probe needs a file")?;
        let (mem_ns, pread_us) = memory_probe_child(Path::new(&file))?;
        println!("{mem_ns} {pread_us}");
        return Ok(());
    }
    let args = parse_args()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        eprintln!("soak: {args:?}");
        match args.engine.as_str() {
            "sqlite" => {
                remove_sqlite(&args.db);
                if let Some(dir) = args.db.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                let store = SqliteStore::open_with(sqlite_options(&args, &args.db)).await?;
                let pool = probe_pool_sqlite(&args.db).await?;
                let probe = Probe::Sqlite {
                    path: args.db.clone(),
                    pool,
                };
                let spec = args.db.display().to_string();
                run(args, store, probe, spec).await
            }
            "postgres" => {
                let url = args
                    .pg_url
                    .clone()
                    .ok_or("--pg-url (or MSSMT_BENCH_PG_URL) is needed for postgres")?;
                let store = durable::durable_postgres(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(2)
                    .connect(&url)
                    .await?;
                // A fresh start: the soak's tables emptied.
                for table in [
                    "ms_smt_strata",
                    "ms_smt_history",
                    "ms_smt_changes",
                    "ms_smt_versions",
                    "ms_smt_pins",
                    "ms_smt_namespaces",
                ] {
                    sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {table}")))
                        .execute(&pool)
                        .await?;
                }
                if let Some(settings) = &args.pg_strata {
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "ALTER TABLE ms_smt_strata SET ({settings})"
                    )))
                    .execute(&pool)
                    .await?;
                }
                sqlx::query("VACUUM FULL").execute(&pool).await?;
                let options: Vec<(String, Option<Vec<String>>)> = sqlx::query_as(
                    "SELECT relname::text, reloptions FROM pg_class WHERE relname = 'ms_smt_strata'",
                )
                .fetch_all(&pool)
                .await?;
                eprintln!("soak: strata table options {options:?}");
                let probe = Probe::Postgres { pool };
                run(args, store, probe, url).await
            }
            other => Err(format!("--engine {other}: sqlite or postgres").into()),
        }
    })
}
