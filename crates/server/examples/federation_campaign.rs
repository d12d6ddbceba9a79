//! The hostile-client campaign against the federation server
//! (RELIABILITY.md, "Hostile clients"): real HTTP over TCP or TLS on
//! loopback, against a SQLite file or a Postgres database, with the
//! server in a child process (this program, `--serve`) so its memory and
//! descriptors are its own.
//!
//! An honest client (its own address, 127.0.0.2, one kept-alive
//! connection) writes one leaf and reads one proof every 20 ms with a
//! valid token through every phase; each attack phase runs beside it:
//!
//! * `matrix`: every route × every bad credential (none, malformed,
//!   wrong, expired, revoked, a read token on a write, a token for
//!   namespace A on B, a write token creating a namespace, a forged parent
//!   write), from 50 addresses;
//! * `bodies`: malformed and oversized bodies, too many leaves, huge
//!   `limit`s, `children` requests of 8,192 prefixes at the deepest level;
//! * `slowloris`: `--half-open` connections (10,000 by default) that send
//!   half a request header, from 200 addresses;
//! * `conn-flood`: connections opened and closed as fast as 200 tasks can;
//! * `flood-1-addr`: anonymous requests from one address, 64 at once;
//! * `flood-tokens`: 200 valid read tokens and random wrong ones from 10
//!   addresses, 64 at once.
//!
//! It prints one table row per phase: the honest client's p50/p99 and
//! failures, the server's RSS and open descriptors before, at most during,
//! and after; then the unauthorized writes that landed (roots, versions,
//! namespaces and the parent's links checked) and the honest
//! acknowledged writes lost (every one read back). Exits 1 if either is
//! not 0. Bounded: each phase lasts `--phase-secs` (default 6).
//!
//! `--cost SECS` measures instead, in one run on one database: honest
//! throughput over TLS against plain HTTP (proofs, and 1-leaf writes; 4
//! clients on kept-alive connections, rate limits off), and what checking
//! the token table on every request costs (token cache 0 against 1 s).
//!
//! ```text
//! scripts/federation-campaign.sh        # raises the descriptor limit, runs all four
//! federation_campaign --db <sqlite path | postgres URL> --tls yes|no [--phase-secs 6] [--half-open 10000]
//! federation_campaign --db <sqlite path | postgres URL> --cost 5
//! ```

use ms_smt_test_support::campaign::{PhaseWatch, attacker_ip, ms, percentile, usage};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ms_smt::{Compacted, Forest, Key, Leaf, Link};
use ms_smt_server::access::{Grants, IssuedToken};
use ms_smt_server::{
    DatabaseExt, ListenConfig, ServerConfig, TlsIdentity, Trust, forest_router, serve,
};
use ms_smt_sql::Database;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::Mutex;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
type Raw = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;
/// The honest client's acknowledged leaves: key and value.
type Acked = Arc<Mutex<Vec<(Key, Vec<u8>)>>>;

const PARENT: &str = "campaign-parent";
const CHILD: &str = "child-";
const HONEST: &str = "child-honest";
const VICTIM_A: &str = "child-victim-a";
const VICTIM_B: &str = "child-victim-b";
const ATTACKER: &str = "child-attacker";
/// The honest client's address.
const HONEST_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn key(tag: &str, i: u64) -> Key {
    Key(Sha256::digest(format!("{tag}/{i}")).into())
}

/// The forest every process of the campaign uses: `child-*` under the
/// parent.
fn forest<S: ms_smt::store::ForestStore>(store: S) -> Forest<S, Compacted> {
    Forest::new(store).with_link(Link::rule(PARENT, |name| {
        name.starts_with(CHILD)
            .then(|| Key(Sha256::digest(name.as_bytes()).into()))
    }))
}

// ---------------------------------------------------------------------------
// The server (child process)
// ---------------------------------------------------------------------------

