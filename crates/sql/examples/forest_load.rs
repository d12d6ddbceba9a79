//! Load over many trees: C concurrent submitters of one-leaf writes spread
//! over K trees, with and without a parent tree over them, through one
//! [`Writer`](ms_smt::Writer) per tree and through the store-wide
//! [`ForestWriter`](ms_smt::ForestWriter), side by side, on memory, SQLite
//! (the crate's durable defaults) and Postgres (fsync on).
//!
//! For each store and each K, N leaves are first spread evenly over the K
//! trees (through the forest, so a parent starts in step); then, for each
//! C and each writer kind, C tasks submit new random leaves for a fixed
//! time, task `t` always to tree `t mod K`. Printed per cell: acknowledged
//! leaves/s, p50/p99 latency, groups (commits), mean group size, trees per
//! commit, rows written per leaf (SQL), and where the writer's time went.
//! At the end of each K every acknowledged leaf is read back, every parent
//! leaf is checked against its child's root, and every tree is audited.
//!
//! ```text
//! MSSMT_FLOAD_N=1000000 MSSMT_FLOAD_TREES=1,10,100,1000,10000 \
//! MSSMT_FLOAD_WRITERS=1000,10000 MSSMT_FLOAD_SECS=8 \
//! MSSMT_BENCH_PG_URL=postgres://postgres@127.0.0.1:PORT/postgres \
//!     cargo run --release --example forest_load
//! ```
//!
//! * `MSSMT_FLOAD_N`: leaves spread over the trees before the cells
//!   (default `100000`).
//! * `MSSMT_FLOAD_TREES`: tree counts K (default `1,10,100,1000`).
//! * `MSSMT_FLOAD_WRITERS`: submitter counts C (default `1000`).
//! * `MSSMT_FLOAD_SECS`: seconds per cell (default 8).
//! * `MSSMT_FLOAD_KINDS`: any of `trees` (one `Writer` per tree, no
//!   parent), `forest` (the store writer, no parent), `parent` (the store
//!   writer with a parent tree over the K trees); default all three.
//! * `MSSMT_FLOAD_STORES`: any of `memory,sqlite,postgres` (default all;
//!   Postgres only with `MSSMT_BENCH_PG_URL`, which must run with
//!   `fsync = on`: `scripts/pg-cluster.sh init` and `start` give one).

use ms_smt_test_support::bench as common;
use ms_smt_test_support::durable;

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{ScratchSqlite, random_batch};
use ms_smt::store::{AuditStore, ForestStore, MemoryStore, TreeStore, Writable};
use ms_smt::{Compacted, Forest, Key, Leaf, Link, WriterConfig, WriterStats};
use ms_smt_sql::SqliteStore;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sha2::{Digest, Sha256};

type Res<T> = Result<T, Box<dyn Error>>;

const SEED: u64 = 0x6d73_736d_7400_0035;
const BUILD_BATCH: usize = 50_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// One `Writer` per tree, no parent.
    Trees,
    /// The store writer, no parent.
    Forest,
    /// The store writer, a parent over every tree.
    Parent,
}

