//! The hostile-client campaign against the gRPC universe server
//! (RELIABILITY.md, "Hostile clients, gRPC face"): tapd's
//! `universerpc.Universe` over TLS (a self-signed identity the clients
//! pin) on loopback, against a SQLite file or a Postgres database, with
//! the server in a child process (this program, `--serve`) so its memory
//! and descriptors are its own. The server has its default limits
//! (`ServiceConfig::default`, `ListenConfig::tls`) and the token table of
//! its database (`UniverseService::with_tokens`).
//!
//! An honest client (its own address, 127.0.0.2, one HTTP/2 connection, a
//! write token for its universe) inserts one valid proof (`InsertProof`)
//! and reads one (`QueryProof`) alternately, one call every 20 ms, through
//! every phase; each attack phase runs beside it for `--phase-secs`
//! (default 6):
//!
//! * `credentials`: `InsertProof` of well-formed proofs into the honest
//!   and a victim universe with no token, a malformed header, a wrong
//!   token, an expired one, a revoked one, a read-only one, a write token
//!   of another universe, a transfer-only token, and an 8 KiB header,
//!   from 50 addresses;
//! * `forged`: the attacker's valid write token (its own universe) with
//!   forged proofs: the key of another leaf (outpoint, script key), the
//!   honest universe's key, a sum that overflows the universe, another
//!   asset ID, a group universe, the wrong proof type, truncated TLV,
//!   random bytes, an empty proof, no proof, and a proof over the 4 MiB
//!   message limit;
//! * `pages`: `AssetRoots`, `AssetLeafKeys` and `AssetLeaves` with offsets
//!   far past the end, negative, `i32::MIN` and `i32::MAX` offsets and
//!   limits, from 20 addresses, anonymous;
//! * `streams`: raw HTTP/2 on one connection: 50 streams at once (a
//!   control), 1,000 at once (10 × the default `max_streams`), and a
//!   rapid reset (streams opened and cancelled at once, CVE-2023-44487);
//!   then 1,000 calls at once on one tonic channel;
//! * `slow-tls`: `--slow-conns` connections (2,000 by default) from 200
//!   addresses that open TCP and then send nothing, or trickle a real
//!   ClientHello one byte every 250 ms; a new client from a fresh address
//!   tries to connect in the middle;
//! * `flood-1-addr`: anonymous `QueryProof` from one address, 64 at once.
//!
//! It prints one table row per phase: the attack's answers by gRPC status
//! (and tapd's words), the honest client's p50/p99 and failures, the
//! server's RSS and open descriptors before, at most during, and after;
//! then the unauthorized writes that landed (every universe's root and
//! the directory compared with the state before, every leaf of the honest
//! universe compared with what the honest client sent, and every `OK`
//! answered to a refused write) and the honest acknowledged writes lost
//! (every one read back). Exits 1 if either is not 0.
//!
//! ```text
//! scripts/grpc-campaign.sh      # raises the descriptor limit, runs SQLite and Postgres
//! grpc_campaign --db <sqlite path | postgres URL> [--phase-secs 6] [--slow-conns 2000]
//! ```

use ms_smt_test_support::campaign::{PhaseWatch, attacker_ip, ms, percentile, usage};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use ms_smt::multiverse::{LeafKey, OutPoint, PageQuery, ProofType, Universe, UniverseId};
use ms_smt::store::ForestStore;
use ms_smt::{ComputedNode, Multiverse};
use ms_smt_server::access::{Grants, IssuedToken};
use ms_smt_server::grpc::proto::universerpc::universe_client::UniverseClient;
use ms_smt_server::grpc::proto::universerpc::{self as rpc, asset_key, id};
use ms_smt_server::grpc::{MAX_MESSAGE_BYTES, MAX_PAGE_SIZE, UniverseService, serve};
use ms_smt_server::{DatabaseExt, ListenConfig, TlsIdentity, Trust};
use ms_smt_sql::Database;
use ms_smt_tapd_proof::UniverseLeafFacts;
use ms_smt_test_support::tapd_proofs::ProofMaker;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
type Client = UniverseClient<Channel>;

/// The honest client's address.
const HONEST_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// The assets of the universes (`ProofMaker` numbers).
const HONEST_ASSET: u32 = 1;
const VICTIM_ASSET: u32 = 2;
const ATTACKER_ASSET: u32 = 3;
/// Leaves of the victim universe, written before the campaign.
const VICTIM_LEAVES: u32 = 20;
/// Attack proofs' leaf numbers start here (the honest client's never
/// reach it).
const ATTACK_LEAF: u32 = 1_000_000;

// ---------------------------------------------------------------------------
// Proofs and requests
// ---------------------------------------------------------------------------

/// A proof and the request tapd's client sends for it.
#[derive(Clone)]
struct Made {
    proof: Vec<u8>,
    universe: Universe,
    key: LeafKey,
    /// The script key as sent (33 bytes, compressed).
    script_key: Vec<u8>,
}