/// `--serve`: the server with its default limits, until stdin closes.
async fn serve_mode(db: &str, listen: &str, tls: Option<(PathBuf, PathBuf)>) -> Res<()> {
    let database = Database::open(db).await?;
    let app = match &database {
        Database::Sqlite(s) => forest_router(forest(s.clone()), ServerConfig::default()),
        Database::Postgres(s) => forest_router(forest(s.clone()), ServerConfig::default()),
    };
    let config = match tls {
        Some((cert, key)) => {
            ListenConfig::tls(TlsIdentity::from_pem_files(&cert, &key)?.server_config()?)
        }
        None => ListenConfig::plain(),
    };
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("ready {}", listener.local_addr()?);
    let stop = async {
        // The campaign closes our stdin to stop us.
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    serve(listener, app, config, stop).await?;
    Ok(())
}

/// The server process and what it uses.
struct Server {
    child: tokio::process::Child,
    pid: u32,
    addr: SocketAddr,
}

impl Server {
    /// (RSS in kB, open descriptors).
    fn usage(&self) -> (u64, u64) {
        usage(self.pid)
    }
}

// ---------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------

/// A client from `ip`, believing `trust` (plain HTTP too).
fn client(ip: Ipv4Addr, trust: &Trust, max_idle: usize) -> Res<Raw> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_local_address(Some(IpAddr::V4(ip)));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(trust.client_config()?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle)
        .build(https))
}

/// One request; the status (None: no answer).
async fn send(
    c: &Raw,
    auth: Option<&str>,
    method: Method,
    url: &str,
    body: Bytes,
) -> Option<StatusCode> {
    let mut request = Request::builder().method(method).uri(url);
    if let Some(auth) = auth {
        request = request.header(hyper::header::AUTHORIZATION, auth);
    }
    let request = request.body(Full::new(body)).ok()?;
    let response = tokio::time::timeout(Duration::from_secs(20), c.request(request))
        .await
        .ok()?
        .ok()?;
    let status = response.status();
    let _ = response.into_body().collect().await;
    Some(status)
}

/// The honest client's figures for one phase.
#[derive(Default)]
struct Honest {
    latencies: Vec<Duration>,
    failures: u64,
    /// Failures answered 503 (no connection slot, busy).
    unavailable: u64,
}

/// The honest client: a write and a proof every 20 ms until `stop`;
/// acknowledged leaves go to `acked`.
async fn honest_loop(
    c: Raw,
    base: String,
    auth: String,
    stop: Arc<AtomicBool>,
    phase: Arc<Mutex<Honest>>,
    acked: Acked,
) {
    let mut i = 0u64;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        next += Duration::from_millis(20);
        let k = key("honest", i);
        let value = format!("h{i}").into_bytes();
        let body = format!(
            r#"[{{"key":"{}","value":"{}","sum":1}}]"#,
            k.to_hex(),
            hex::encode(&value)
        );
        let (method, url, body) = if i.is_multiple_of(2) {
            (
                Method::POST,
                format!("{base}/v1/{HONEST}/leaves"),
                Bytes::from(body),
            )
        } else {
            let k = key("honest", i - 1);
            (
                Method::GET,
                format!("{base}/v1/{HONEST}/proof/{}", k.to_hex()),
                Bytes::new(),
            )
        };
        let write = method == Method::POST;
        let started = Instant::now();
        let status = send(&c, Some(&auth), method, &url, body).await;
        let took = started.elapsed();
        {
            let mut p = phase.lock().await;
            match status {
                Some(s) if s.is_success() => {
                    p.latencies.push(took);
                    if write {
                        acked.lock().await.push((k, value));
                    }
                }
                Some(StatusCode::SERVICE_UNAVAILABLE) | None => {
                    p.failures += 1;
                    p.unavailable += 1;
                }
                Some(_) => p.failures += 1,
            }
        }
        i += 1;
        tokio::time::sleep_until(next.into()).await;
    }
}

/// The statuses attackers got, by class.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

impl Tally {
    fn add(&mut self, status: Option<StatusCode>) {
        let k = status.map_or("no answer".to_owned(), |s| s.as_u16().to_string());
        *self.0.entry(k).or_insert(0) += 1;
    }

