//! Scale to 10^7 leaves and beyond: one tree per size on SQLite and
//! Postgres, and how each cost grows with it (BENCHMARKS.md, "Trees of
//! 10^7 leaves"). `examples/scale.rs` is the 10^4-10^6 comparison with the
//! memory store and the engine floor; this one leaves the memory store out
//! (a 10^7-leaf memory tree is most of this machine's memory) and measures
//! what a server at that size lives with.
//!
//! For each size N and engine, in a database of its own:
//! 1. **build**: N random leaves by `insert_many` in batches of `--batch`
//!    (time, and the process's peak RSS over the build). `--order random`
//!    (the default) draws every batch from the whole key space;
//!    `--order keys` hands the same kind of uniformly random keys over in
//!    key order, batch after batch, as an import or a sync from a sorted
//!    source does (each batch lands in one part of the tree);
//! 2. **disk**: bytes per leaf (SQLite: the file after a WAL checkpoint;
//!    Postgres: the store's tables, indexes and TOAST, then again after
//!    `VACUUM`);
//! 3. **insert_many of 1,000** new keys, `--rounds` times, through the
//!    handle that built the tree (warm) and through one that remembers no
//!    node (cold): medians and round trips;
//! 4. **the writer at 1,000 × 1**: 1,000 tasks each submitting one new leaf
//!    at a time for `--writer-secs` through one `Writer`: leaves/s, p99;
//! 5. **cold proofs**: a handle that remembers nothing asks for one key's
//!    proof (20 keys, a new handle each): latency and round trips; and
//!    `merkle_proofs` of 1,000 keys;
//! 6. **audit**: `Tree::audit` of the whole tree (time, peak RSS);
//! 7. at the largest size, **the listing**: `--namespaces` namespaces in all
//!    (the big tree and small ones of 10 leaves, written through the
//!    forest), listed by `SqlStore::namespaces` and by `ms-smt namespaces`
//!    (with `--cli`).
//!
//! Every figure goes to stdout as markdown (one table for all sizes, with
//! each cost's ratio to the previous size) and to `--out`/scale_big.json.
//!
//! ```text
//! cargo run --release --example scale_big -- --sizes 100000,1000000,10000000 \
//!     --engines sqlite,postgres --dir /scratch --pg-url postgres://... --cli target/release/ms-smt
//! ```
//!
//! Postgres must run with fsync on (refused otherwise); each size gets a
//! database of its own on that server (`scale_big_<N>`), dropped at the
//! end unless `--keep yes`. SQLite files go to `--dir`, removed at the end
//! unless `--keep yes`.

use ms_smt_test_support::durable;

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ms_smt::store::{AuditStore, StoreStats, TreeStore, Writable};

