//! The access tokens of a database written by the released 0.1.0, where
//! they were the tree schema's migration 7 (SQLite) / 6 (Postgres), still
//! authenticate after the upgrade on both engines: the live one writes, the
//! revoked one is refused, and the token table joins the server's own
//! migration set without being rewritten.

use crate::support;

use std::net::SocketAddr;

use hyper::StatusCode;
use ms_smt::{CompactedTree, Leaf};
use ms_smt_server::{HttpPeer, ListenConfig, PeerError, ServerConfig, TOKENS_SCHEMA, TokenStore};
use ms_smt_sql::{Dialect, SchemaState, SqlStore};
use serde_json::Value;
use support::upgrade::{RestoredPostgres, expected, sqlite_copy};
use tokio::net::TcpListener;

const RELEASE: &str = "0.1.0";

/// Serves `store`'s database on a free loopback port (plain HTTP).
async fn start<C: Dialect>(store: SqlStore<C>) -> String {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = ms_smt_server::router(store, ServerConfig::default());
    tokio::spawn(ms_smt_server::serve(
        listener,
        app,
        ListenConfig::plain(),
        std::future::pending(),
    ));
    format!("http://{addr}")
}

/// The release's two tokens against a server over its upgraded database.
async fn tokens_still_work<C: Dialect>(store: SqlStore<C>, want: &Value)
where
    SqlStore<C>: ms_smt::store::Writable,
{
    let tokens = want["tokens"].as_array().expect("tokens");
    let secret = |revoked: bool| {
        let t = tokens
            .iter()
            .find(|t| t["revoked"] == revoked)
            .expect("token");
        (
            t["id"].as_str().expect("id"),
            t["secret"].as_str().expect("secret"),
        )
    };
    let url = start(store.clone()).await;
    let leaf = (
        support::hkey("upgrade", 1),
        Leaf::new(b"by an old token".to_vec(), 3),
    );

    let (_, live) = secret(false);
    let peer = HttpPeer::new(&url, "assets")
        .expect("peer")
        .with_token(live)
        .expect("token");
    peer.insert(std::slice::from_ref(&leaf))
        .await
        .expect("the token minted by the release writes");
    let tree = CompactedTree::new(store.open_namespace("assets"));
    assert_eq!(
        tree.get(&leaf.0).await.expect("get"),
        leaf.1,
        "the write landed"
    );

    let (_, revoked) = secret(true);
    let peer = HttpPeer::new(&url, "assets")
        .expect("peer")
        .with_token(revoked)
        .expect("token");
    match peer.insert(std::slice::from_ref(&leaf)).await {
        Err(PeerError::Status { status, .. }) => assert_eq!(status, StatusCode::UNAUTHORIZED),
        other => panic!("a token revoked by the release was not refused: {other:?}"),
    }

    // The table is the server's set now, and holds what the release wrote.
    let listed = TokenStore::open(&store)
        .await
        .expect("tokens")
        .list()
        .await
        .expect("list");
    let mut ids: Vec<&str> = tokens
        .iter()
        .map(|t| t["id"].as_str().expect("id"))
        .collect();
    let mut listed_ids: Vec<&str> = listed.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    listed_ids.sort_unstable();
    assert_eq!(listed_ids, ids);
    assert_eq!(
        store.schema_state_of(&TOKENS_SCHEMA).await.expect("state"),
        SchemaState::Current
    );
    assert_eq!(
        store.schema_state().await.expect("state"),
        SchemaState::Current
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_tokens_of_the_release_authenticate() {
    let want = expected(RELEASE);
    let file = sqlite_copy(RELEASE);
    let store = ms_smt_sql::SqliteStore::open(&file.path)
        .await
        .expect("open");
    tokens_still_work(store.clone(), &want["sqlite"]).await;
    store.pool().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tokens_of_the_release_authenticate() {
    let Some(url) = support::pg_url("postgres_tokens_of_the_release_authenticate") else {
        return;
    };
    let want = expected(RELEASE);
    let restored = RestoredPostgres::load(&url, RELEASE).await;
    let store = ms_smt_sql::PostgresStore::connect(&restored.url)
        .await
        .expect("open");
    tokens_still_work(store.clone(), &want["postgres"]).await;
    store.pool().close().await;
    restored.drop_database().await;
}
