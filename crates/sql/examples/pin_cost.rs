//! What a pinned root costs: storage kept for it, and commit time, after
//! 1,000 batches of 100 keys (BENCHMARKS.md, "Pinned roots").
//!
//! For each store (memory, SQLite with the crate's durable defaults, and
//! Postgres with fsync on when `MSSMT_BENCH_PG_URL` is set) and each of two
//! workloads — 100 new keys per batch, or 100 existing keys given new
//! values per batch — it builds two identical compacted trees of
//! `MSSMT_PIN_BASE` leaves (default 10,000), pins one of them, applies the
//! same 1,000 batches to both (the pinned and the unpinned tree take turns,
//! batch by batch), and prints:
//!
//! * the rows and bytes of the current tree, and the rows and bytes kept
//!   for the pin (`ms_smt_history`; for memory, the nodes held only by the
//!   pin: the pinned tree's node count minus the unpinned tree's);
//! * the median commit time of the pinned and of the unpinned tree;
//! * that the pinned root still reads back (its leaf count), and that
//!   unpinning frees everything kept.
//!
//! ```text
//! MSSMT_BENCH_PG_URL=postgres://... cargo run --release --example pin_cost
//! ```

use ms_smt_test_support::bench as common;
use ms_smt_test_support::durable;

use std::error::Error;
use std::time::{Duration, Instant};

use common::ScratchSqlite;
use ms_smt::store::{BulkStore, MemoryStore, PinStore, TreeStore};
use ms_smt::{CompactedTree, Key, Leaf, Tree};
use ms_smt_sql::{PostgresStore, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Res<T> = Result<T, Box<dyn Error>>;
type Batch = Vec<(Key, Leaf)>;

const BATCHES: usize = 1_000;
const PER_BATCH: usize = 100;

/// A store whose kept storage can be measured.
trait Measured: TreeStore + PinStore + BulkStore + Clone + 'static {
    /// (rows, bytes) of the current tree and (rows, bytes) kept for pins,
    /// for the namespace of `self`; `other` is an identical unpinned
    /// namespace (the memory store counts the difference in nodes).
    async fn storage(&self, other: &Self) -> Res<((u64, u64), (u64, u64))>;
}

impl Measured for MemoryStore {
    /// Nodes only (no bytes: nodes are Rust values, not rows).
    async fn storage(&self, other: &Self) -> Res<((u64, u64), (u64, u64))> {
        let (mine, theirs) = (self.node_count()? as u64, other.node_count()? as u64);
        Ok(((theirs, 0), (mine.saturating_sub(theirs), 0)))
    }
}

/// `Measured` for a SQL store: rows and body bytes of `ms_smt_strata` (the
/// current tree) and `ms_smt_history` (kept for pins) of the namespace;
/// `$count` and `$bytes` are the select list's two columns, `$param` the
/// namespace's placeholder.
macro_rules! sql_measured {
    ($store:ty, $count:literal, $bytes:literal, $param:literal) => {
        impl Measured for $store {
            async fn storage(&self, _: &Self) -> Res<((u64, u64), (u64, u64))> {
                let q = |table: &str| {
                    format!(
                        concat!(
                            "SELECT ",
                            $count,
                            ", ",
                            $bytes,
                            " FROM {} t JOIN ms_smt_namespaces n ON n.id = t.ns WHERE n.name = ",
                            $param
                        ),
                        table
                    )
                };
                let mut out = [(0i64, 0i64); 2];
                for (slot, table) in out.iter_mut().zip(["ms_smt_strata", "ms_smt_history"]) {
                    *slot = sqlx::query_as(sqlx::AssertSqlSafe(q(table)))
                        .bind(self.name())
                        .fetch_one(self.pool())
                        .await?;
                }
                Ok((
                    (out[0].0 as u64, out[0].1 as u64),
                    (out[1].0 as u64, out[1].1 as u64),
                ))
            }
        }
    };
}

sql_measured!(
    SqliteStore,
    "COUNT(*)",
    "COALESCE(SUM(LENGTH(t.body)), 0)",
    "?"
);
sql_measured!(
    PostgresStore,
    "COUNT(*)::int8",
    "COALESCE(SUM(LENGTH(t.body)), 0)::int8",
    "$1"
);

