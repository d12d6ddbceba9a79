//! The federation server exposed: who may do what, over TCP and TLS, and
//! what one client can cost.
//!
//! * `authorization_matrix_*`: every route × every bad credential (none,
//!   malformed, wrong, expired, revoked, a read token on a write, a token
//!   for namespace A on B, a write token creating a namespace, a forged
//!   parent write, public read switched off) is refused with 401/403 and a
//!   JSON error naming no secret, and nothing of it lands: every root, the
//!   namespace list and the token table are as before (SQLite over plain
//!   TCP, Postgres over TLS). The honest calls in between succeed.
//! * `revocation_needs_no_restart`: a revoked token is refused soon after
//!   (the token cache time; printed).
//! * `metrics_need_their_scope`: `GET /metrics` answers only a `metrics`
//!   token (not anonymous callers under public read, not a read token) with
//!   the Prometheus text of the writer, the handles and every namespace.
//! * `limits_answer_quickly`: leaves per POST, body size, the rate limit
//!   (429 with Retry-After), the connection cap (503 at once) and a
//!   half-sent header (closed after the header timeout).
//! * `tls_peers_verify_the_server`: a pinned certificate and a CA file are
//!   believed, the system's roots are not for a self-signed server, and a
//!   token is never sent in clear to another host.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ms_smt::store::ForestStore;
use ms_smt::{Compacted, CompactedTree, Forest, Key, Leaf, Link};
use ms_smt_server::TokenRecord;
use ms_smt_server::access::Grants;
use ms_smt_server::{
    DatabaseExt, HttpPeer, ListenConfig, PeerError, Rate, ServerConfig, TlsIdentity, Trust,
    forest_router,
};
use ms_smt_sql::Database;
use ms_smt_sql::SqliteStore;
use support::pg_url;
use support::scratch_postgres::ScratchPostgres;
use support::stores::SqliteDb;
use support::{hkey, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Raw = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A raw client believing `trust` (plain HTTP too).
fn raw(trust: &Trust) -> Raw {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(trust.client_config().expect("client config"))
        .https_or_http()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(https)
}

/// One request: status, headers' `www-authenticate` and `retry-after`,
/// body.
async fn send(
    c: &Raw,
    auth: Option<&str>,
    method: Method,
    url: &str,
    body: &[u8],
) -> (StatusCode, Option<String>, Bytes) {
    let mut request = Request::builder().method(method).uri(url);
    if let Some(auth) = auth {
        request = request.header(hyper::header::AUTHORIZATION, auth);
    }
    let request = request
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("request");
    let response = c.request(request).await.expect("send");
    let status = response.status();
    let retry = response
        .headers()
        .get(hyper::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, retry, body)
}

/// Serves `app` on a free loopback port with `listen`; its base URL.
async fn start(app: axum::Router, listen: ListenConfig) -> (String, SocketAddr) {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let scheme = match listen.transport {
        ms_smt_server::Transport::Tls(_) => "https",
        ms_smt_server::Transport::Plain => "http",
    };
    tokio::spawn(ms_smt_server::serve(
        listener,
        app,
        listen,
        std::future::pending(),
    ));
    (format!("{scheme}://{addr}"), addr)
}

/// The namespaces, their roots and versions, and the token table: what no
/// refused request may change.
async fn state(db: &Database) -> (Vec<String>, Vec<TokenRecord>) {
    let spaces = db
        .namespaces()
        .await
        .expect("namespaces")
        .into_iter()
        .map(|n| match n.summary {
            Ok(s) => format!("{} {} {} v{}", n.name, s.root.hash, s.root.sum, s.version),
            Err(damage) => format!("{} damaged: {damage:?}", n.name),
        })
        .collect();
    (spaces, db.tokens().await.expect("tokens"))
}

/// The credentials a matrix tries, as `Authorization` values.
struct Creds {
    read_a: String,
    write_a: String,
    admin: String,
    expired: String,
    revoked: String,
}

/// Makes the matrix's tokens in `db`.
async fn creds(db: &Database, a: &str) -> Creds {
    let make = async |grants: &str, expires: Option<i64>| {
        let grants: Grants = grants.parse().expect("grants");
        db.issue_token("matrix", &grants, expires)
            .await
            .expect("issue")
    };
    let revoked = make(&format!("write:{a}"), None).await;
    assert!(db.revoke_token(&revoked.record.id).await.expect("revoke"));
    let bearer = |t: ms_smt_server::access::IssuedToken| format!("Bearer {}", t.secret.expose());
    Creds {
        read_a: bearer(make(&format!("read:{a}"), None).await),
        write_a: bearer(make(&format!("write:{a}"), None).await),
        admin: bearer(make("admin:*", None).await),
        expired: bearer(make(&format!("write:{a}"), Some(1)).await),
        revoked: bearer(revoked),
    }
}

/// Every route of namespace `ns`: what it needs, method, path, body.
fn routes(ns: &str, root: &str) -> Vec<(&'static str, Method, String, Vec<u8>)> {
    let key = hkey("matrix", 1).to_hex();
    let leaf = format!(r#"[{{"key":"{key}","value":"0bad","sum":7}}]"#);
    let delete = format!(
        r#"[{{"key":"{}","value":"","sum":0}}]"#,
        hkey("a", 0).to_hex()
    );
    vec![
        ("admin", Method::PUT, format!("/v1/{ns}"), vec![]),
        (
            "write",
            Method::POST,
            format!("/v1/{ns}/leaves"),
            leaf.into_bytes(),
        ),
        (
            "write",
            Method::POST,
            format!("/v1/{ns}/leaves"),
            delete.into_bytes(),
        ),
        ("read", Method::GET, format!("/v1/{ns}/root"), vec![]),
        ("read", Method::GET, format!("/v1/{ns}/proof/{key}"), vec![]),
        (
            "read",
            Method::POST,
            format!("/v1/{ns}/children"),
            format!(r#"{{"root":"{root}","sum":0,"prefixes":["00"]}}"#).into_bytes(),
        ),
        (
            "read",
            Method::GET,
            format!("/v1/{ns}/changes?since=0"),
            vec![],
        ),
    ]
}

/// A refusal: the status wanted, a JSON error, no token in it.
fn refused(
    what: &str,
    want: StatusCode,
    (status, _, body): &(StatusCode, Option<String>, Bytes),
    secrets: &[&str],
) {
    assert_eq!(*status, want, "{what}: {}", String::from_utf8_lossy(body));
    let json: serde_json::Value = serde_json::from_slice(body).expect("JSON error body");
    let error = json["error"].as_str().unwrap_or_default();
    assert!(!error.is_empty(), "{what}: {json}");
    let text = String::from_utf8_lossy(body);
    for secret in secrets {
        let secret = secret.trim_start_matches("Bearer ");
        assert!(!text.contains(secret), "{what}: the answer names a token");
    }
}

/// The matrix's namespaces: children `{tag}-a` and `{tag}-b` of the
/// parent `{tag}-parent`.
struct Names {
    tag: String,
    a: String,
    b: String,
    parent: String,
}

impl Names {
    fn new() -> Self {
        let tag = unique("mx")
            .to_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "");
        Names {
            a: format!("{tag}-a"),
            b: format!("{tag}-b"),
            parent: format!("{tag}-parent"),
            tag,
        }
    }

    /// `store`'s forest with the link.
    fn forest<S: ForestStore>(&self, store: S) -> Forest<S, Compacted> {
        let prefix = format!("{}-", self.tag);
        let parent = self.parent.clone();
        Forest::new(store).with_link(Link::rule(&self.parent, move |name| {
            (name.starts_with(&prefix) && name != parent)
                .then(|| Key(ms_smt_core::hash::sha256(name.as_bytes()).0))
        }))
    }
}

/// The matrix on the servers `app` makes over `forest` (`db` its
/// database).
async fn matrix<S>(
    names: Names,
    forest: Forest<S, Compacted>,
    app: impl Fn(ServerConfig) -> axum::Router,
    db: Database,
    tls: bool,
) where
    S: ForestStore + Clone + Send + Sync + 'static,
    S::Tree: Clone,
{
    let Names { tag, a, b, parent } = names;
    // Both children exist with a leaf each (through the forest: the
    // parent holds them).
    forest
        .insert_many([
            (a.as_str(), hkey("a", 0), Leaf::new(b"a".to_vec(), 1)),
            (b.as_str(), hkey("b", 0), Leaf::new(b"b".to_vec(), 2)),
        ])
        .await
        .expect("children");
    let creds = creds(&db, &a).await;
    let config = ServerConfig::default().per_address(None).per_token(None);
    let (listen, trust) = if tls {
        let (identity, _, _) = TlsIdentity::self_signed(&[]).expect("self-signed");
        let cert = identity.certificate().expect("cert").clone();
        (
            ListenConfig::tls(identity.server_config().expect("tls")),
            Trust::Pinned(cert),
        )
    } else {
        (ListenConfig::plain(), Trust::SystemRoots)
    };
    let (url, _) = start(app(config), listen.clone()).await;
    let (closed_url, _) = start(app(config.public_read(false)), listen).await;
    let c = raw(&trust);
    let empty_root = ms_smt::ComputedNode::empty_root().hash.to_hex();
    let wrong = format!("Bearer mssmt_{}", "ab".repeat(32));
    let secrets = [
        creds.read_a.as_str(),
        creds.write_a.as_str(),
        creds.admin.as_str(),
        creds.expired.as_str(),
        creds.revoked.as_str(),
        wrong.as_str(),
    ];
    let before = state(&db).await;
    let mut refusals = 0;
    let new_ns = format!("{tag}-new");
    for (ns, target) in [(&a, "A"), (&b, "B"), (&parent, "parent"), (&new_ns, "new")] {
        for (need, method, path, body) in routes(ns, &empty_root) {
            let mut cases: Vec<(String, Option<&str>, StatusCode, &str)> = vec![
                (
                    "malformed".into(),
                    Some("Basic bWU6cHc="),
                    StatusCode::UNAUTHORIZED,
                    url.as_str(),
                ),
                (
                    "empty bearer".into(),
                    Some("Bearer "),
                    StatusCode::UNAUTHORIZED,
                    url.as_str(),
                ),
                (
                    "wrong".into(),
                    Some(wrong.as_str()),
                    StatusCode::UNAUTHORIZED,
                    url.as_str(),
                ),
                (
                    "expired".into(),
                    Some(creds.expired.as_str()),
                    StatusCode::UNAUTHORIZED,
                    url.as_str(),
                ),
                (
                    "revoked".into(),
                    Some(creds.revoked.as_str()),
                    StatusCode::UNAUTHORIZED,
                    url.as_str(),
                ),
                (
                    "none, public read off".into(),
                    None,
                    StatusCode::UNAUTHORIZED,
                    closed_url.as_str(),
                ),
            ];
            if need != "read" {
                cases.push(("none".into(), None, StatusCode::FORBIDDEN, url.as_str()));
                cases.push((
                    "read:A".into(),
                    Some(creds.read_a.as_str()),
                    StatusCode::FORBIDDEN,
                    url.as_str(),
                ));
            }
            if need == "admin" {
                cases.push((
                    "write:A".into(),
                    Some(creds.write_a.as_str()),
                    StatusCode::FORBIDDEN,
                    url.as_str(),
                ));
            }
            if target != "A" {
                // Where public read is off, A's tokens read nothing else.
                cases.push((
                    "read:A, public read off".into(),
                    Some(creds.read_a.as_str()),
                    StatusCode::FORBIDDEN,
                    closed_url.as_str(),
                ));
                if need == "write" {
                    cases.push((
                        "write:A".into(),
                        Some(creds.write_a.as_str()),
                        StatusCode::FORBIDDEN,
                        url.as_str(),
                    ));
                }
            }
            if target == "parent" && need == "write" {
                cases.push((
                    "forged parent write, admin".into(),
                    Some(creds.admin.as_str()),
                    StatusCode::FORBIDDEN,
                    url.as_str(),
                ));
            }
            for (cred, auth, want, base) in cases {
                let what = format!("{need} {method} {target} as {cred}");
                let answer = send(&c, auth, method.clone(), &format!("{base}{path}"), &body).await;
                refused(&what, want, &answer, &secrets);
                refusals += 1;
            }
        }
    }
    assert_eq!(
        state(&db).await,
        before,
        "a refused request changed something"
    );
    // The honest calls: reads without a token (public read on) and with
    // read:A where it is off; a write with write:A; a namespace made by
    // an admin, which a write does not make.
    let ok =
        |what: &str, (status, _, body): (StatusCode, Option<String>, Bytes), want: StatusCode| {
            assert_eq!(status, want, "{what}: {}", String::from_utf8_lossy(&body));
        };
    ok(
        "public read",
        send(&c, None, Method::GET, &format!("{url}/v1/{b}/root"), b"").await,
        StatusCode::OK,
    );
    ok(
        "read:A, public read off",
        send(
            &c,
            Some(&creds.read_a),
            Method::GET,
            &format!("{closed_url}/v1/{a}/root"),
            b"",
        )
        .await,
        StatusCode::OK,
    );
    let routes_a = routes(&a, &empty_root);
    let (_, _, write_path, write_body) = &routes_a[1];
    ok(
        "write:A",
        send(
            &c,
            Some(&creds.write_a),
            Method::POST,
            &format!("{url}{write_path}"),
            write_body,
        )
        .await,
        StatusCode::OK,
    );
    let new_leaves = format!("{url}/v1/{new_ns}/leaves");
    ok(
        "admin write to a namespace that does not exist",
        send(
            &c,
            Some(&creds.admin),
            Method::POST,
            &new_leaves,
            write_body,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    ok(
        "admin creates",
        send(
            &c,
            Some(&creds.admin),
            Method::PUT,
            &format!("{url}/v1/{new_ns}"),
            b"",
        )
        .await,
        StatusCode::CREATED,
    );
    ok(
        "admin writes",
        send(
            &c,
            Some(&creds.admin),
            Method::POST,
            &new_leaves,
            write_body,
        )
        .await,
        StatusCode::OK,
    );
    let links = forest.audit_links().await.expect("audit links");
    assert!(links.is_clean(), "{links:?}");
    eprintln!(
        "matrix ({}): {refusals} refusals, 0 writes landed",
        if tls { "TLS" } else { "TCP" }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_matrix_sqlite_tcp() {
    let db = SqliteDb::open("fed-matrix").await;
    let names = Names::new();
    let forest = names.forest(db.store.clone());
    let app = |config| forest_router(forest.clone(), config);
    matrix(
        names,
        forest.clone(),
        app,
        Database::Sqlite(db.store.clone()),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_matrix_postgres_tls() {
    let Some(admin) = pg_url("authorization_matrix_postgres_tls") else {
        return;
    };
    // A database of its own: the matrix checks that a refused request
    // changed no namespace and no token, and the other test binaries write
    // into the shared test database at the same time.
    let db = ScratchPostgres::create(&admin, "authz_matrix").await;
    let pg = db.connect().await;
    let names = Names::new();
    let forest = names.forest(pg.clone());
    let app = |config| forest_router(forest.clone(), config);
    matrix(
        names,
        forest.clone(),
        app,
        Database::Postgres(pg.clone()),
        true,
    )
    .await;
    db.drop_after(pg).await;
}

/// A store with namespace `ns` holding one leaf, and a write token on it.
async fn one_space(store: &SqliteStore, ns: &str, grants: &str) -> (Database, String, String) {
    CompactedTree::new(store.open_namespace(ns))
        .insert(hkey("one", 0), Leaf::new(b"x".to_vec(), 1))
        .await
        .expect("leaf");
    let db = Database::Sqlite(store.clone());
    let grants: Grants = grants.parse().expect("grants");
    let issued = db.issue_token("t", &grants, None).await.expect("issue");
    (
        db,
        issued.record.id.clone(),
        issued.secret.expose().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_needs_no_restart() {
    let db = SqliteDb::open("fed-revoke").await;
    let (database, id, token) = one_space(&db.store, "r", "write:r").await;
    let config = ServerConfig::default().token_cache(Duration::from_millis(300));
    let (url, _) = start(
        ms_smt_server::router(db.store.clone(), config),
        ListenConfig::plain(),
    )
    .await;
    let peer = HttpPeer::new(&url, "r")
        .expect("peer")
        .with_token(&token)
        .expect("token");
    let leaf = (hkey("r", 1), Leaf::new(b"r".to_vec(), 1));
    peer.insert(std::slice::from_ref(&leaf))
        .await
        .expect("write before");
    assert!(database.revoke_token(&id).await.expect("revoke"));
    let revoked_at = Instant::now();
    loop {
        match peer.insert(std::slice::from_ref(&leaf)).await {
            Err(PeerError::Status { status, .. }) if status == StatusCode::UNAUTHORIZED => break,
            Ok(_) => {}
            Err(e) => panic!("unexpected: {e}"),
        }
        // A bound only so a broken revocation fails instead of hanging:
        // the cache is 300 ms, this machine may be slow.
        assert!(
            revoked_at.elapsed() < Duration::from_secs(30),
            "still accepted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = revoked_at.elapsed();
    eprintln!("revocation took effect after {took:?} (cache 300 ms)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_their_scope() {
    let db = SqliteDb::open("fed-metrics").await;
    let (database, _, writer) = one_space(&db.store, "m", "write:m,read:m").await;
    let metrics = database
        .issue_token("metrics", &"metrics:*".parse().expect("grants"), None)
        .await
        .expect("issue");
    let (url, _) = start(
        ms_smt_server::router(db.store.clone(), ServerConfig::default()),
        ListenConfig::plain(),
    )
    .await;
    let c = raw(&Trust::SystemRoots);
    let bearer = |t: &str| format!("Bearer {t}");
    // A write first, so the writer and the namespace's handle have figures.
    let peer = HttpPeer::new(&url, "m")
        .expect("peer")
        .with_token(&writer)
        .expect("token");
    peer.insert(&[(hkey("m", 1), Leaf::new(b"m".to_vec(), 5))])
        .await
        .expect("write");
    let at = format!("{url}/metrics");
    let (status, _, body) = send(&c, None, Method::GET, &at, b"").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "anonymous: {body:?}");
    let (status, _, body) = send(&c, Some(&bearer(&writer)), Method::GET, &at, b"").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "read and write: {body:?}");
    let secret = metrics.secret.expose().to_owned();
    let (status, _, body) = send(&c, Some(&bearer(&secret)), Method::GET, &at, b"").await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let text = String::from_utf8(body.to_vec()).expect("utf8");
    for line in [
        "# TYPE ms_smt_namespace_leaves gauge",
        "ms_smt_namespace_leaves{namespace=\"m\"} 2",
        "ms_smt_namespace_root_sum{namespace=\"m\"} 6",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("ms_smt_writer_")),
        "no writer figures in:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_quickly() {
    let db = SqliteDb::open("fed-limits").await;
    let (database, _, token) = one_space(&db.store, "l", "write:l").await;
    let grants: Grants = "read:l".parse().expect("grants");
    let reader = database
        .issue_token("rate", &grants, None)
        .await
        .expect("issue");
    let reader = format!("Bearer {}", reader.secret.expose());
    let config = ServerConfig::default()
        .max_leaves(4)
        .body_limit(2_000)
        .per_token(Some(Rate::new(1.0, 3)))
        .per_address(Some(Rate::new(1.0, 3)));
    let listen = ListenConfig::plain()
        .max_connections(6)
        .max_per_address(6)
        .header_timeout(Duration::from_secs(1));
    let (url, addr) = start(ms_smt_server::router(db.store.clone(), config), listen).await;
    let c = raw(&Trust::SystemRoots);
    let auth = format!("Bearer {token}");
    let leaves = |n: usize| {
        let list: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"key":"{}","value":"01","sum":1}}"#,
                    hkey("l", i as u64).to_hex()
                )
            })
            .collect();
        format!("[{}]", list.join(",")).into_bytes()
    };
    let post = format!("{url}/v1/l/leaves");
    let tree = CompactedTree::new(db.store.open_namespace("l"));
    let root = tree.root().await.expect("root");
    let too_many = send(&c, Some(&auth), Method::POST, &post, &leaves(5)).await;
    refused(
        "5 leaves, cap 4",
        StatusCode::PAYLOAD_TOO_LARGE,
        &too_many,
        &[token.as_str()],
    );
    let too_big = send(&c, Some(&auth), Method::POST, &post, &vec![b' '; 3_000]).await;
    refused(
        "3,000-byte body, cap 2,000",
        StatusCode::PAYLOAD_TOO_LARGE,
        &too_big,
        &[token.as_str()],
    );
    assert_eq!(
        tree.root().await.expect("root"),
        root,
        "a refused write landed"
    );
    // The rate (a token of its own): 3 at once, then one a second, further
    // off than a request waits.
    let mut statuses = Vec::new();
    let mut retry = None;
    for _ in 0..6 {
        let (status, after, _) = send(
            &c,
            Some(&reader),
            Method::GET,
            &format!("{url}/v1/l/root"),
            b"",
        )
        .await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            retry = after;
        }
        statuses.push(status);
    }
    assert!(
        statuses[..3].iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    assert_eq!(retry.as_deref(), Some("1"));
    // Half-sent headers: each holds a slot until the header timeout.
    let mut half = Vec::new();
    for _ in 0..6 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /v1/l/root HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("half");
        half.push(s);
    }
    // The seventh is over the cap: answered 503 at once.
    let started = Instant::now();
    let mut extra = TcpStream::connect(addr).await.expect("connect");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), extra.read_to_end(&mut answer)).await;
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 503"),
        "{answer:?}"
    );
    // The half-sent ones are closed after the 1 s header timeout.
    let started = Instant::now();
    for mut s in half {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "a half-sent request was left open");
    }
    let closed = started.elapsed();
    eprintln!("6 half-sent headers closed within {closed:?} (header timeout 1 s)");
    assert!(closed < Duration::from_secs(3), "{closed:?}");
    // Slots are back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _, _) = send(
        &c,
        Some(&auth),
        Method::GET,
        &format!("{url}/v1/l/root"),
        b"",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_peers_verify_the_server() {
    let db = SqliteDb::open("fed-tls").await;
    let (_database, _, token) = one_space(&db.store, "t", "write:t").await;
    let dir = tempfile::tempdir().expect("dir");
    let (cert, key) = (dir.path().join("tls.cert"), dir.path().join("tls.key"));
    let (identity, made) = TlsIdentity::load_or_generate(&cert, &key, &[]).expect("generate");
    assert!(made);
    let (again, made) = TlsIdentity::load_or_generate(&cert, &key, &[]).expect("load");
    assert!(!made);
    assert_eq!(
        identity.certificate(),
        again.certificate(),
        "the pair is kept"
    );
    let config = ServerConfig::default().public_read(false);
    let (url, _) = start(
        ms_smt_server::router(db.store.clone(), config),
        ListenConfig::tls(again.server_config().expect("tls")),
    )
    .await;
    // Pinned: reads and writes with the token.
    let pinned = HttpPeer::with_trust(&url, "t", Trust::pinned_file(&cert).expect("pin"))
        .expect("peer")
        .with_token(&token)
        .expect("token");
    let leaf = (hkey("t", 1), Leaf::new(b"t".to_vec(), 3));
    let root = pinned
        .insert(std::slice::from_ref(&leaf))
        .await
        .expect("write over TLS");
    assert_eq!(pinned.proof(&leaf.0).await.expect("proof").0, root);
    // The self-signed certificate as a CA file: believed for 127.0.0.1.
    let ca = HttpPeer::with_trust(&url, "t", Trust::ca_file(&cert).expect("ca"))
        .expect("peer")
        .with_token(&token)
        .expect("token");
    assert_eq!(ca.root().await.expect("root via CA file"), root);
    // The system's roots do not know it; another pinned certificate is
    // not it.
    let system = HttpPeer::new(&url, "t")
        .expect("peer")
        .with_token(&token)
        .expect("token");
    assert!(matches!(system.root().await, Err(PeerError::Transport(_))));
    let (other, _, _) = TlsIdentity::self_signed(&[]).expect("other");
    let wrong = HttpPeer::with_trust(
        &url,
        "t",
        Trust::Pinned(other.certificate().expect("c").clone()),
    )
    .expect("peer");
    assert!(matches!(wrong.root().await, Err(PeerError::Transport(_))));
    // Plain HTTP to the TLS port gets nothing.
    let plain = url.replacen("https://", "http://", 1);
    let plain = HttpPeer::new(&plain, "t")
        .expect("peer")
        .with_token(&token)
        .expect("loopback");
    assert!(plain.root().await.is_err());
    // A token is not sent in clear to another host.
    assert!(matches!(
        HttpPeer::new("http://192.0.2.1:1", "t")
            .expect("peer")
            .with_token(&token),
        Err(PeerError::TokenInClear)
    ));
    assert!(
        HttpPeer::new("https://192.0.2.1:1", "t")
            .expect("peer")
            .with_token(&token)
            .is_ok()
    );
}
