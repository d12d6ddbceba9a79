//! Load: many concurrent submitters of small writes, through the
//! coalescing [`Writer`](ms_smt::Writer) and through direct `insert_many`,
//! side by side, on memory, SQLite (the crate's durable defaults) and
//! Postgres (fsync on).
//!
//! For each tree size a compacted tree is built once per store; then, for
//! each number of submitters C and leaves per submission, C tasks submit
//! new random leaves in a loop for a fixed time, through each path in turn.
//! Printed per cell: acknowledged leaves/s, p50/p99/max latency, errors by
//! kind, the writer's group sizes and where its time went (planning,
//! commits, waiting for a commit with the next group planned); at the end of each store every
//! acknowledged leaf is read back and the tree is audited.
//!
//! ```text
//! MSSMT_LOAD_N=100000 MSSMT_LOAD_WRITERS=1,10,100,1000 MSSMT_LOAD_LEAVES=1,10 \
//! MSSMT_LOAD_SECS=5 MSSMT_BENCH_PG_URL=postgres://postgres@127.0.0.1:PORT/postgres \
//!     cargo run --release --example load
//! ```
//!
//! * `MSSMT_LOAD_N`: tree sizes, comma-separated (default `100000`).
//! * `MSSMT_LOAD_WRITERS`: submitter counts (default `1,10,100,1000`).
//! * `MSSMT_LOAD_LEAVES`: leaves per submission (default `1,10`).
//! * `MSSMT_LOAD_SECS`: seconds per cell (default 5).
//! * `MSSMT_LOAD_PATHS`: `writer`, `direct` or both (default both).
//! * `MSSMT_LOAD_DESCENT_THREADS`: threads per descent
//!   (`Tree::with_descent_threads`; default 0: two on this machine).
//! * `MSSMT_LOAD_HASH_LANES`: branch hashes in flight per core
//!   (`Tree::with_hash_lanes`; default 0: four where SHA-NI is present).
//! * `MSSMT_LOAD_JOURNAL`: `yes` switches the SQL stores' change journal
//!   on before the tree is built (`JournalStore::enable_journal`), so every
//!   commit also writes its leaf changes (default `no`).
//! * `MSSMT_LOAD_STORES`: any of `memory,sqlite,postgres` (default all;
//!   Postgres only with `MSSMT_BENCH_PG_URL`, which must run with
//!   `fsync = on`: `scripts/pg-cluster.sh init` and `start` give one).

use ms_smt_test_support::bench as common;
use ms_smt_test_support::durable;

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Batch, ScratchSqlite, random_batch};
use ms_smt::store::{AuditStore, JournalStore, MemoryStore, TreeStore, Writable};
use ms_smt::{CompactedTree, Key, Leaf, TreeError, WriterConfig, WriterStats};
use ms_smt_sql::SqliteStore;
use rand::SeedableRng;
use rand::rngs::StdRng;

type Res<T> = Result<T, Box<dyn Error>>;

const SEED: u64 = 0x6d73_736d_7400_0021;
const BUILD_BATCH: usize = 50_000;

struct Config {
    sizes: Vec<usize>,
    writers: Vec<usize>,
    leaves: Vec<usize>,
    secs: f64,
    paths: Vec<Path>,
    stores: Vec<String>,
    /// Whether the SQL stores keep a change journal.
    journal: bool,
    /// The trees' lanes and descent threads (0: the default).
    tuning: ms_smt::Tuning,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Writer,
    Direct,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn list<T: std::str::FromStr>(name: &str, default: &str) -> Res<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    env(name)
        .as_deref()
        .unwrap_or(default)
        .split(',')
        .map(|s| {
            s.trim()
                .replace('_', "")
                .parse()
                .map_err(|e| format!("{name}: {e}").into())
        })
        .collect()
}