fn leaf(rng: &mut StdRng) -> Leaf {
    let mut value = vec![0u8; rng.gen_range(32..=64usize)];
    rng.fill(&mut value[..]);
    Leaf::new(value, rng.gen_range(1..1000))
}

fn random_batch(rng: &mut StdRng, n: usize) -> Batch {
    (0..n)
        .map(|_| {
            let mut key = [0u8; 32];
            rng.fill(&mut key);
            (Key(key), leaf(rng))
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn mb(bytes: u64) -> String {
    match bytes {
        0 => "-".to_owned(),
        b => format!("{:.1} MB", b as f64 / 1e6),
    }
}

async fn measure<S: Measured>(label: &str, db: &S, base: &Batch, replace: bool) -> Res<()> {
    let workload = if replace {
        "100 replaced keys"
    } else {
        "100 new keys"
    };
    let pinned: CompactedTree<S> = Tree::new(db.open_namespace(&format!("pin-cost-{replace}-p"))?);
    let plain: CompactedTree<S> = Tree::new(db.open_namespace(&format!("pin-cost-{replace}-u"))?);
    for t in [&pinned, &plain] {
        t.delete_all().await?;
        for part in base.chunks(50_000) {
            t.insert_many(part.to_vec()).await?;
        }
    }
    let pin = pinned.pin("p").await?;
    let mut rng = StdRng::seed_from_u64(0x7069_6e00 + u64::from(replace));
    let (mut with_pin, mut without) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for _ in 0..BATCHES {
        let batch: Batch = if replace {
            (0..PER_BATCH)
                .map(|_| (base[rng.gen_range(0..base.len())].0, leaf(&mut rng)))
                .collect()
        } else {
            random_batch(&mut rng, PER_BATCH)
        };
        let t = Instant::now();
        pinned.insert_many(batch.clone()).await?;
        with_pin.push(t.elapsed());
        let t = Instant::now();
        plain.insert_many(batch).await?;
        without.push(t.elapsed());
    }
    let elapsed = started.elapsed();
    assert_eq!(pinned.root().await?, plain.root().await?);
    let ((rows, bytes), (kept_rows, kept_bytes)) = pinned.store().storage(plain.store()).await?;
    let pinned_leaves = pinned.at(&pin).leaves(..).collect_all().await?.len();
    assert_eq!(pinned_leaves, base.len());
    pinned.unpin("p").await?;
    let (_, (left_rows, _)) = pinned.store().storage(plain.store()).await?;
    let unit = if label == "memory" { "nodes" } else { "rows" };
    println!(
        "| {label} | {workload} | {rows} {unit}, {} | {kept_rows} {unit}, {} ({:.0} % of the tree) | {:.2?} | {:.2?} | {pinned_leaves} | {left_rows} |",
        mb(bytes),
        mb(kept_bytes),
        100.0 * kept_rows as f64 / rows.max(1) as f64,
        median(with_pin),
        median(without),
    );
    eprintln!("{label} {workload}: {elapsed:?}");
    for t in [&pinned, &plain] {
        t.delete_all().await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Res<()> {
    let base_n: usize = std::env::var("MSSMT_PIN_BASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let mut rng = StdRng::seed_from_u64(0x7069_6e63_6f73_7400);
    let base = random_batch(&mut rng, base_n);
    println!(
        "- a compacted tree of {base_n} leaves, pinned, then {BATCHES} batches of {PER_BATCH} keys"
    );
    let pg = match durable::bench_pg_url() {
        Some(url) => Some(durable::durable_postgres(&url).await?),
        None => {
            println!("- Postgres: not measured (MSSMT_BENCH_PG_URL is not set)");
            None
        }
    };
    println!();
    println!(
        "| store | each batch | current tree | kept for the pin | commit, pinned (median) | commit, unpinned | pinned leaves read back | kept after unpin |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let file = ScratchSqlite::new("ms-smt-pin-cost");
    let sqlite = SqliteStore::open(&file.path).await?;
    for replace in [false, true] {
        measure("memory", &MemoryStore::new(), &base, replace).await?;
        measure("sqlite", &sqlite, &base, replace).await?;
        if let Some(pg) = &pg {
            measure("postgres", pg, &base, replace).await?;
        }
    }
    sqlite.pool().close().await;
    drop(file);
    Ok(())
}
