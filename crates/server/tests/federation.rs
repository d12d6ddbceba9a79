//! Federation over HTTP, on loopback: two servers (real TCP, in process),
//! a 100,000-leaf namespace synced from one to the other (SQLite to SQLite,
//! and to Postgres when `MSSMT_PG_URL` is set), then 100 changes synced by
//! fetching only the subtrees that differ; a lying server is caught and
//! nothing it sent is kept; bad input gets a 4xx JSON error and writes
//! nothing. Writes go with a token (`federation_access.rs` checks who may
//! do what); the servers here run without rate limits.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ms_smt::store::{AuditStore, Writable};
use ms_smt::{CompactedTree, Key, Leaf, SyncError};
use ms_smt_server::access::{Grants, issue_token};
use ms_smt_server::{HttpPeer, ListenConfig, PeerError, ServerConfig, router, serve};
use support::stores::{SqliteDb, pg_store};
use support::{hkey, unique};
use tokio::net::TcpListener;

const LEAVES: u64 = 100_000;
const CHANGED: u64 = 100;

type Raw = Client<HttpConnector, Full<Bytes>>;

/// Serves `app` on a free loopback port until the test ends; its URL.
async fn start(app: Router) -> String {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(
        listener,
        app,
        ListenConfig::plain(),
        std::future::pending(),
    ));
    format!("http://{addr}")
}

/// The default server without rate limits (the tests send requests back
/// to back from one address).
fn unlimited() -> ServerConfig {
    ServerConfig::default().per_address(None).per_token(None)
}

/// A token with `grants` in `store`'s database.
async fn token(store: &ms_smt_sql::SqliteStore, grants: &str) -> String {
    let grants: Grants = grants.parse().expect("grants");
    let issued = issue_token(store, "test", &grants, None)
        .await
        .expect("issue token");
    issued.secret.expose().to_owned()
}