fn config() -> Res<Config> {
    let paths = env("MSSMT_LOAD_PATHS")
        .as_deref()
        .unwrap_or("writer,direct")
        .split(',')
        .map(|p| match p.trim() {
            "writer" => Ok(Path::Writer),
            "direct" => Ok(Path::Direct),
            other => Err(format!("MSSMT_LOAD_PATHS: unknown path {other}")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Config {
        sizes: list("MSSMT_LOAD_N", "100000")?,
        writers: list("MSSMT_LOAD_WRITERS", "1,10,100,1000")?,
        leaves: list("MSSMT_LOAD_LEAVES", "1,10")?,
        secs: list::<f64>("MSSMT_LOAD_SECS", "5")?[0],
        paths,
        stores: list("MSSMT_LOAD_STORES", "memory,sqlite,postgres")?,
        journal: match env("MSSMT_LOAD_JOURNAL").as_deref() {
            None | Some("no") => false,
            Some("yes") => true,
            Some(other) => {
                return Err(format!("MSSMT_LOAD_JOURNAL: {other} is not yes or no").into());
            }
        },
        tuning: ms_smt::Tuning::new()
            .with_descent_threads(list("MSSMT_LOAD_DESCENT_THREADS", "0")?[0])
            .with_hash_lanes(list("MSSMT_LOAD_HASH_LANES", "0")?[0]),
    })
}

/// What one cell measured.
#[derive(Default)]
struct Cell {
    latencies: Vec<Duration>,
    leaves: u64,
    errors: std::collections::BTreeMap<String, u64>,
    written: Vec<(Key, Leaf)>,
    secs: f64,
    groups: Option<WriterStats>,
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn error_kind<E: Error>(e: &E) -> String {
    let text = e.to_string();
    text.split(':').next().unwrap_or(&text).to_string()
}

/// C tasks submitting `leaves`-leaf batches for `secs` through `path`.
async fn run_cell<S>(
    tree: &CompactedTree<S>,
    path: Path,
    writers: usize,
    leaves: usize,
    secs: f64,
    seed: u64,
) -> Cell
where
    S: Writable + AuditStore + Clone + 'static,
{
    let writer = (path == Path::Writer).then(|| tree.writer(WriterConfig::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(writers);
    for t in 0..writers {
        let (tree, writer, stop) = (tree.clone(), writer.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9e37_79b9));
            let mut cell = Cell::default();
            while !stop.load(Ordering::Relaxed) {
                let batch: Batch = random_batch(&mut rng, leaves, 8..=32, 1..1_000);
                let began = Instant::now();
                let result = match &writer {
                    Some(w) => w
                        .submit(batch.clone())
                        .await
                        .map(|_| ())
                        .map_err(|e| error_kind(&e)),
                    None => {
                        tree.insert_many(batch.clone())
                            .await
                            .map(|_| ())
                            .map_err(|e| match e {
                                TreeError::Contention { .. } => "Contention".to_string(),
                                other => error_kind(&other),
                            })
                    }
                };
                match result {
                    Ok(()) => {
                        cell.latencies.push(began.elapsed());
                        cell.leaves += leaves as u64;
                        cell.written.extend(batch);
                    }
                    Err(kind) => *cell.errors.entry(kind).or_default() += 1,
                }
            }
            cell
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = Cell::default();
    for task in tasks {
        match task.await {
            Ok(cell) => {
                total.latencies.extend(cell.latencies);
                total.leaves += cell.leaves;
                total.written.extend(cell.written);
                for (k, n) in cell.errors {
                    *total.errors.entry(k).or_default() += n;
                }
            }
            Err(e) => *total.errors.entry(format!("task: {e}")).or_default() += 1,
        }
    }
    total.secs = start.elapsed().as_secs_f64();
    if let Some(writer) = writer {
        writer.close().await;
        total.groups = Some(writer.stats());
    }
    total
}

fn print_cell(n: usize, store: &str, path: Path, writers: usize, leaves: usize, cell: &mut Cell) {
    cell.latencies.sort_unstable();
    let errors = if cell.errors.is_empty() {
        "0".to_string()
    } else {
        cell.errors
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Where the writer's time went, as shares of the cell's wall time:
    // planning (read phase and descent), commits in flight, and waiting
    // with the next group planned for the previous commit.
    let share = |d: Duration| 100.0 * d.as_secs_f64() / cell.secs;
    let groups = cell.groups.as_ref().map_or("-".to_string(), |w| {
        format!(
            "{} ({:.1} mean, {} max); plan {:.0}% commit {:.0}% wait {:.0}%",
            w.groups,
            w.leaves as f64 / w.groups.max(1) as f64,
            w.largest_group,
            share(w.planning),
            share(w.committing),
            share(w.waiting),
        )
    });
    println!(
        "| {n} | {store} | {path:?} | {writers} | {leaves} | {:.0} | {:.1} | {:.1} | {:.1} | {errors} | {groups} | {:.0} |",
        cell.leaves as f64 / cell.secs,
        pct(&cell.latencies, 0.5),
        pct(&cell.latencies, 0.99),
        pct(&cell.latencies, 1.0),
        rss_mib(),
    );
}

/// Builds a tree of `n` random leaves on `store`, then runs every cell.
async fn measure<S>(cfg: &Config, n: usize, name: &str, store: S) -> Res<()>
where
    S: Writable + AuditStore + Clone + 'static,
{
    let tree = CompactedTree::new(store).with_tuning(cfg.tuning);
    let built = Instant::now();
    let mut rng = StdRng::seed_from_u64(SEED ^ n as u64);
    let mut left = n;
    while left > 0 {
        let take = left.min(BUILD_BATCH);
        tree.insert_many(random_batch(&mut rng, take, 8..=32, 1..1_000))
            .await?;
        left -= take;
    }
    eprintln!(
        "[{name}] built {n} leaves in {:.1} s",
        built.elapsed().as_secs_f64()
    );
    let mut written: Vec<(Key, Leaf)> = Vec::new();
    let mut cell_seed = SEED;
    for &writers in &cfg.writers {
        for &leaves in &cfg.leaves {
            for &path in &cfg.paths {
                cell_seed = cell_seed.wrapping_add(0x1_0000_0001);
                let mut cell = run_cell(&tree, path, writers, leaves, cfg.secs, cell_seed).await;
                print_cell(n, name, path, writers, leaves, &mut cell);
                written.append(&mut cell.written);
            }
        }
    }
    // Every acknowledged leaf reads back (the last write of a key wins;
    // random 32-byte keys do not repeat), and the tree audits clean.
    let checked = Instant::now();
    let keys: Vec<Key> = written.iter().map(|(k, _)| *k).collect();
    let mut missing = 0usize;
    for (chunk, pairs) in keys.chunks(50_000).zip(written.chunks(50_000)) {
        let got = tree.get_many(chunk).await?;
        missing += got
            .iter()
            .zip(pairs)
            .filter(|(got, (_, want))| *got != want)
            .count();
    }
    let report = tree.audit().await?;
    println!(
        "<!-- {name} N={n}: {} acknowledged leaves read back, {missing} missing; audit {} ({} problems); checked in {:.1} s -->",
        written.len(),
        if report.is_clean() {
            "clean"
        } else {
            "NOT CLEAN"
        },
        report.problems.len(),
        checked.elapsed().as_secs_f64()
    );
    if missing > 0 || !report.is_clean() {
        return Err(format!(
            "{name} N={n}: {missing} acknowledged leaves missing or audit not clean"
        )
        .into());
    }
    Ok(())
}

fn main() -> Res<()> {
    let cfg = config()?;
    let (threads, lanes) = (cfg.tuning.descent_threads(), cfg.tuning.hash_lanes());
    let rt = common::runtime();
    rt.block_on(async {
        println!(
            "load: {} s per cell, descent threads {threads}, hash lanes {lanes}, machine: {} vCPUs",
            cfg.secs,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let pg_url = durable::bench_pg_url();
        let pg = match (&pg_url, cfg.stores.iter().any(|s| s == "postgres")) {
            (Some(url), true) => Some(durable::durable_postgres(url).await?),
            _ => None,
        };
        println!(
            "\n| N | store | path | submitters | leaves/sub | leaves/s | p50 ms | p99 ms | max ms | errors | groups | RSS MiB |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for &n in &cfg.sizes {
            if cfg.stores.iter().any(|s| s == "memory") {
                measure(&cfg, n, "memory", MemoryStore::new()).await?;
            }
            if cfg.stores.iter().any(|s| s == "sqlite") {
                let file = ScratchSqlite::new("mssmt-load");
                let store = SqliteStore::open(&file.path).await?;
                if cfg.journal {
                    store.enable_journal().await?;
                }
                measure(&cfg, n, "SQLite", store.clone()).await?;
                store.pool().close().await;
            }
            if let Some(pg) = &pg {
                let ns = format!("load-{n}-{}", std::process::id());
                if cfg.journal {
                    pg.open_namespace(&ns).enable_journal().await?;
                }
                measure(&cfg, n, "Postgres", pg.open_namespace(&ns)).await?;
                pg.open_namespace(&ns).delete_all().await?;
                if cfg.journal {
                    pg.open_namespace(&ns).disable_journal().await?;
                }
            }
        }
        Ok(())
    })
}
