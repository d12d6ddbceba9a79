//! Federation over HTTP, measured: a source SQLite database of N leaves
//! served on loopback, a local SQLite database synced from it in full,
//! then after each of several change sets (a third replaced, a third new,
//! a third deleted) synced again by fetching only the differing subtrees;
//! and, in the same run, a full export/import of the same tree
//! (`View::export_trunk`/`export_chunk` + `Tree::import`, in process, the
//! binary encodings) for comparison. With `--journal yes` the source's
//! change journal is on after the full sync, so the change sets go through
//! the change feed (`GET /changes`) instead of the diff walk. Opt-in; not
//! part of the test suite.
//!
//! Access control is on: the server's public read is off and the peer
//! reads with a read token (`--access no`: public read, no token, as
//! before access control). `--tls yes` serves HTTPS with a self-signed
//! certificate the peer pins. Rate limits are off unless `--rate QPS`
//! (burst 10) is given.
//!
//! ```text
//! cargo run --release --example federation_bench -- \
//!     [--leaves 100000] [--changes 100,1000] [--dir /tmp] [--journal yes] \
//!     [--access yes|no] [--tls yes|no] [--rate QPS]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ms_smt::store::JournalStore;
use ms_smt::{Chunk, CompactedTree, Key, Leaf, Trunk};
use ms_smt_server::access::{Grants, issue_token};
use ms_smt_server::{
    HttpPeer, ListenConfig, Rate, ServerConfig, TlsIdentity, Trust, router, serve,
};
use ms_smt_sql::SqliteStore;
use sha2::{Digest, Sha256};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const NS: &str = "bench";
/// Leaves per export chunk.
const PER_CHUNK: u64 = 4_096;

fn key(tag: &str, i: u64) -> Key {
    Key(Sha256::digest(format!("{tag}/{i}")).into())
}

fn leaf(i: u64) -> (Key, Leaf) {
    (
        key("leaf", i),
        Leaf::new(i.to_le_bytes().to_vec(), 1 + i % 7),
    )
}

/// `d` changes, the `round`-th set: replaced, new and deleted leaves.
fn changes(n: u64, d: u64, round: u64) -> Vec<(Key, Leaf)> {
    let stride = (n / d.max(1)).max(1);
    (0..d)
        .map(|i| {
            let at = (i * stride + round) % n;
            match i % 3 {
                0 => (
                    key("leaf", at),
                    Leaf::new(format!("v{round}").into_bytes(), 9),
                ),
                1 => (
                    key(&format!("new{round}"), i),
                    Leaf::new(b"new".to_vec(), 2),
                ),
                _ => (key("leaf", at), Leaf::empty()),
            }
        })
        .collect()
}

async fn open(path: &PathBuf) -> Res<SqliteStore> {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    Ok(SqliteStore::open(path).await?)
}

/// One sync over HTTP, printed as a table row.
async fn sync(what: &str, peer: &HttpPeer, local: &CompactedTree<SqliteStore>) -> Res<()> {
    let before = peer.stats();
    let start = Instant::now();
    let report = peer.sync_into(local).await?;
    let took = start.elapsed();
    let http = peer.stats().since(&before);
    println!(
        "| {what} | {} | {} | {} | {} | {} | {:.1} ms |",
        http.requests,
        report.requests,
        report.fetched,
        http.bytes_received,
        http.bytes_sent,
        took.as_secs_f64() * 1e3
    );
    Ok(())
}

/// How the bench's server is exposed.
struct Exposure {
    access: bool,
    tls: bool,
    rate: Option<f64>,
}