    fn line(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The tokens the attacks use.
struct Tokens {
    read_a: String,
    write_a: String,
    expired: String,
    revoked: String,
    attacker: String,
    many: Vec<String>,
}

async fn tokens(db: &Database) -> Res<(Tokens, String)> {
    let make = async |grants: &str, expires: Option<i64>| -> Res<IssuedToken> {
        let grants: Grants = grants.parse()?;
        Ok(db.issue_token("campaign", &grants, expires).await?)
    };
    let bearer = |t: &IssuedToken| format!("Bearer {}", t.secret.expose());
    let revoked = make(&format!("write:{VICTIM_A}"), None).await?;
    db.revoke_token(&revoked.record.id).await?;
    let mut many = Vec::new();
    for _ in 0..200 {
        many.push(bearer(&make("read:*", None).await?));
    }
    let honest = make(&format!("write:{HONEST}"), None).await?;
    Ok((
        Tokens {
            read_a: bearer(&make(&format!("read:{VICTIM_A}"), None).await?),
            write_a: bearer(&make(&format!("write:{VICTIM_A}"), None).await?),
            expired: bearer(&make(&format!("write:{VICTIM_A}"), Some(1)).await?),
            revoked: bearer(&revoked),
            attacker: bearer(&make(&format!("write:{ATTACKER}"), None).await?),
            many,
        },
        bearer(&honest),
    ))
}

/// Every (credential, method, path, body) of the authorization matrix.
fn matrix_requests(t: &Tokens) -> Vec<(Option<String>, Method, String, Bytes)> {
    let k = key("attack", 0).to_hex();
    let leaf = Bytes::from(format!(r#"[{{"key":"{k}","value":"0bad","sum":7}}]"#));
    let del = Bytes::from(format!(
        r#"[{{"key":"{}","value":"","sum":0}}]"#,
        key("victim", 0).to_hex()
    ));
    let wrong = format!("Bearer mssmt_{}", "ab".repeat(32));
    let mut out = Vec::new();
    let bad: Vec<Option<String>> = vec![
        None,
        Some("Basic bWU6cHc=".into()),
        Some(wrong),
        Some(t.expired.clone()),
        Some(t.revoked.clone()),
        Some(t.read_a.clone()),
    ];
    for ns in [VICTIM_A, VICTIM_B, PARENT, "child-new", "brand-new"] {
        let mut creds = bad.clone();
        if ns != VICTIM_A {
            creds.push(Some(t.write_a.clone()));
        }
        for cred in &creds {
            out.push((
                cred.clone(),
                Method::POST,
                format!("/v1/{ns}/leaves"),
                leaf.clone(),
            ));
            out.push((
                cred.clone(),
                Method::POST,
                format!("/v1/{ns}/leaves"),
                del.clone(),
            ));
        }
        // Creating a namespace: an admin's only; a write token is not.
        for cred in bad.iter().chain([&Some(t.write_a.clone())]) {
            out.push((cred.clone(), Method::PUT, format!("/v1/{ns}"), Bytes::new()));
        }
    }
    // A forged parent write with the attacker's valid write token.
    out.push((
        Some(t.attacker.clone()),
        Method::POST,
        format!("/v1/{PARENT}/leaves"),
        leaf,
    ));
    out
}

/// Malformed, oversized and expensive requests with the attacker's own
/// valid tokens.
fn body_requests(t: &Tokens, root: &str) -> Vec<(Option<String>, Method, String, Bytes)> {
    let auth = Some(t.attacker.clone());
    let reader = Some(t.many[0].clone());
    let leaves = |n: usize| {
        let list: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"key":"{}","value":"00","sum":1}}"#,
                    key("many", i as u64).to_hex()
                )
            })
            .collect();
        Bytes::from(format!("[{}]", list.join(",")))
    };
    let deep: Vec<String> = (0..8_192u64)
        .map(|i| {
            let mut b = vec![255u8];
            b.extend_from_slice(&key("deep", i).0);
            b[32] &= 0xfe;
            format!("\"{}\"", hex::encode(b))
        })
        .collect();
    let children = Bytes::from(format!(
        r#"{{"root":"{root}","sum":0,"prefixes":[{}]}}"#,
        deep.join(",")
    ));
    let leaves_url = format!("/v1/{ATTACKER}/leaves");
    vec![
        (
            auth.clone(),
            Method::POST,
            leaves_url.clone(),
            Bytes::from_static(b"[{\"key\":"),
        ),
        (
            auth.clone(),
            Method::POST,
            leaves_url.clone(),
            Bytes::from_static(b"{\"x\":1}"),
        ),
        (
            auth.clone(),
            Method::POST,
            leaves_url.clone(),
            Bytes::from(vec![b'['; 5 << 20]),
        ),
        (
            auth.clone(),
            Method::POST,
            leaves_url.clone(),
            leaves(10_001),
        ),
        (
            reader.clone(),
            Method::GET,
            format!("/v1/{VICTIM_A}/changes?since=0&limit=18446744073709551615"),
            Bytes::new(),
        ),
        (
            reader.clone(),
            Method::GET,
            format!("/v1/{VICTIM_A}/changes?since=0&limit=999999999999999999999999"),
            Bytes::new(),
        ),
        (
            reader,
            Method::POST,
            format!("/v1/{VICTIM_A}/children"),
            children,
        ),
    ]
}

