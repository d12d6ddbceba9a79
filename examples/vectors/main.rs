//! Conformance runner: replays files in the official MS-SMT test-vector
//! format against every tree layout, write path and store.
//!
//! ```text
//! cargo run --release --example vectors -- [--tree full|compacted|both] \
//!     [--path sequential|batched|both] FILE...
//! ```
//!
//! Prints one line per case and last `N passed, M failed`; exits non-zero
//! on any failure or bad arguments.

mod replay;

use std::path::PathBuf;
use std::process::ExitCode;

use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, FullTree};
use replay::{CaseResult, Tally, WritePath};

const USAGE: &str = "usage: vectors [--tree full|compacted|both] [--path sequential|batched|both] FILE...";

#[derive(Debug)]
struct Options {
    full: bool,
    compacted: bool,
    paths: Vec<WritePath>,
    files: Vec<PathBuf>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut opts = Options {
        full: true,
        compacted: true,
        paths: vec![WritePath::Sequential, WritePath::Batched],
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
            "-h" | "--help" => return Err(String::new()),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag:?}")),
            file => opts.files.push(PathBuf::from(file)),
        }
    }
    if opts.files.is_empty() {
        return Err("no vector files given".into());
    }
    Ok(opts)
}

async fn run(opts: &Options) -> Tally {
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
        for &wp in &opts.paths {
            let mut results = Vec::new();
            if opts.full {
                results.extend(
                    replay::replay_file(&name, &file, "tree=full store=memory", wp, || async {
                        Ok(FullTree::new(MemoryStore::new()))
                    })
                    .await,
                );
            }
            if opts.compacted {
                results.extend(
                    replay::replay_file(&name, &file, "tree=compacted store=memory", wp, || async {
                        Ok(CompactedTree::new(MemoryStore::new()))
                    })
                    .await,
                );
            }
            for r in &results {
                report(&mut tally, r);
            }
        }
    }
    tally
}

fn report(tally: &mut Tally, r: &CaseResult) {
    match &r.failure {
        None if r.proofs_checked > 0 => println!("ok   {}: root ok, {} proofs byte-exact", r.name, r.proofs_checked),
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
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::from(2);
        }
    };
    let tally = runtime.block_on(run(&opts));
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if tally.failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
