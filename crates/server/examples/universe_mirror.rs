//! The mirror's figures (BENCHMARKS.md, "Mirroring over tapd's protocol"):
//! a universe server of this crate on loopback over TLS (a self-signed
//! identity, the client pinning it), `--universes` universes of `--leaves`
//! leaves each (every other one a transfer universe), mirrored fresh into
//! SQLite or Postgres by [`UniversePeer`]; then `--change` percent of the
//! leaves are replaced on the server (spread over every universe, the
//! worst case for the key listings, or with `--concentrated` in as few
//! universes as hold them) and mirrored again.
//!
//! ```text
//! cargo run --release -p ms-smt-server --features grpc --example universe_mirror -- \
//!     [--universes 50] [--leaves 200] [--change 1] [--concentrated] \
//!     [--db sqlite | --db postgres://URL]
//! ```
//!
//! The server's store is in memory (what is measured is the mirror). A
//! Postgres URL names a server on which a scratch database is created and
//! dropped; SQLite is a scratch file with the store's defaults (WAL,
//! `synchronous=FULL`). Every round ends with every universe root and both
//! multiverse roots compared with the server's; the run fails if one
//! differs.

use std::process::ExitCode;
use std::time::Instant;

use ms_smt::Multiverse;
use ms_smt::multiverse::{ProofType, Universe, UniverseLeaf};
use ms_smt::store::{ForestStore, MemoryStore};
use ms_smt_server::grpc::{MirrorReport, ServiceConfig, UniversePeer, UniverseService, serve};
use ms_smt_server::{ListenConfig, TlsIdentity, Trust};
use ms_smt_sql::SqliteStore;
use ms_smt_test_support::bench::ScratchSqlite;
use ms_smt_test_support::scratch_postgres::ScratchPostgres;
use ms_smt_test_support::tapd_proofs::ProofMaker;

const USAGE: &str = "usage: universe_mirror [--universes N] [--leaves N] [--change PERCENT] \
                     [--concentrated] [--db sqlite | --db postgres://URL]";

struct Args {
    universes: u32,
    leaves: u32,
    change: f64,
    concentrated: bool,
    db: String,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        universes: 50,
        leaves: 200,
        change: 1.0,
        concentrated: false,
        db: "sqlite".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--universes" => args.universes = value()?.parse().map_err(|e| format!("{e}"))?,
            "--leaves" => args.leaves = value()?.parse().map_err(|e| format!("{e}"))?,
            "--change" => args.change = value()?.parse().map_err(|e| format!("{e}"))?,
            "--db" => args.db = value()?,
            "--concentrated" => args.concentrated = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if !(0.0..=100.0).contains(&args.change) {
        return Err("--change is a percentage".into());
    }
    Ok(args)
}

/// Universe `i`: asset `i`, a transfer universe when `i` is odd.
fn proof_type(i: u32) -> ProofType {
    if i.is_multiple_of(2) {
        ProofType::Issuance
    } else {
        ProofType::Transfer
    }
}

/// The server's multiverse: `universes` × `leaves`.
async fn build(
    maker: &ProofMaker,
    universes: u32,
    leaves: u32,
) -> (Multiverse<MemoryStore>, Vec<Universe>) {
    let server = Multiverse::new(MemoryStore::new());
    let mut out = Vec::new();
    for i in 0..universes {
        let universe = maker.universe(proof_type(i), i);
        let batch: Vec<UniverseLeaf> = (0..leaves)
            .map(|leaf| maker.leaf(proof_type(i), i, leaf, u64::from(leaf) + 1))
            .collect();
        server
            .insert(&universe, &batch)
            .await
            .expect("server insert");
        out.push(universe);
    }
    (server, out)
}

/// Every root of the mirror equals the server's.
async fn check<S>(server: &Multiverse<MemoryStore>, mirror: &Multiverse<S>, universes: &[Universe])
where
    S: ForestStore + Clone,
    S::Tree: Clone,
{
    for universe in universes {
        let ours = mirror.root(universe).await.expect("mirror root");
        let theirs = server.root(universe).await.expect("server root");
        assert_eq!(ours, theirs, "universe {}", universe.namespace());
    }
    for proof_type in [ProofType::Issuance, ProofType::Transfer] {
        assert_eq!(
            mirror.multiverse_root(proof_type).await.expect("mirror"),
            server.multiverse_root(proof_type).await.expect("server"),
            "{proof_type:?} multiverse"
        );
    }
}

