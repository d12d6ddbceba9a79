//! Scale benchmark: the SQL stores at real tree sizes next to the in-memory
//! store, all in one run (the figures of BENCHMARKS.md's scale section).
//!
//! For each tree size N it
//! 1. builds a compacted tree of N random leaves (`insert_many` batches of
//!    100,000) on memory, SQLite and, when configured, PostgreSQL, and times
//!    each build (the stores take the same batches in turn);
//! 2. runs R rounds. Each round inserts 1,000 new keys into every store
//!    through the handle that built its tree (warm), then 1,000 other new
//!    keys through a fresh handle that remembers no nodes (cold,
//!    `with_recent_nodes(0)`). It records the time, the store round trips,
//!    the rows each commit changes and, for SQLite, the WAL bytes one commit
//!    writes. Before each timed SQLite commit, an untimed
//!    `wal_checkpoint(RESTART)` on a separate connection checkpoints the
//!    WAL, so the commit writes its frames from the start of the `-wal`
//!    file (over old frames, as a running database does); afterwards the
//!    frames in the WAL are counted (`wal_checkpoint(PASSIVE)`). All roots must be equal after every round;
//! 3. each round also asks a fresh cold handle for `merkle_proofs` of 1,000
//!    existing keys and checks that the proofs equal the memory store's;
//! 4. last, the engine floor: in one transaction, read as many rows picked
//!    at random as a median commit changed and rewrite their bodies
//!    (one statement each), then COMMIT with the same durability — the
//!    engine's own cost of such a commit, without merging or hashing.
//!
//! It prints medians over the rounds as markdown tables on stdout, and
//! progress on stderr.
//!
//! ```text
//! cargo run --release --example scale
//! MSSMT_SCALE_N=10000,100000,1000000 MSSMT_SCALE_ROUNDS=5 MSSMT_SCALE_HEIGHT=4 \
//!     MSSMT_BENCH_PG_URL=postgres://user@localhost/db cargo run --release --example scale
//! ```
//!
//! * `MSSMT_SCALE_N`: tree sizes, comma-separated (default `10000,100000`).
//!   Building 1,000,000 leaves on SQL takes minutes, so it is opt-in.
//! * `MSSMT_SCALE_ROUNDS`: measured rounds per size (default 5).
//! * `MSSMT_SCALE_HEIGHT`: stratum height (1 to 6) of the new SQLite and
//!   Postgres namespaces (default: the crate's).
//! * `MSSMT_BENCH_PG_URL`: a PostgreSQL server to measure as well. **It must
//!   run with `fsync = on`.** The example prints the server's `fsync` and
//!   refuses to start when it is off. The throwaway server of
//!   `scripts/with-postgres.sh` runs with fsync off, so it cannot be used here.
//!
//! SQLite is a fresh file in the temp dir for each N, opened with the
//! crate's durable defaults (`SqliteStore::open`: WAL, `synchronous=FULL`).
//! Keys and leaves come from a fixed seed, so runs are comparable.

use ms_smt_test_support::bench as common;
use ms_smt_test_support::durable;

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::Batch;
use ms_smt::store::{AuditStore, MemoryStore, StoreStats, Writable};
use ms_smt::{CompactedTree, ComputedNode, Key, Proof};
use ms_smt_sql::{DEFAULT_STRATUM_HEIGHT, PostgresStore, SqliteStore, StratumHeight};
use rand::SeedableRng;
use rand::rngs::StdRng;
use sqlx::SqlitePool;
use sqlx::sqlite::SqlitePoolOptions;

type Res<T> = Result<T, Box<dyn Error>>;

const SEED: u64 = 0x6d73_736d_7400_0003;
const BUILD_BATCH: usize = 100_000;
const ROUND_KEYS: usize = 1_000;
const ENV_VARS: [&str; 4] = [
    "MSSMT_SCALE_N",
    "MSSMT_SCALE_ROUNDS",
    "MSSMT_SCALE_HEIGHT",
    "MSSMT_BENCH_PG_URL",
];

/// `n` leaves: random 32-byte keys, 1-255 random value bytes, sums in [1, 2^32).
fn random_batch(rng: &mut StdRng, n: usize) -> Batch {
    common::random_batch(rng, n, 1..=255, 1..(1u64 << 32))
}

