//! `InsertProof` and the gate of the gRPC face, over loopback on SQLite
//! with the HTTP server's token table, and the face over TLS.
//!
//! * `insert_proof_needs_a_write_token`: no token, a malformed one, a
//!   read token, a write token for other namespaces and a revoked one are
//!   refused in gRPC's words, and nothing lands (a forged proof from a
//!   caller without the scope is refused for the scope); a grant of exactly
//!   one universe's namespace writes that universe alone; with a write
//!   token the
//!   official proof vectors (an asset issuance, a group issuance, a
//!   transfer) land at the roots tapd's rules give them, and each is then
//!   served by `QueryProof`.
//! * `an_overflowing_sum_is_the_requests_fault`: a leaf that would take
//!   the universe's sum past 2^64 − 1 is refused as tapd refuses it
//!   (`UNKNOWN`, "integer overflow"), not as a server failure.
//! * `forged_inserts_write_nothing`: a proof under another script key,
//!   outpoint, asset ID, group or proof type, a truncated proof, no proof,
//!   and a message over the size limit: each refused, every root as
//!   before.
//! * `rates_answer_resource_exhausted`: a client over its address's rate
//!   is told `RESOURCE_EXHAUSTED` with the rate limiter's words.
//! * `serves_over_tls_with_h2`: a self-signed identity, the client
//!   trusting its certificate, ALPN `h2`; a client offering only
//!   HTTP/1.1 is refused at the handshake.

use std::sync::Arc;
use std::time::Duration;

use ms_smt::Multiverse;
use ms_smt::multiverse::{LeafKey, OutPoint, ProofType, Universe, UniverseId, UniverseLeaf};
use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, ComputedNode, Hash, Leaf};
use ms_smt_server::access::{Grants, issue_token, unix_now};
use ms_smt_server::grpc::proto::universerpc::universe_client::UniverseClient;
use ms_smt_server::grpc::proto::universerpc::{self as rpc, asset_key, id};
use ms_smt_server::grpc::{MAX_MESSAGE_BYTES, ServiceConfig, UniverseService, serve};
use ms_smt_server::{ListenConfig, Rate, TlsIdentity, TokenStore};
use ms_smt_sql::SqliteStore;
use ms_smt_tapd_proof::UniverseLeafFacts;
use serde_json::Value;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

/// The valid proofs of an official vector file, by comment.
fn vector_proofs(file: &str) -> Vec<(String, Vec<u8>)> {
    let path = ms_smt_test_support::repo_root()
        .join("../shared/vectors/tapd-proof")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: Value = serde_json::from_str(&text).expect("vector JSON");
    json["valid_test_cases"]
        .as_array()
        .expect("valid cases")
        .iter()
        .map(|case| {
            let comment = case["comment"].as_str().expect("comment").to_owned();
            let bytes = hex::decode(case["expected"].as_str().expect("expected")).expect("hex");
            (comment, bytes)
        })
        .collect()
}

/// One vector proof by file and comment.
fn vector(file: &str, comment: &str) -> Vec<u8> {
    vector_proofs(file)
        .into_iter()
        .find(|(c, _)| c == comment)
        .unwrap_or_else(|| panic!("{file}: no case {comment:?}"))
        .1
}

/// What a proof is to an insert: its facts, and the request naming it.
struct Case {
    proof: Vec<u8>,
    facts: UniverseLeafFacts,
    universe: Universe,
}

impl Case {
    /// The proof in its asset's universe.
    fn asset(proof: Vec<u8>) -> Self {
        let facts = UniverseLeafFacts::from_proof_bytes(&proof).expect("facts");
        let universe = Universe::new(UniverseId::Asset(facts.asset_id), proof_type(&facts));
        Case {
            proof,
            facts,
            universe,
        }
    }

    /// The proof in its group's universe.
    fn group(proof: Vec<u8>) -> Self {
        let facts = UniverseLeafFacts::from_proof_bytes(&proof).expect("facts");
        let group = facts.group_key.expect("a grouped asset").x_only();
        let universe = Universe::new(UniverseId::Group(group), proof_type(&facts));
        Case {
            proof,
            facts,
            universe,
        }
    }

    fn leaf_key(&self) -> LeafKey {
        LeafKey {
            outpoint: OutPoint {
                txid: self.facts.anchor_outpoint.txid,
                index: self.facts.anchor_outpoint.index,
            },
            script_key: self.facts.script_key.x_only(),
        }
    }