struct Config {
    n: usize,
    trees: Vec<usize>,
    writers: Vec<usize>,
    secs: f64,
    kinds: Vec<Kind>,
    stores: Vec<String>,
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
    let kinds = list::<String>("MSSMT_FLOAD_KINDS", "trees,forest,parent")?
        .iter()
        .map(|k| match k.as_str() {
            "trees" => Ok(Kind::Trees),
            "forest" => Ok(Kind::Forest),
            "parent" => Ok(Kind::Parent),
            other => Err(format!("MSSMT_FLOAD_KINDS: unknown kind {other}")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Config {
        n: list("MSSMT_FLOAD_N", "100000")?[0],
        trees: list("MSSMT_FLOAD_TREES", "1,10,100,1000")?,
        writers: list("MSSMT_FLOAD_WRITERS", "1000")?,
        secs: list::<f64>("MSSMT_FLOAD_SECS", "8")?[0],
        kinds,
        stores: list("MSSMT_FLOAD_STORES", "memory,sqlite,postgres")?,
    })
}

/// The parent over every tree of a run: `{run}/t{i}` sits at
/// sha256(name).
fn parent_link(run: &str) -> Link {
    let prefix = format!("{run}/t");
    Link::rule(&format!("{run}/parent"), move |name| {
        name.starts_with(&prefix)
            .then(|| Key(Sha256::digest(name.as_bytes()).into()))
    })
}

fn tree_name(run: &str, i: usize) -> String {
    format!("{run}/t{i}")
}

/// What one cell measured.
#[derive(Default)]
struct Cell {
    latencies: Vec<Duration>,
    leaves: u64,
    errors: BTreeMap<String, u64>,
    written: Vec<(usize, Key, Leaf)>,
    secs: f64,
    stats: WriterStats,
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

fn add_stats(total: &mut WriterStats, s: &WriterStats) {
    total.groups += s.groups;
    total.acknowledged += s.acknowledged;
    total.leaves += s.leaves;
    total.trees += s.trees;
    total.planning += s.planning;
    total.committing += s.committing;
    total.waiting += s.waiting;
    total.largest_group = total.largest_group.max(s.largest_group);
}

/// The sum of every tree handle's rows (or nodes) written so far.
fn nodes_written<S>(forest: &Forest<S, Compacted>, names: &[String]) -> u64
where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    names
        .iter()
        .filter_map(|n| forest.tree(n).ok())
        .map(|t| t.store().stats().nodes_written)
        .sum()
}

/// C tasks submitting one-leaf writes for `secs`, task `t` to tree
/// `t mod K`, through `kind`.
async fn run_cell<S>(
    forest: &Forest<S, Compacted>,
    run: &str,
    kind: Kind,
    k: usize,
    writers: usize,
    secs: f64,
    seed: u64,
) -> Res<Cell>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let names: Vec<String> = (0..k).map(|i| tree_name(run, i)).collect();
    let per_tree: Vec<_> = if kind == Kind::Trees {
        names
            .iter()
            .map(|n| Ok(forest.tree(n)?.writer(WriterConfig::default())))
            .collect::<Result<_, ms_smt::TreeError<S::Error>>>()?
    } else {
        Vec::new()
    };
    let store_writer = (kind != Kind::Trees).then(|| forest.writer(WriterConfig::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(writers);
    for t in 0..writers {
        let tree = t % k;
        let name = names[tree].clone();
        let one = per_tree.get(tree).cloned();
        let (all, stop) = (store_writer.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9e37_79b9));
            let mut cell = Cell::default();
            while !stop.load(Ordering::Relaxed) {
                let batch = random_batch(&mut rng, 1, 8..=32, 1..1_000);
                let (key, leaf) = batch[0].clone();
                let began = Instant::now();
                let result = match (&one, &all) {
                    (Some(w), _) => w.submit(batch).await.map(|_| ()),
                    (None, Some(w)) => w.submit([(&name, key, leaf.clone())]).await.map(|_| ()),
                    (None, None) => Ok(()),
                };
                match result {
                    Ok(()) => {
                        cell.latencies.push(began.elapsed());
                        cell.leaves += 1;
                        cell.written.push((tree, key, leaf));
                    }
                    Err(e) => {
                        let text = e.to_string();
                        let kind = text.split(':').next().unwrap_or(&text).to_string();
                        *cell.errors.entry(kind).or_default() += 1;
                    }
                }
            }
            cell
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = Cell::default();
    for task in tasks {
        let cell = task.await?;
        total.latencies.extend(cell.latencies);
        total.leaves += cell.leaves;
        total.written.extend(cell.written);
        for (k, n) in cell.errors {
            *total.errors.entry(k).or_default() += n;
        }
    }
    total.secs = start.elapsed().as_secs_f64();
    for w in &per_tree {
        w.close().await;
        add_stats(&mut total.stats, &w.stats());
    }
    if let Some(w) = store_writer {
        w.close().await;
        add_stats(&mut total.stats, &w.stats());
    }
    Ok(total)
}

/// Spreads `n` random leaves over the K trees of `forest` (through the
/// forest, so a parent is in step), in `BUILD_BATCH`-leaf commits.
async fn build<S>(forest: &Forest<S, Compacted>, run: &str, k: usize, n: usize) -> Res<()>
where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    let mut rng = StdRng::seed_from_u64(SEED ^ (n as u64) ^ ((k as u64) << 32));
    let mut done = 0;
    while done < n {
        let take = (n - done).min(BUILD_BATCH);
        let batch = random_batch(&mut rng, take, 8..=32, 1..1_000);
        let writes = batch
            .into_iter()
            .enumerate()
            .map(|(i, (key, leaf))| (tree_name(run, (done + i) % k), key, leaf));
        forest.insert_many(writes).await?;
        done += take;
    }
    Ok(())
}

/// A nested proof of an acknowledged leaf on a cold forest (`cold`: a
/// handle that remembers no nodes): its round trips (every handle's, the
/// child's and the parent's), its time, and that it verifies.
async fn nested_proof_cold<S>(
    cold: S,
    run: &str,
    store: &str,
    written: &(usize, Key, Leaf),
) -> Res<()>
where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    let forest = Forest::<_, Compacted>::new(cold).with_link(parent_link(run));
    let (tree, key, leaf) = written;
    let (name, parent) = (tree_name(run, *tree), format!("{run}/parent"));
    let handles = [forest.tree(&name)?, forest.tree(&parent)?];
    let trips = || -> u64 { handles.iter().map(|t| t.store().stats().round_trips).sum() };
    let before = trips();
    let started = Instant::now();
    let proof = forest.nested_proof(&name, key).await?;
    let took = started.elapsed();
    let trips = trips() - before;
    let top = forest.roots(&[&parent]).await?[0];
    let ok = proof.verify(key, leaf, &top);
    println!(
        "<!-- {store}: nested proof of one key, cold: {trips} round trips, {:.2} ms, {} bytes, verifies: {ok} -->",
        took.as_secs_f64() * 1e3,
        proof.to_bytes().len()
    );
    if !ok {
        return Err(format!("{store}: the nested proof does not verify").into());
    }
    Ok(())
}

/// Every cell of one store for one K: build, run, check.
async fn measure<S>(cfg: &Config, k: usize, store_name: &str, store: S, cold: S) -> Res<()>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Writable + AuditStore + 'static,
{
    let run = format!("fload-{k}-{}", std::process::id());
    let names: Vec<String> = (0..k).map(|i| tree_name(&run, i)).collect();
    let with_parent = cfg.kinds.contains(&Kind::Parent);
    let plain = Forest::<_, Compacted>::new(store.clone());
    let linked = plain.clone().with_link(parent_link(&run));
    let builder = if with_parent { &linked } else { &plain };
    let built = Instant::now();
    build(builder, &run, k, cfg.n).await?;
    eprintln!(
        "[{store_name}] K={k}: built {} leaves in {:.1} s",
        cfg.n,
        built.elapsed().as_secs_f64()
    );
    let mut written: Vec<(usize, Key, Leaf)> = Vec::new();
    let mut seed = SEED ^ k as u64;
    // The parent cells first, then their links are checked: the other
    // kinds write around the parent.
    let mut kinds = cfg.kinds.clone();
    kinds.sort_by_key(|k| *k != Kind::Parent);
    let mut links_checked = !with_parent;
    for kind in kinds {
        if kind != Kind::Parent && !links_checked {
            check_links(&linked, store_name, k).await?;
            links_checked = true;
        }
        let forest = if kind == Kind::Parent {
            &linked
        } else {
            &plain
        };
        for &writers in &cfg.writers {
            seed = seed.wrapping_add(0x1_0000_0001);
            let mut counted = names.clone();
            if kind == Kind::Parent {
                counted.push(format!("{run}/parent"));
            }
            let before = nodes_written(forest, &counted);
            let mut cell = run_cell(forest, &run, kind, k, writers, cfg.secs, seed).await?;
            let rows = nodes_written(forest, &counted) - before;
            print_cell(cfg.n, store_name, k, kind, writers, &mut cell, rows);
            if kind == Kind::Parent
                && let Some(first) = cell.written.first()
            {
                nested_proof_cold(cold.clone(), &run, store_name, first).await?;
            }
            written.append(&mut cell.written);
        }
    }
    if !links_checked {
        check_links(&linked, store_name, k).await?;
    }
    check(&plain, store_name, &names, &written).await
}

/// Every parent leaf matches its child's root.
async fn check_links<S>(forest: &Forest<S, Compacted>, store: &str, k: usize) -> Res<()>
where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    let checked = Instant::now();
    let links = forest.audit_links().await?;
    println!(
        "<!-- {store} K={k}: links: {} parents, {} children, {} problems; checked in {:.1} s -->",
        links.parents,
        links.children,
        links.problems.len(),
        checked.elapsed().as_secs_f64()
    );
    if !links.is_clean() {
        return Err(format!("{store} K={k}: links {:?}", links.problems).into());
    }
    Ok(())
}