fn made(proof: Vec<u8>) -> Made {
    let facts = UniverseLeafFacts::from_proof_bytes(&proof).expect("a made proof decodes");
    let proof_type = match facts.proof_type {
        ms_smt_tapd_proof::ProofType::Issuance => ProofType::Issuance,
        ms_smt_tapd_proof::ProofType::Transfer => ProofType::Transfer,
    };
    Made {
        universe: Universe::new(UniverseId::Asset(facts.asset_id), proof_type),
        key: LeafKey {
            outpoint: OutPoint {
                txid: facts.anchor_outpoint.txid,
                index: facts.anchor_outpoint.index,
            },
            script_key: facts.script_key.x_only(),
        },
        script_key: facts.script_key.0.to_vec(),
        proof,
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

fn universe_key(universe: &Universe, key: &LeafKey, script_key: Vec<u8>) -> rpc::UniverseKey {
    rpc::UniverseKey {
        id: Some(rpc_id(universe)),
        leaf_key: Some(rpc::AssetKey {
            outpoint: Some(asset_key::Outpoint::OpStr(key.outpoint.to_string())),
            script_key: Some(asset_key::ScriptKey::ScriptKeyBytes(script_key)),
        }),
    }
}

/// `InsertProof` of `proof` under `universe` and `key`.
fn insert_request(
    universe: &Universe,
    key: &LeafKey,
    script_key: Vec<u8>,
    proof: Option<Vec<u8>>,
) -> rpc::AssetProof {
    rpc::AssetProof {
        key: Some(universe_key(universe, key, script_key)),
        asset_leaf: proof.map(|proof| rpc::AssetLeaf { proof }),
    }
}

impl Made {
    fn request(&self) -> rpc::AssetProof {
        insert_request(
            &self.universe,
            &self.key,
            self.script_key.clone(),
            Some(self.proof.clone()),
        )
    }

    fn query(&self) -> rpc::UniverseKey {
        universe_key(&self.universe, &self.key, self.script_key.clone())
    }
}

/// `msg` with `auth` as its `authorization` metadata.
fn with_auth<T>(msg: T, auth: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(msg);
    request.set_timeout(Duration::from_secs(20));
    if let Some(auth) = auth
        && let Ok(value) = auth.parse()
    {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

// ---------------------------------------------------------------------------
// The server (child process)
// ---------------------------------------------------------------------------

/// `--serve`: the universe service with its default limits and the
/// database's token table, over TLS, until stdin closes.
async fn serve_mode(db: &str, listen: &str, cert: PathBuf, key: PathBuf) -> Res<()> {
    let database = Database::open(db).await?;
    let config = ListenConfig::tls(TlsIdentity::from_pem_files(&cert, &key)?.grpc_server_config()?);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("ready {}", listener.local_addr()?);
    let stop = async {
        // The campaign closes our stdin to stop us.
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    match database {
        Database::Sqlite(s) => {
            let service = UniverseService::new(Multiverse::new(s.clone())).with_tokens(s);
            serve(listener, service, config, stop).await?;
        }
        Database::Postgres(s) => {
            let service = UniverseService::new(Multiverse::new(s.clone())).with_tokens(s);
            serve(listener, service, config, stop).await?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------

/// TCP from one local address to the server, then TLS with ALPN `h2`
/// (the pinned certificate), for tonic's channel.
#[derive(Clone)]
struct Connect {
    tls: Arc<rustls::ClientConfig>,
    local: Ipv4Addr,
    server: SocketAddr,
}

type TlsIo = TlsStream<TcpStream>;

impl Connect {
    async fn tls(&self) -> io::Result<TlsIo> {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(IpAddr::V4(self.local), 0))?;
        let tcp = socket.connect(self.server).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from("localhost").map_err(io::Error::other)?;
        let tls = tokio::time::timeout(
            Duration::from_secs(10),
            TlsConnector::from(self.tls.clone()).connect(name, tcp),
        )
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake"))??;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(io::Error::other("no ALPN h2"));
        }
        Ok(tls)
    }

    fn from(&self, local: Ipv4Addr) -> Connect {
        Connect {
            local,
            ..self.clone()
        }
    }

    /// A tonic client on a connection of its own.
    async fn client(&self) -> Res<Client> {
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(self.clone())
            .await?;
        Ok(UniverseClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(usize::MAX))
    }
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TokioIo<TlsIo>>> + Send>>;

impl tower_service::Service<hyper::Uri> for Connect {
    type Response = TokioIo<TlsIo>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper::Uri) -> Connecting {
        let me = self.clone();
        Box::pin(async move { Ok(TokioIo::new(me.tls().await?)) })
    }
}

async fn clients(connect: &Connect, block: u8, n: usize) -> Res<Vec<Client>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(connect.from(attacker_ip(block, i)).client().await?);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The words of tapd's (and the gate's) errors that tell refusals apart.
const PHRASES: &[&str] = &[
    "script key mismatch",
    "outpoint mismatch",
    "asset id mismatch",
    "group key mismatch",
    "proof type mismatch",
    "sparse-decode",
    "asset_leaf must be set",
    "invalid request offset",
    "invalid request limit",
    "no universe proof found",
    "rate limiter",
    "too large",
    "overflow",
];

/// A status as a class (its code and the words that say why) and its
/// whole message.
fn class(status: &Status) -> (String, String) {
    let m = status.message();
    let words = PHRASES
        .iter()
        .find(|p| m.contains(**p))
        .map(|p| (*p).to_owned())
        .unwrap_or_else(|| {
            // The first words, token IDs and other hex left out.
            let w: Vec<&str> = m
                .split_whitespace()
                .take(6)
                .map(|w| {
                    let hex = w.len() >= 8 && w.chars().all(|c| c.is_ascii_hexdigit());
                    if hex { "…" } else { w }
                })
                .collect();
            let w = w.join(" ");
            w.chars().take(48).collect()
        });
    // The end of a long message says why; its start names the universe.
    let chars: Vec<char> = m.chars().collect();
    let sample: String = if chars.len() > 200 {
        let tail: String = chars[chars.len() - 160..].iter().collect();
        format!("…{tail}")
    } else {
        m.to_owned()
    };
    if words.is_empty() {
        (code_name(status.code()).to_owned(), sample)
    } else {
        (format!("{} \"{words}\"", code_name(status.code())), sample)
    }
}

/// The answers attackers got, by class.
#[derive(Default, Clone)]
struct Tally(BTreeMap<String, u64>, BTreeMap<String, String>);

impl Tally {
    fn add(&mut self, class: (String, String)) {
        *self.0.entry(class.0.clone()).or_insert(0) += 1;
        self.1.entry(class.0).or_insert(class.1);
    }

    fn merge(&mut self, other: Tally) {
        for (k, v) in other.0 {
            *self.0.entry(k).or_insert(0) += v;
        }
        for (k, v) in other.1 {
            self.1.entry(k).or_insert(v);
        }
    }

    fn count(&self, prefix: &str) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| *v)
            .sum()
    }

    fn line(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

// ---------------------------------------------------------------------------
// The honest client
// ---------------------------------------------------------------------------

/// The honest client's figures for one phase.
#[derive(Default)]
struct Honest {
    latencies: Vec<Duration>,
    failures: Tally,
}

/// What the honest client sent and was told was written.
#[derive(Default)]
struct Written {
    /// Every proof it sent, by universe key.
    sent: HashMap<[u8; 32], Vec<u8>>,
    /// The acknowledged ones.
    acked: Vec<Made>,
}

/// The honest client: an insert and a query alternately, one call every
/// 20 ms until `stop`.
async fn honest_loop(
    mut c: Client,
    maker: Arc<ProofMaker>,
    auth: String,
    stop: Arc<AtomicBool>,
    phase: Arc<Mutex<Honest>>,
    written: Arc<Mutex<Written>>,
) {
    let mut i = 1u32;
    let mut last: Option<Made> = None;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        next += Duration::from_millis(20);
        let started = Instant::now();
        let (ok, acked) = match last.take() {
            None => {
                let m = made(maker.proof(ProofType::Issuance, HONEST_ASSET, i, 1));
                i += 1;
                written
                    .lock()
                    .await
                    .sent
                    .insert(m.key.universe_key().0, m.proof.clone());
                let got = c.insert_proof(with_auth(m.request(), Some(&auth))).await;
                let ok = got.map(|_| ());
                if ok.is_ok() {
                    last = Some(m.clone());
                    (ok, Some(m))
                } else {
                    (ok, None)
                }
            }
            Some(m) => {
                let got = c.query_proof(with_auth(m.query(), Some(&auth))).await;
                let ok = match got {
                    Ok(a) => {
                        let a = a.into_inner();
                        if a.asset_leaf.map(|l| l.proof) == Some(m.proof.clone()) {
                            Ok(())
                        } else {
                            Err(Status::data_loss("QueryProof answered another proof"))
                        }
                    }
                    Err(e) => Err(e),
                };
                (ok, None)
            }
        };
        let took = started.elapsed();
        {
            let mut p = phase.lock().await;
            match ok {
                Ok(()) => p.latencies.push(took),
                Err(e) => p.failures.add(class(&e)),
            }
        }
        if let Some(m) = acked {
            written.lock().await.acked.push(m);
        }
        tokio::time::sleep_until(next.into()).await;
    }
}

// ---------------------------------------------------------------------------
// Attacks
// ---------------------------------------------------------------------------

/// One attacking call.
#[derive(Clone)]
enum Call {
    Insert(Option<String>, Box<rpc::AssetProof>),
    Roots(rpc::AssetRootRequest),
    Keys(rpc::AssetLeafKeysRequest),
    Leaves(rpc::AssetLeavesRequest),
    Proof(rpc::UniverseKey),
}

/// A call's answer as a class (`OK`, `OK, empty` for an empty page).
async fn call(c: &mut Client, call: &Call) -> (String, String) {
    let page = |items: usize, has_more: bool| {
        let class = if items == 0 {
            format!("OK, empty{}", if has_more { ", has_more" } else { "" })
        } else {
            "OK, items".to_owned()
        };
        (class, String::new())
    };
    match call {
        Call::Insert(auth, r) => match c
            .insert_proof(with_auth((**r).clone(), auth.as_deref()))
            .await
        {
            Ok(_) => ("OK".to_owned(), String::new()),
            Err(e) => class(&e),
        },
        Call::Roots(r) => match c.asset_roots(with_auth(*r, None)).await {
            Ok(a) => {
                let a = a.into_inner();
                page(a.universe_roots.len(), a.has_more)
            }
            Err(e) => class(&e),
        },
        Call::Keys(r) => match c.asset_leaf_keys(with_auth(r.clone(), None)).await {
            Ok(a) => {
                let a = a.into_inner();
                page(a.entries.len(), a.has_more)
            }
            Err(e) => class(&e),
        },
        Call::Leaves(r) => match c.asset_leaves(with_auth(r.clone(), None)).await {
            Ok(a) => {
                let a = a.into_inner();
                page(a.leaves.len(), a.has_more)
            }
            Err(e) => class(&e),
        },
        Call::Proof(r) => match c.query_proof(with_auth(r.clone(), None)).await {
            Ok(_) => ("OK".to_owned(), String::new()),
            Err(e) => class(&e),
        },
    }
}

/// Sends `calls` round-robin from `clients` with `concurrency` tasks until
/// `stop`; the answers by class, and by class for the calls that
/// `flagged` marks (pages that must be empty).
async fn hammer(
    clients: Vec<Client>,
    calls: Vec<(Call, bool)>,
    concurrency: usize,
    stop: Arc<AtomicBool>,
) -> (Tally, Tally) {
    let calls = Arc::new(calls);
    let tally = Arc::new(Mutex::new((Tally::default(), Tally::default())));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let (calls, tally, next, stop) = (calls.clone(), tally.clone(), next.clone(), stop.clone());
        let mut c = clients[t % clients.len()].clone();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                let (what, flagged) = &calls[n % calls.len()];
                let got = call(&mut c, what).await;
                let mut t = tally.lock().await;
                if *flagged {
                    t.1.add(got.clone());
                }
                t.0.add(got);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let t = tally.lock().await;
    (t.0.clone(), t.1.clone())
}

/// The tokens the campaign uses.
struct Tokens {
    honest: String,
    attacker: String,
    read: String,
    expired: String,
    revoked: String,
    transfers: String,
}

fn grant_of(universe: &Universe) -> String {
    // An exact grant is at most 64 characters; a universe's namespace is
    // 73: the prefix pattern names it alone.
    format!("write:{}*", universe.namespace())
}

async fn tokens(db: &Database, honest: &Universe, attacker: &Universe) -> Res<Tokens> {
    let make = async |grants: &str, expires: Option<i64>| -> Res<IssuedToken> {
        let grants: Grants = grants.parse()?;
        Ok(db.issue_token("grpc campaign", &grants, expires).await?)
    };
    let bearer = |t: &IssuedToken| format!("Bearer {}", t.secret.expose());
    let revoked = make("write:*", None).await?;
    db.revoke_token(&revoked.record.id).await?;
    Ok(Tokens {
        honest: bearer(&make(&grant_of(honest), None).await?),
        attacker: bearer(&make(&grant_of(attacker), None).await?),
        read: bearer(&make("read:*", None).await?),
        expired: bearer(&make("write:*", Some(1)).await?),
        revoked: bearer(&revoked),
        transfers: bearer(&make("write:transfer-*", None).await?),
    })
}

/// Well-formed proofs into the honest and the victim universes with every
/// bad credential.
fn credential_calls(maker: &ProofMaker, t: &Tokens) -> Vec<(Call, bool)> {
    let wrong = format!("Bearer mssmt_{}", "ab".repeat(32));
    let creds: Vec<Option<String>> = vec![
        None,
        Some("Basic bWU6cHc=".into()),
        Some("Bearer".into()),
        Some("Bearer not-a-token".into()),
        Some(wrong),
        Some(t.expired.clone()),
        Some(t.revoked.clone()),
        Some(t.read.clone()),
        Some(t.attacker.clone()),
        Some(t.transfers.clone()),
        Some(format!("Bearer mssmt_{}", "a".repeat(8 << 10))),
    ];
    let mut out = Vec::new();
    for (n, asset) in [HONEST_ASSET, VICTIM_ASSET].into_iter().enumerate() {
        for k in 0..4u32 {
            let m = made(maker.proof(
                ProofType::Issuance,
                asset,
                ATTACK_LEAF + n as u32 * 100 + k,
                7,
            ));
            for cred in &creds {
                out.push((Call::Insert(cred.clone(), Box::new(m.request())), false));
            }
        }
    }
    // The honest token on the victim universe.
    let m = made(maker.proof(ProofType::Issuance, VICTIM_ASSET, ATTACK_LEAF + 500, 7));
    out.push((
        Call::Insert(Some(t.honest.clone()), Box::new(m.request())),
        false,
    ));
    out
}

/// Forged proofs with the attacker's own valid write token.
fn forged_calls(maker: &ProofMaker, t: &Tokens, honest_first: &Made) -> Vec<(Call, bool)> {
    let auth = Some(t.attacker.clone());
    let own = |leaf: u32, amount: u64| {
        made(maker.proof(
            ProofType::Issuance,
            ATTACKER_ASSET,
            ATTACK_LEAF + leaf,
            amount,
        ))
    };
    let a = own(0, 5);
    let b = own(1, 5);
    let mut requests: Vec<rpc::AssetProof> = Vec::new();
    // The key of another leaf: another outpoint, another script key.
    requests.push(insert_request(
        &a.universe,
        &b.key,
        a.script_key.clone(),
        Some(a.proof.clone()),
    ));
    let mut other_script = a.script_key.clone();
    other_script[5] ^= 1;
    let mut other_key = a.key;
    other_key.script_key[4] ^= 1;
    requests.push(insert_request(
        &a.universe,
        &other_key,
        other_script,
        Some(a.proof.clone()),
    ));
    // The honest universe's first leaf, with the attacker's proof.
    requests.push(insert_request(
        &honest_first.universe,
        &honest_first.key,
        honest_first.script_key.clone(),
        Some(a.proof.clone()),
    ));
    // A sum that overflows the attacker's universe (it holds a leaf of 1).
    requests.push(own(2, u64::MAX).request());
    // The honest leaf's key with a proof of another amount (a well-formed
    // proof of the honest asset: only the token's scope refuses it).
    let rewrite = made(maker.proof(ProofType::Issuance, HONEST_ASSET, 1, 1_000_000));
    requests.push(rewrite.request());
    // Another asset ID, a group universe, the wrong proof type.
    let other_asset = Universe::new(UniverseId::Asset([7; 32]), ProofType::Issuance);
    let group = Universe::new(UniverseId::Group([7; 32]), ProofType::Issuance);
    let as_transfer = Universe::new(a.universe.id, ProofType::Transfer);
    for u in [&other_asset, &group, &as_transfer] {
        requests.push(insert_request(
            u,
            &a.key,
            a.script_key.clone(),
            Some(a.proof.clone()),
        ));
    }
    let transfer = made(maker.proof(ProofType::Transfer, ATTACKER_ASSET, ATTACK_LEAF, 5));
    let as_issuance = Universe::new(transfer.universe.id, ProofType::Issuance);
    requests.push(insert_request(
        &as_issuance,
        &transfer.key,
        transfer.script_key.clone(),
        Some(transfer.proof.clone()),
    ));
    // Truncated TLV, random bytes, empty, none.
    for cut in [a.proof.len() / 2, a.proof.len() - 1, 1] {
        requests.push(insert_request(
            &a.universe,
            &a.key,
            a.script_key.clone(),
            Some(a.proof[..cut].to_vec()),
        ));
    }
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let random: Vec<u8> = (0..1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    requests.push(insert_request(
        &a.universe,
        &a.key,
        a.script_key.clone(),
        Some(random),
    ));
    requests.push(insert_request(
        &a.universe,
        &a.key,
        a.script_key.clone(),
        Some(Vec::new()),
    ));
    requests.push(insert_request(
        &a.universe,
        &a.key,
        a.script_key.clone(),
        None,
    ));
    // Over the message limit.
    let mut big = a.proof.clone();
    big.resize(MAX_MESSAGE_BYTES + 1, 0);
    requests.push(insert_request(
        &a.universe,
        &a.key,
        a.script_key.clone(),
        Some(big),
    ));
    requests
        .into_iter()
        .map(|r| (Call::Insert(auth.clone(), Box::new(r)), false))
        .collect()
}

/// Pages past the end, negative and huge offsets and limits; the flag
/// marks those whose answer, if `OK`, must be empty.
fn page_calls(victim: &Universe, honest: &Universe) -> Vec<(Call, bool)> {
    let offsets = [0, 1_000_000, i32::MAX, -1, i32::MIN];
    let limits = [
        0,
        1,
        -1,
        i32::MAX,
        MAX_PAGE_SIZE,
        MAX_PAGE_SIZE + 1,
        i32::MIN,
    ];
    let mut out = Vec::new();
    for offset in offsets {
        for limit in limits {
            for direction in [0, 1, 7] {
                let past = offset >= 1_000_000;
                out.push((
                    Call::Roots(rpc::AssetRootRequest {
                        with_amounts_by_id: true,
                        offset,
                        limit,
                        direction,
                    }),
                    past,
                ));
                for u in [victim, honest] {
                    out.push((
                        Call::Keys(rpc::AssetLeafKeysRequest {
                            id: Some(rpc_id(u)),
                            offset,
                            limit,
                            direction,
                        }),
                        past,
                    ));
                    out.push((
                        Call::Leaves(rpc::AssetLeavesRequest {
                            id: Some(rpc_id(u)),
                            offset,
                            limit,
                            direction,
                        }),
                        past,
                    ));
                }
            }
        }
    }
    out
}

// --- raw HTTP/2 -------------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A gRPC call's header block: HPACK literals, never indexed.
fn header_block(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "https"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        b.push(0x00);
        b.push(name.len() as u8);
        b.extend_from_slice(name.as_bytes());
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
    }
    b
}

/// What a raw HTTP/2 connection got back.
#[derive(Default, Debug)]
struct Raw {
    opened: u64,
    answered: u64,
    /// RST_STREAM frames by error code.
    resets: BTreeMap<u32, u64>,
    goaway: Option<u32>,
    closed: bool,
}

/// An HTTP/2 error code's name (RFC 9113, section 7).
fn h2_code(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x5 => "STREAM_CLOSED",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0xb => "ENHANCE_YOUR_CALM",
        _ => return format!("{code:#x}"),
    };
    name.to_owned()
}

impl Raw {
    fn line(&self, what: &str) -> String {
        let resets: Vec<String> = self
            .resets
            .iter()
            .map(|(c, n)| format!("{n} RST_STREAM {}", h2_code(*c)))
            .collect();
        format!(
            "{what}: {} opened, {} answered (HEADERS){}{}{}",
            self.opened,
            self.answered,
            resets.iter().map(|r| format!(", {r}")).collect::<String>(),
            self.goaway
                .map_or(String::new(), |c| format!(", GOAWAY {}", h2_code(c))),
            if self.closed { ", closed" } else { "" }
        )
    }
}

/// One raw HTTP/2 connection: `n` `Info` streams opened at once (with
/// `reset`, each cancelled right after its headers), then the answers
/// read for up to `wait`.
async fn raw_streams(connect: &Connect, n: u32, reset: bool, wait: Duration) -> Res<Raw> {
    let tls = connect.tls().await?;
    let (mut rd, mut wr) = tokio::io::split(tls);
    let mut out = Vec::new();
    out.extend_from_slice(PREFACE);
    out.extend_from_slice(&frame(4, 0, 0, &[]));
    let headers = header_block("/universerpc.Universe/Info");
    let empty_message = [0u8; 5];
    for i in 0..n {
        let stream = 2 * i + 1;
        if reset {
            out.extend_from_slice(&frame(1, 0x4, stream, &headers));
            out.extend_from_slice(&frame(3, 0, stream, &8u32.to_be_bytes()));
        } else {
            out.extend_from_slice(&frame(1, 0x4, stream, &headers));
            out.extend_from_slice(&frame(0, 0x1, stream, &empty_message));
        }
    }
    let mut raw = Raw {
        opened: u64::from(n),
        ..Raw::default()
    };
    // The writer: the burst, then the acknowledgements the reader asks for.
    let (ack_tx, mut ack_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        if wr.write_all(&out).await.is_err() {
            return;
        }
        let _ = wr.flush().await;
        while let Some(a) = ack_rx.recv().await {
            if wr.write_all(&a).await.is_err() {
                return;
            }
            let _ = wr.flush().await;
        }
    });
    let mut seen = std::collections::HashSet::new();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut head = [0u8; 9];
        match tokio::time::timeout_at(deadline, rd.read_exact(&mut head)).await {
            Err(_) => break,
            Ok(Err(_)) => {
                raw.closed = true;
                break;
            }
            Ok(Ok(_)) => {}
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        if tokio::time::timeout_at(deadline, rd.read_exact(&mut payload))
            .await
            .map_or(true, |r| r.is_err())
        {
            raw.closed = true;
            break;
        }
        match kind {
            1 if seen.insert(stream) => raw.answered += 1,
            3 if payload.len() >= 4 => {
                let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                *raw.resets.entry(code).or_insert(0) += 1;
            }
            4 if flags & 1 == 0 => {
                let _ = ack_tx.send(frame(4, 1, 0, &[]));
            }
            6 if flags & 1 == 0 => {
                let _ = ack_tx.send(frame(6, 1, 0, &payload));
            }
            7 if payload.len() >= 8 => {
                raw.goaway = Some(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
            }
            _ => {}
        }
        let resets: u64 = raw.resets.values().sum();
        if !reset && raw.answered + resets >= u64::from(n) {
            break;
        }
    }
    drop(ack_tx);
    writer.abort();
    Ok(raw)
}

/// `n` connections from `addresses` addresses that open TCP and stall,
/// or (every other one) trickle a real ClientHello a byte every 250 ms;
/// a fresh client tries to connect meanwhile. (opened, closed at once,
/// closed within 10 s, the longest, a line on the fresh client).
async fn slow_tls(
    connect: &Connect,
    n: usize,
    addresses: usize,
) -> (usize, usize, usize, Duration, String) {
    let hello = {
        let mut c = rustls::ClientConnection::new(
            connect.tls.clone(),
            ServerName::try_from("localhost").expect("a name"),
        )
        .expect("a client connection");
        let mut bytes = Vec::new();
        let _ = c.write_tls(&mut bytes);
        bytes
    };
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let ip = attacker_ip(3, i % addresses);
        let Ok(socket) = TcpSocket::new_v4() else {
            break;
        };
        if socket.bind(SocketAddr::new(IpAddr::V4(ip), 0)).is_err() {
            continue;
        }
        let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(2), socket.connect(connect.server)).await
        else {
            continue;
        };
        let hello = hello.clone();
        tasks.push(tokio::spawn(async move {
            let opened = Instant::now();
            let (mut rd, mut wr) = s.into_split();
            let trickle = async move {
                if i % 2 == 1 {
                    for b in &hello {
                        if wr.write_all(std::slice::from_ref(b)).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                }
                std::future::pending::<()>().await;
            };
            let closed = async {
                let mut sink = [0u8; 512];
                loop {
                    match rd.read(&mut sink).await {
                        Ok(0) | Err(_) => return opened.elapsed(),
                        Ok(_) => continue,
                    }
                }
            };
            tokio::select! {
                took = closed => Some(took),
                () = trickle => None,
                () = tokio::time::sleep(Duration::from_secs(30)) => None,
            }
        }));
    }
    let opened = tasks.len();
    // A new client in the middle of it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fresh = {
        let started = Instant::now();
        let got = async {
            let mut c = connect.from(Ipv4Addr::new(127, 0, 9, 1)).client().await?;
            c.info(rpc::InfoRequest {}).await?;
            Res::Ok(())
        }
        .await;
        match got {
            Ok(()) => format!(
                "a fresh client connected and called in {:.0} ms",
                started.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => {
                let mut words = e.to_string();
                let mut source = e.source();
                while let Some(s) = source {
                    words = format!("{words}: {s}");
                    source = s.source();
                }
                format!(
                    "a fresh client failed after {:.0} ms: {words}",
                    started.elapsed().as_secs_f64() * 1e3
                )
            }
        }
    };
    let (mut at_once, mut within, mut longest) = (0, 0, Duration::ZERO);
    for t in tasks {
        match t.await {
            Ok(Some(took)) => {
                longest = longest.max(took);
                if took <= Duration::from_millis(200) {
                    at_once += 1;
                }
                if took <= Duration::from_secs(10) {
                    within += 1;
                }
            }
            _ => longest = Duration::from_secs(30),
        }
    }
    (opened, at_once, within, longest, fresh)
}

// ---------------------------------------------------------------------------
// What landed
// ---------------------------------------------------------------------------

/// Every universe with its root.
async fn directory<S>(m: &Multiverse<S>) -> Res<Vec<(String, ComputedNode)>>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
    S::Error: Send + Sync + 'static,
{
    let page = m
        .universes(PageQuery {
            offset: 0,
            limit: 1 << 20,
            descending: false,
        })
        .await?;
    let mut out: Vec<(String, ComputedNode)> = page
        .items
        .into_iter()
        .map(|(u, r)| (u.namespace(), r))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The honest universe's leaves that the honest client did not send (or
/// whose proof is not the one it sent), and its acknowledged leaves that
/// do not read back.
async fn honest_check<S>(m: &Multiverse<S>, universe: &Universe, w: &Written) -> Res<(u64, u64)>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
    S::Error: Send + Sync + 'static,
{
    let mut foreign = 0;
    let mut offset = 0;
    loop {
        let page = m
            .leaves(
                universe,
                PageQuery {
                    offset,
                    limit: 1_000,
                    descending: false,
                },
            )
            .await?;
        let n = page.items.len() as u64;
        for (record, leaf) in &page.items {
            match w.sent.get(&record.key.universe_key().0) {
                Some(p) if p.as_slice() == leaf.value() => {}
                _ => foreign += 1,
            }
        }
        offset += n;
        if n == 0 || offset >= page.total {
            break;
        }
    }
    let mut lost = 0;
    for a in &w.acked {
        match m.proof(universe, &a.key).await? {
            Some(p) if p.leaf.value() == a.proof.as_slice() => {}
            _ => lost += 1,
        }
    }
    Ok((foreign, lost))
}

// ---------------------------------------------------------------------------
// The campaign
// ---------------------------------------------------------------------------

async fn seed<S>(m: &Multiverse<S>, maker: &ProofMaker) -> Res<()>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
    S::Error: Send + Sync + 'static,
{
    let victim: Vec<_> = (0..VICTIM_LEAVES)
        .map(|i| maker.leaf(ProofType::Issuance, VICTIM_ASSET, i, 1 + u64::from(i)))
        .collect();
    m.insert(&maker.universe(ProofType::Issuance, VICTIM_ASSET), &victim)
        .await?;
    for asset in [HONEST_ASSET, ATTACKER_ASSET] {
        let leaf = maker.leaf(ProofType::Issuance, asset, 0, 1);
        m.insert(&maker.universe(ProofType::Issuance, asset), &[leaf])
            .await?;
    }
    Ok(())
}

async fn campaign(db_spec: String, phase_secs: u64, slow_conns: usize) -> Res<bool> {
    let phase = Duration::from_secs(phase_secs);
    let maker = Arc::new(ProofMaker::from_vectors());
    let db = Database::open(&db_spec).await?;
    let honest_u = maker.universe(ProofType::Issuance, HONEST_ASSET);
    let victim_u = maker.universe(ProofType::Issuance, VICTIM_ASSET);
    let attacker_u = maker.universe(ProofType::Issuance, ATTACKER_ASSET);
    match &db {
        Database::Sqlite(s) => seed(&Multiverse::new(s.clone()), &maker).await?,
        Database::Postgres(s) => seed(&Multiverse::new(s.clone()), &maker).await?,
    }
    let tokens = tokens(&db, &honest_u, &attacker_u).await?;
    let dir = std::env::temp_dir().join(format!("mssmt-grpc-campaign-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (cert, key_file) = (dir.join("tls.cert"), dir.join("tls.key"));
    TlsIdentity::load_or_generate(&cert, &key_file, &[])?;
    let mut tls = Trust::pinned_file(&cert)?.client_config()?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let tls = Arc::new(tls);

    // The server, in a process of its own.
    let me = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(me)
        .arg("--serve")
        .arg("--db")
        .arg(&db_spec)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await??
        .ok_or("the server exited")?;
    let addr: SocketAddr = ready.trim_start_matches("ready ").parse()?;
    let pid = child.id().ok_or("no pid")?;
    eprintln!("server pid {pid} on https://{addr}");
    let connect = Connect {
        tls,
        local: HONEST_IP,
        server: addr,
    };

    let written = Arc::new(Mutex::new(Written::default()));
    let honest_first = made(maker.proof(ProofType::Issuance, HONEST_ASSET, 0, 1));
    written.lock().await.sent.insert(
        honest_first.key.universe_key().0,
        honest_first.proof.clone(),
    );
    let honest_phase = Arc::new(Mutex::new(Honest::default()));
    let stop_honest = Arc::new(AtomicBool::new(false));
    let honest = tokio::spawn(honest_loop(
        connect.client().await?,
        maker.clone(),
        tokens.honest.clone(),
        stop_honest.clone(),
        honest_phase.clone(),
        written.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let guarded = |dir: &[(String, ComputedNode)]| -> Vec<(String, ComputedNode)> {
        let honest_ns = honest_u.namespace();
        dir.iter()
            .filter(|(n, _)| *n != honest_ns)
            .cloned()
            .collect()
    };
    let before_dir = match &db {
        Database::Sqlite(s) => directory(&Multiverse::new(s.clone())).await?,
        Database::Postgres(s) => directory(&Multiverse::new(s.clone())).await?,
    };

    let engine = match db {
        Database::Sqlite(_) => "SQLite",
        Database::Postgres(_) => "Postgres (fsync on)",
    };
    println!(
        "\n| engine | phase | attack traffic (answers) | honest p50 / p99 (ms) | p99 vs alone | honest failures of calls | server RSS MB before / max / after | server fds before / max / after |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut alone_p99 = None;
    let mut unauthorized_ok = 0u64;
    let mut past_end_items = 0u64;
    let mut all_refusals = Tally::default();
    // One message of every class any phase saw.
    let mut samples = Tally::default();
    let phases = [
        "alone",
        "credentials",
        "forged",
        "pages",
        "streams",
        "slow-tls",
        "flood-1-addr",
        "after",
    ];
    for name in phases {
        let before = usage(pid);
        *honest_phase.lock().await = Honest::default();
        let PhaseWatch {
            stop,
            peak,
            sampler,
            timer,
        } = PhaseWatch::start(pid, before, phase);
        let traffic = match name {
            "alone" | "after" => {
                timer.await?;
                "none".to_owned()
            }
            "credentials" => {
                let cs = clients(&connect, 1, 50).await?;
                let (tally, _) =
                    hammer(cs, credential_calls(&maker, &tokens), 32, stop.clone()).await;
                let _ = timer.await;
                unauthorized_ok += tally.count("OK");
                all_refusals.merge(tally.clone());
                tally.line()
            }
            "forged" => {
                let cs = clients(&connect, 2, 8).await?;
                let calls = forged_calls(&maker, &tokens, &honest_first);
                let (tally, _) = hammer(cs, calls, 8, stop.clone()).await;
                let _ = timer.await;
                unauthorized_ok += tally.count("OK");
                all_refusals.merge(tally.clone());
                tally.line()
            }
            "pages" => {
                let cs = clients(&connect, 4, 20).await?;
                let (tally, past) =
                    hammer(cs, page_calls(&victim_u, &honest_u), 32, stop.clone()).await;
                let _ = timer.await;
                past_end_items += past.count("OK, items");
                samples.merge(tally.clone());
                format!(
                    "{}; offsets ≥ 10^6 answered with items: {}",
                    tally.line(),
                    past.count("OK, items")
                )
            }
            "streams" => {
                let c = connect.from(attacker_ip(5, 0));
                let wait = phase / 5;
                let few = raw_streams(&c, 50, false, wait).await;
                let many = raw_streams(&c, 1_000, false, wait).await;
                let reset = raw_streams(&c, 1_000, true, wait).await;
                let tonic_many = {
                    let client = c.client().await?;
                    let key = made(maker.proof(ProofType::Issuance, VICTIM_ASSET, 0, 1)).query();
                    let calls = vec![(Call::Proof(key), false)];
                    let (tally, _) = hammer(vec![client], calls, 1_000, stop.clone()).await;
                    samples.merge(tally.clone());
                    tally
                };
                let _ = timer.await;
                let show = |r: Res<Raw>, what: &str| match r {
                    Ok(r) => r.line(what),
                    Err(e) => format!("{what}: {e}"),
                };
                format!(
                    "{}; {}; {}; tonic, 1000 calls at once on one channel: {}",
                    show(few, "raw HTTP/2, 50 streams at once"),
                    show(many, "1000 streams at once"),
                    show(reset, "rapid reset of 1000"),
                    tonic_many.line()
                )
            }
            "slow-tls" => {
                let (opened, at_once, within, longest, fresh) =
                    slow_tls(&connect, slow_conns, 200).await;
                stop.store(true, Ordering::Relaxed);
                let _ = timer.await;
                format!(
                    "{opened} stalled or trickled handshakes opened; {at_once} closed at once (over the caps), {within} within 10 s, the last after {:.1} s; {fresh}",
                    longest.as_secs_f64()
                )
            }
            "flood-1-addr" => {
                let c = connect.from(attacker_ip(6, 0));
                let mut cs = Vec::new();
                for _ in 0..8 {
                    cs.push(c.client().await?);
                }
                let key = made(maker.proof(ProofType::Issuance, VICTIM_ASSET, 1, 2)).query();
                let (tally, _) =
                    hammer(cs, vec![(Call::Proof(key), false)], 64, stop.clone()).await;
                let _ = timer.await;
                samples.merge(tally.clone());
                tally.line()
            }
            _ => unreachable!(),
        };
        stop.store(true, Ordering::Relaxed);
        let _ = sampler.await;
        // Settle, then read the server's usage after.
        tokio::time::sleep(Duration::from_secs(if name == "slow-tls" { 6 } else { 1 })).await;
        let after = usage(pid);
        let peak = *peak.lock().await;
        let h = std::mem::take(&mut *honest_phase.lock().await);
        let mut lat = h.latencies;
        lat.sort();
        let p50 = percentile(&lat, 0.5);
        let p99 = percentile(&lat, 0.99);
        if name == "alone" {
            alone_p99 = Some(p99);
        }
        let ratio = alone_p99.map_or(1.0, |a| p99.as_secs_f64() / a.as_secs_f64().max(1e-9));
        let failures = h.failures.0.values().sum::<u64>();
        let failures_line = if failures == 0 {
            String::new()
        } else {
            format!(" ({})", h.failures.line())
        };
        println!(
            "| {engine} | {name} | {traffic} | {} / {} | {ratio:.2}× | {failures}{failures_line} of {} | {:.0} / {:.0} / {:.0} | {} / {} / {} |",
            ms(p50),
            ms(p99),
            lat.len() as u64 + failures,
            before.0 as f64 / 1024.0,
            peak.0 as f64 / 1024.0,
            after.0 as f64 / 1024.0,
            before.1,
            peak.1,
            after.1
        );
    }
    stop_honest.store(true, Ordering::Relaxed);
    let _ = honest.await;

    // What landed: nothing of the attacks, everything the honest client was
    // told was written.
    let w = std::mem::take(&mut *written.lock().await);
    let (after_dir, (foreign, lost)) = match &db {
        Database::Sqlite(s) => {
            let m = Multiverse::new(s.clone());
            (directory(&m).await?, honest_check(&m, &honest_u, &w).await?)
        }
        Database::Postgres(s) => {
            let m = Multiverse::new(s.clone());
            (directory(&m).await?, honest_check(&m, &honest_u, &w).await?)
        }
    };
    let (g_before, g_after) = (guarded(&before_dir), guarded(&after_dir));
    let changed = g_before.iter().filter(|e| !g_after.contains(e)).count() as u64
        + g_after.iter().filter(|e| !g_before.contains(e)).count() as u64;
    let unauthorized = changed + foreign + unauthorized_ok;
    let refusal_codes: BTreeMap<&str, u64> = {
        let mut m = BTreeMap::new();
        for (k, v) in &all_refusals.0 {
            let code = k.split(' ').next().unwrap_or("");
            *m.entry(code).or_insert(0) += v;
        }
        m
    };
    println!(
        "\n{engine}: unauthorized writes landed: {unauthorized} (universes changed or added: {changed}, honest-universe leaves the honest client did not send: {foreign}, OK answers to refused inserts: {unauthorized_ok}); honest acknowledged writes: {}, lost: {lost}; pages past the end answered with items: {past_end_items}; refusals of the credentials and forged phases by code: {}",
        w.acked.len(),
        refusal_codes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    samples.merge(all_refusals);
    println!("\n{engine}: one message of each kind of answer:\n");
    for (class, message) in &samples.1 {
        if !message.is_empty() {
            println!("* {class}: `{message}`");
        }
    }
    drop(child.stdin.take());
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(unauthorized == 0 && lost == 0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.iter().any(|a| a == "--serve") {
        let (Some(db), Some(listen), Some(cert), Some(key)) = (
            get("--db"),
            get("--listen"),
            get("--tls-cert"),
            get("--tls-key"),
        ) else {
            return ExitCode::FAILURE;
        };
        return match rt.block_on(serve_mode(&db, &listen, cert.into(), key.into())) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("server error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let Some(db) = get("--db") else {
        eprintln!(
            "usage: grpc_campaign --db <sqlite path | postgres URL> [--phase-secs 6] [--slow-conns 2000]"
        );
        return ExitCode::FAILURE;
    };
    let phase_secs = get("--phase-secs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let slow_conns = get("--slow-conns")
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    match rt.block_on(campaign(db, phase_secs, slow_conns)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("FAILED: an unauthorized write landed or an honest write was lost");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