/// Sends `requests` round-robin from `clients` with `concurrency` tasks
/// until `stop`.
async fn hammer(
    clients: Vec<Raw>,
    base: &str,
    requests: Vec<(Option<String>, Method, String, Bytes)>,
    concurrency: usize,
    stop: Arc<AtomicBool>,
) -> Tally {
    let requests = Arc::new(requests);
    let clients = Arc::new(clients);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (requests, clients, tally, next, stop) = (
            requests.clone(),
            clients.clone(),
            tally.clone(),
            next.clone(),
            stop.clone(),
        );
        let base = base.to_owned();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                let (auth, method, path, body) = &requests[n % requests.len()];
                let c = &clients[n % clients.len()];
                let status = send(
                    c,
                    auth.as_deref(),
                    method.clone(),
                    &format!("{base}{path}"),
                    body.clone(),
                )
                .await;
                tally.lock().await.add(status);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Arc::try_unwrap(tally)
        .map(|m| m.into_inner())
        .unwrap_or_default()
}

/// `n` connections that each send half a request header, from
/// `addresses` addresses; how long the server took to close them (the
/// longest), and how many it closed within 10 s.
async fn slowloris(
    server: SocketAddr,
    n: usize,
    addresses: usize,
    tls: bool,
) -> (Duration, usize, usize) {
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let ip = attacker_ip(3, i % addresses);
        let Ok(socket) = TcpSocket::new_v4() else {
            break;
        };
        if socket.bind(SocketAddr::new(IpAddr::V4(ip), 0)).is_err() {
            continue;
        }
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(2), socket.connect(server)).await
        else {
            continue;
        };
        // Half a header (or, on TLS, half a ClientHello's worth of bytes).
        let half: &[u8] = if tls {
            b"\x16\x03\x01\x00\xc8\x01\x00\x00"
        } else {
            b"GET /v1/child-honest/root HTTP/1.1\r\nHost: x\r\n"
        };
        let _ = s.write_all(half).await;
        conns.push((Instant::now(), s));
    }
    let opened = conns.len();
    let mut tasks = Vec::new();
    for (sent, mut s) in conns {
        tasks.push(tokio::spawn(async move {
            let mut sink = [0u8; 512];
            loop {
                match tokio::time::timeout(Duration::from_secs(30), s.read(&mut sink)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return Some(sent.elapsed()),
                    Ok(Ok(_)) => continue,
                    Err(_) => return None,
                }
            }
        }));
    }
    let mut longest = Duration::ZERO;
    let mut within = 0;
    for t in tasks {
        if let Ok(Some(took)) = t.await {
            longest = longest.max(took);
            if took <= Duration::from_secs(10) {
                within += 1;
            }
        } else {
            longest = Duration::from_secs(30);
        }
    }
    (longest, within, opened)
}