use ms_smt::{CompactedTree, Forest, Key, Leaf, WriterConfig};
use ms_smt_sql::{PostgresStore, SqlStoreError, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

const SEED: u64 = 0x6d73_736d_7400_0107;
const NS: &str = "big";

#[derive(Debug, Clone)]
struct Args {
    sizes: Vec<u64>,
    engines: Vec<String>,
    dir: PathBuf,
    pg_url: Option<String>,
    batch: usize,
    rounds: usize,
    writer_secs: f64,
    namespaces: u64,
    cli: Option<PathBuf>,
    out: PathBuf,
    keep: bool,
    /// `--order keys`: the build's batches in key order.
    key_order: bool,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        sizes: vec![100_000, 1_000_000],
        engines: vec!["sqlite".into(), "postgres".into()],
        dir: std::env::temp_dir(),
        pg_url: durable::bench_pg_url(),
        batch: 100_000,
        rounds: 5,
        writer_secs: 10.0,
        namespaces: 10_000,
        cli: None,
        out: PathBuf::from("scale-big-out"),
        keep: false,
        key_order: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let list = |v: &str| {
            v.split(',')
                .map(|s| s.trim().to_owned())
                .collect::<Vec<_>>()
        };
        match flag.as_str() {
            "--sizes" => {
                a.sizes = list(&value)
                    .iter()
                    .map(|s| s.replace('_', "").parse::<u64>())
                    .collect::<Result<_, _>>()?
            }
            "--engines" => a.engines = list(&value),
            "--dir" => a.dir = value.into(),
            "--pg-url" => a.pg_url = Some(value),
            "--batch" => a.batch = value.replace('_', "").parse()?,
            "--rounds" => a.rounds = value.parse()?,
            "--writer-secs" => a.writer_secs = value.parse()?,
            "--namespaces" => a.namespaces = value.replace('_', "").parse()?,
            "--cli" => a.cli = Some(value.into()),
            "--out" => a.out = value.into(),
            "--keep" => a.keep = value == "yes",
            "--order" => {
                a.key_order = match value.as_str() {
                    "keys" => true,
                    "random" => false,
                    other => return Err(format!("--order {other}: random or keys").into()),
                }
            }
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    if a.sizes.is_empty() || a.batch == 0 || a.rounds == 0 {
        return Err("sizes, batch and rounds must not be empty or zero".into());
    }
    Ok(a)
}

fn random_leaves(rng: &mut StdRng, n: usize) -> Vec<(Key, Leaf)> {
    (0..n)
        .map(|_| {
            let mut key = [0u8; 32];
            rng.fill(&mut key);
            let len = rng.gen_range(1..=64);
            let mut value = vec![0u8; len];
            rng.fill(&mut value[..]);
            (Key(key), Leaf::new(value, rng.gen_range(1..1u64 << 32)))
        })
        .collect()
}

/// Batch `index` of `batches` of a key-ordered build: `count` random leaves
/// whose keys fall in that batch's share of the key space (by their first
/// eight bytes), sorted. Over all batches the keys are as uniform as
/// [`random_leaves`]'s; only the order they arrive in differs.
fn ordered_leaves(rng: &mut StdRng, index: u64, batches: u64, count: usize) -> Vec<(Key, Leaf)> {
    let span = 1u128 << 64;
    let lo = span * u128::from(index) / u128::from(batches);
    let hi = span * u128::from(index + 1) / u128::from(batches);
    let mut leaves = random_leaves(rng, count);
    for (key, _) in &mut leaves {
        let top = rng.gen_range(lo..hi) as u64;
        key.0[..8].copy_from_slice(&top.to_be_bytes());
    }
    leaves.sort_by_key(|(key, _)| key.0);
    leaves
}

/// The process's resident and peak resident memory (MB); `reset_peak`
/// starts a new peak (Linux: `/proc/self/clear_refs`).
fn memory_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// What one engine measured at one size.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct Measured {
    engine: String,
    n: u64,
    /// "random" or "keys" (`--order`).
    build_order: String,
    build_secs: f64,
    build_peak_mb: f64,
    rss_after_build_mb: f64,
    bytes: i64,
    bytes_after_vacuum: Option<i64>,
    /// Leaves when the size was measured again (after the rounds and the
    /// writer added theirs).
    leaves_after: u64,
    strata_rows: i64,
    insert_warm_ms: f64,
    insert_cold_ms: f64,
    insert_cold_round_trips: f64,
    /// Postgres: shared-buffer hits and misses (blocks read from the OS)
    /// per `insert_many` of 1,000, over every round, warm and cold, from
    /// `pg_stat_database`.
    insert_blocks_hit: Option<f64>,
    insert_blocks_read: Option<f64>,
    writer_leaves_per_s: f64,
    writer_p99_ms: f64,
    proof_cold_ms: f64,
    proof_cold_round_trips: f64,
    proofs_1000_cold_ms: f64,
    audit_secs: f64,
    audit_peak_mb: f64,
    audit_clean: bool,
    listing_namespaces: Option<u64>,
    listing_ms: Option<f64>,
    cli_listing_ms: Option<f64>,
    listed_leaves: Option<u64>,
}

/// A store of either engine, with what the measurement needs of it.
trait Big:
    TreeStore<Error = SqlStoreError> + Writable + AuditStore + Clone + Send + Sync + 'static
{
    fn named(&self, name: &str) -> Self;
    fn cold(&self) -> Self;
}

impl Big for SqliteStore {
    fn named(&self, name: &str) -> Self {
        self.open_namespace(name)
    }
    fn cold(&self) -> Self {
        self.clone().with_recent_nodes(0)
    }
}

impl Big for PostgresStore {
    fn named(&self, name: &str) -> Self {
        self.open_namespace(name)
    }
    fn cold(&self) -> Self {
        self.clone().with_recent_nodes(0)
    }
}

/// Steps 1 and 3 to 6 on `store`'s namespace [`NS`]; `size_of` measures
/// the database (after the build); `pg_url`, for Postgres, is where the
/// buffer statistics of step 3 are read.
async fn measure<S: Big>(
    args: &Args,
    engine: &str,
    n: u64,
    store: S,
    size_of: impl AsyncFn(bool) -> Res<(i64, i64)>,
    pg_url: Option<&str>,
) -> Res<(Measured, Vec<Key>)> {
    let mut m = Measured {
        engine: engine.to_owned(),
        n,
        build_order: if args.key_order { "keys" } else { "random" }.to_owned(),
        ..Default::default()
    };
    let tree = CompactedTree::new(store.named(NS));
    let mut rng = StdRng::seed_from_u64(SEED ^ n);
    let mut sample_keys: Vec<Key> = Vec::new();
    reset_peak();
    let started = Instant::now();
    let mut done = 0u64;
    let batches = n.div_ceil(args.batch as u64);
    // Up to 100 sample keys a batch, spread over it (over every part of the
    // key space when the batches come in key order).
    let per_batch = (1_000 / batches.max(1) as usize).clamp(1, 100);
    while done < n {
        let count = args.batch.min((n - done) as usize);
        let batch = if args.key_order {
            ordered_leaves(&mut rng, done / args.batch as u64, batches, count)
        } else {
            random_leaves(&mut rng, count)
        };
        if sample_keys.len() < 1_000 {
            let step = (batch.len() / per_batch).max(1);
            sample_keys.extend(batch.iter().step_by(step).take(per_batch).map(|(k, _)| *k));
        }
        done += batch.len() as u64;
        tree.insert_many(batch).await?;
        eprintln!(
            "scale_big: [{engine} N={n}] build {done}/{n} ({:.0} s, RSS {:.0} MB)",
            started.elapsed().as_secs_f64(),
            memory_mb().0
        );
    }
    m.build_secs = started.elapsed().as_secs_f64();
    (m.rss_after_build_mb, m.build_peak_mb) = memory_mb();
    let (bytes, rows) = size_of(false).await?;
    m.bytes = bytes;
    m.strata_rows = rows;

    // insert_many of 1,000 new keys, warm and cold.
    let (mut warm, mut cold, mut trips) = (Vec::new(), Vec::new(), Vec::new());
    let blocks_before = match pg_url {
        Some(url) => Some(pg_blocks(url).await?),
        None => None,
    };
    for _ in 0..args.rounds {
        let batch = random_leaves(&mut rng, 1_000);
        let t = Instant::now();
        tree.insert_many(batch).await?;
        warm.push(t.elapsed().as_secs_f64() * 1e3);
        let fresh = CompactedTree::new(tree.store().cold());
        let batch = random_leaves(&mut rng, 1_000);
        let before = fresh.store().stats();
        let t = Instant::now();
        fresh.insert_many(batch).await?;
        cold.push(t.elapsed().as_secs_f64() * 1e3);
        trips.push(fresh.store().stats().since(&before).round_trips as f64);
    }
    if let (Some(url), Some((hit0, read0))) = (pg_url, blocks_before) {
        // A backend reports its counters when idle, within 10 s.
        tokio::time::sleep(Duration::from_secs(11)).await;
        let (hit1, read1) = pg_blocks(url).await?;
        let writes = (2 * args.rounds).max(1) as f64;
        m.insert_blocks_hit = Some((hit1 - hit0) as f64 / writes);
        m.insert_blocks_read = Some((read1 - read0) as f64 / writes);
    }
    m.insert_warm_ms = median(&mut warm);
    m.insert_cold_ms = median(&mut cold);
    m.insert_cold_round_trips = median(&mut trips);
    eprintln!(
        "scale_big: [{engine} N={n}] insert_many 1,000: warm {:.1} ms, cold {:.1} ms",
        m.insert_warm_ms, m.insert_cold_ms
    );

    // The writer at 1,000 × 1.
    let writer = tree.writer(WriterConfig::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..1_000u64 {
        let (writer, stop) = (writer.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(SEED ^ n ^ (t << 20));
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let leaf = random_leaves(&mut rng, 1);
                let s = Instant::now();
                if writer.submit(leaf).await.is_ok() {
                    lat.push(s.elapsed().as_secs_f64() * 1e3);
                }
            }
            lat
        }));
    }
    let before = writer.stats();
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.writer_secs)).await;
    let leaves = writer.stats().leaves - before.leaves;
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    for task in tasks {
        lat.extend(task.await?);
    }
    writer.close().await;
    m.writer_leaves_per_s = leaves as f64 / secs;
    lat.sort_by(f64::total_cmp);
    m.writer_p99_ms = lat
        .get((lat.len() as f64 * 0.99) as usize)
        .copied()
        .unwrap_or(f64::NAN);
    eprintln!(
        "scale_big: [{engine} N={n}] writer 1,000 x 1: {:.0} leaves/s, p99 {:.0} ms",
        m.writer_leaves_per_s, m.writer_p99_ms
    );

    // Cold proofs: one key, a new handle each; then 1,000 keys.
    let (mut ms, mut trips) = (Vec::new(), Vec::new());
    for key in sample_keys.iter().take(20) {
        let fresh = CompactedTree::new(tree.store().cold());
        let before: StoreStats = fresh.store().stats();
        let t = Instant::now();
        let proof = fresh.merkle_proof(key).await?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        trips.push(fresh.store().stats().since(&before).round_trips as f64);
        let leaf = fresh.get(key).await?;
        if !proof.verify(key, &leaf, &fresh.root().await?) {
            return Err("a cold proof does not verify".into());
        }
    }
    m.proof_cold_ms = median(&mut ms);
    m.proof_cold_round_trips = median(&mut trips);
    let fresh = CompactedTree::new(tree.store().cold());
    let keys: Vec<Key> = sample_keys.iter().take(1_000).copied().collect();
    let t = Instant::now();
    fresh.merkle_proofs(&keys).await?;
    m.proofs_1000_cold_ms = t.elapsed().as_secs_f64() * 1e3;

    // The audit.
    reset_peak();
    let t = Instant::now();
    let report = tree.audit().await?;
    m.audit_secs = t.elapsed().as_secs_f64();
    m.audit_peak_mb = memory_mb().1;
    m.audit_clean = report.is_clean();
    eprintln!(
        "scale_big: [{engine} N={n}] audit {:.1} s ({} leaves, clean: {})",
        m.audit_secs, report.leaves, m.audit_clean
    );
    if !m.audit_clean {
        return Err(format!("audit: {:?}", report.problems).into());
    }
    // The bytes again after a VACUUM (Postgres; SQLite measures the same),
    // over the leaves the tree holds now.
    m.bytes_after_vacuum = Some(size_of(true).await?.0);
    m.leaves_after = n + 2 * 1_000 * args.rounds as u64 + leaves;
    Ok((m, sample_keys))
}

