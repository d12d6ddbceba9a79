//! Interop evidence: a Go client built from the reference's own `.proto`
//! files (`tests/go-interop`, built by `scripts/go-interop.sh`) syncs from
//! our server over TLS as tapd's syncer does, and checks every root, leaf
//! key, leaf hash and inclusion proof with the reference's own `mssmt`
//! package against the reference's tree of the same leaves. The leaves
//! come from the Go side (`go-interop gen`: real secp256k1 script and
//! group keys, as tapd parses them); this side writes them through
//! [`Multiverse::insert`] into SQLite or Postgres and serves them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use ms_smt::Multiverse;
use ms_smt::multiverse::{LeafKey, OutPoint, ProofType, Universe, UniverseId, UniverseLeaf};
use ms_smt::store::ForestStore;
use ms_smt_server::grpc::{ServiceConfig, UniverseService, serve};
use ms_smt_server::{ListenConfig, TlsIdentity};
use ms_smt_sql::SqliteStore;
use serde::Deserialize;

/// The truth file of `go-interop gen` (its `Truth` type).
#[derive(Deserialize)]
struct Truth {
    universes: Vec<TruthUniverse>,
}

#[derive(Deserialize)]
struct TruthUniverse {
    asset_id: Option<String>,
    group_key: Option<String>,
    proof_type: String,
    leaves: Vec<TruthLeaf>,
}

#[derive(Deserialize)]
struct TruthLeaf {
    txid: String,
    index: u32,
    script_key: String,
    asset_id: String,
    proof: String,
    amount: String,
    #[serde(default)]
    burn: bool,
}

/// What `go-interop check` counted (its `Report` type).
#[derive(Deserialize, Debug)]
struct Report {
    runtime_id: i64,
    universes: usize,
    leaf_keys: usize,
    leaf_hashes: usize,
    leaves: usize,
    proofs: usize,
    multiverse_proofs: usize,
    multiverse_roots: usize,
    mismatches: Vec<String>,
}

fn bytes32(s: &str) -> [u8; 32] {
    hex::decode(s).expect("hex").try_into().expect("32 bytes")
}

/// The Go client, built once per test binary.
fn go_client() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/go-interop.sh");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-interop");
        let built = Command::new(&script)
            .arg(&out)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        assert!(
            built.status.success(),
            "{} failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&built.stderr)
        );
        PathBuf::from(String::from_utf8(built.stdout).expect("utf-8").trim())
    })
}

/// `go-interop gen` with a fixed seed (printed, so that a failure can be
/// replayed by hand).
fn truth(dir: &Path, seed: u64) -> (PathBuf, Truth) {
    let path = dir.join("truth.json");
    eprintln!("go-interop gen -seed {seed}");
    let out = Command::new(go_client())
        .args([
            "gen",
            "-seed",
            &seed.to_string(),
            "-universes",
            "6",
            "-leaves",
            "40",
        ])
        .output()
        .expect("run go-interop gen");
    assert!(
        out.status.success(),
        "gen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&path, &out.stdout).expect("write the truth");
    let truth = serde_json::from_slice(&out.stdout).expect("parse the truth");
    (path, truth)
}

/// The truth's universes, as the crate names them.
fn universes(truth: &Truth) -> Vec<(Universe, Vec<UniverseLeaf>)> {
    truth
        .universes
        .iter()
        .map(|u| {
            let id = match (&u.asset_id, &u.group_key) {
                (Some(a), None) => UniverseId::Asset(bytes32(a)),
                (None, Some(g)) => UniverseId::Group(bytes32(g)),
                _ => panic!("a universe is an asset or a group"),
            };
            let proof_type = match u.proof_type.as_str() {
                "issuance" => ProofType::Issuance,
                "transfer" => ProofType::Transfer,
                other => panic!("proof type {other}"),
            };
            let leaves = u
                .leaves
                .iter()
                .map(|l| UniverseLeaf {
                    key: LeafKey {
                        outpoint: OutPoint {
                            txid: bytes32(&l.txid),
                            index: l.index,
                        },
                        script_key: bytes32(&l.script_key),
                    },
                    asset_id: bytes32(&l.asset_id),
                    proof: hex::decode(&l.proof).expect("hex"),
                    amount: l.amount.parse().expect("an amount"),
                    burn: l.burn,
                })
                .collect();
            (Universe::new(id, proof_type), leaves)
        })
        .collect()
}

/// Writes the truth into `multiverse`, serves it over TLS (a self-signed
/// pair, as tapd's first start makes), runs the Go client against it and
/// checks that it found no mismatch in a walk of everything.
async fn sync_with_the_go_client<S>(multiverse: Multiverse<S>, seed: u64)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let (truth_path, truth) = truth(dir.path(), seed);
    let all = universes(&truth);
    for (universe, leaves) in &all {
        multiverse.insert(universe, leaves).await.expect("insert");
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (identity, _, _) = TlsIdentity::self_signed(&[]).expect("identity");
    let listen = ListenConfig::tls(identity.grpc_server_config().expect("server config"));
    // The client asks for every proof: no per-address rate here (the
    // default, tapd's 100 qps, is the limits tests' business).
    let service = UniverseService::new(multiverse)
        .with_runtime_id(777)
        .with_config(ServiceConfig::default().per_address(None).per_token(None));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, service, listen, async {
        let _ = stopped.await;
    }));

    let bin = go_client().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args(["check", "-addr", &addr.to_string(), "-truth"])
            .arg(&truth_path)
            .output()
            .expect("run go-interop check")
    })
    .await
    .expect("join");
    let _ = stop.send(());
    task.await.expect("join").expect("serve");

    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the Go client's report ({e}); its stderr:\n{stderr}"));
    assert!(
        report.mismatches.is_empty() && out.status.success(),
        "the reference's code disagrees:\n{}\n{stderr}",
        report.mismatches.join("\n")
    );
    // ...and it checked everything there was, not nothing.
    let leaves: usize = all.iter().map(|(_, l)| l.len()).sum();
    assert_eq!(report.runtime_id, 777);
    assert_eq!(report.universes, all.len());
    assert_eq!(report.multiverse_roots, 2);
    assert_eq!(report.leaf_keys, leaves);
    assert_eq!(report.leaf_hashes, leaves);
    assert_eq!(report.leaves, leaves);
    assert_eq!(report.proofs, leaves);
    assert_eq!(report.multiverse_proofs, leaves);
    assert!(
        all.iter()
            .any(|(u, _)| matches!(u.id, UniverseId::Group(_)))
            && all.iter().any(|(_, l)| l.iter().any(|l| l.burn))
            && all
                .iter()
                .any(|(_, l)| l.iter().any(|l| l.amount > i64::MAX as u64)),
        "the truth holds a group, a burn and a sum above i64::MAX"
    );
    eprintln!("go client: {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_go_client_agrees_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("universes.db");
    let store = SqliteStore::open(path.to_str().expect("utf-8"))
        .await
        .expect("open");
    sync_with_the_go_client(Multiverse::new(store), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_go_client_agrees_on_postgres() {
    let Some(admin) = ms_smt_test_support::pg_url("the_reference_go_client_agrees_on_postgres")
    else {
        return;
    };
    // A database of its own: the multiverse trees of the other Postgres
    // tests share the test database.
    let db =
        ms_smt_test_support::scratch_postgres::ScratchPostgres::create(&admin, "go_client").await;
    let store = db.connect().await;
    sync_with_the_go_client(Multiverse::new(store.clone()), 2).await;
    db.drop_after(store).await;
}
