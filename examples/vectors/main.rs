//! Conformance runner: replays files in the official MS-SMT test-vector
//! format against every tree layout, write path and store.
//!
//! ```text
//! cargo run --release --example vectors -- [--tree full|compacted|both] \
//!     [--path sequential|batched|both] [--store memory|sqlite|postgres|all] FILE...
//! ```
//!
//! Defaults: `--tree both --path both --store all`. Each case runs on a fresh
//! tree: a new `MemoryStore`, a new namespace of one temporary SQLite file,
//! or a new namespace of the PostgreSQL database at `$MSSMT_PG_URL` (removed
//! again at the end). `--store all` includes Postgres only when
//! `MSSMT_PG_URL` is set and says so on stderr when it is not;
//! `--store postgres` without it is an error.
//!
//! Prints one line per case and last `N passed, M failed`; exits non-zero
//! on any failure (1) or bad arguments (2).

mod replay;

use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::atomic::{AtomicUsize, Ordering};

use ms_smt::store::{MemoryStore, PostgresStore, SqliteStore, TreeStore};
use ms_smt::{CompactedTree, FullTree};
use sqlx::sqlite::SqliteSynchronous;
use replay::{CaseResult, Tally, VectorFile, WritePath};

const USAGE: &str = "usage: vectors [--tree full|compacted|both] [--path sequential|batched|both] \
                     [--store memory|sqlite|postgres|all] FILE...";

/// Where the trees live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    Memory,
    Sqlite,
    Postgres,
}

#[derive(Debug)]
struct Options {
    full: bool,
    compacted: bool,
    paths: Vec<WritePath>,
    stores: Vec<StoreKind>,
    files: Vec<PathBuf>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut opts = Options {
        full: true,
        compacted: true,
        paths: vec![WritePath::Sequential, WritePath::Batched],
        stores: Vec::new(),
        files: Vec::new(),
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or(format!("{flag} needs a value"));
        match arg.as_str() {
            "--tree" => match value("--tree")?.as_str() {
                "full" => (opts.full, opts.compacted) = (true, false),
                "compacted" => (opts.full, opts.compacted) = (false, true),
                "both" => (opts.full, opts.compacted) = (true, true),
                other => return Err(format!("unknown --tree {other:?}")),
            },
            "--path" => {
                opts.paths = match value("--path")?.as_str() {
                    "sequential" => vec![WritePath::Sequential],
                    "batched" => vec![WritePath::Batched],
                    "both" => vec![WritePath::Sequential, WritePath::Batched],
                    other => return Err(format!("unknown --path {other:?}")),
                }
            }
            "--store" => {
                opts.stores = match value("--store")?.as_str() {
                    "memory" => vec![StoreKind::Memory],
                    "sqlite" => vec![StoreKind::Sqlite],
                    "postgres" => {
                        if pg_url().is_none() {
                            return Err("--store postgres needs MSSMT_PG_URL".into());
                        }
                        vec![StoreKind::Postgres]
                    }
                    "all" => all_stores(),
                    other => return Err(format!("unknown --store {other:?}")),
                }
            }
            "-h" | "--help" => return Err(String::new()),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag:?}")),
            file => opts.files.push(PathBuf::from(file)),
        }
    }
    if opts.files.is_empty() {
        return Err("no vector files given".into());
    }
    if opts.stores.is_empty() {
        opts.stores = all_stores();
    }
    Ok(opts)
}

fn pg_url() -> Option<String> {
    std::env::var("MSSMT_PG_URL").ok().filter(|u| !u.is_empty())
}

fn all_stores() -> Vec<StoreKind> {
    let mut stores = vec![StoreKind::Memory, StoreKind::Sqlite];
    if pg_url().is_some() {
        stores.push(StoreKind::Postgres);
    } else {
        eprintln!("note: --store all runs memory and sqlite only: MSSMT_PG_URL is not set");
    }
    stores
}