struct Config {
    sizes: Vec<usize>,
    rounds: usize,
    height: Option<StratumHeight>,
    pg_url: Option<String>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn config() -> Res<Config> {
    let sizes = env("MSSMT_SCALE_N")
        .unwrap_or_else(|| "10000,100000".into())
        .split(',')
        .map(|s| s.trim().replace('_', "").parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("MSSMT_SCALE_N: {e}"))?;
    let rounds = match env("MSSMT_SCALE_ROUNDS") {
        Some(r) => r
            .trim()
            .parse()
            .map_err(|e| format!("MSSMT_SCALE_ROUNDS: {e}"))?,
        None => 5,
    };
    let height = match env("MSSMT_SCALE_HEIGHT") {
        Some(h) => Some(
            h.trim()
                .parse()
                .ok()
                .and_then(StratumHeight::new)
                .ok_or("MSSMT_SCALE_HEIGHT must be 1 to 6")?,
        ),
        None => None,
    };
    if sizes.contains(&0) || rounds == 0 {
        return Err("sizes and rounds must be at least 1".into());
    }
    Ok(Config {
        sizes,
        rounds,
        height,
        pg_url: durable::bench_pg_url(),
    })
}

fn shell(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

fn print_machine(cfg: &Config) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let mut command: Vec<String> = ENV_VARS
        .iter()
        .filter_map(|var| env(var).map(|v| format!("{var}={}", durable::masked(&v))))
        .collect();
    command.push("cargo run --release --example scale".into());
    println!("## Scale run\n");
    println!("- command: `{}`", command.join(" "));
    println!(
        "- binary: `{}`",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    println!(
        "- machine: {} CPUs (nproc: {}), {cpu}",
        shell("nproc", &["--all"]),
        shell("nproc", &[])
    );
    println!(
        "- date: {}, code: {}",
        shell("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        shell("git", &["describe", "--always", "--dirty"])
    );
    println!(
        "- sizes: {:?}, rounds: {}, seed: {SEED:#x}",
        cfg.sizes, cfg.rounds
    );
    match cfg.height {
        Some(h) => println!(
            "- stratum height: {} (MSSMT_SCALE_HEIGHT), SQLite and Postgres",
            h.get()
        ),
        None => println!("- stratum height: {DEFAULT_STRATUM_HEIGHT} (crate default)"),
    }
}

/// A separate connection to an SQLite file, to checkpoint its WAL before
/// a commit and count the frames that commit writes there.
struct Wal {
    pool: SqlitePool,
}

impl Wal {
    async fn open(db: &Path) -> Res<Wal> {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(SqliteStore::connect_options(db))
            .await?;
        Ok(Wal { pool })
    }

    /// Checkpoints everything into the database file so that the next
    /// commit writes its frames from the start of the WAL (over the old
    /// ones, as a running database does: the file is not truncated).
    async fn restart(&self) -> Res<()> {
        self.checkpoint("RESTART").await
    }

    /// Checkpoints everything into the database file and truncates the WAL
    /// (to measure the database file alone).
    async fn truncate(&self) -> Res<()> {
        self.checkpoint("TRUNCATE").await
    }

    /// A full checkpoint in `mode`, which no other connection may block.
    async fn checkpoint(&self, mode: &str) -> Res<()> {
        let (busy, _, _): (i64, i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "PRAGMA wal_checkpoint({mode})"
        )))
        .fetch_one(&self.pool)
        .await?;
        if busy != 0 {
            return Err(format!("wal_checkpoint({mode}) was blocked by another connection").into());
        }
        Ok(())
    }

    /// Bytes of the frames in the WAL since the last restart: frames times
    /// (page size + the 24-byte frame header), plus the 32-byte header.
    async fn bytes(&self) -> Res<u64> {
        let (_, frames, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&self.pool)
            .await?;
        let page: i64 = sqlx::query_scalar("PRAGMA page_size")
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(frames.max(0) * (page + 24) + 32)?)
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(with_suffix(db, suffix));
    }
}

/// One timed `insert_many`.
struct Insert {
    secs: f64,
    root: ComputedNode,
    stats: StoreStats,
    wal: Option<u64>,
}