fn print_cell(
    n: usize,
    store: &str,
    k: usize,
    kind: Kind,
    writers: usize,
    cell: &mut Cell,
    rows: u64,
) {
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
    let s = &cell.stats;
    let share = |d: Duration| 100.0 * d.as_secs_f64() / cell.secs;
    let kind = match kind {
        Kind::Trees => "one Writer per tree",
        Kind::Forest => "store writer",
        Kind::Parent => "store writer + parent",
    };
    println!(
        "| {n} | {store} | {k} | {kind} | {writers} | {:.0} | {:.0} | {:.0} | {} | {:.1} | {:.1} | {:.2} | {:.0}% / {:.0}% / {:.0}% | {errors} | {:.0} |",
        cell.leaves as f64 / cell.secs,
        pct(&cell.latencies, 0.5),
        pct(&cell.latencies, 0.99),
        s.groups,
        s.leaves as f64 / s.groups.max(1) as f64,
        s.trees as f64 / s.groups.max(1) as f64,
        rows as f64 / s.leaves.max(1) as f64,
        share(s.planning),
        share(s.committing),
        share(s.waiting),
        rss_mib(),
    );
}

/// Every acknowledged leaf reads back and every tree audits clean.
async fn check<S>(
    forest: &Forest<S, Compacted>,
    store: &str,
    names: &[String],
    written: &[(usize, Key, Leaf)],
) -> Res<()>
where
    S: ForestStore,
    S::Tree: Writable + AuditStore,
{
    let checked = Instant::now();
    let mut by_tree: BTreeMap<usize, Vec<(Key, Leaf)>> = BTreeMap::new();
    for (t, k, l) in written {
        by_tree.entry(*t).or_default().push((*k, l.clone()));
    }
    let mut missing = 0usize;
    for (t, pairs) in &by_tree {
        let tree = forest.tree(&names[*t])?;
        let keys: Vec<Key> = pairs.iter().map(|(k, _)| *k).collect();
        let got = tree.get_many(&keys).await?;
        missing += got
            .iter()
            .zip(pairs)
            .filter(|(got, (_, want))| *got != want)
            .count();
    }
    let mut unclean = 0usize;
    for name in names {
        if !forest.tree(name)?.audit().await?.is_clean() {
            unclean += 1;
        }
    }
    println!(
        "<!-- {store} K={}: {} acknowledged leaves read back, {missing} missing; {} trees audited, {unclean} not clean; checked in {:.1} s -->",
        names.len(),
        written.len(),
        names.len(),
        checked.elapsed().as_secs_f64()
    );
    if missing > 0 || unclean > 0 {
        return Err(format!("{store}: {missing} missing, {unclean} trees not clean").into());
    }
    Ok(())
}