/// Replays `file` on every chosen layout and path, with a fresh store from
/// `fresh` per case.
async fn replay_on<S: TreeStore + 'static>(
    opts: &Options,
    tally: &mut Tally,
    name: &str,
    file: &VectorFile,
    store_label: &str,
    fresh: &(dyn Fn() -> S + Sync),
) {
    for &wp in &opts.paths {
        let mut results = Vec::new();
        if opts.full {
            let label = format!("tree=full store={store_label}");
            results.extend(
                replay::replay_file(name, file, &label, wp, || {
                    let store = fresh();
                    async move { Ok(FullTree::new(store)) }
                })
                .await,
            );
        }
        if opts.compacted {
            let label = format!("tree=compacted store={store_label}");
            results.extend(
                replay::replay_file(name, file, &label, wp, || {
                    let store = fresh();
                    async move { Ok(CompactedTree::new(store)) }
                })
                .await,
            );
        }
        for r in &results {
            report(tally, r);
        }
    }
}

/// Opened stores, one database per kind for the whole run.
struct Stores {
    sqlite: Option<(SqliteStore, PathBuf)>,
    postgres: Option<PostgresStore>,
    used: std::sync::Mutex<Vec<String>>,
    run_id: String,
    counter: AtomicUsize,
}

impl Stores {
    fn next_namespace(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let ns = format!("vectors-{}-{n}", self.run_id);
        if let Ok(mut used) = self.used.lock() {
            used.push(ns.clone());
        }
        ns
    }
}

async fn open_stores(opts: &Options) -> Result<Stores, String> {
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let sqlite = if opts.stores.contains(&StoreKind::Sqlite) {
        let path = std::env::temp_dir().join(format!("ms-smt-vectors-{run_id}.db"));
        // A scratch database: WAL without an fsync per commit.
        let options = SqliteStore::connect_options(&path).synchronous(SqliteSynchronous::Normal);
        let store = SqliteStore::open_with(options)
            .await
            .map_err(|e| format!("cannot open SQLite {}: {e}", path.display()))?;
        Some((store, path))
    } else {
        None
    };
    let postgres = match (opts.stores.contains(&StoreKind::Postgres), pg_url()) {
        (true, Some(url)) => Some(
            PostgresStore::connect(&url)
                .await
                .map_err(|e| format!("cannot connect to MSSMT_PG_URL: {e}"))?,
        ),
        _ => None,
    };
    Ok(Stores {
        sqlite,
        postgres,
        used: std::sync::Mutex::default(),
        run_id,
        counter: AtomicUsize::new(0),
    })
}

async fn run(opts: &Options) -> Result<Tally, String> {
    let stores = open_stores(opts).await?;
    let mut tally = Tally::default();
    for path in &opts.files {
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let file = match replay::load(path) {
            Ok(f) => f,
            Err(e) => {
                report(&mut tally, &CaseResult { name, failure: Some(e), proofs_checked: 0 });
                continue;
            }
        };
        for kind in &opts.stores {
            match kind {
                StoreKind::Memory => {
                    replay_on(opts, &mut tally, &name, &file, "memory", &MemoryStore::new).await;
                }
                StoreKind::Sqlite => {
                    if let Some((db, _)) = &stores.sqlite {
                        let fresh = || db.namespace(&stores.next_namespace());
                        replay_on(opts, &mut tally, &name, &file, "sqlite", &fresh).await;
                    }
                }
                StoreKind::Postgres => {
                    if let Some(db) = &stores.postgres {
                        let fresh = || db.namespace(&stores.next_namespace());
                        replay_on(opts, &mut tally, &name, &file, "postgres", &fresh).await;
                    }
                }
            }
        }
    }
    cleanup(stores).await;
    Ok(tally)
}

/// Removes the namespaces and the SQLite file this run created.
async fn cleanup(stores: Stores) {
    let used = stores.used.lock().map(|u| u.clone()).unwrap_or_default();
    if let Some(db) = &stores.postgres {
        for ns in &used {
            if let Err(e) = db.namespace(ns).delete_all().await {
                eprintln!("warning: cannot remove Postgres namespace {ns}: {e}");
            }
        }
    }
    if let Some((db, path)) = stores.sqlite {
        db.pool().close().await;
        for suffix in ["", "-wal", "-shm"] {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

fn report(tally: &mut Tally, r: &CaseResult) {
    match &r.failure {
        None if r.proofs_checked > 0 => println!(
            "ok   {}: root ok, {} proofs byte-exact",
            r.name, r.proofs_checked
        ),
        None => println!("ok   {}", r.name),
        Some(why) => println!("FAIL {}: {why}", r.name),
    }
    tally.add(r);
}

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::from(2);
        }
    };
    let tally = match runtime.block_on(run(&opts)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