fn raw() -> Raw {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One raw request: the status, the content type and the body.
async fn send(client: &Raw, method: Method, url: &str, body: &[u8]) -> (StatusCode, String, Bytes) {
    send_as(client, None, method, url, body).await
}

/// A request with `Authorization: Bearer <token>` when given.
fn request_as(token: Option<&str>, method: Method, url: &str, body: &[u8]) -> Request<Full<Bytes>> {
    let mut request = Request::builder().method(method).uri(url);
    if let Some(token) = token {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    request
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("request")
}

/// [`send`] with `Authorization: Bearer <token>` when given.
async fn send_as(
    client: &Raw,
    token: Option<&str>,
    method: Method,
    url: &str,
    body: &[u8],
) -> (StatusCode, String, Bytes) {
    let response = client
        .request(request_as(token, method, url, body))
        .await
        .expect("send");
    let status = response.status();
    let kind = response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, kind, body)
}

fn leaf_of(i: u64) -> (Key, Leaf) {
    (
        hkey("fed", i),
        Leaf::new(i.to_le_bytes().to_vec(), 1 + i % 7),
    )
}

/// `CHANGED` changes to the leaves of [`leaf_of`]: a third replaced, a
/// third new, a third deleted.
fn hundred_changes() -> Vec<(Key, Leaf)> {
    (0..CHANGED)
        .map(|i| match i % 3 {
            0 => (hkey("fed", i * 97), Leaf::new(b"changed".to_vec(), 9)),
            1 => (hkey("fed-new", i), Leaf::new(b"new".to_vec(), 2)),
            _ => (hkey("fed", i * 97), Leaf::empty()),
        })
        .collect()
}

/// A SQLite database with `n` leaves in namespace `ns`, its server, and
/// an `admin:*` token there.
async fn source(ns: &str, n: u64, config: ServerConfig) -> (SqliteDb, String, String) {
    let db = SqliteDb::open("fed-source").await;
    let tree = CompactedTree::new(db.store.open_namespace(ns));
    tree.insert_many((0..n).map(leaf_of)).await.expect("build");
    let url = start(router(db.store.clone(), config)).await;
    let admin = token(&db.store, "admin:*").await;
    (db, url, admin)
}

/// Syncs `local` (served at `local_url`) from `ns` at `from`, then again
/// after 100 changes there, checking the roots and the cost.
async fn sync_scenario<S: Writable + AuditStore>(
    kind: &str,
    from: &str,
    writer: &str,
    ns: &str,
    local: &CompactedTree<S>,
    local_url: &str,
    local_ns: &str,
) {
    let remote = HttpPeer::new(from, ns)
        .expect("peer")
        .with_token(writer)
        .expect("token to loopback");
    let served = HttpPeer::new(local_url, local_ns).expect("local peer");
    let start = Instant::now();
    let full = remote.sync_into(local).await.expect("first sync");
    let first = remote.stats();
    eprintln!(
        "{kind}: first sync of {LEAVES} leaves: {} HTTP requests, {} levels, {} subtrees, \
         {} bytes in, {} out, {:.2?}",
        first.requests,
        full.requests,
        full.fetched,
        first.bytes_received,
        first.bytes_sent,
        start.elapsed()
    );
    let root = remote.root().await.expect("remote root");
    assert_eq!(full.root, root, "{kind}: synced root");
    assert_eq!(full.upserts, LEAVES);
    assert_eq!(served.root().await.expect("served root"), root);

    // 100 changes through the source's writer: replaced, new, deleted.
    let changes = hundred_changes();
    let changed = remote.insert(&changes).await.expect("insert changes");
    assert_eq!(remote.root().await.expect("root"), changed);
    let before = remote.stats();
    let start = Instant::now();
    let delta = remote.sync_into(local).await.expect("second sync");
    let used = remote.stats().since(&before);
    // ~2 log2 N levels to separate a leaf from its neighbours.
    let depth = 2 * u64::from(64 - (LEAVES + CHANGED).leading_zeros());
    eprintln!(
        "{kind}: sync of {CHANGED} changes: {} HTTP requests, {} levels, {} subtrees, \
         {} bytes in, {} out, {:.2?} (bounds: {} subtrees, {} requests)",
        used.requests,
        delta.requests,
        delta.fetched,
        used.bytes_received,
        used.bytes_sent,
        start.elapsed(),
        4 * CHANGED * depth,
        depth + 2
    );
    assert_eq!(delta.root, changed, "{kind}: root after the second sync");
    assert_eq!(served.root().await.expect("served root"), changed);
    assert_eq!(delta.upserts + delta.deletes, CHANGED);
    assert!(delta.fetched <= 4 * CHANGED * depth, "{kind}: {delta:?}");
    // One root read and one request per level (each under the split).
    assert!(used.requests <= depth + 2, "{kind}: {used:?}");
    assert!(used.bytes_received < 2_000_000, "{kind}: {used:?}");
    // The local server proves a changed leaf as the source does.
    let (key, leaf) = &changes[0];
    let (r, l, _) = served.proof(key).await.expect("proof");
    assert_eq!((r, &l), (changed, leaf));
    let (key, _) = &changes[2];
    let (_, l, _) = served.proof(key).await.expect("exclusion proof");
    assert!(l.is_empty());
    // In step: one root read, nothing fetched.
    let again = remote.sync_into(local).await.expect("third sync");
    assert_eq!((again.requests, again.fetched), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_sqlite_to_sqlite_over_http() {
    let ns = "assets";
    let (_src, from, writer) = source(ns, LEAVES, unlimited()).await;
    let dest = SqliteDb::open("fed-dest").await;
    let local_url = start(router(dest.store.clone(), unlimited())).await;
    let local = CompactedTree::new(dest.store.open_namespace("mirror"));
    sync_scenario("sqlite", &from, &writer, ns, &local, &local_url, "mirror").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_sqlite_to_postgres_over_http() {
    let Some(pg) = pg_store("sync_sqlite_to_postgres_over_http").await else {
        return;
    };
    let ns = "assets";
    let (_src, from, writer) = source(ns, LEAVES, unlimited()).await;
    let local_ns = unique("mirror");
    let local_url = start(router(pg.clone(), unlimited())).await;
    let local = CompactedTree::new(pg.open_namespace(&local_ns));
    sync_scenario(
        "postgres", &from, &writer, ns, &local, &local_url, &local_ns,
    )
    .await;
    local.delete_all().await.expect("clean up");
}

/// How the lying proxy alters the `children` answer it tampers with.
#[derive(Clone, Copy, Debug)]
enum Lie {
    /// One hex digit of the first branch hash.
    BranchHash,
    /// One byte of the first leaf value.
    LeafValue,
}

struct Proxy {
    client: Raw,
    upstream: String,
    /// Tamper with the `children` answer of this request (0 = first).
    nth: u64,
    seen: AtomicU64,
    lie: Lie,
}

/// Forwards to the real server, flipping one byte of one answer.
async fn lying_children(
    State(p): State<Arc<Proxy>>,
    Path(ns): Path<String>,
    body: Bytes,
) -> (StatusCode, Bytes) {
    let url = format!("{}/v1/{ns}/children", p.upstream);
    let (status, _, answer) = send(&p.client, Method::POST, &url, &body).await;
    if p.seen.fetch_add(1, Ordering::SeqCst) != p.nth {
        return (status, answer);
    }
    let mut json: serde_json::Value = serde_json::from_slice(&answer).expect("answer");
    let field = match p.lie {
        Lie::BranchHash => "hash",
        Lie::LeafValue => "value",
    };
    let target = json["children"]
        .as_array_mut()
        .expect("children")
        .iter_mut()
        .flat_map(|pair| pair.as_array_mut().expect("pair").iter_mut())
        .find(|s| {
            s.get(field)
                .is_some_and(|v| v.as_str().is_some_and(|h| !h.is_empty()))
        })
        .unwrap_or_else(|| panic!("no {field} to tamper with"));
    let hex = target[field].as_str().expect("hex").to_owned();
    let flipped = if hex.starts_with('0') { "1" } else { "0" };
    target[field] = serde_json::Value::String(format!("{flipped}{}", &hex[1..]));
    (
        status,
        Bytes::from(serde_json::to_vec(&json).expect("json")),
    )
}

async fn forward_root(State(p): State<Arc<Proxy>>, Path(ns): Path<String>) -> (StatusCode, Bytes) {
    let url = format!("{}/v1/{ns}/root", p.upstream);
    let (status, _, answer) = send(&p.client, Method::GET, &url, &[]).await;
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_server_is_caught_and_nothing_is_kept() {
    let ns = "assets";
    let n = 2_000;
    let (_src, from, _) = source(ns, n, unlimited()).await;
    let dest = SqliteDb::open("fed-liar-dest").await;
    let local = CompactedTree::new(dest.store.open_namespace("mirror"));
    // The local tree has half the leaves and one of its own.
    local
        .insert_many(
            (0..n / 2)
                .map(leaf_of)
                .chain([(hkey("mine", 0), Leaf::new(b"m".to_vec(), 1))]),
        )
        .await
        .expect("local leaves");
    let before = local.root().await.expect("root");
    for (lie, nth) in [
        (Lie::BranchHash, 0),
        (Lie::BranchHash, 5),
        (Lie::LeafValue, 9),
    ] {
        let proxy = Arc::new(Proxy {
            client: raw(),
            upstream: from.clone(),
            nth,
            seen: AtomicU64::new(0),
            lie,
        });
        let app = Router::new()
            .route("/v1/{ns}/children", post(lying_children))
            .route("/v1/{ns}/root", get(forward_root))
            .with_state(proxy);
        let liar = HttpPeer::new(&start(app).await, ns).expect("peer");
        match liar.sync_into(&local).await {
            Err(SyncError::BadChildren { position }) => {
                eprintln!("{lie:?} in answer {nth}: caught at {position:?}")
            }
            other => panic!("{lie:?} in answer {nth} was accepted: {other:?}"),
        }
        assert_eq!(local.root().await.expect("root"), before, "{lie:?}: kept");
    }
    // The honest server brings it level.
    let honest = HttpPeer::new(&from, ns).expect("peer");
    let report = honest.sync_into(&local).await.expect("sync");
    assert_eq!(report.root, honest.root().await.expect("root"));
    assert_eq!((report.upserts, report.deletes), (n / 2, 1));
}

/// A 4xx with a JSON `{"error": "..."}` body.
fn refused(what: &str, want: StatusCode, (status, kind, body): (StatusCode, String, Bytes)) {
    assert_eq!(status, want, "{what}: {}", String::from_utf8_lossy(&body));
    assert!(
        kind.starts_with("application/json"),
        "{what}: content type {kind}"
    );
    let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON error body");
    let error = json["error"].as_str().unwrap_or_default();
    assert!(!error.is_empty(), "{what}: {json}");
    eprintln!("{what}: {status} {error}");
}

/// One request that must be refused: what it tests, the status wanted,
/// method, URL and body.
type Refusal = (&'static str, StatusCode, Method, String, Vec<u8>);

/// Sends each request in turn and checks it is [`refused`].
async fn refused_all(c: &Raw, requests: Vec<Refusal>) {
    for (what, want, method, url, body) in requests {
        refused(what, want, send(c, method, &url, &body).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_json_4xx_and_writes_nothing() {
    let ns = "assets";
    let config = unlimited().body_limit(64 << 10).max_prefixes(16);
    let (db, url, admin) = source(ns, 100, config).await;
    let tree = CompactedTree::new(db.store.open_namespace(ns));
    let root = tree.root().await.expect("root");
    let c = raw();
    let at = |path: &str| format!("{url}/v1/{path}");
    let key = hkey("fed", 1).to_hex();
    let root_hex = root.hash.to_hex();
    let sum = root.sum;

    let children = |sum: u64, prefixes: &str| {
        format!(r#"{{"root":"{root_hex}","sum":{sum},"prefixes":[{prefixes}]}}"#).into_bytes()
    };
    let many = vec!["\"00\""; 17].join(",");
    refused_all(
        &c,
        vec![
            (
                "proof, key not hex",
                StatusCode::BAD_REQUEST,
                Method::GET,
                at("assets/proof/zz"),
                vec![],
            ),
            (
                "proof, key of 31 bytes",
                StatusCode::BAD_REQUEST,
                Method::GET,
                at(&format!("assets/proof/{}", &key[2..])),
                vec![],
            ),
            (
                "root, unknown namespace",
                StatusCode::NOT_FOUND,
                Method::GET,
                at("nope/root"),
                vec![],
            ),
            (
                "proof, unknown namespace",
                StatusCode::NOT_FOUND,
                Method::GET,
                at(&format!("nope/proof/{key}")),
                vec![],
            ),
            (
                "children, unknown namespace",
                StatusCode::NOT_FOUND,
                Method::POST,
                at("nope/children"),
                children(sum, r#""00""#),
            ),
            (
                "children, bad position",
                StatusCode::BAD_REQUEST,
                Method::POST,
                at("assets/children"),
                children(sum, r#""0102""#),
            ),
            (
                "children, root not the tree's",
                StatusCode::CONFLICT,
                Method::POST,
                at("assets/children"),
                children(sum + 1, r#""00""#),
            ),
            (
                "children, too many prefixes",
                StatusCode::BAD_REQUEST,
                Method::POST,
                at("assets/children"),
                children(sum, &many),
            ),
        ],
    )
    .await;
    // Writes that must change nothing.
    let good = format!(
        r#"{{"key":"{}","value":"00","sum":1}}"#,
        hkey("new", 0).to_hex()
    );
    let bad_writes: Vec<(&str, StatusCode, Vec<u8>)> = vec![
        (
            "leaves, malformed JSON",
            StatusCode::BAD_REQUEST,
            b"[{\"key\":".to_vec(),
        ),
        (
            "leaves, value not hex",
            StatusCode::BAD_REQUEST,
            format!(r#"[{good},{{"key":"{key}","value":"0g","sum":1}}]"#).into_bytes(),
        ),
        (
            "leaves, key of 33 bytes",
            StatusCode::BAD_REQUEST,
            format!(r#"[{good},{{"key":"{key}00","value":"","sum":1}}]"#).into_bytes(),
        ),
        (
            "leaves, unknown field",
            StatusCode::BAD_REQUEST,
            format!(r#"[{{"key":"{key}","value":"","sum":1,"x":1}}]"#).into_bytes(),
        ),
        (
            "leaves, negative sum",
            StatusCode::BAD_REQUEST,
            format!(r#"[{{"key":"{key}","value":"","sum":-1}}]"#).into_bytes(),
        ),
        (
            "leaves, sum overflow",
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                r#"[{{"key":"{}","value":"","sum":{}}}]"#,
                hkey("big", 0).to_hex(),
                u64::MAX
            )
            .into_bytes(),
        ),
        (
            "leaves, body over the limit",
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("[{}]", vec![good.as_str(); 1_000].join(",")).into_bytes(),
        ),
    ];
    for (what, status, body) in bad_writes {
        refused(
            what,
            status,
            send_as(&c, Some(&admin), Method::POST, &at("assets/leaves"), &body).await,
        );
        assert_eq!(tree.root().await.expect("root"), root, "{what}: wrote");
    }
    refused_all(
        &c,
        vec![
            (
                "leaves, bad namespace name",
                StatusCode::BAD_REQUEST,
                Method::POST,
                at("bad%20name/leaves"),
                format!("[{good}]").into_bytes(),
            ),
            (
                "no such route",
                StatusCode::NOT_FOUND,
                Method::GET,
                at("assets/nothing"),
                vec![],
            ),
            (
                "wrong method",
                StatusCode::METHOD_NOT_ALLOWED,
                Method::DELETE,
                at("assets/root"),
                vec![],
            ),
        ],
    )
    .await;
    // The good leaf alone is written, through the writer.
    let peer = HttpPeer::new(&url, ns)
        .expect("peer")
        .with_token(&admin)
        .expect("token");
    let (k, l) = (hkey("new", 0), Leaf::new(vec![0], 1));
    let new_root = peer.insert(&[(k, l.clone())]).await.expect("insert");
    assert_eq!(tree.root().await.expect("root"), new_root);
    assert_eq!(peer.proof(&k).await.expect("proof").1, l);
    // A client error for a peer URL that is not http(s)://host:port.
    for bad in ["ftp://127.0.0.1:1", "http://127.0.0.1:1/x", "nonsense"] {
        assert!(
            matches!(HttpPeer::new(bad, ns), Err(PeerError::Url)),
            "{bad}"
        );
    }
}

/// A refusal of a request with a body says `Connection: close` (the server
/// may not have read the body, and then closes the socket), so the client
/// sends its next request on a new connection: once, the request after a
/// 413 failed with `IncompleteMessage` on the socket being closed. A refusal
/// with no body keeps its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_with_a_body_closes_its_connection() {
    let ns = "assets";
    let config = unlimited().body_limit(64 << 10);
    let (db, url, admin) = source(ns, 10, config).await;
    let reader = token(&db.store, "read:*").await;
    let c = raw();
    let leaves = format!("{url}/v1/{ns}/leaves");
    let root = format!("{url}/v1/{ns}/root");
    let big = vec![b' '; 100 << 10];
    let cases: [(&str, Option<&str>, &[u8], StatusCode); 4] = [
        (
            "over the body limit",
            Some(&admin),
            &big,
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        ("no token", None, &big, StatusCode::FORBIDDEN),
        (
            "a read-only token",
            Some(&reader),
            &big,
            StatusCode::FORBIDDEN,
        ),
        (
            "a malformed token",
            Some("x"),
            &big,
            StatusCode::UNAUTHORIZED,
        ),
    ];
    for round in 0..10 {
        for (what, token, body, want) in cases {
            let response = c
                .request(request_as(token, Method::POST, &leaves, body))
                .await
                .expect("send");
            assert_eq!(response.status(), want, "{what}");
            assert_eq!(
                response
                    .headers()
                    .get(hyper::header::CONNECTION)
                    .map(|v| v.as_bytes()),
                Some(&b"close"[..]),
                "{what}"
            );
            let (status, _, _) = send_as(&c, Some(&admin), Method::GET, &root, &[]).await;
            assert_eq!(status, StatusCode::OK, "round {round}, after {what}");
        }
    }
    let response = c
        .request(request_as(None, Method::POST, &leaves, &[]))
        .await
        .expect("send");
    assert_eq!(
        response.status(),
        StatusCode::FORBIDDEN,
        "no body, no token"
    );
    assert_eq!(response.headers().get(hyper::header::CONNECTION), None);
}

/// A server over a forest with a parent tree: concurrent POSTs to many
/// child namespaces share the store writer's commits, the parent's root
/// (served read-only) holds every child's root, and a POST to the parent
/// is refused with a 403 and writes nothing. The children are created by
/// an admin first (a write creates no namespace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forest_server_keeps_its_parent_in_step() {
    let db = SqliteDb::open("fed-forest").await;
    let p = unique("fed-parent");
    let prefix = format!("{p}-");
    let child_key = |name: &str| Key(ms_smt_core::hash::sha256(name.as_bytes()).0);
    let forest = ms_smt::Forest::<_, ms_smt::Compacted>::new(db.store.clone()).with_link(
        ms_smt::Link::rule(&p, move |name| {
            name.starts_with(&prefix).then(|| child_key(name))
        }),
    );
    let url = start(ms_smt_server::forest_router(forest.clone(), unlimited())).await;
    let client = raw();
    let admin = token(&db.store, "admin:*").await;
    let before = send_as(
        &client,
        Some(&admin),
        Method::POST,
        &format!("{url}/v1/{p}-0/leaves"),
        b"[]",
    )
    .await;
    assert_eq!(
        before.0,
        StatusCode::NOT_FOUND,
        "no write creates a namespace"
    );
    for i in 0..8 {
        let url = format!("{url}/v1/{p}-{i}");
        let (status, _, _) = send_as(&client, Some(&admin), Method::PUT, &url, b"").await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, _, _) = send_as(&client, Some(&admin), Method::PUT, &url, b"").await;
        assert_eq!(status, StatusCode::OK, "created once");
    }
    let mut posts = Vec::new();
    for i in 0..40u64 {
        let (client, url, ns) = (client.clone(), url.clone(), format!("{p}-{}", i % 8));
        let admin = admin.clone();
        posts.push(tokio::spawn(async move {
            let (key, _) = leaf_of(i);
            let body = format!(
                r#"[{{"key":"{}","value":"0a","sum":{}}}]"#,
                key.to_hex(),
                i + 1
            );
            let (status, _, body) = send_as(
                &client,
                Some(&admin),
                Method::POST,
                &format!("{url}/v1/{ns}/leaves"),
                body.as_bytes(),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        }));
    }
    for post in posts {
        post.await.expect("post");
    }
    let (status, _, body) = send(&client, Method::GET, &format!("{url}/v1/{p}/root"), b"").await;
    assert_eq!(status, StatusCode::OK);
    let parent = forest.roots(&[&p]).await.expect("root")[0];
    assert_eq!(
        parent.sum,
        (1..=40).sum::<u64>(),
        "the parent sums every child"
    );
    assert!(String::from_utf8_lossy(&body).contains(&parent.hash.to_hex()));
    let links = forest.audit_links().await.expect("audit");
    assert!(links.is_clean() && links.children == 8, "{links:?}");
    let body = format!(
        r#"[{{"key":"{}","value":"0a","sum":1}}]"#,
        leaf_of(99).0.to_hex()
    );
    let (status, _, _) = send_as(
        &client,
        Some(&admin),
        Method::POST,
        &format!("{url}/v1/{p}/leaves"),
        body.as_bytes(),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a parent is not written directly"
    );
    assert_eq!(forest.roots(&[&p]).await.expect("root")[0], parent);
}

/// Delta sync through the change feed: a follower whose root the leader's
/// journal knows gets the changes since then in one page (the root, then
/// one request),
/// checked against its own tree; one the journal does not know falls back
/// to the diff walk; a holder of a root alone verifies a proven page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_sync_through_the_change_feed() {
    use ms_smt::store::JournalStore;
    let ns = "journaled";
    let (src, from, writer) = source(ns, 20_000, unlimited()).await;
    let leader = CompactedTree::new(src.store.open_namespace(ns));
    let dest = SqliteDb::open("fed-feed").await;
    let local = CompactedTree::new(dest.store.open_namespace("mirror"));
    let remote = HttpPeer::new(&from, ns)
        .expect("peer")
        .with_token(&writer)
        .expect("token");
    // No journal yet: the feed answers 410, the diff walk syncs.
    let first = remote.sync_into(&local).await.expect("first sync");
    assert_eq!(first.upserts, 20_000);
    assert!(first.fetched > 0, "diff walk: {first:?}");
    let start = leader.store().enable_journal().await.expect("enable");
    assert!(
        remote
            .proven_changes(start.from_version, 10)
            .await
            .expect("proven")
            .is_some()
    );
    let changes = hundred_changes();
    let changed = remote.insert(&changes).await.expect("insert changes");
    let before = remote.stats();
    let delta = remote.sync_into(&local).await.expect("delta sync");
    let used = remote.stats().since(&before);
    eprintln!(
        "feed: sync of {CHANGED} changes: {} HTTP requests, {} bytes in, {} out",
        used.requests, used.bytes_received, used.bytes_sent
    );
    assert_eq!(delta.root, changed);
    assert_eq!(local.root().await.expect("root"), changed);
    assert_eq!((delta.upserts + delta.deletes, delta.fetched), (CHANGED, 0));
    // The remote root, then one page of the feed.
    assert_eq!(used.requests, 2, "{used:?}");
    assert!(used.bytes_received < 50_000, "{used:?}");
    // A holder of the start root alone: the proven page verifies and gives
    // the changes.
    let before = remote.stats();
    let proven = remote
        .proven_changes(start.from_version, 1_000)
        .await
        .expect("proven")
        .expect("covered");
    eprintln!(
        "feed: proven page of {CHANGED} changes: {} bytes in",
        remote.stats().since(&before).bytes_received
    );
    let batch = proven.verify(&first.root).expect("verifies");
    assert_eq!(batch.len() as u64, CHANGED);
    assert_eq!(proven.page.to_root, changed);
    // Pruned past the follower's version: 410, and the diff walk again.
    leader
        .insert(hkey("fed-late", 0), Leaf::new(b"late".to_vec(), 1))
        .await
        .expect("insert");
    let stale = CompactedTree::new(dest.store.open_namespace("stale"));
    stale
        .insert_many(changes.iter().take(3).cloned())
        .await
        .expect("stale");
    let walked = remote.sync_into(&stale).await.expect("stale sync");
    assert!(walked.fetched > 0);
    assert_eq!(walked.root, leader.root().await.expect("root"));
}