    /// The request tapd's client sends for this proof.
    fn request(&self) -> rpc::AssetProof {
        self.request_as(&self.universe, self.leaf_key(), self.script_key_bytes())
    }

    fn script_key_bytes(&self) -> Vec<u8> {
        self.facts.script_key.0.to_vec()
    }

    fn request_as(
        &self,
        universe: &Universe,
        key: LeafKey,
        script_key: Vec<u8>,
    ) -> rpc::AssetProof {
        rpc::AssetProof {
            key: Some(rpc::UniverseKey {
                id: Some(rpc_id(universe)),
                leaf_key: Some(rpc::AssetKey {
                    outpoint: Some(asset_key::Outpoint::OpStr(key.outpoint.to_string())),
                    script_key: Some(asset_key::ScriptKey::ScriptKeyBytes(script_key)),
                }),
            }),
            asset_leaf: Some(rpc::AssetLeaf {
                proof: self.proof.clone(),
            }),
        }
    }

    /// The universe's root with this proof alone in it, built apart.
    async fn expected_root(&self) -> ComputedNode {
        let leaf = UniverseLeaf {
            key: self.leaf_key(),
            asset_id: self.facts.asset_id,
            proof: self.proof.clone(),
            amount: self.facts.amount,
            burn: false,
        };
        let tree = CompactedTree::new(MemoryStore::new());
        tree.insert_many([(
            leaf.key.universe_key(),
            Leaf::new(self.proof.clone(), self.facts.sum),
        )])
        .await
        .expect("reference tree")
    }
}

fn proof_type(facts: &UniverseLeafFacts) -> ProofType {
    match facts.proof_type {
        ms_smt_tapd_proof::ProofType::Issuance => ProofType::Issuance,
        ms_smt_tapd_proof::ProofType::Transfer => ProofType::Transfer,
    }
}

fn rpc_id(universe: &Universe) -> rpc::Id {
    let id = match universe.id {
        UniverseId::Asset(a) => id::Id::AssetId(a.to_vec()),
        UniverseId::Group(k) => id::Id::GroupKey(k.to_vec()),
    };
    rpc::Id {
        id: Some(id),
        proof_type: i32::from(universe.proof_type.number()),
    }
}

fn node(n: Option<&rpc::MerkleSumNode>) -> ComputedNode {
    let n = n.expect("a node");
    let hash: [u8; 32] = n.root_hash.as_slice().try_into().expect("32 bytes");
    ComputedNode::new(Hash(hash), u64::from_ne_bytes(n.root_sum.to_ne_bytes()))
}

/// The official proofs used: an asset issuance and two transfers of it
/// (regtest), and a group's issuance (generated).
fn cases() -> (Case, Case, Case) {
    let regtest = "proof_tlv_encoding_regtest.json";
    let issuance = Case::asset(vector(
        regtest,
        "valid regtest genesis proof with meta reveal",
    ));
    let transfer = Case::asset(vector(regtest, "valid regtest ownership proof"));
    let grouped = Case::group(vector(
        "proof_tlv_encoding_generated.json",
        "normal genesis",
    ));
    assert_eq!(issuance.universe.proof_type, ProofType::Issuance);
    assert_eq!(transfer.universe.proof_type, ProofType::Transfer);
    assert_eq!(grouped.universe.proof_type, ProofType::Issuance);
    (issuance, transfer, grouped)
}

/// A server on loopback and a client of it.
struct Running {
    client: UniverseClient<Channel>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn start(service: UniverseService<SqliteStore>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, service, ListenConfig::plain(), async {
            let _ = stopped.await;
        }));
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        Running {
            client: UniverseClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(usize::MAX),
            stop: Some(stop),
            task,
        }
    }

    async fn insert(
        &mut self,
        token: Option<&str>,
        request: rpc::AssetProof,
    ) -> Result<rpc::AssetProofResponse, Status> {
        let mut request = Request::new(request);
        if let Some(token) = token {
            request.metadata_mut().insert(
                "authorization",
                token.parse().expect("an ASCII header value"),
            );
        }
        self.client
            .insert_proof(request)
            .await
            .map(tonic::Response::into_inner)
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("join").expect("serve");
    }
}