fn main() -> Res<()> {
    let cfg = config()?;
    let rt = common::runtime();
    rt.block_on(async {
        println!(
            "forest_load: {} leaves spread over the trees, {} s per cell, machine: {} vCPUs",
            cfg.n,
            cfg.secs,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let pg_url = durable::bench_pg_url();
        let pg = match (&pg_url, cfg.stores.iter().any(|s| s == "postgres")) {
            (Some(url), true) => Some(durable::durable_postgres(url).await?),
            _ => None,
        };
        println!(
            "\n| N | store | trees K | writer | submitters | leaves/s | p50 ms | p99 ms | commits | leaves/commit | trees/commit | rows/leaf | plan / commit / wait | errors | RSS MiB |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for &k in &cfg.trees {
            if cfg.stores.iter().any(|s| s == "memory") {
                let store = MemoryStore::new();
                measure(&cfg, k, "memory", store.clone(), store).await?;
            }
            if cfg.stores.iter().any(|s| s == "sqlite") {
                let file = ScratchSqlite::new("mssmt-fload");
                let store = SqliteStore::open(&file.path).await?;
                let cold = store.clone().with_recent_nodes(0);
                measure(&cfg, k, "SQLite", store.clone(), cold).await?;
                store.pool().close().await;
            }
            if let Some(pg) = &pg {
                measure(&cfg, k, "Postgres", pg.clone(), pg.clone().with_recent_nodes(0)).await?;
            }
        }
        Ok(())
    })
}
