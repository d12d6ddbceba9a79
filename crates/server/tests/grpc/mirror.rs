//! [`UniversePeer`]: mirroring a server that speaks tapd's universe
//! protocol (this crate's, on the memory store) into SQLite, over loopback.
//!
//! * `a_mirror_copies_then_fetches_only_what_changed`: a first round
//!   copies every universe (issuance and transfer) with the server's roots
//!   and multiverse roots; a second one fetches nothing; after the server
//!   gains a leaf in one universe, a changed leaf in another and a new
//!   universe, a third fetches exactly those (two leaves by `QueryProof`,
//!   the new universe whole) and the roots agree again.
//! * `a_lying_server_gets_nothing_written`: a universe whose stored leaf
//!   sits under a key its proof does not name is refused when fetched
//!   whole (`RootMismatch`) and when fetched leaf by leaf (`WrongLeaf`),
//!   and the mirror keeps what it had.
//! * `a_mirror_over_tls_trusts_a_pinned_certificate`: the server on a
//!   self-signed identity, the peer pinning that certificate; a peer
//!   pinning another certificate does not connect.

use std::time::Duration;

use ms_smt::Multiverse;
use ms_smt::multiverse::{ProofType, Universe, UniverseLeaf};
use ms_smt::store::MemoryStore;
use ms_smt_server::grpc::{
    MirrorConfig, MirrorError, MirrorReport, ServiceConfig, UniversePeer, UniverseService, serve,
};
use ms_smt_server::{ListenConfig, TlsIdentity, Trust};
use ms_smt_sql::SqliteStore;
use ms_smt_test_support::tapd_proofs::ProofMaker;