async fn insert<S: Writable + AuditStore + 'static>(
    tree: &CompactedTree<S>,
    batch: &Batch,
    wal: Option<&Wal>,
) -> Res<Insert> {
    if let Some(wal) = wal {
        wal.restart().await?;
    }
    let batch = batch.clone();
    let before = tree.store().stats();
    let start = Instant::now();
    let root = tree.insert_many(batch).await?;
    let secs = start.elapsed().as_secs_f64();
    let wal = match wal {
        Some(wal) => Some(wal.bytes().await?),
        None => None,
    };
    Ok(Insert {
        secs,
        root,
        stats: tree.store().stats().since(&before),
        wal,
    })
}

/// The measurements of one store at one size.
#[derive(Default)]
struct Samples {
    build_secs: f64,
    /// ms per `insert_many` of 1,000 new keys (memory: both batches).
    warm: Vec<f64>,
    cold: Vec<f64>,
    cold_trips: Vec<f64>,
    /// Rows changed per commit, warm and cold commits.
    rows: Vec<f64>,
    /// WAL bytes per commit, warm and cold commits (SQLite).
    wal: Vec<f64>,
    /// ms per cold `merkle_proofs` of 1,000 keys.
    proofs: Vec<f64>,
    proof_trips: Vec<f64>,
    /// ms the engine alone takes to read and durably rewrite as many
    /// scattered rows as a median commit changes (see [`floor_sqlite`]).
    floor: Vec<f64>,
}

/// The median; the mean of the middle two for an even count.
fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[mid]),
        _ => Some((v[mid - 1] + v[mid]) / 2.0),
    }
}

/// A store handle that can open a cold handle on the same namespace.
trait SqlStore: Writable + AuditStore + Clone + 'static {
    fn cold(&self) -> Self;
}
impl SqlStore for SqliteStore {
    fn cold(&self) -> Self {
        self.clone().with_recent_nodes(0)
    }
}
impl SqlStore for PostgresStore {
    fn cold(&self) -> Self {
        self.clone().with_recent_nodes(0)
    }
}

/// One SQL store's tree (the warm handle) and what was measured on it.
struct Sql<S> {
    tree: CompactedTree<S>,
    wal: Option<Wal>,
    s: Samples,
}

impl<S: SqlStore> Sql<S> {
    fn new(store: S, wal: Option<Wal>) -> Self {
        Sql {
            tree: CompactedTree::new(store),
            wal,
            s: Samples::default(),
        }
    }

    async fn build(&mut self, batch: &Batch) -> Res<ComputedNode> {
        let done = insert(&self.tree, batch, None).await?;
        self.s.build_secs += done.secs;
        Ok(done.root)
    }

    fn record(&mut self, done: &Insert) {
        self.s.rows.push(done.stats.nodes_written as f64);
        self.s.wal.extend(done.wal.map(|b| b as f64));
    }

    async fn warm(&mut self, batch: &Batch) -> Res<ComputedNode> {
        let done = insert(&self.tree, batch, self.wal.as_ref()).await?;
        self.s.warm.push(done.secs * 1e3);
        self.record(&done);
        Ok(done.root)
    }

    async fn cold(&mut self, batch: &Batch) -> Res<ComputedNode> {
        let cold = CompactedTree::new(self.tree.store().cold());
        let done = insert(&cold, batch, self.wal.as_ref()).await?;
        self.s.cold.push(done.secs * 1e3);
        self.s.cold_trips.push(done.stats.round_trips as f64);
        self.record(&done);
        Ok(done.root)
    }

    async fn proofs(&mut self, keys: &[Key], expected: &[Proof]) -> Res<()> {
        let cold = CompactedTree::new(self.tree.store().cold());
        let start = Instant::now();
        let proofs = cold.merkle_proofs(keys).await?;
        self.s.proofs.push(start.elapsed().as_secs_f64() * 1e3);
        self.s
            .proof_trips
            .push(cold.store().stats().round_trips as f64);
        if proofs != expected {
            return Err("cold SQL proofs differ from the memory store's".into());
        }
        Ok(())
    }
}

/// What one size measured, for the tables.
struct Outcome {
    n: usize,
    mem: Samples,
    sqlite: Samples,
    sqlite_file: u64,
    pg: Option<Samples>,
}

