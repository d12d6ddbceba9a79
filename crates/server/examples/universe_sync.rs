//! Brings a local namespace level with a remote universe server's, fetching
//! only the subtrees that differ; every answer is checked against its
//! parent's hash before anything is written.
//!
//! ```text
//! cargo run --release --example universe_sync -- \
//!     --from https://HOST:PORT --ns NS --db <sqlite path | postgres://URL> [--local-ns NAME] \
//!     [--token TOKEN | --token-file FILE] [--pin-cert PEM | --ca-file PEM]
//! ```
//!
//! An `https://` server is verified against the system's roots, or the
//! authorities of `--ca-file`, or exactly the certificate of `--pin-cert`
//! (a self-signed server's `tls.cert`). A token (for a server whose public
//! read is off) goes only over https or to loopback.

use std::process::ExitCode;
use std::time::Instant;

use ms_smt_server::{DatabaseExt, HttpPeer, Trust};
use ms_smt_sql::Database;

const USAGE: &str = "usage: universe_sync --from https://HOST:PORT --ns NS \
                     --db <sqlite path | postgres URL> [--local-ns NAME] \
                     [--token TOKEN | --token-file FILE] [--pin-cert PEM | --ca-file PEM]";

struct Args {
    from: String,
    ns: String,
    db: String,
    local_ns: Option<String>,
    token: Option<String>,
    trust: Option<Trust>,
}

async fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let database = Database::open(&a.db).await?;
    let mut peer = match a.trust {
        Some(trust) => HttpPeer::with_trust(&a.from, &a.ns, trust)?,
        None => HttpPeer::new(&a.from, &a.ns)?,
    };
    if let Some(token) = &a.token {
        peer = peer.with_token(token)?;
    }
    let local_ns = a.local_ns.unwrap_or_else(|| a.ns.clone());
    let start = Instant::now();
    let report = database.sync_from(&local_ns, &peer).await?;
    let took = start.elapsed();
    let http = peer.stats();
    println!(
        "synced {}/{} into {}:{local_ns} in {took:.2?}",
        a.from, a.ns, a.db
    );
    println!("root {} sum {}", report.root.hash, report.root.sum);
    println!(
        "{} HTTP requests ({} levels asked), {} subtrees fetched, {} bytes received, {} sent",
        http.requests, report.requests, report.fetched, http.bytes_received, http.bytes_sent
    );
    println!(
        "{} leaves written, {} deleted",
        report.upserts, report.deletes
    );
    Ok(())
}

fn parse() -> Option<Args> {
    let mut args = std::env::args().skip(1);
    let (mut from, mut ns, mut db, mut local_ns) = (None, None, None, None);
    let (mut token, mut trust) = (None, None);
    while let Some(flag) = args.next() {
        let value = args.next()?;
        match flag.as_str() {
            "--from" => from = Some(value),
            "--ns" => ns = Some(value),
            "--db" => db = Some(value),
            "--local-ns" => local_ns = Some(value),
            "--token" => token = Some(value),
            "--token-file" => token = Some(std::fs::read_to_string(value).ok()?.trim().to_owned()),
            "--pin-cert" => trust = Some(Trust::pinned_file(value.as_ref()).ok()?),
            "--ca-file" => trust = Some(Trust::ca_file(value.as_ref()).ok()?),
            _ => return None,
        }
    }
    Some(Args {
        from: from?,
        ns: ns?,
        db: db?,
        local_ns,
        token,
        trust,
    })
}

fn main() -> ExitCode {
    let Some(args) = parse() else {
        eprintln!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let result = tokio::runtime::Runtime::new()
        .map_err(Box::<dyn std::error::Error>::from)
        .and_then(|rt| rt.block_on(run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