async fn run(n: u64, sets: Vec<u64>, dir: PathBuf, journal: bool, how: Exposure) -> Res<()> {
    let source = open(&dir.join("ms_smt_fed_bench_source.db")).await?;
    let local_db = open(&dir.join("ms_smt_fed_bench_local.db")).await?;
    let src = CompactedTree::new(source.open_namespace(NS));
    let start = Instant::now();
    src.insert_many((0..n).map(leaf)).await?;
    println!("built {n} leaves in the source in {:.2?}", start.elapsed());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let rate = how.rate.map(|qps| Rate::new(qps, 10));
    let config = ServerConfig::default()
        .public_read(!how.access)
        .per_address(rate)
        .per_token(rate);
    let (listen, url, trust) = if how.tls {
        let (identity, _, _) = TlsIdentity::self_signed(&[])?;
        let cert = identity.certificate().ok_or("no certificate")?.clone();
        (
            ListenConfig::tls(identity.server_config()?),
            format!("https://{}", listener.local_addr()?),
            Some(Trust::Pinned(cert)),
        )
    } else {
        (
            ListenConfig::plain(),
            format!("http://{}", listener.local_addr()?),
            None,
        )
    };
    tokio::spawn(serve(
        listener,
        router(source.clone(), config),
        listen,
        std::future::pending(),
    ));
    let mut peer = match trust {
        Some(trust) => HttpPeer::with_trust(&url, NS, trust)?,
        None => HttpPeer::new(&url, NS)?,
    };
    if how.access {
        let grants: Grants = format!("read:{NS}").parse()?;
        let token = issue_token(&source, "bench", &grants, None).await?;
        peer = peer.with_token(token.secret.expose())?;
    }
    println!(
        "access control {}, {}, rate limit {}",
        if how.access { "on (read token)" } else { "off" },
        if how.tls { "TLS" } else { "plain HTTP" },
        how.rate
            .map_or("off".to_owned(), |q| format!("{q} req/s burst 10"))
    );
    let local = CompactedTree::new(local_db.open_namespace(NS));
    println!(
        "\n| sync over HTTP | HTTP requests | levels | subtrees | bytes in | bytes out | time |"
    );
    println!("|---|---|---|---|---|---|---|");
    sync(&format!("full, {n} leaves into empty"), &peer, &local).await?;
    if journal {
        // From here the changes go through the feed: the local root is the
        // journal's first version.
        src.store().enable_journal().await?;
    }
    for (round, d) in sets.iter().enumerate() {
        src.insert_many(changes(n, *d, round as u64)).await?;
        sync(&format!("{d} changed leaves"), &peer, &local).await?;
        if local.root().await? != src.root().await? {
            return Err("the synced root differs from the source's".into());
        }
    }

    // Full export/import of the same tree, in process.
    let pin = src.pin("export").await?;
    let view = src.at(&pin);
    let level = Trunk::level_for(pin.root.sum.min(n), PER_CHUNK);
    let start = Instant::now();
    let trunk_bytes = view.export_trunk(level).await?.encode();
    let trunk = Trunk::decode(&trunk_bytes)?;
    let target = CompactedTree::new(local_db.open_namespace("imported"));
    let mut import = target.import(trunk.clone()).await?;
    let mut bytes = trunk_bytes.len();
    for (position, _) in &trunk.chunks {
        let encoded = view.export_chunk(*position).await?.encode();
        bytes += encoded.len();
        import.add(&Chunk::decode(&encoded)?).await?;
    }
    let root = import.finish().await?;
    let took = start.elapsed();
    src.unpin("export").await?;
    if root != pin.root {
        return Err("the imported root differs from the source's".into());
    }
    println!(
        "\nfull export/import (in process, binary): level {level}, {} chunks, {bytes} bytes, {:.1} ms",
        trunk.chunks.len(),
        took.as_secs_f64() * 1e3
    );
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut n, mut sets, mut dir) = (100_000u64, vec![100u64, 1_000], std::env::temp_dir());
    let mut journal = false;
    let mut how = Exposure {
        access: true,
        tls: false,
        rate: None,
    };
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let ok = match flag.as_str() {
            "--leaves" => value.parse().map(|v| n = v).is_ok(),
            "--changes" => value
                .split(',')
                .map(str::parse)
                .collect::<Result<Vec<u64>, _>>()
                .map(|v| sets = v)
                .is_ok(),
            "--dir" => {
                dir = PathBuf::from(value);
                true
            }
            "--journal" => {
                journal = value == "yes";
                matches!(value.as_str(), "yes" | "no")
            }
            "--access" => {
                how.access = value == "yes";
                matches!(value.as_str(), "yes" | "no")
            }
            "--tls" => {
                how.tls = value == "yes";
                matches!(value.as_str(), "yes" | "no")
            }
            "--rate" => value.parse().map(|q| how.rate = Some(q)).is_ok(),
            _ => false,
        };
        if !ok {
            eprintln!(
                "usage: federation_bench [--leaves N] [--changes D,D,...] [--dir DIR] \
                 [--journal yes|no] [--access yes|no] [--tls yes|no] [--rate QPS]"
            );
            return ExitCode::FAILURE;
        }
    }
    let result = tokio::runtime::Runtime::new()
        .map_err(Box::<dyn std::error::Error>::from)
        .and_then(|rt| rt.block_on(run(n, sets, dir, journal, how)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