/// A server on loopback, serving `multiverse` until dropped.
struct Served {
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    async fn start(multiverse: Multiverse<MemoryStore>, listen: ListenConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = UniverseService::new(multiverse)
            .with_config(ServiceConfig::default().per_address(None).per_token(None));
        let task = tokio::spawn(serve(listener, service, listen, async {
            let _ = stopped.await;
        }));
        Served {
            addr,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("join").expect("serve");
    }
}

/// A scratch SQLite multiverse.
async fn mirror_database(dir: &tempfile::TempDir) -> Multiverse<SqliteStore> {
    let path = dir.path().join("mirror.db");
    let store = SqliteStore::open(path.to_str().expect("utf-8"))
        .await
        .expect("open");
    Multiverse::new(store)
}

/// `leaves` leaves of each of `assets` assets, in both proof types.
async fn populate(
    server: &Multiverse<MemoryStore>,
    maker: &ProofMaker,
    assets: std::ops::Range<u32>,
    leaves: u32,
) -> Vec<Universe> {
    let mut universes = Vec::new();
    for proof_type in [ProofType::Issuance, ProofType::Transfer] {
        for asset in assets.clone() {
            let universe = maker.universe(proof_type, asset);
            let batch: Vec<UniverseLeaf> = (0..leaves)
                .map(|leaf| maker.leaf(proof_type, asset, leaf, u64::from(leaf) + 10))
                .collect();
            server
                .insert(&universe, &batch)
                .await
                .expect("server insert");
            universes.push(universe);
        }
    }
    universes
}

/// Every universe's root, and both multiverse roots, agree.
async fn assert_same(
    server: &Multiverse<MemoryStore>,
    mirror: &Multiverse<SqliteStore>,
    universes: &[Universe],
) {
    for universe in universes {
        let theirs = server.root(universe).await.expect("server root");
        assert!(theirs.is_some());
        let ours = mirror.root(universe).await.expect("mirror root");
        assert_eq!(ours, theirs, "{}", universe.namespace());
    }
    for proof_type in [ProofType::Issuance, ProofType::Transfer] {
        assert_eq!(
            mirror.multiverse_root(proof_type).await.expect("mirror"),
            server.multiverse_root(proof_type).await.expect("server"),
            "{proof_type:?} multiverse"
        );
    }
}

async fn round(peer: &UniversePeer, mirror: &Multiverse<SqliteStore>) -> MirrorReport {
    let report = peer.mirror(mirror).await.expect("mirror round");
    println!("{report:?}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_copies_then_fetches_only_what_changed() {
    let maker = ProofMaker::from_vectors();
    let server = Multiverse::new(MemoryStore::new());
    let mut universes = populate(&server, &maker, 0..4, 25).await;
    let served = Served::start(server.clone(), ListenConfig::plain()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mirror = mirror_database(&dir).await;
    // Small pages and commits, so that paging and batching are exercised.
    let config = MirrorConfig {
        root_page: 3,
        key_page: 7,
        leaf_page: 6,
        batch_leaves: 60,
        ..MirrorConfig::default()
    };
    let peer = UniversePeer::connect_plain(&served.addr.to_string())
        .await
        .expect("connect")
        .with_config(config);

    let first = round(&peer, &mirror).await;
    assert_eq!(first.universes, 8);
    assert_eq!(first.fetched_whole, 8);
    assert_eq!(first.fetched_by_leaf, 0);
    assert_eq!(first.leaves_written, 200);
    assert!(
        first.leaves_fetched >= 200,
        "{} leaves received",
        first.leaves_fetched
    );
    // Commits close at 60 leaves or more, never inside a universe: after
    // universes 3 and 6 (75 leaves each), then the last two.
    assert_eq!(first.commits, 3);
    assert_eq!(first.diverged, 0);
    assert_same(&server, &mirror, &universes).await;

    let second = round(&peer, &mirror).await;
    assert_eq!(second.unchanged, 8);
    assert_eq!(
        (second.leaves_fetched, second.leaves_written, second.commits),
        (0, 0, 0)
    );

    // A new leaf in one universe, another proof under an existing key in
    // a transfer universe, and a universe that is new.
    let issuance = maker.universe(ProofType::Issuance, 1);
    server
        .insert(&issuance, &[maker.leaf(ProofType::Issuance, 1, 900, 5)])
        .await
        .expect("new leaf");
    let transfer = maker.universe(ProofType::Transfer, 2);
    let mut changed = maker.leaf(ProofType::Transfer, 2, 3, 13);
    changed.proof = maker.proof(ProofType::Transfer, 2, 3, 7_777);
    changed.amount = 7_777;
    server
        .insert(&transfer, &[changed])
        .await
        .expect("changed leaf");
    universes.extend(populate(&server, &maker, 9..10, 4).await);

    let third = round(&peer, &mirror).await;
    assert_eq!(third.universes, 10);
    assert_eq!(third.unchanged, 6);
    assert_eq!(third.fetched_by_leaf, 2);
    assert_eq!(third.fetched_whole, 2);
    assert_eq!(third.leaves_written, 2 + 8);
    assert!(third.leaves_fetched >= 10);
    assert!(third.leaves_fetched < 20, "{third:?}");
    assert_eq!(third.diverged, 0);
    assert_same(&server, &mirror, &universes).await;

    // The changed leaf is the server's new proof.
    let proof = mirror
        .proof(&transfer, &maker.leaf(ProofType::Transfer, 2, 3, 1).key)
        .await
        .expect("proof");
    assert_eq!(
        proof.expect("the leaf").leaf.value(),
        maker.proof(ProofType::Transfer, 2, 3, 7_777)
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_server_gets_nothing_written() {
    let maker = ProofMaker::from_vectors();
    let dir = tempfile::tempdir().expect("tempdir");
    let mirror = mirror_database(&dir).await;

    // Fetched whole: a leaf stored under the key of leaf 1 holds the
    // proof of leaf 2.
    let liar = Multiverse::new(MemoryStore::new());
    let universe = maker.universe(ProofType::Issuance, 0);
    let mut lie = maker.leaf(ProofType::Issuance, 0, 2, 40);
    lie.key = maker.leaf(ProofType::Issuance, 0, 1, 40).key;
    liar.insert(
        &universe,
        &[maker.leaf(ProofType::Issuance, 0, 0, 40), lie.clone()],
    )
    .await
    .expect("liar insert");
    let served = Served::start(liar.clone(), ListenConfig::plain()).await;
    let peer = UniversePeer::connect_plain(&served.addr.to_string())
        .await
        .expect("connect");
    match peer.mirror(&mirror).await {
        Err(MirrorError::RootMismatch { namespace, .. }) => {
            assert_eq!(namespace, universe.namespace());
        }
        other => panic!("expected RootMismatch, got {other:?}"),
    }
    assert_eq!(mirror.root(&universe).await.expect("root"), None);
    served.stop().await;

    // Fetched leaf by leaf: an honest universe is mirrored, then the
    // server replaces one leaf with the proof of another key.
    let server = Multiverse::new(MemoryStore::new());
    let honest: Vec<UniverseLeaf> = (0..20)
        .map(|leaf| maker.leaf(ProofType::Issuance, 0, leaf, 40))
        .collect();
    server.insert(&universe, &honest).await.expect("insert");
    let served = Served::start(server.clone(), ListenConfig::plain()).await;
    let peer = UniversePeer::connect_plain(&served.addr.to_string())
        .await
        .expect("connect");
    peer.mirror(&mirror).await.expect("honest round");
    let held = mirror.root(&universe).await.expect("root");
    assert_eq!(held, server.root(&universe).await.expect("root"));
    let mut lie = maker.leaf(ProofType::Issuance, 0, 100, 40);
    lie.key = honest[4].key;
    server.insert(&universe, &[lie]).await.expect("the lie");
    match peer.mirror(&mirror).await {
        Err(MirrorError::WrongLeaf { namespace, .. }) => {
            assert_eq!(namespace, universe.namespace());
        }
        other => panic!("expected WrongLeaf, got {other:?}"),
    }
    assert_eq!(mirror.root(&universe).await.expect("root"), held);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_over_tls_trusts_a_pinned_certificate() {
    let maker = ProofMaker::from_vectors();
    let server = Multiverse::new(MemoryStore::new());
    let universes = populate(&server, &maker, 0..2, 10).await;
    let (identity, _, _) = TlsIdentity::self_signed(&[]).expect("identity");
    let listen = ListenConfig::tls(identity.grpc_server_config().expect("server config"));
    let served = Served::start(server.clone(), listen).await;
    let host_port = format!("localhost:{}", served.addr.port());

    let pinned = Trust::Pinned(identity.certificate().expect("certificate").clone());
    let peer = UniversePeer::connect_tls(&host_port, &pinned)
        .await
        .expect("connect over TLS");
    let dir = tempfile::tempdir().expect("tempdir");
    let mirror = mirror_database(&dir).await;
    let report = round(&peer, &mirror).await;
    assert_eq!(report.fetched_whole, 4);
    assert_same(&server, &mirror, &universes).await;

    // Another certificate pinned: no round gets through.
    let (other, _, _) = TlsIdentity::self_signed(&[]).expect("identity");
    let wrong = Trust::Pinned(other.certificate().expect("certificate").clone());
    let refused = tokio::time::timeout(Duration::from_secs(30), async {
        match UniversePeer::connect_tls(&host_port, &wrong).await {
            Err(_) => true,
            Ok(peer) => peer.mirror(&mirror).await.is_err(),
        }
    })
    .await
    .expect("an answer within 30 s");
    assert!(refused, "a peer pinning another certificate mirrored");
    served.stop().await;
}
