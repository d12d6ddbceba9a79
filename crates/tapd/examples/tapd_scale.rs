//! Scale benchmark of the tapd interop (BENCHMARKS.md, "tapd interop"):
//! a tree of N leaves exported to tapd's tables and imported back, beside
//! a direct build of the same leaves into the same store, in one run.
//!
//! For SQLite (a fresh file with the crate's durable defaults) and, when
//! `MSSMT_BENCH_PG_URL` names a durable server, for Postgres:
//! 1. **direct**: `insert_many` of the N leaves into namespace `direct`, in
//!    batches of the import's default size;
//! 2. **export**: that tree into tapd's tables (`export_namespace`,
//!    creating the schema) in a tapd-layout SQLite file / the same Postgres
//!    database;
//! 3. **import**: the tapd namespace back into namespace `imported`
//!    (`import_namespace`, defaults); the root must equal `direct`'s;
//! 4. **walk**: the same import again: the target already holds the tree,
//!    so this is the source walk alone with the import's checks;
//! 5. **audit**: `audit_namespace` (the walk with every check);
//! 6. SQLite only: U unreachable rows (random leaf rows no root reaches)
//!    are added to the tapd file and it is imported into namespace
//!    `imported-u`, to show that peak memory does not grow with them.
//!
//! Each phase reports wall time, CPU time, tapd rows per second and the
//! process's peak RSS during that phase, sampled every 20 ms: anonymous
//! memory (the heap: the N leaves this example holds, the build, the
//! walk) and file-backed pages (a SQLite source is read through a
//! read-only map, whose pages the kernel may drop at any time).
//!
//! ```text
//! cargo run --release --example tapd_scale
//! MSSMT_TAPD_SCALE_N=1000000 MSSMT_BENCH_PG_URL=postgres://postgres@127.0.0.1:PORT/postgres \
//!     cargo run --release --example tapd_scale
//! ```
//!
//! * `MSSMT_TAPD_SCALE_N`: leaves (default 100,000; 10^6 takes minutes,
//!   so it is opt-in).
//! * `MSSMT_TAPD_SCALE_UNREACHABLE`: unreachable rows for step 6 (default
//!   N / 2).
//! * `MSSMT_BENCH_PG_URL`: a Postgres server with `fsync = on`
//!   (`scripts/pg-cluster.sh`); without it only SQLite is measured.

use ms_smt_test_support::bench as common;
use ms_smt_test_support::durable;

use std::error::Error;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use common::{Batch, ScratchSqlite};
use ms_smt::CompactedTree;
use ms_smt::store::BulkStore;
use ms_smt_sql::SqliteStore;
use ms_smt_tapd::{
    ExportOptions, ImportOptions, TapdSource, TapdTarget, audit_namespace, export_namespace,
    import_namespace,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Res<T> = Result<T, Box<dyn Error>>;

const SEED: u64 = 0x6d73_736d_7400_0026;
/// The tapd namespace written and read.
const TAPD_NS: &str = "scale";

fn env_usize(name: &str, default: usize) -> Res<usize> {
    match std::env::var(name).ok().filter(|v| !v.trim().is_empty()) {
        Some(v) => Ok(v.trim().replace('_', "").parse()?),
        None => Ok(default),
    }
}

/// The process's resident memory in MiB: anonymous (heap) and file-backed
/// (the read-only map of a SQLite source, which the kernel may drop).
fn rss_mib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024)
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// The highest anonymous and file-backed RSS seen since the last reset,
/// sampled every 20 ms by a thread of its own.
struct RssPeak {
    anon: Arc<AtomicU64>,
    file: Arc<AtomicU64>,
}