/// A scratch SQLite database holding both the universes and the tokens.
async fn database(dir: &tempfile::TempDir) -> SqliteStore {
    let path = dir.path().join("universes.db");
    SqliteStore::open(path.to_str().expect("utf-8"))
        .await
        .expect("open")
}

/// A bearer token with `grants` in `store`'s token table.
async fn token(store: &SqliteStore, grants: &str) -> (String, String) {
    let grants: Grants = grants.parse().expect("grants");
    let issued = issue_token(store, "grpc test", &grants, None)
        .await
        .expect("issue token");
    (
        format!("Bearer {}", issued.secret.expose()),
        issued.record.id.clone(),
    )
}

/// Every universe root of the cases, as the multiverse holds them.
async fn roots(multiverse: &Multiverse<SqliteStore>, cases: &[&Case]) -> Vec<Option<ComputedNode>> {
    let mut out = Vec::new();
    for case in cases {
        out.push(multiverse.root(&case.universe).await.expect("root"));
    }
    out
}

fn assert_refused(got: Result<rpc::AssetProofResponse, Status>, code: Code, words: &str) {
    match got {
        Ok(_) => panic!("accepted; expected {code:?} ({words})"),
        Err(status) => {
            assert_eq!(status.code(), code, "{status:?}");
            assert!(
                status.message().contains(words),
                "{:?} does not say {words:?}",
                status.message()
            );
        }
    }
}

#[tokio::test]
async fn insert_proof_needs_a_write_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = database(&dir).await;
    let multiverse = Multiverse::new(store.clone());
    let (issuance, transfer, grouped) = cases();
    let all = [&issuance, &transfer, &grouped];

    let (read, _) = token(&store, "read:*").await;
    let (transfers_only, _) = token(&store, "write:transfer-*").await;
    let (writer, _) = token(&store, "write:*").await;
    let (revoked, revoked_id) = token(&store, "write:*").await;
    let config = ServiceConfig::default()
        .per_address(None)
        .per_token(None)
        .token_cache(Duration::ZERO);
    let service = UniverseService::new(multiverse.clone())
        .with_config(config)
        .with_tokens(store.clone());
    let mut running = Running::start(service).await;

    // Refused, and nothing lands.
    let before = roots(&multiverse, &all).await;
    assert_eq!(before, vec![None, None, None]);
    assert_refused(
        running.insert(None, issuance.request()).await,
        Code::Unauthenticated,
        "token",
    );
    assert_refused(
        running.insert(Some("Bearer"), issuance.request()).await,
        Code::Unauthenticated,
        "token",
    );
    assert_refused(
        running
            .insert(Some("Bearer not-a-token"), issuance.request())
            .await,
        Code::Unauthenticated,
        "token",
    );
    assert_refused(
        running.insert(Some(&read), issuance.request()).await,
        Code::PermissionDenied,
        "write",
    );
    assert_refused(
        running
            .insert(Some(&transfers_only), issuance.request())
            .await,
        Code::PermissionDenied,
        &issuance.universe.namespace(),
    );
    // The scope is checked from the key before the proof is decoded: a
    // forged proof from a caller that may not write there is refused for
    // the scope, not for the proof.
    let forged = {
        let mut r = issuance.request();
        if let Some(leaf) = r.asset_leaf.as_mut() {
            leaf.proof.truncate(7);
        }
        r
    };
    assert_refused(
        running.insert(Some(&read), forged.clone()).await,
        Code::PermissionDenied,
        "write",
    );
    assert_refused(
        running.insert(Some(&transfers_only), forged).await,
        Code::PermissionDenied,
        &issuance.universe.namespace(),
    );
    TokenStore::open(&store)
        .await
        .expect("token table")
        .revoke(&revoked_id, unix_now())
        .await
        .expect("revoke");
    assert_refused(
        running.insert(Some(&revoked), issuance.request()).await,
        Code::Unauthenticated,
        "token",
    );
    assert_eq!(roots(&multiverse, &all).await, before);

    // A grant of exactly one universe's namespace (73 bytes) writes it.
    let (exact, _) = token(&store, &format!("write:{}", issuance.universe.namespace())).await;
    running
        .insert(Some(&exact), issuance.request())
        .await
        .expect("an exact grant writes its universe");
    assert_refused(
        running.insert(Some(&exact), transfer.request()).await,
        Code::PermissionDenied,
        &transfer.universe.namespace(),
    );

    // A write token: each proof at the root tapd's rules give it, the
    // answer naming its key with the proof type filled in.
    for case in all {
        let mut request = case.request();
        // Unspecified proof type: the proof's own.
        if let Some(id) = request.key.as_mut().and_then(|k| k.id.as_mut()) {
            id.proof_type = 0;
        }
        let answer = running
            .insert(Some(&writer), request)
            .await
            .expect("inserted");
        let expected = case.expected_root().await;
        assert_eq!(
            multiverse.root(&case.universe).await.expect("root"),
            Some(expected)
        );
        let key = answer.req.as_ref().expect("req");
        assert_eq!(
            key.id.as_ref().expect("id").proof_type,
            i32::from(case.universe.proof_type.number())
        );
        assert_eq!(
            answer.asset_leaf.as_ref().expect("leaf").proof,
            case.proof,
            "the proof stored is the proof sent"
        );
        assert_eq!(
            node(
                answer
                    .universe_root
                    .as_ref()
                    .and_then(|r| r.mssmt_root.as_ref())
            ),
            expected
        );
        // Served back as the syncer asks for it.
        let served = running
            .client
            .query_proof(case.request().key.expect("key"))
            .await
            .expect("query proof")
            .into_inner();
        assert_eq!(served.asset_leaf.expect("leaf").proof, case.proof);
    }
    // The same proof again: the same roots.
    let after = roots(&multiverse, &all).await;
    running
        .insert(Some(&writer), transfer.request())
        .await
        .expect("again");
    assert_eq!(roots(&multiverse, &all).await, after);
    running.stop().await;
}