fn check_roots(what: &str, mem: ComputedNode, others: &[Option<ComputedNode>]) -> Res<()> {
    match others.iter().flatten().find(|r| **r != mem) {
        Some(r) => Err(format!("{what}: roots differ: memory {mem:?}, SQL {r:?}").into()),
        None => Ok(()),
    }
}

async fn run_size(cfg: &Config, n: usize, pg: Option<&PostgresStore>) -> Res<Outcome> {
    let pid = std::process::id();
    let ns = format!("scale-{pid}-{n}");
    let db = std::env::temp_dir().join(format!("ms-smt-scale-{pid}-{n}.db"));
    remove_db(&db);
    let sqlite_db = SqliteStore::open(&db).await?;
    let (journal,): (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(sqlite_db.pool())
        .await?;
    let (sync,): (i64,) = sqlx::query_as("PRAGMA synchronous")
        .fetch_one(sqlite_db.pool())
        .await?;
    if journal != "wal" || sync != 2 {
        return Err(
            format!("SQLite opened with journal_mode={journal}, synchronous={sync}").into(),
        );
    }
    eprintln!(
        "[N={n}] SQLite {} (journal_mode=wal, synchronous=FULL)",
        db.display()
    );
    let mut sqlite_store = sqlite_db.open_namespace(&ns);
    let mut pg_store = pg.map(|p| p.open_namespace(&ns));
    if let Some(h) = cfg.height {
        sqlite_store = sqlite_store.with_stratum_height(h);
        pg_store = pg_store.map(|p| p.with_stratum_height(h));
    }
    let mem = CompactedTree::new(MemoryStore::new());
    let mut mem_s = Samples::default();
    let mut sqlite = Sql::new(sqlite_store, Some(Wal::open(&db).await?));
    let mut pg = pg_store.map(|p| Sql::new(p, None));
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut keys: Vec<Key> = Vec::with_capacity(n + 2 * ROUND_KEYS * cfg.rounds);

    // 1. Build: the same batches into every store in turn.
    let started = Instant::now();
    while keys.len() < n {
        let batch = random_batch(&mut rng, BUILD_BATCH.min(n - keys.len()));
        let done = insert(&mem, &batch, None).await?;
        mem_s.build_secs += done.secs;
        let lite = sqlite.build(&batch).await?;
        let pg_root = match &mut pg {
            Some(pg) => Some(pg.build(&batch).await?),
            None => None,
        };
        check_roots("build", done.root, &[Some(lite), pg_root])?;
        keys.extend(batch.iter().map(|(k, _)| *k));
        eprintln!(
            "[N={n}] build {}/{n} rows: memory {:.1} s, SQLite {:.1} s{} (elapsed {:.0} s)",
            keys.len(),
            mem_s.build_secs,
            sqlite.s.build_secs,
            pg.as_ref()
                .map(|p| format!(", Postgres {:.1} s", p.s.build_secs))
                .unwrap_or_default(),
            started.elapsed().as_secs_f64()
        );
    }
    let wal = sqlite.wal.as_ref().expect("SQLite has a WAL probe");
    wal.truncate().await?;
    let sqlite_file = file_size(&db);

    // 2. and 3. Rounds: warm and cold inserts of new keys, cold proofs.
    for round in 1..=cfg.rounds {
        let warm_batch = random_batch(&mut rng, ROUND_KEYS);
        let cold_batch = random_batch(&mut rng, ROUND_KEYS);
        for (batch, cold) in [(&warm_batch, false), (&cold_batch, true)] {
            let done = insert(&mem, batch, None).await?;
            mem_s.warm.push(done.secs * 1e3);
            let lite = match cold {
                false => sqlite.warm(batch).await?,
                true => sqlite.cold(batch).await?,
            };
            let pg_root = match (&mut pg, cold) {
                (Some(pg), false) => Some(pg.warm(batch).await?),
                (Some(pg), true) => Some(pg.cold(batch).await?),
                (None, _) => None,
            };
            check_roots(&format!("round {round}"), done.root, &[Some(lite), pg_root])?;
            keys.extend(batch.iter().map(|(k, _)| *k));
        }

        let picked: Vec<Key> = rand::seq::index::sample(&mut rng, keys.len(), ROUND_KEYS)
            .into_iter()
            .map(|i| keys[i])
            .collect();
        let start = Instant::now();
        let expected = mem.merkle_proofs(&picked).await?;
        mem_s.proofs.push(start.elapsed().as_secs_f64() * 1e3);
        sqlite.proofs(&picked, &expected).await?;
        if let Some(pg) = &mut pg {
            pg.proofs(&picked, &expected).await?;
        }
        eprintln!(
            "[N={n}] round {round}/{}: memory {:.1} ms, SQLite warm {:.1} ms, cold {:.1} ms{}",
            cfg.rounds,
            mem_s.warm[mem_s.warm.len() - 2],
            sqlite.s.warm[round - 1],
            sqlite.s.cold[round - 1],
            pg.as_ref()
                .map(|p| format!(
                    ", Postgres warm {:.1} ms, cold {:.1} ms",
                    p.s.warm[round - 1],
                    p.s.cold[round - 1]
                ))
                .unwrap_or_default()
        );
    }

    // 4. The engine floor: the same number of scattered rows read and
    // rewritten durably by the engine alone. This overwrites row bodies, so
    // it comes last.
    let rows = median(&sqlite.s.rows).unwrap_or(0.0) as usize;
    for _ in 0..cfg.rounds {
        sqlite.wal.as_ref().expect("WAL probe").restart().await?;
        let secs = floor_sqlite(sqlite.tree.store(), rows).await?;
        sqlite.s.floor.push(secs * 1e3);
    }
    if let Some(pg) = &mut pg {
        let rows = median(&pg.s.rows).unwrap_or(0.0) as usize;
        for _ in 0..cfg.rounds {
            let secs = floor_postgres(pg.tree.store(), rows).await?;
            pg.s.floor.push(secs * 1e3);
        }
    }

    // Clean up: the SQLite file goes, the Postgres namespace is emptied.
    if let Some(pg) = &pg {
        pg.tree.delete_all().await?;
    }
    sqlite.wal.take().expect("probe").pool.close().await;
    sqlite.tree.store().pool().close().await;
    drop(sqlite_db);
    remove_db(&db);

    Ok(Outcome {
        n,
        mem: mem_s,
        sqlite: sqlite.s,
        sqlite_file,
        pg: pg.map(|p| p.s),
    })
}

/// What the SQLite engine alone needs for what a commit of `rows` changed
/// rows does to the table: in one `BEGIN IMMEDIATE` transaction, read
/// `rows` rows picked at random (one statement), rewrite each body with as
/// many random bytes (one statement), COMMIT with the store's durability.
/// No merge, no hashing, no encoding. Returns seconds.
async fn floor_sqlite(store: &SqliteStore, rows: usize) -> Res<f64> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT s.id FROM ms_smt_strata s JOIN ms_smt_namespaces n ON n.id = s.ns \
         WHERE n.name = ? ORDER BY random() LIMIT ?",
    )
    .bind(store.name())
    .bind(rows as i64)
    .fetch_all(store.pool())
    .await?;
    let ids = serde_json::to_string(&ids)?;
    let mut conn = store.pool().acquire().await?;
    let start = Instant::now();
    let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE").await?;
    let bodies: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT body FROM ms_smt_strata WHERE id IN (SELECT value FROM json_each(?))",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE ms_smt_strata SET body = randomblob(length(body)) \
         WHERE id IN (SELECT value FROM json_each(?))",
    )
    .bind(&ids)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    floor_secs(start, bodies.len(), rows)
}