/// Connections opened and dropped from 200 tasks until `stop`.
async fn conn_flood(server: SocketAddr, stop: Arc<AtomicBool>) -> u64 {
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..200 {
        let (stop, count) = (stop.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let ip = attacker_ip(4, t);
            while !stop.load(Ordering::Relaxed) {
                let Ok(socket) = TcpSocket::new_v4() else {
                    continue;
                };
                if socket.bind(SocketAddr::new(IpAddr::V4(ip), 0)).is_err() {
                    continue;
                }
                if let Ok(Ok(s)) =
                    tokio::time::timeout(Duration::from_secs(1), socket.connect(server)).await
                {
                    count.fetch_add(1, Ordering::Relaxed);
                    drop(s);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    count.load(Ordering::Relaxed)
}

/// What no attack may change: every namespace but the honest one and the
/// parent (which the honest writes move), with root and version.
async fn guarded(db: &Database) -> Res<Vec<String>> {
    Ok(db
        .namespaces()
        .await?
        .into_iter()
        .filter(|n| n.name != HONEST && n.name != PARENT)
        .map(|n| match n.summary {
            Ok(s) => format!("{} {} {} v{}", n.name, s.root.hash, s.root.sum, s.version),
            Err(damage) => format!("{} damaged: {damage:?}", n.name),
        })
        .collect())
}

async fn campaign(db_spec: String, tls: bool, phase_secs: u64, half_open: usize) -> Res<bool> {
    let phase = Duration::from_secs(phase_secs);
    let db = Database::open(&db_spec).await?;
    // Setup: the namespaces through the forest (the parent in step).
    match &db {
        Database::Sqlite(s) => seed(forest(s.clone())).await?,
        Database::Postgres(s) => seed(forest(s.clone())).await?,
    }
    let (tokens, honest_auth) = tokens(&db).await?;
    let dir = std::env::temp_dir().join(format!("mssmt-campaign-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (cert, key_file) = (dir.join("tls.cert"), dir.join("tls.key"));
    let trust = if tls {
        TlsIdentity::load_or_generate(&cert, &key_file, &[])?;
        Trust::pinned_file(&cert)?
    } else {
        Trust::SystemRoots
    };

    // The server, in a process of its own.
    let me = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(me);
    cmd.arg("--serve")
        .arg("--db")
        .arg(&db_spec)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    if tls {
        cmd.arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key_file);
    }
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await??
        .ok_or("the server exited")?;
    let addr: SocketAddr = ready.trim_start_matches("ready ").parse()?;
    let server = Server {
        pid: child.id().ok_or("no pid")?,
        child,
        addr,
    };
    let base = format!("{}://{addr}", if tls { "https" } else { "http" });
    eprintln!("server pid {} on {base}", server.pid);

    let acked = Arc::new(Mutex::new(Vec::new()));
    let honest_phase = Arc::new(Mutex::new(Honest::default()));
    let stop_honest = Arc::new(AtomicBool::new(false));
    let honest = tokio::spawn(honest_loop(
        client(HONEST_IP, &trust, 1)?,
        base.clone(),
        honest_auth,
        stop_honest.clone(),
        honest_phase.clone(),
        acked.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let guarded_before = guarded(&db).await?;
    let victim_root = match &db {
        Database::Sqlite(s) => {
            ms_smt::CompactedTree::new(s.open_namespace(VICTIM_A))
                .root()
                .await?
        }
        Database::Postgres(s) => {
            ms_smt::CompactedTree::new(s.open_namespace(VICTIM_A))
                .root()
                .await?
        }
    };

    println!(
        "\n| engine, transport | phase | attack traffic | honest p50 / p99 (ms) | p99 vs alone | honest failures (503 or no answer) | server RSS MB before / max / after | server fds before / max / after |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let engine = match db {
        Database::Sqlite(_) => "SQLite",
        Database::Postgres(_) => "Postgres (fsync on)",
    };
    let transport = if tls { "TLS" } else { "TCP" };
    let mut alone_p99 = None;
    let mut unauthorized_2xx = 0u64;
    let phases = [
        "alone",
        "matrix",
        "bodies",
        "slowloris",
        "conn-flood",
        "flood-1-addr",
        "flood-tokens",
        "after",
    ];
    for name in phases {
        let before = server.usage();
        *honest_phase.lock().await = Honest::default();
        let PhaseWatch {
            stop,
            peak,
            sampler,
            timer,
        } = PhaseWatch::start(server.pid, before, phase);
        let traffic = match name {
            "alone" | "after" => {
                timer.await?;
                "none".to_owned()
            }
            "matrix" => {
                let clients = (0..50)
                    .map(|i| client(attacker_ip(1, i), &trust, 4))
                    .collect::<Res<Vec<_>>>()?;
                let requests = matrix_requests(&tokens);
                let tally = hammer(clients, &base, requests, 32, stop.clone()).await;
                unauthorized_2xx += tally
                    .0
                    .iter()
                    .filter(|(k, _)| k.starts_with('2'))
                    .map(|(_, v)| *v)
                    .sum::<u64>();
                let _ = timer.await;
                tally.line()
            }
            "bodies" => {
                let clients = (0..20)
                    .map(|i| client(attacker_ip(2, i), &trust, 4))
                    .collect::<Res<Vec<_>>>()?;
                let tally = hammer(
                    clients,
                    &base,
                    body_requests(&tokens, &victim_root.hash.to_hex()),
                    8,
                    stop.clone(),
                )
                .await;
                let _ = timer.await;
                tally.line()
            }
            "slowloris" => {
                let (longest, within, opened) = slowloris(server.addr, half_open, 200, tls).await;
                stop.store(true, Ordering::Relaxed);
                let _ = timer.await;
                format!(
                    "{opened} half-sent requests opened; {within} closed within 10 s, the last after {:.1} s",
                    longest.as_secs_f64()
                )
            }
            "conn-flood" => {
                let n = conn_flood(server.addr, stop.clone()).await;
                let _ = timer.await;
                format!("{n} connections opened and dropped")
            }
            "flood-1-addr" => {
                let c = client(attacker_ip(5, 0), &trust, 64)?;
                let requests = vec![(
                    None,
                    Method::GET,
                    format!("/v1/{VICTIM_A}/root"),
                    Bytes::new(),
                )];
                let tally = hammer(vec![c], &base, requests, 64, stop.clone()).await;
                let _ = timer.await;
                tally.line()
            }
            "flood-tokens" => {
                let clients = (0..10)
                    .map(|i| client(attacker_ip(6, i), &trust, 8))
                    .collect::<Res<Vec<_>>>()?;
                let mut requests: Vec<_> = tokens
                    .many
                    .iter()
                    .map(|t| {
                        (
                            Some(t.clone()),
                            Method::GET,
                            format!("/v1/{VICTIM_B}/root"),
                            Bytes::new(),
                        )
                    })
                    .collect();
                for i in 0..200 {
                    let wrong = format!("Bearer mssmt_{:064x}", i);
                    requests.push((
                        Some(wrong),
                        Method::GET,
                        format!("/v1/{VICTIM_B}/root"),
                        Bytes::new(),
                    ));
                }
                let tally = hammer(clients, &base, requests, 64, stop.clone()).await;
                let _ = timer.await;
                tally.line()
            }
            _ => unreachable!(),
        };
        stop.store(true, Ordering::Relaxed);
        let _ = sampler.await;
        // Settle, then read the server's usage after.
        tokio::time::sleep(Duration::from_secs(if name == "slowloris" { 6 } else { 1 })).await;
        let after = server.usage();
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
        println!(
            "| {engine}, {transport} | {name} | {traffic} | {} / {} | {ratio:.2}× | {} ({}) of {} | {:.0} / {:.0} / {:.0} | {} / {} / {} |",
            ms(p50),
            ms(p99),
            h.failures,
            h.unavailable,
            lat.len() as u64 + h.failures,
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
    let guarded_after = guarded(&db).await?;
    let changed = guarded_before
        .iter()
        .filter(|l| !guarded_after.contains(l))
        .count()
        + guarded_after.len().saturating_sub(guarded_before.len());
    let acked = acked.lock().await.clone();
    let (lost, links_clean) = match &db {
        Database::Sqlite(s) => check(forest(s.clone()), &acked).await?,
        Database::Postgres(s) => check(forest(s.clone()), &acked).await?,
    };
    println!(
        "\n{engine}, {transport}: unauthorized writes landed: {} (namespaces changed or added: {changed}, 2xx answers to the matrix's writes: {unauthorized_2xx}, parent links clean: {links_clean}); honest acknowledged writes: {}, lost: {lost}",
        changed as u64 + unauthorized_2xx + u64::from(!links_clean),
        acked.len()
    );
    let mut server = server;
    drop(server.child.stdin.take());
    let _ = tokio::time::timeout(Duration::from_secs(30), server.child.wait()).await;
    let _ = server.child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(changed == 0 && unauthorized_2xx == 0 && lost == 0 && links_clean)
}

/// The victims, the honest and the attacker's namespaces, a leaf each.
async fn seed<S>(forest: Forest<S, Compacted>) -> Res<()>
where
    S: ms_smt::store::ForestStore + Send + Sync + 'static,
    S::Error: Send + Sync,
    S::Tree: Clone,
{
    forest
        .insert_many(
            [VICTIM_A, VICTIM_B, HONEST, ATTACKER]
                .iter()
                .map(|ns| (*ns, key("victim", 0), Leaf::new(ns.as_bytes().to_vec(), 1))),
        )
        .await?;
    Ok(())
}

/// Honest acknowledged leaves missing or different, and whether the
/// parent holds every child's root.
async fn check<S>(forest: Forest<S, Compacted>, acked: &[(Key, Vec<u8>)]) -> Res<(u64, bool)>
where
    S: ms_smt::store::ForestStore + Send + Sync + 'static,
    S::Error: Send + Sync,
    S::Tree: Clone,
{
    let tree = forest.tree(HONEST)?;
    let keys: Vec<Key> = acked.iter().map(|(k, _)| *k).collect();
    let got = tree.get_many(&keys).await?;
    let lost = acked
        .iter()
        .zip(&got)
        .filter(|((_, v), leaf)| leaf.value() != v.as_slice())
        .count() as u64;
    let links = forest.audit_links().await?;
    Ok((lost, links.is_clean()))
}

/// Requests per second of `clients` tasks doing `op` for `secs` against
/// `base` (one kept-alive connection each).
async fn throughput(
    base: &str,
    trust: &Trust,
    auth: &str,
    write: bool,
    clients: usize,
    secs: f64,
    round: u64,
) -> Res<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..clients {
        let c = client(Ipv4Addr::new(127, 0, 7, t as u8 + 1), trust, 1)?;
        let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
        let (base, auth) = (base.to_owned(), auth.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = key(&format!("cost-{round}-{t}"), i);
                let (method, url, body) = if write {
                    let body = format!(r#"[{{"key":"{}","value":"01","sum":1}}]"#, k.to_hex());
                    (
                        Method::POST,
                        format!("{base}/v1/{HONEST}/leaves"),
                        Bytes::from(body),
                    )
                } else {
                    let k = key("honest-seed", i % 1_000);
                    (
                        Method::GET,
                        format!("{base}/v1/{HONEST}/proof/{}", k.to_hex()),
                        Bytes::new(),
                    )
                };
                match send(&c, Some(&auth), method, &url, body).await {
                    Some(s) if s.is_success() => done.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    if failed.load(Ordering::Relaxed) > 0 {
        return Err(format!("{} requests failed", failed.load(Ordering::Relaxed)).into());
    }
    Ok(done.load(Ordering::Relaxed) as f64 / secs)
}

/// `--cost`: TLS against plain, token cache off against on, same run.
async fn cost(db_spec: String, secs: f64) -> Res<()> {
    let db = Database::open(&db_spec).await?;
    let seed_leaves = (0..1_000u64).map(|i| (HONEST, key("honest-seed", i), Leaf::new(vec![1], 1)));
    match &db {
        Database::Sqlite(s) => {
            forest(s.clone()).insert_many(seed_leaves).await?;
        }
        Database::Postgres(s) => {
            forest(s.clone()).insert_many(seed_leaves).await?;
        }
    }
    let (_, auth) = tokens(&db).await?;
    let (identity, _, _) = TlsIdentity::self_signed(&[])?;
    let trust = Trust::Pinned(identity.certificate().ok_or("no cert")?.clone());
    let unlimited = ServerConfig::default().per_address(None).per_token(None);
    let start = async |config: ServerConfig, listen: ListenConfig| -> Res<String> {
        let app = match &db {
            Database::Sqlite(s) => forest_router(forest(s.clone()), config),
            Database::Postgres(s) => forest_router(forest(s.clone()), config),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let scheme = match listen.transport {
            ms_smt_server::Transport::Tls(_) => "https",
            ms_smt_server::Transport::Plain => "http",
        };
        let url = format!("{scheme}://{}", listener.local_addr()?);
        tokio::spawn(serve(listener, app, listen, std::future::pending()));
        Ok(url)
    };
    let plain = start(unlimited, ListenConfig::plain()).await?;
    let tls = start(unlimited, ListenConfig::tls(identity.server_config()?)).await?;
    let uncached = start(unlimited.token_cache(Duration::ZERO), ListenConfig::plain()).await?;
    println!("\n| measure | A | B | B / A |\n|---|---|---|---|");
    // Alternate A and B three times each; the medians.
    let pairs: [(&str, &String, &String, bool); 3] = [
        ("proofs/s, plain (A) vs TLS (B)", &plain, &tls, false),
        ("1-leaf writes/s, plain (A) vs TLS (B)", &plain, &tls, true),
        (
            "proofs/s, token cache 1 s (A) vs 0 (B)",
            &plain,
            &uncached,
            false,
        ),
    ];
    let mut round = 0;
    for (what, a, b, write) in pairs {
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            round += 1;
            ra.push(throughput(a, &trust, &auth, write, 4, secs, round).await?);
            round += 1;
            rb.push(throughput(b, &trust, &auth, write, 4, secs, round).await?);
        }
        ra.sort_by(f64::total_cmp);
        rb.sort_by(f64::total_cmp);
        let (ma, mb) = (ra[1], rb[1]);
        println!("| {what} | {ma:.0} | {mb:.0} | {:.2} |", mb / ma);
    }
    Ok(())
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
        let tls = get("--tls-cert")
            .zip(get("--tls-key"))
            .map(|(c, k)| (PathBuf::from(c), PathBuf::from(k)));
        let (Some(db), Some(listen)) = (get("--db"), get("--listen")) else {
            return ExitCode::FAILURE;
        };
        return match rt.block_on(serve_mode(&db, &listen, tls)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("server error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let (Some(db), Some(secs)) = (get("--db"), get("--cost").and_then(|v| v.parse().ok())) {
        return match rt.block_on(cost(db, secs)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let Some(db) = get("--db") else {
        eprintln!(
            "usage: federation_campaign --db <sqlite path | postgres URL> --tls yes|no [--phase-secs 6] [--half-open 10000]"
        );
        return ExitCode::FAILURE;
    };
    let tls = get("--tls").as_deref() == Some("yes");
    let phase_secs = get("--phase-secs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let half_open = get("--half-open")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    match rt.block_on(campaign(db, tls, phase_secs, half_open)) {
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