#[tokio::test]
async fn an_overflowing_sum_is_the_requests_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = database(&dir).await;
    let multiverse = Multiverse::new(store.clone());
    let (writer, _) = token(&store, "write:*").await;
    let service = UniverseService::new(multiverse.clone())
        .with_config(ServiceConfig::default().per_address(None).per_token(None))
        .with_tokens(store.clone());
    let mut running = Running::start(service).await;
    let maker = ms_smt_test_support::tapd_proofs::ProofMaker::from_vectors();
    let big = Case::asset(maker.proof(ProofType::Issuance, 0, 0, u64::MAX - 1));
    let more = Case::asset(maker.proof(ProofType::Issuance, 0, 1, 5));
    assert_eq!(big.universe, more.universe);
    running
        .insert(Some(&writer), big.request())
        .await
        .expect("a sum just under 2^64");
    let before = roots(&multiverse, &[&big]).await;
    // tapd's words (mssmt.ErrIntegerOverflow), as a handler's error.
    assert_refused(
        running.insert(Some(&writer), more.request()).await,
        Code::Unknown,
        "integer overflow",
    );
    assert_eq!(roots(&multiverse, &[&big]).await, before);
    running.stop().await;
}

#[tokio::test]
async fn forged_inserts_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = database(&dir).await;
    let multiverse = Multiverse::new(store.clone());
    let (issuance, transfer, grouped) = cases();
    let all = [&issuance, &transfer, &grouped];
    let (writer, _) = token(&store, "write:*").await;
    let service = UniverseService::new(multiverse.clone())
        .with_config(ServiceConfig::default().per_address(None).per_token(None))
        .with_tokens(store.clone());
    let mut running = Running::start(service).await;

    let other_key = {
        let mut k = issuance.facts.script_key.0;
        k[5] ^= 1;
        k.to_vec()
    };
    let mut moved = issuance.leaf_key();
    moved.outpoint.index += 1;
    let other_asset = Universe::new(UniverseId::Asset([7; 32]), ProofType::Issuance);
    let other_group = Universe::new(UniverseId::Group([7; 32]), ProofType::Issuance);
    let ungrouped_as_group = Universe::new(
        UniverseId::Group(grouped.universe.id.bytes()),
        ProofType::Issuance,
    );
    let wrong_type = Universe::new(issuance.universe.id, ProofType::Transfer);
    let truncated = {
        let mut r = issuance.request();
        if let Some(leaf) = r.asset_leaf.as_mut() {
            leaf.proof.truncate(leaf.proof.len() / 2);
        }
        r
    };
    let no_leaf = rpc::AssetProof {
        asset_leaf: None,
        ..issuance.request()
    };
    let oversized = {
        let mut r = issuance.request();
        if let Some(leaf) = r.asset_leaf.as_mut() {
            leaf.proof.resize(MAX_MESSAGE_BYTES + 1, 0);
        }
        r
    };
    let forged: Vec<(&str, rpc::AssetProof, Code, &str)> = vec![
        (
            "another script key",
            issuance.request_as(&issuance.universe, issuance.leaf_key(), other_key),
            Code::Unknown,
            "script key mismatch",
        ),
        (
            "another outpoint",
            issuance.request_as(&issuance.universe, moved, issuance.script_key_bytes()),
            Code::Unknown,
            "outpoint mismatch",
        ),
        (
            "another asset",
            issuance.request_as(
                &other_asset,
                issuance.leaf_key(),
                issuance.script_key_bytes(),
            ),
            Code::Unknown,
            "asset id mismatch",
        ),
        (
            "another group",
            grouped.request_as(&other_group, grouped.leaf_key(), grouped.script_key_bytes()),
            Code::Unknown,
            "group key mismatch",
        ),
        (
            "an ungrouped asset in a group universe",
            issuance.request_as(
                &ungrouped_as_group,
                issuance.leaf_key(),
                issuance.script_key_bytes(),
            ),
            Code::Unknown,
            "group key mismatch",
        ),
        (
            "an issuance as a transfer",
            issuance.request_as(
                &wrong_type,
                issuance.leaf_key(),
                issuance.script_key_bytes(),
            ),
            Code::Unknown,
            "proof type mismatch",
        ),
        (
            "a truncated proof",
            truncated,
            Code::Unknown,
            "sparse-decode",
        ),
        ("no proof", no_leaf, Code::Unknown, "asset_leaf must be set"),
        (
            "over the size limit",
            oversized,
            Code::OutOfRange,
            "too large",
        ),
    ];
    for (what, request, code, words) in forged {
        let got = running.insert(Some(&writer), request).await;
        match got {
            Ok(_) => panic!("{what}: accepted"),
            Err(status) => {
                assert_eq!(status.code(), code, "{what}: {status:?}");
                assert!(
                    status.message().contains(words),
                    "{what}: {:?} does not say {words:?}",
                    status.message()
                );
            }
        }
    }
    for universe in [&other_asset, &other_group, &ungrouped_as_group, &wrong_type] {
        assert_eq!(multiverse.root(universe).await.expect("root"), None);
    }
    assert_eq!(roots(&multiverse, &all).await, vec![None, None, None]);
    running.stop().await;
}