/// The seconds a floor measurement took since `start`, once it read back
/// all `rows` rows (`read`).
fn floor_secs(start: Instant, read: usize, rows: usize) -> Res<f64> {
    let secs = start.elapsed().as_secs_f64();
    if read != rows {
        return Err(format!("floor: read {read} rows of {rows}").into());
    }
    Ok(secs)
}

/// [`floor_sqlite`] on Postgres: read `rows` random rows by position and
/// rewrite their bodies, one statement each, in one transaction.
async fn floor_postgres(store: &PostgresStore, rows: usize) -> Res<f64> {
    let picked: Vec<(Vec<u8>, i32)> = sqlx::query_as(
        "SELECT s.path, s.depth FROM ms_smt_strata s JOIN ms_smt_namespaces n ON n.id = s.ns \
         WHERE n.name = $1 ORDER BY random() LIMIT $2",
    )
    .bind(store.name())
    .bind(rows as i64)
    .fetch_all(store.pool())
    .await?;
    let ns: i64 = sqlx::query_scalar("SELECT id FROM ms_smt_namespaces WHERE name = $1")
        .bind(store.name())
        .fetch_one(store.pool())
        .await?;
    let (paths, depths): (Vec<Vec<u8>>, Vec<i32>) = picked.into_iter().unzip();
    let start = Instant::now();
    let mut tx = store.pool().begin().await?;
    let bodies: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT m.body FROM UNNEST($2::bytea[], $3::int4[]) AS k(path, depth) \
         CROSS JOIN LATERAL (SELECT body FROM ms_smt_strata WHERE ns = $1 \
             AND path = k.path AND depth = k.depth OFFSET 0) AS m",
    )
    .bind(ns)
    .bind(&paths)
    .bind(&depths)
    .fetch_all(&mut *tx)
    .await?;
    // Rows located by fenced primary-key probes, as the store's own
    // statements do (a plain join may scan the table).
    sqlx::query(
        "UPDATE ms_smt_strata SET body = set_byte(body, 0, (get_byte(body, 0) + 1) % 256) \
         WHERE ctid = ANY(ARRAY( \
             SELECT m.ctid FROM UNNEST($2::bytea[], $3::int4[]) AS k(path, depth) \
             CROSS JOIN LATERAL (SELECT ctid FROM ms_smt_strata WHERE ns = $1 \
                 AND path = k.path AND depth = k.depth OFFSET 0) AS m))",
    )
    .bind(ns)
    .bind(&paths)
    .bind(&depths)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    floor_secs(start, bodies.len(), rows)
}

