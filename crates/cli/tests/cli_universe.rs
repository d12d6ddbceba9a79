//! `universe serve` and `universe mirror` as an operator runs them: a
//! served SQLite file over TLS (its self-signed certificate made on first
//! start, then pinned by the mirror), mirrored into SQLite and Postgres;
//! a change on the server reaches the mirror leaf by leaf; every
//! namespace of the mirror equals the server's.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use ms_smt::Multiverse;
use ms_smt::multiverse::{ProofType, Universe};
use ms_smt_sql::SqliteStore;
use serde_json::Value;

use crate::cli_support::{Run, ms_smt};
use crate::support;
use support::scratch_postgres::ScratchPostgres;
use support::tapd_proofs::ProofMaker;

const UNIVERSES: u32 = 4;
const LEAVES: u32 = 25;

/// Universe `i`: asset `i`, a transfer universe when `i` is odd.
fn proof_type(i: u32) -> ProofType {
    if i.is_multiple_of(2) {
        ProofType::Issuance
    } else {
        ProofType::Transfer
    }
}

/// Fills the SQLite file `path` with the served universes.
async fn fill(maker: &ProofMaker, path: &Path) -> Vec<Universe> {
    let store = SqliteStore::open(path.to_str().expect("a UTF-8 path"))
        .await
        .expect("open the served file");
    let multiverse = Multiverse::new(store.clone());
    let mut universes = Vec::new();
    for i in 0..UNIVERSES {
        let universe = maker.universe(proof_type(i), i);
        let leaves: Vec<_> = (0..LEAVES)
            .map(|leaf| maker.leaf(proof_type(i), i, leaf, u64::from(leaf) + 1))
            .collect();
        multiverse
            .insert(&universe, &leaves)
            .await
            .expect("insert the served leaves");
        universes.push(universe);
    }
    store.pool().close().await;
    universes
}

/// Replaces leaf 3 of universe 1 in the served file (the server is
/// running: SQLite's WAL lets a second writer in).
async fn change_one(maker: &ProofMaker, path: &Path, universes: &[Universe]) {
    let store = SqliteStore::open(path.to_str().expect("a UTF-8 path"))
        .await
        .expect("open the served file");
    let mut changed = maker.leaf(proof_type(1), 1, 3, 1);
    changed.proof = maker.proof(proof_type(1), 1, 3, 777);
    changed.amount = 777;
    Multiverse::new(store.clone())
        .insert(&universes[1], &[changed])
        .await
        .expect("change a leaf");
    store.pool().close().await;
}

/// A running `universe serve`, stopped with SIGTERM when dropped.
struct Server {
    child: Child,
    /// Where it listens.
    address: String,
    /// Its certificate file.
    cert: String,
}