/// Step 7: small namespaces beside the big tree until there are
/// `args.namespaces`, then the listing, timed (median of 3).
async fn listing<S>(args: &Args, store: &S, spec: &str, m: &mut Measured) -> Res<()>
where
    S: Big + ms_smt::store::ForestStore<Tree = S, Error = SqlStoreError>,
{
    let forest = Forest::<S, ms_smt::Compacted>::new(store.clone());
    let mut rng = StdRng::seed_from_u64(SEED ^ 0x11);
    let small = args.namespaces.saturating_sub(1);
    let mut batch = Vec::new();
    for i in 0..small {
        let name = format!("small-{i:05}");
        for (k, l) in random_leaves(&mut rng, 10) {
            batch.push((name.clone(), k, l));
        }
        if batch.len() >= 50_000 {
            forest.insert_many(std::mem::take(&mut batch)).await?;
        }
    }
    if !batch.is_empty() {
        forest.insert_many(batch).await?;
    }
    let any: &dyn std::any::Any = store;
    let mut times = Vec::new();
    let mut listed = 0u64;
    let mut leaves = 0u64;
    for _ in 0..3 {
        let t = Instant::now();
        let listing = if let Some(s) = any.downcast_ref::<SqliteStore>() {
            s.namespaces().await?
        } else if let Some(s) = any.downcast_ref::<PostgresStore>() {
            s.namespaces().await?
        } else {
            return Err("an SQL store".into());
        };
        times.push(t.elapsed().as_secs_f64() * 1e3);
        listed = listing.len() as u64;
        leaves = listing
            .iter()
            .filter_map(|l| l.summary.as_ref().ok().and_then(|s| s.leaves.exact()))
            .sum();
        if listing.iter().any(|l| l.summary.is_err()) {
            return Err("a damaged namespace in the listing".into());
        }
    }
    m.listing_namespaces = Some(listed);
    m.listing_ms = Some(median(&mut times));
    m.listed_leaves = Some(leaves);
    if let Some(cli) = &args.cli {
        let mut times = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            let out = std::process::Command::new(cli)
                .args(["--db", spec, "--json", "namespaces"])
                .output()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            if !out.status.success() {
                return Err(format!(
                    "ms-smt namespaces: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
                .into());
            }
        }
        m.cli_listing_ms = Some(median(&mut times));
    }
    eprintln!(
        "scale_big: listing of {listed} namespaces ({leaves} leaves): {:.0} ms, CLI {:?} ms",
        m.listing_ms.unwrap_or(f64::NAN),
        m.cli_listing_ms
    );
    Ok(())
}