impl RssPeak {
    fn start() -> Self {
        let (anon, file) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (a, f) = (anon.clone(), file.clone());
        std::thread::spawn(move || {
            loop {
                let (now_anon, now_file) = rss_mib();
                a.fetch_max(now_anon, Ordering::Relaxed);
                f.fetch_max(now_file, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        RssPeak { anon, file }
    }

    fn reset(&self) {
        let (anon, file) = rss_mib();
        self.anon.store(anon, Ordering::Relaxed);
        self.file.store(file, Ordering::Relaxed);
    }

    fn peak(&self) -> (u64, u64) {
        (
            self.anon.load(Ordering::Relaxed),
            self.file.load(Ordering::Relaxed),
        )
    }
}

static RSS: LazyLock<RssPeak> = LazyLock::new(RssPeak::start);

/// CPU seconds (user + system, all threads) the process has used so far.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) and `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 (1-based); `rest` starts at 3.
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => (u + s) / 100.0,
        _ => f64::NAN,
    }
}

/// One measured phase: what ran, seconds, rows it read or wrote, peak RSS.
struct Phase {
    engine: &'static str,
    what: String,
    secs: f64,
    cpu: f64,
    rows: u64,
    peak_mib: (u64, u64),
}

/// Runs `work` as one phase, timing it and its peak RSS.
async fn phase<T, F>(out: &mut Vec<Phase>, engine: &'static str, what: &str, work: F) -> Res<T>
where
    F: Future<Output = Res<(T, u64)>>,
{
    eprintln!("[{engine}] {what} ...");
    RSS.reset();
    let start = Instant::now();
    let cpu_start = cpu_secs();
    let (value, rows) = work.await?;
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu_start;
    let peak_mib = RSS.peak();
    eprintln!(
        "[{engine}] {what}: {secs:.1} s ({cpu:.1} s CPU), {rows} rows, peak RSS {} MiB heap + {} MiB mapped file",
        peak_mib.0, peak_mib.1
    );
    out.push(Phase {
        engine,
        what: what.to_owned(),
        secs,
        cpu,
        rows,
        peak_mib,
    });
    Ok(value)
}

/// Builds `leaves` into `tree` in import-sized batches.
async fn build<S: BulkStore>(tree: &CompactedTree<S>, leaves: &Batch) -> Res<((), u64)> {
    for chunk in leaves.chunks(ImportOptions::default().batch) {
        tree.insert_many(chunk.to_vec()).await?;
    }
    Ok(((), 0))
}

/// Steps 1-5 on one engine: `store` is the ms-smt side, `tapd` the tapd
/// tables' location (a SQLite path or the Postgres URL).
async fn run_engine<S: BulkStore>(
    out: &mut Vec<Phase>,
    engine: &'static str,
    store: &S,
    tapd: &str,
    leaves: &Batch,
) -> Res<()> {
    let direct = CompactedTree::new(store.open_namespace("direct")?);
    direct.delete_all().await?;
    phase(
        out,
        engine,
        "direct build (insert_many)",
        build(&direct, leaves),
    )
    .await?;
    let root = direct.root().await?;

    let target = TapdTarget::open(tapd, true).await?;
    let options = ExportOptions {
        create_schema: true,
        replace: true,
    };
    phase(out, engine, "export to tapd tables", async {
        let r = export_namespace(&direct, &target, TAPD_NS, options).await?;
        Ok(((), r.rows))
    })
    .await?;
    drop(target);

    let source = TapdSource::open(tapd).await?;
    let imported = CompactedTree::new(store.open_namespace("imported")?);
    imported.delete_all().await?;
    let report = phase(out, engine, "import", async {
        let r = import_namespace(&source, TAPD_NS, &imported, ImportOptions::default()).await?;
        let rows = r.rows;
        Ok((r, rows))
    })
    .await?;
    if report.root != root || imported.root().await? != root {
        return Err(format!(
            "{engine}: imported root {:?} != built {root:?}",
            report.root
        )
        .into());
    }
    phase(
        out,
        engine,
        "walk (import again: nothing to write)",
        async {
            let r = import_namespace(&source, TAPD_NS, &imported, ImportOptions::default()).await?;
            if !r.unchanged {
                return Err("the second import wrote".into());
            }
            Ok(((), r.rows))
        },
    )
    .await?;
    phase(out, engine, "audit (every check)", async {
        let a = audit_namespace(&source, TAPD_NS).await?;
        if !a.problems.is_empty() {
            return Err(format!("{engine}: audit found {:?}", a.problems).into());
        }
        Ok(((), a.rows))
    })
    .await?;
    Ok(())
}

/// Step 6: `count` random leaf rows that no root reaches, into the tapd
/// SQLite file.
async fn add_unreachable(path: &str, count: usize, rng: &mut StdRng) -> Res<()> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{path}")).await?;
    let mut tx = pool.begin().await?;
    for _ in 0..count {
        let hash: [u8; 32] = rng.r#gen();
        let key: [u8; 32] = rng.r#gen();
        let value: [u8; 16] = rng.r#gen();
        sqlx::query(
            "INSERT INTO mssmt_nodes (hash_key, l_hash_key, r_hash_key, key, value, sum, \
             namespace) VALUES (?, NULL, NULL, ?, ?, ?, ?)",
        )
        .bind(&hash[..])
        .bind(&key[..])
        .bind(&value[..])
        .bind(1_i64)
        .bind(TAPD_NS)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    pool.close().await;
    Ok(())
}

fn print_table(n: usize, phases: &[Phase]) {
    println!(
        "\n| engine | phase ({n} leaves) | time | CPU | rows | rows/s | x direct | peak RSS: heap + mapped file |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for p in phases {
        let direct = phases
            .iter()
            .find(|d| d.engine == p.engine && d.what.starts_with("direct"))
            .map_or(f64::NAN, |d| d.secs);
        let rate = if p.rows == 0 {
            "-".to_owned()
        } else {
            format!("{:.0}", p.rows as f64 / p.secs)
        };
        println!(
            "| {} | {} | {:.1} s | {:.1} s | {} | {} | {:.2}x | {} + {} MiB |",
            p.engine,
            p.what,
            p.secs,
            p.cpu,
            p.rows,
            rate,
            p.secs / direct,
            p.peak_mib.0,
            p.peak_mib.1
        );
    }
}

#[tokio::main]
async fn main() -> Res<()> {
    let n = env_usize("MSSMT_TAPD_SCALE_N", 100_000)?;
    let unreachable = env_usize("MSSMT_TAPD_SCALE_UNREACHABLE", n / 2)?;
    let mut rng = StdRng::seed_from_u64(SEED);
    let leaves = common::random_batch(&mut rng, n, 1..=255, 1..(1u64 << 32));
    println!(
        "tapd interop at {n} leaves (compacted tree, import batches of {})",
        ImportOptions::default().batch
    );
    let mut phases = Vec::new();

    let ms = ScratchSqlite::new("tapd-scale-msmt");
    let tapd_file = ScratchSqlite::new("tapd-scale-tapd");
    let tapd_path = tapd_file.path.to_string_lossy().into_owned();
    let sqlite = SqliteStore::open(&ms.path).await?;
    run_engine(&mut phases, "SQLite", &sqlite, &tapd_path, &leaves).await?;

    if unreachable > 0 {
        add_unreachable(&tapd_path, unreachable, &mut rng).await?;
        let source = TapdSource::open(&tapd_path).await?;
        let again = CompactedTree::new(sqlite.open_namespace("imported-u"));
        again.delete_all().await?;
        let what = format!("import with {unreachable} unreachable rows");
        let report = phase(&mut phases, "SQLite", &what, async {
            let r = import_namespace(&source, TAPD_NS, &again, ImportOptions::default()).await?;
            let rows = r.rows;
            Ok((r, rows))
        })
        .await?;
        if report.unreachable_rows != unreachable as u64 {
            return Err(format!(
                "{} unreachable rows reported, {unreachable} added",
                report.unreachable_rows
            )
            .into());
        }
    }

    if let Some(url) = durable::bench_pg_url() {
        let pg = durable::durable_postgres(&url).await?;
        run_engine(&mut phases, "Postgres", &pg, &url, &leaves).await?;
        // Leave the server as found: without our namespaces and tapd's tables.
        for ns in ["direct", "imported"] {
            CompactedTree::new(pg.open_namespace(ns))
                .delete_all()
                .await?;
        }
        sqlx::query("DROP TABLE IF EXISTS mssmt_roots, mssmt_nodes")
            .execute(pg.pool())
            .await?;
    } else {
        eprintln!("Postgres not measured: MSSMT_BENCH_PG_URL is not set");
    }
    print_table(n, &phases);
    Ok(())
}
