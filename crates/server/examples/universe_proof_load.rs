//! `QueryProof` under load (docs/benchmarks/federation.md, "Serving proofs
//! over tapd's gRPC protocol"): `--universes` universes holding `--leaves` leaves in all,
//! served over TLS on loopback (a self-signed identity, as tapd's first
//! start makes), and `--clients` clients, each on a connection of its own,
//! asking for the proof of a random leaf one after another for
//! `--seconds`. Prints proofs per second and the latency percentiles; the
//! first answers of every client are verified against the universe root
//! (a wrong proof fails the run).
//!
//! ```text
//! cargo run --release -p ms-smt-server --features grpc --example universe_proof_load -- \
//!     [--leaves 1000000] [--universes 10] [--clients 16] [--seconds 10] \
//!     [--db memory | --db sqlite | --db postgres://URL] [--proof-reads N] [--proof-batch N]
//! ```
//!
//! SQLite is a scratch file with the store's defaults (WAL,
//! `synchronous=FULL`); a Postgres URL names a server on which a scratch
//! database is created and dropped. The server runs without its
//! per-address rate (tapd's 100 qps default), which is what is measured
//! past here.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ms_smt::multiverse::{LeafKey, OutPoint, ProofType, Universe, UniverseId, UniverseLeaf};
use ms_smt::store::{ForestStore, MemoryStore};
use ms_smt::{CompressedProof, ComputedNode, Multiverse};
use ms_smt_server::grpc::proto::universerpc::universe_client::UniverseClient;
use ms_smt_server::grpc::proto::universerpc::{self as rpc, asset_key, id};
use ms_smt_server::grpc::{ServiceConfig, UniverseService, serve};
use ms_smt_server::{ListenConfig, TlsIdentity};
use ms_smt_sql::SqliteStore;
use ms_smt_test_support::bench::ScratchSqlite;
use ms_smt_test_support::scratch_postgres::ScratchPostgres;
use sha2::{Digest, Sha256};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

const USAGE: &str = "usage: universe_proof_load [--leaves N] [--universes N] [--clients N] \
                     [--seconds S] [--db memory | --db sqlite | --db postgres://URL] \
                     [--proof-reads N] [--proof-batch N]";

type Res<T> = Result<T, Box<dyn std::error::Error>>;
/// A client task's result (it crosses `tokio::spawn`).
type ClientRes<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Args {
    leaves: u64,
    universes: u64,
    clients: u64,
    seconds: f64,
    db: String,
    /// Proof reads at once and proofs per read (`UniverseService::with_proof_reads`).
    proof_reads: (usize, usize),
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        leaves: 1_000_000,
        universes: 10,
        clients: 16,
        seconds: 10.0,
        db: "memory".to_owned(),
        proof_reads: (
            ms_smt::multiverse::default_proof_reads(),
            ms_smt::multiverse::DEFAULT_PROOF_BATCH,
        ),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--leaves" => args.leaves = number(value()?)?,
            "--universes" => args.universes = number(value()?)?,
            "--clients" => args.clients = number(value()?)?,
            "--seconds" => {
                args.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?;
            }
            "--db" => args.db = value()?,
            "--proof-reads" => {
                args.proof_reads.0 = number(value()?)?.try_into().unwrap_or(usize::MAX)
            }
            "--proof-batch" => {
                args.proof_reads.1 = number(value()?)?.try_into().unwrap_or(usize::MAX)
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.universes == 0 || args.clients == 0 || args.leaves < args.universes {
        return Err(
            "--universes and --clients are at least 1, --leaves at least --universes".into(),
        );
    }
    Ok(args)
}

/// A deterministic 32 bytes for `(tag, n)`.
fn bytes(tag: &[u8], n: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tag);
    h.update(n.to_le_bytes());
    h.finalize().into()
}

fn universe(i: u64) -> Universe {
    Universe::new(UniverseId::Asset(bytes(b"asset", i)), ProofType::Issuance)
}

/// Leaf `n` of universe `i`: a 200-byte value (a small proof's size).
fn leaf(i: u64, n: u64) -> UniverseLeaf {
    let txid = bytes(b"txid", i << 32 | n);
    UniverseLeaf {
        key: LeafKey {
            outpoint: OutPoint {
                txid,
                index: u32::try_from(n % 4).unwrap_or(0),
            },
            script_key: bytes(b"script", i << 32 | n),
        },
        asset_id: bytes(b"asset", i),
        proof: txid.repeat(7)[..200].to_vec(),
        amount: 1 + n,
        burn: false,
    }
}

async fn build<S>(multiverse: &Multiverse<S>, args: &Args) -> Res<()>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
{
    let per = args.leaves / args.universes;
    let started = Instant::now();
    for i in 0..args.universes {
        let u = universe(i);
        let mut n = 0;
        while n < per {
            let end = (n + 50_000).min(per);
            let batch: Vec<UniverseLeaf> = (n..end).map(|n| leaf(i, n)).collect();
            multiverse.insert(&u, &batch).await?;
            n = end;
        }
    }
    println!(
        "built {} universes × {per} leaves in {:.1?}",
        args.universes,
        started.elapsed()
    );
    Ok(())
}