fn ms(v: &[f64]) -> String {
    median(v).map_or("—".into(), |m| format!("{m:.1} ms"))
}

fn ratio(v: &[f64], mem: &[f64]) -> String {
    match (median(v), median(mem)) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}

fn count(v: &[f64]) -> String {
    match median(v) {
        Some(m) if m.fract() == 0.0 => thousands(m as u64),
        Some(m) => format!("{m:.1}"),
        None => "—".into(),
    }
}

fn mb(bytes: f64) -> String {
    format!("{:.2} MB", bytes / 1e6)
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print_size(o: &Outcome, rounds: usize) {
    let none = Samples::default();
    let pg = o.pg.as_ref().unwrap_or(&none);
    let (m, s) = (&o.mem, &o.sqlite);
    let build = |x: &Samples| format!("{:.2} s", x.build_secs);
    let build_ratio = |x: &Samples| format!("{:.2}", x.build_secs / m.build_secs);
    let pg_build = o.pg.as_ref().map_or("—".into(), build);
    let pg_build_ratio = o.pg.as_ref().map_or("—".into(), build_ratio);
    println!(
        "\n### N = {} ({rounds} rounds, medians)\n",
        thousands(o.n as u64)
    );
    println!("| | memory | SQLite | ÷ mem | Postgres | ÷ mem |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| build {} leaves (batches of {}) | {} | {} | {} | {pg_build} | {pg_build_ratio} |",
        thousands(o.n as u64),
        thousands(BUILD_BATCH as u64),
        build(m),
        build(s),
        build_ratio(s)
    );
    // A timed row: memory (blank for `None`), then each SQL store and its
    // ratio to `base` (memory's samples).
    let timed = |what: &str, mem: Option<&[f64]>, base: &[f64], pick: fn(&Samples) -> &[f64]| {
        println!(
            "| {what} |{}| {} | {} | {} | {} |",
            mem.map_or(" ".into(), |v| format!(" {} ", ms(v))),
            ms(pick(s)),
            ratio(pick(s), base),
            ms(pick(pg)),
            ratio(pick(pg), base)
        );
    };
    // A counted row: SQL stores only.
    let counted = |what: &str, pick: fn(&Samples) -> &[f64]| {
        println!(
            "| {what} | — | {} | | {} | |",
            count(pick(s)),
            count(pick(pg))
        );
    };
    timed(
        "insert_many 1,000 new keys, warm handle",
        Some(&m.warm),
        &m.warm,
        |x| &x.warm,
    );
    timed("… cold handle", None, &m.warm, |x| &x.cold);
    counted("round trips, cold insert_many (reads and commit)", |x| {
        &x.cold_trips
    });
    counted("rows changed per commit", |x| &x.rows);
    println!(
        "| WAL bytes per commit | — | {} | | — | |",
        median(&s.wal).map_or("—".into(), mb)
    );
    timed(
        "merkle_proofs of 1,000 keys, cold handle",
        Some(&m.proofs),
        &m.proofs,
        |x| &x.proofs,
    );
    counted("round trips, cold merkle_proofs", |x| &x.proof_trips);
    println!(
        "| SQLite file after the build (checkpointed) | | {} | | | |",
        mb(o.sqlite_file as f64)
    );
    // The best a store could do: the hashing memory does, plus the
    // engine's own cost of rewriting that many scattered rows durably.
    let floor_ratio = |x: &Samples| match (median(&x.floor), median(&m.warm)) {
        (Some(f), Some(mem)) if mem > 0.0 => format!("{:.2}", (f + mem) / mem),
        _ => "—".into(),
    };
    println!(
        "| engine floor: read + rewrite that many random rows, COMMIT | — | {} | {} | {} | {} |",
        ms(&s.floor),
        floor_ratio(s),
        ms(&pg.floor),
        floor_ratio(pg)
    );
}

fn print_combined(outcomes: &[Outcome]) {
    println!("\n### All sizes (medians)\n");
    println!(
        "| N | memory | SQLite warm (÷mem) | SQLite cold (÷mem) | PG warm (÷mem) | PG cold (÷mem) \
         | cold read round trips | rows changed | SQLite WAL/commit \
         | proofs 1k cold SQLite / PG | build mem / SQLite / PG \
         | floor SQLite / PG ((floor + mem) ÷ mem) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let none = Samples::default();
    for o in outcomes {
        let (m, s) = (&o.mem, &o.sqlite);
        let pg = o.pg.as_ref().unwrap_or(&none);
        let with_ratio = |v: &[f64]| match median(v) {
            Some(_) => format!("{} ({})", ms(v), ratio(v, &m.warm)),
            None => "—".into(),
        };
        let floor = |x: &Samples| match (median(&x.floor), median(&m.warm)) {
            (Some(f), Some(mem)) if mem > 0.0 => format!("{f:.0} ms ({:.2})", (f + mem) / mem),
            _ => "—".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} | {} / {} | {:.2} / {:.2} / {} s | {} / {} |",
            thousands(o.n as u64),
            ms(&m.warm),
            with_ratio(&s.warm),
            with_ratio(&s.cold),
            with_ratio(&pg.warm),
            with_ratio(&pg.cold),
            count(&s.cold_trips),
            count(&pg.cold_trips),
            count(&s.rows),
            count(&pg.rows),
            median(&s.wal).map_or("—".into(), mb),
            ms(&s.proofs),
            ms(&pg.proofs),
            m.build_secs,
            s.build_secs,
            o.pg.as_ref()
                .map_or("—".into(), |p| format!("{:.2}", p.build_secs)),
            floor(s),
            floor(pg)
        );
    }
    println!(
        "\nmemory: insert_many of 1,000 new keys (median of the warm and cold batches). \
         Ratios divide by that median. \"cold read round trips\" is the whole cold insert_many \
         (reads and commit), SQLite / PG; \"rows changed\" is per commit, SQLite / PG; \
         WAL/commit is the -wal file after one commit, starting from an empty WAL (MB = 10^6 bytes). \
         \"floor\" is the engine alone reading and durably rewriting as many random rows as a \
         median commit changes (no merge, no hashing); (floor + mem) ÷ mem is the best ratio any \
         store code could reach on this engine and layout, since it must also hash as memory does."
    );
}

#[tokio::main]
async fn main() -> Res<()> {
    let cfg = config()?;
    print_machine(&cfg);
    let pg = match &cfg.pg_url {
        Some(url) => Some(durable::durable_postgres(url).await?),
        None => {
            println!("- Postgres: not measured (MSSMT_BENCH_PG_URL is not set)");
            None
        }
    };
    let mut outcomes = Vec::new();
    for &n in &cfg.sizes {
        let outcome = run_size(&cfg, n, pg.as_ref()).await?;
        print_size(&outcome, cfg.rounds);
        outcomes.push(outcome);
    }
    print_combined(&outcomes);
    Ok(())
}