fn remove_sqlite(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

async fn sqlite_size(path: &Path) -> Res<(i64, i64)> {
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .busy_timeout(Duration::from_secs(60)),
        )
        .await?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&pool)
        .await?;
    let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(&pool)
        .await?;
    let page: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&pool)
        .await?;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ms_smt_strata")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok((pages * page, rows))
}

async fn pg_size(url: &str, vacuum: bool) -> Res<(i64, i64)> {
    let pool = sqlx::PgPool::connect(url).await?;
    if vacuum {
        sqlx::raw_sql("VACUUM (ANALYZE)").execute(&pool).await?;
    }
    let bytes: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(pg_total_relation_size(relid)), 0)::int8 FROM pg_stat_user_tables \
         WHERE relname LIKE 'ms\\_smt\\_%'",
    )
    .fetch_one(&pool)
    .await?;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ms_smt_strata")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok((bytes, rows))
}

/// This database's shared-buffer hits and reads so far.
async fn pg_blocks(url: &str) -> Res<(i64, i64)> {
    let pool = sqlx::PgPool::connect(url).await?;
    let (hit, read): (i64, i64) = sqlx::query_as(
        "SELECT blks_hit, blks_read FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    Ok((hit, read))
}

async fn run_size(args: &Args, engine: &str, n: u64, largest: bool) -> Res<Measured> {
    match engine {
        "sqlite" => {
            std::fs::create_dir_all(&args.dir)?;
            let path = args.dir.join(format!("scale-big-{n}.db"));
            remove_sqlite(&path);
            let store = SqliteStore::open(&path).await?;
            let p = path.clone();
            let (mut m, _) = measure(
                args,
                engine,
                n,
                store.clone(),
                async move |_| sqlite_size(&p).await,
                None,
            )
            .await?;
            if largest {
                let spec = path.display().to_string();
                listing(args, &store, &spec, &mut m).await?;
            }
            store.pool().close().await;
            if !args.keep {
                remove_sqlite(&path);
            }
            Ok(m)
        }
        "postgres" => {
            let url = args.pg_url.clone().ok_or("--pg-url for postgres")?;
            let admin = durable::durable_postgres(&url)
                .await
                .map_err(|e| e.to_string())?;
            let name = format!("scale_big_{n}");
            let admin = admin.pool().clone();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&admin)
            .await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&admin)
                .await?;
            let (base, _) = url.rsplit_once('/').ok_or("a database in the URL")?;
            let db_url = format!("{base}/{name}");
            let store = PostgresStore::connect(&db_url).await?;
            let u = db_url.clone();
            let (mut m, _) = measure(
                args,
                engine,
                n,
                store.clone(),
                async move |vacuum| pg_size(&u, vacuum).await,
                Some(&db_url),
            )
            .await?;
            if largest {
                listing(args, &store, &db_url, &mut m).await?;
            }
            store.pool().close().await;
            if !args.keep {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE {name} WITH (FORCE)"
                )))
                .execute(&admin)
                .await?;
            }
            admin.close().await;
            Ok(m)
        }
        other => Err(format!("engine {other}: sqlite or postgres").into()),
    }
}