fn request(i: u64, l: &UniverseLeaf) -> rpc::UniverseKey {
    rpc::UniverseKey {
        id: Some(rpc::Id {
            id: Some(id::Id::AssetId(bytes(b"asset", i).to_vec())),
            proof_type: i32::from(ProofType::Issuance.number()),
        }),
        leaf_key: Some(rpc::AssetKey {
            outpoint: Some(asset_key::Outpoint::OpStr(l.key.outpoint.to_string())),
            script_key: Some(asset_key::ScriptKey::ScriptKeyBytes(
                l.key.script_key.to_vec(),
            )),
        }),
    }
}

/// One client: proofs of random leaves until `until`; its latencies. The
/// first `check` answers are verified against the roots.
async fn client(
    channel: Channel,
    seed: u64,
    args: (u64, u64),
    roots: Arc<Vec<ComputedNode>>,
    until: Instant,
) -> ClientRes<Vec<Duration>> {
    let (universes, per) = args;
    let mut client = UniverseClient::new(channel);
    let mut x = seed | 1;
    let mut latencies = Vec::new();
    while Instant::now() < until {
        // xorshift64: the same sequence every run.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (i, n) = (x % universes, (x >> 20) % per);
        let l = leaf(i, n);
        let request = request(i, &l);
        let started = Instant::now();
        let answer = client.query_proof(request).await?.into_inner();
        latencies.push(started.elapsed());
        if latencies.len() <= 50 {
            let proof = CompressedProof::decode(&answer.universe_inclusion_proof)?.decompress()?;
            let root = &roots[usize::try_from(i)?];
            if !proof.verify(&l.key.universe_key(), &l.leaf(ProofType::Issuance), root) {
                return Err(
                    format!("the proof of leaf {n} of universe {i} does not verify").into(),
                );
            }
        }
    }
    Ok(latencies)
}

async fn load<S>(multiverse: Multiverse<S>, args: &Args) -> Res<()>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
{
    build(&multiverse, args).await?;
    let mut roots = Vec::new();
    for i in 0..args.universes {
        let root = multiverse.root(&universe(i)).await?;
        roots.push(root.ok_or("a universe without a root")?);
    }
    let roots = Arc::new(roots);

    let (identity, cert_pem, _) = TlsIdentity::self_signed(&[])?;
    let listen = ListenConfig::tls(identity.grpc_server_config()?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let service = UniverseService::new(multiverse)
        .with_proof_reads(args.proof_reads.0, args.proof_reads.1)
        .with_config(ServiceConfig::default().per_address(None).per_token(None));
    let reader = service.proof_reader().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, service, listen, async {
        let _ = stopped.await;
    }));

    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(cert_pem))
        .domain_name("localhost");
    let mut channels = Vec::new();
    for _ in 0..args.clients {
        channels.push(
            Endpoint::from_shared(format!("https://localhost:{port}"))?
                .tls_config(tls.clone())?
                .connect()
                .await?,
        );
    }
    let per = args.leaves / args.universes;
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.seconds);
    let tasks: Vec<_> = channels
        .into_iter()
        .enumerate()
        .map(|(c, channel)| {
            let seed = 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(c as u64 + 1);
            tokio::spawn(client(
                channel,
                seed,
                (args.universes, per),
                roots.clone(),
                until,
            ))
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await?.map_err(|e| e as Box<dyn std::error::Error>)?);
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let at = |q: f64| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((all.len() as f64 - 1.0) * q).round() as usize;
        all.get(i).copied().unwrap_or_default()
    };
    #[allow(clippy::cast_precision_loss)]
    let rate = all.len() as f64 / elapsed.as_secs_f64();
    println!(
        "{} clients over TLS: {} proofs in {:.2?} = {rate:.0} proofs/s; latency p50 {:.2?}, \
         p99 {:.2?}, max {:.2?}",
        args.clients,
        all.len(),
        elapsed,
        at(0.5),
        at(0.99),
        at(1.0)
    );
    let read = reader.stats();
    #[allow(clippy::cast_precision_loss)]
    let mean = read.proofs as f64 / read.reads.max(1) as f64;
    println!(
        "proof reads: {} reads of {mean:.1} proofs each on average (at most {} at once, {} \
         proofs each)",
        read.reads, args.proof_reads.0, args.proof_reads.1
    );
    let _ = stop.send(());
    task.await??;
    Ok(())
}

async fn run(args: Args) -> Res<()> {
    match args.db.as_str() {
        "memory" => {
            println!("store: memory");
            load(Multiverse::new(MemoryStore::new()), &args).await
        }
        "sqlite" => {
            let scratch = ScratchSqlite::new("universe-proof-load");
            let store = SqliteStore::open(scratch.path.to_str().ok_or("a non-UTF-8 path")?).await?;
            println!("store: SQLite {}", scratch.path.display());
            let result = load(Multiverse::new(store.clone()), &args).await;
            store.pool().close().await;
            result
        }
        url => {
            let scratch = ScratchPostgres::create(url, "universe_proof_load").await;
            let store = scratch.connect().await;
            println!("store: Postgres (a scratch database)");
            let result = load(Multiverse::new(store.clone()), &args).await;
            scratch.drop_after(store).await;
            result
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("universe_proof_load: {e}");
            ExitCode::FAILURE
        }
    }
}
