//! Conformance runner: replays files in the official MS-SMT test-vector
//! format against every tree layout, write path and store.
//!
//! ```text
//! cargo run --release --example vectors -- [--tree full|compacted|both] \
//!     [--path sequential|batched|both] [--store memory|sqlite|postgres|all] \
//!     [--recent-nodes N] FILE...
//! ```
//!
//! Defaults: `--tree both --path both --store all`, and SQL tree handles
//! that remember the store's default number of recent nodes; `--recent-nodes
//! 0` makes them read every node from the database. Each case runs on a fresh
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

use ms_smt::store::DEFAULT_RECENT_NODES;
use replay::{CaseResult, StoreKind, Stores, Tally, WritePath};

const USAGE: &str = "usage: vectors [--tree full|compacted|both] [--path sequential|batched|both] \
                     [--store memory|sqlite|postgres|all] [--recent-nodes N] FILE...";

#[derive(Debug)]
struct Options {
    full: bool,
    compacted: bool,
    paths: Vec<WritePath>,
    stores: Vec<StoreKind>,
    recent_nodes: usize,
    files: Vec<PathBuf>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut opts = Options {
        full: true,
        compacted: true,
        paths: vec![WritePath::Sequential, WritePath::Batched],
        stores: Vec::new(),
        recent_nodes: DEFAULT_RECENT_NODES,
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
            "--recent-nodes" => {
                let v = value("--recent-nodes")?;
                opts.recent_nodes = v
                    .parse()
                    .map_err(|_| format!("--recent-nodes needs a count, not {v:?}"))?;
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

async fn run(opts: &Options) -> Result<Tally, String> {
    let stores = Stores::open(&opts.stores, pg_url().as_deref(), opts.recent_nodes).await?;
    let mut tally = Tally::default();
    for path in &opts.files {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let file = match replay::load(path) {
            Ok(f) => f,
            Err(e) => {
                report(
                    &mut tally,
                    &CaseResult {
                        name,
                        failure: Some(e),
                        proofs_checked: 0,
                    },
                );
                continue;
            }
        };
        for &kind in &opts.stores {
            stores
                .replay(
                    kind,
                    &name,
                    &file,
                    opts.full,
                    opts.compacted,
                    &opts.paths,
                    &mut |r| report(&mut tally, r),
                )
                .await;
        }
    }
    stores.cleanup().await;
    Ok(tally)
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