fn cell(v: f64, unit: &str) -> String {
    if v.is_nan() {
        "—".into()
    } else if v >= 100.0 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// One markdown table: a row per cost, a column per (engine, size), each
/// with its ratio to the previous size of its engine.
fn table(all: &[Measured]) -> String {
    type Pick = fn(&Measured) -> f64;
    let rows: Vec<(&str, &str, Pick)> = vec![
        ("build (insert_many batches)", " s", |m| m.build_secs),
        ("peak RSS during the build", " MB", |m| m.build_peak_mb),
        ("disk bytes per leaf", " B", |m| m.bytes as f64 / m.n as f64),
        ("… after the rounds and a VACUUM", " B", |m| {
            m.bytes_after_vacuum
                .map_or(f64::NAN, |b| b as f64 / m.leaves_after.max(1) as f64)
        }),
        ("strata rows per leaf", "", |m| {
            m.strata_rows as f64 / m.n as f64
        }),
        ("insert_many 1,000, warm", " ms", |m| m.insert_warm_ms),
        ("insert_many 1,000, cold", " ms", |m| m.insert_cold_ms),
        ("… its round trips", "", |m| m.insert_cold_round_trips),
        ("… Postgres buffer hits per insert_many", "", |m| {
            m.insert_blocks_hit.unwrap_or(f64::NAN)
        }),
        ("… Postgres blocks read (buffer misses)", "", |m| {
            m.insert_blocks_read.unwrap_or(f64::NAN)
        }),
        ("writer 1,000 × 1", " leaves/s", |m| m.writer_leaves_per_s),
        ("… p99", " ms", |m| m.writer_p99_ms),
        ("cold proof, one key", " ms", |m| m.proof_cold_ms),
        ("… its round trips", "", |m| m.proof_cold_round_trips),
        ("cold merkle_proofs, 1,000 keys", " ms", |m| {
            m.proofs_1000_cold_ms
        }),
        ("full audit", " s", |m| m.audit_secs),
        ("peak RSS during the audit", " MB", |m| m.audit_peak_mb),
    ];
    let mut out = String::from("| cost |");
    for m in all {
        let exp = (m.n as f64).log10().round() as u32;
        let size = if 10u64.pow(exp) == m.n {
            format!("10^{exp}")
        } else {
            m.n.to_string()
        };
        out.push_str(&format!(" {} {size} |", m.engine));
    }
    out.push_str("\n|---|");
    for _ in all {
        out.push_str("---|");
    }
    for (what, unit, pick) in rows {
        out.push_str(&format!("\n| {what} |"));
        for (i, m) in all.iter().enumerate() {
            let v = pick(m);
            let prev = all[..i].iter().rev().find(|p| p.engine == m.engine);
            let ratio = prev
                .map(&pick)
                .filter(|p| *p > 0.0 && !v.is_nan())
                .map(|p| format!(" (×{:.2})", v / p))
                .unwrap_or_default();
            out.push_str(&format!(" {}{ratio} |", cell(v, unit)));
        }
    }
    out
}

fn main() -> Res<()> {
    let args = parse_args()?;
    std::fs::create_dir_all(&args.out)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        eprintln!("scale_big: {args:?}");
        let largest = args.sizes.iter().copied().max().unwrap_or(0);
        let mut all = Vec::new();
        for engine in &args.engines {
            for &n in &args.sizes {
                let m = run_size(&args, engine, n, n == largest).await?;
                eprintln!("scale_big: {m:?}");
                all.push(m);
                std::fs::write(
                    args.out.join("scale_big.json"),
                    serde_json::to_string_pretty(&json!({ "args": format!("{args:?}"), "measured": all }))?,
                )?;
            }
        }
        println!("{}", table(&all));
        for m in all.iter().filter(|m| m.listing_ms.is_some()) {
            println!(
                "\n{}: `namespaces` over {} namespaces holding {} leaves: {:.0} ms (library), {} (ms-smt namespaces)",
                m.engine,
                m.listing_namespaces.unwrap_or(0),
                m.listed_leaves.unwrap_or(0),
                m.listing_ms.unwrap_or(f64::NAN),
                m.cli_listing_ms
                    .map_or("not run".to_owned(), |ms| format!("{ms:.0} ms"))
            );
        }
        Ok(())
    })
}