fn line(label: &str, r: &MirrorReport) {
    println!(
        "{label}: {:.2?}, {} universes ({} unchanged, {} whole, {} by leaf), \
         {} leaves received, {} written, {} commits, {} bytes",
        r.elapsed,
        r.universes,
        r.unchanged,
        r.fetched_whole,
        r.fetched_by_leaf,
        r.leaves_fetched,
        r.leaves_written,
        r.commits,
        r.bytes
    );
}

async fn mirror_into<S>(
    args: &Args,
    maker: &ProofMaker,
    server: &Multiverse<MemoryStore>,
    universes: &[Universe],
    peer: &UniversePeer,
    mirror: Multiverse<S>,
) -> Result<(), Box<dyn std::error::Error>>
where
    S: ForestStore + Clone,
    S::Tree: Clone,
{
    let fresh = peer.mirror(&mirror).await?;
    check(server, &mirror, universes).await;
    line("fresh", &fresh);

    // Replace `change` percent of the leaves, spread over the universes or
    // in the first ones.
    let total = u64::from(args.universes) * u64::from(args.leaves);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let changes = ((total as f64) * args.change / 100.0).round() as u64;
    let started = Instant::now();
    for k in 0..changes {
        let (u, l) = (u64::from(args.universes), u64::from(args.leaves));
        let (i, leaf) = if args.concentrated {
            ((k / l) % u, k % l)
        } else {
            (k % u, (k / u) % l)
        };
        let (i, leaf) = (u32::try_from(i)?, u32::try_from(leaf)?);
        let mut changed = maker.leaf(proof_type(i), i, leaf, 1);
        changed.proof = maker.proof(proof_type(i), i, leaf, 1_000_000 + k);
        changed.amount = 1_000_000 + k;
        server.insert(&universes[i as usize], &[changed]).await?;
    }
    println!(
        "changed {changes} leaves on the server in {:.2?}",
        started.elapsed()
    );

    let again = peer.mirror(&mirror).await?;
    check(server, &mirror, universes).await;
    line("after the change", &again);
    #[allow(clippy::cast_precision_loss)]
    let (time, bytes) = (
        again.elapsed.as_secs_f64() / fresh.elapsed.as_secs_f64() * 100.0,
        again.bytes as f64 / fresh.bytes as f64 * 100.0,
    );
    println!("second round: {time:.1} % of the fresh round's time, {bytes:.1} % of its bytes");
    let idle = peer.mirror(&mirror).await?;
    line("nothing changed", &idle);
    Ok(())
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let maker = ProofMaker::from_vectors();
    let started = Instant::now();
    let (server, universes) = build(&maker, args.universes, args.leaves).await;
    println!(
        "server: {} universes × {} leaves built in {:.2?}",
        args.universes,
        args.leaves,
        started.elapsed()
    );
    let (identity, _, _) = TlsIdentity::self_signed(&[])?;
    let listen = ListenConfig::tls(identity.grpc_server_config()?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let service = UniverseService::new(server.clone())
        .with_config(ServiceConfig::default().per_address(None).per_token(None));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, service, listen, async {
        let _ = stopped.await;
    }));
    let trust = Trust::Pinned(identity.certificate().ok_or("no certificate")?.clone());
    let peer = UniversePeer::connect_tls(&format!("localhost:{port}"), &trust).await?;

    if args.db == "sqlite" {
        let scratch = ScratchSqlite::new("universe-mirror");
        let store = SqliteStore::open(scratch.path.to_str().ok_or("a non-UTF-8 path")?).await?;
        println!("mirror: SQLite {}", scratch.path.display());
        mirror_into(
            &args,
            &maker,
            &server,
            &universes,
            &peer,
            Multiverse::new(store.clone()),
        )
        .await?;
        store.pool().close().await;
    } else {
        let scratch = ScratchPostgres::create(&args.db, "universe_mirror").await;
        let store = scratch.connect().await;
        println!("mirror: Postgres (a scratch database)");
        let result = mirror_into(
            &args,
            &maker,
            &server,
            &universes,
            &peer,
            Multiverse::new(store.clone()),
        )
        .await;
        scratch.drop_after(store).await;
        result?;
    }
    let _ = stop.send(());
    task.await??;
    Ok(())
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
            eprintln!("universe_mirror: {e}");
            ExitCode::FAILURE
        }
    }
}