#[tokio::test]
async fn rates_answer_resource_exhausted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = database(&dir).await;
    // Two calls at once, then one per thousand seconds: the third is over.
    let config = ServiceConfig::default().per_address(Some(Rate::new(0.001, 2)));
    let service = UniverseService::new(Multiverse::new(store)).with_config(config);
    let mut running = Running::start(service).await;
    for _ in 0..2 {
        running
            .client
            .info(rpc::InfoRequest {})
            .await
            .expect("within the burst");
    }
    let status = running
        .client
        .info(rpc::InfoRequest {})
        .await
        .expect_err("over the rate");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().starts_with("rate limiter"), "{status:?}");
    running.stop().await;
}

#[tokio::test]
async fn serves_over_tls_with_h2() {
    let (identity, cert_pem, _key) = TlsIdentity::self_signed(&[]).expect("identity");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = database(&dir).await;
    let multiverse = Multiverse::new(store);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listen = ListenConfig::tls(identity.grpc_server_config().expect("server config"));
    let service = UniverseService::new(multiverse).with_runtime_id(77);
    let task = tokio::spawn(serve(listener, service, listen, async {
        let _ = stopped.await;
    }));

    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&cert_pem))
        .domain_name("localhost");
    let channel = Endpoint::from_shared(format!("https://localhost:{}", addr.port()))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls config")
        .connect()
        .await
        .expect("connect over TLS");
    let info = UniverseClient::new(channel)
        .info(rpc::InfoRequest {})
        .await
        .expect("info over TLS")
        .into_inner();
    assert_eq!(info.runtime_id, 77);

    // A client that offers only HTTP/1.1 does not get a connection.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(identity.certificate().expect("certificate").clone())
        .expect("root");
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("tcp");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let handshake = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await;
    assert!(handshake.is_err(), "an HTTP/1.1-only client was served");

    let _ = stop.send(());
    task.await.expect("join").expect("serve");
}