impl Server {
    /// Starts `ms-smt universe serve` on `db` and reads the address it
    /// printed.
    fn start(db: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ms-smt"))
            .args([
                "--db",
                db,
                "--json",
                "universe",
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn ms-smt universe serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the server's first line");
        let started: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not the server's JSON line ({e}): {line:?}"));
        Server {
            child,
            address: started["listening"].as_str().expect("listening").to_owned(),
            cert: started["tls_cert"].as_str().unwrap_or_default().to_owned(),
        }
    }

    /// Stops it as an init system would, and returns its exit code.
    fn stop(mut self) -> i32 {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM");
        let code = self.child.wait().expect("wait for the server");
        code.code().expect("an exit code, not a signal")
    }
}

/// `localhost:PORT` of a `127.0.0.1:PORT` address (the certificate names
/// localhost and 127.0.0.1; the pin ignores names anyway).
fn port_of(address: &str) -> &str {
    address.rsplit_once(':').expect("HOST:PORT").1
}

/// Every namespace of `db` with its root and leaf count, as `namespaces
/// --json` lists them (versions differ: the mirror commits its own way).
fn roots(db: &str) -> Vec<(String, String, Value)> {
    let run = ms_smt(&["--db", db, "--json", "namespaces"]);
    assert_eq!(run.code, 0, "namespaces: {}", run.stderr);
    let json = run.json();
    let mut out: Vec<_> = json["namespaces"]
        .as_array()
        .expect("an array of namespaces")
        .iter()
        .map(|ns| {
            (
                ns["name"].as_str().expect("name").to_owned(),
                ns["root"].to_string(),
                ns["leaves"].clone(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn mirror(db: &str, server: &Server) -> Run {
    ms_smt(&[
        "--db",
        db,
        "--json",
        "universe",
        "mirror",
        "--from",
        &format!("localhost:{}", port_of(&server.address)),
        "--tls-cert",
        &server.cert,
    ])
}

/// The report of a mirror round that succeeded.
fn report(run: &Run) -> Value {
    assert_eq!(run.code, 0, "mirror: {} {}", run.stdout, run.stderr);
    run.json()
}

/// Serves `served`, mirrors it into `mirror_db` fresh, changes one leaf,
/// mirrors again and once more with nothing changed.
async fn serve_and_mirror(
    maker: &ProofMaker,
    served: &Path,
    universes: &[Universe],
    mirror_db: &str,
) {
    let served_db = served.to_str().expect("a UTF-8 path");
    let server = Server::start(served_db, &["--rate", "1000", "--burst", "1000"]);
    assert!(
        Path::new(&server.cert).exists(),
        "a certificate was made on first start: {}",
        server.cert
    );

    let fresh = report(&mirror(mirror_db, &server));
    assert_eq!(fresh["universes"], u64::from(UNIVERSES));
    assert_eq!(fresh["fetched_whole"], u64::from(UNIVERSES));
    assert_eq!(fresh["leaves_written"], u64::from(UNIVERSES * LEAVES));
    assert_eq!(fresh["diverged"], 0);
    assert_eq!(roots(mirror_db), roots(served_db));
    // Both multiverse trees and every universe: 2 + 4 namespaces at least.
    assert!(roots(mirror_db).len() >= 2 + UNIVERSES as usize);

    change_one(maker, served, universes).await;
    let again = report(&mirror(mirror_db, &server));
    assert_eq!(again["unchanged"], u64::from(UNIVERSES - 1));
    assert_eq!(again["fetched_by_leaf"], 1);
    assert_eq!(again["leaves_written"], 1);
    assert_eq!(roots(mirror_db), roots(served_db));

    let idle = report(&mirror(mirror_db, &server));
    assert_eq!(idle["unchanged"], u64::from(UNIVERSES));
    assert_eq!(idle["leaves_fetched"], 0);

    assert_eq!(server.stop(), 0, "SIGTERM stops the server cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn universe_serve_and_mirror() {
    let maker = ProofMaker::from_vectors();
    let dir = tempfile::tempdir().expect("tempdir");
    let served = dir.path().join("served.db");
    let universes = fill(&maker, &served).await;
    let mirror_db = dir.path().join("mirror.db");
    serve_and_mirror(
        &maker,
        &served,
        &universes,
        mirror_db.to_str().expect("a UTF-8 path"),
    )
    .await;
    // The second start loads the pair the first one made.
    let server = Server::start(served.to_str().expect("a UTF-8 path"), &[]);
    let idle = report(&mirror(mirror_db.to_str().expect("a UTF-8 path"), &server));
    assert_eq!(idle["unchanged"], u64::from(UNIVERSES));
    assert_eq!(server.stop(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn universe_mirror_into_postgres() {
    let Some(url) = support::pg_url("universe_mirror_into_postgres") else {
        return;
    };
    let maker = ProofMaker::from_vectors();
    let dir = tempfile::tempdir().expect("tempdir");
    let served = dir.path().join("served.db");
    let universes = fill(&maker, &served).await;
    // A database of its own: `namespaces` lists every namespace in it.
    let scratch = ScratchPostgres::create(&url, "cli_universe").await;
    serve_and_mirror(&maker, &served, &universes, &scratch.url.clone()).await;
    scratch.drop_database().await;
}

/// What `universe` refuses before it serves or mirrors anything.
#[test]
fn universe_refusals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("u.db");
    let db = db.to_str().expect("a UTF-8 path");
    let plain = ms_smt(&[
        "--db",
        db,
        "universe",
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--plain",
    ]);
    assert_eq!(plain.code, 2, "{}", plain.stderr);
    assert!(
        plain.stderr.contains("only on a loopback"),
        "{}",
        plain.stderr
    );

    let half = dir.path().join("only.cert");
    std::fs::write(&half, b"x").expect("write");
    let half_pair = ms_smt(&[
        "--db",
        db,
        "universe",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        half.to_str().expect("a UTF-8 path"),
        "--tls-key",
        dir.path()
            .join("missing.key")
            .to_str()
            .expect("a UTF-8 path"),
    ]);
    assert_eq!(half_pair.code, 2, "{}", half_pair.stderr);

    // Nothing listens on port 1.
    let unreachable = ms_smt(&[
        "--db",
        db,
        "universe",
        "mirror",
        "--from",
        "127.0.0.1:1",
        "--plain",
    ]);
    assert_eq!(unreachable.code, 2, "{}", unreachable.stderr);
    assert!(
        unreachable.stderr.starts_with("ms-smt: error: "),
        "{}",
        unreachable.stderr
    );

    let bad_every = ms_smt(&[
        "--db",
        db,
        "universe",
        "mirror",
        "--from",
        "127.0.0.1:1",
        "--plain",
        "--every=-1",
    ]);
    assert_eq!(bad_every.code, 2, "{}", bad_every.stderr);
    assert!(bad_every.stderr.contains("--every"), "{}", bad_every.stderr);
}
