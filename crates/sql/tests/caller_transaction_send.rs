//! Every public write path inside the caller's transaction is `Send`: its
//! future can be handed to `tokio::spawn` on a multi-threaded runtime and
//! be an axum handler's, as services run it (SQLite and Postgres).
//!
//! These are compile tests first: if a change makes one of these futures
//! lose `Send` (a store type whose lifetime the engine's bounds no longer
//! accept: rust-lang/rust#110338), this file stops compiling and CI fails.
//! Each path then runs for real, in a spawned task of its own and through
//! an axum router, and its committed root must equal the root the same
//! path gives through the pool (no caller's transaction) on a namespace
//! seeded alike.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::future::Future;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use ms_smt::store::{JournalStore, PinStore, Writable};
use ms_smt::{Compacted, CompactedTree, ComputedNode, Forest, Key, Leaf, Link, Tree};
use ms_smt_sql::{PostgresStore, SqliteStore};
use support::{TempDb, hkey, pg_url, unique};
use tower_service::Service;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The public write paths of a tree or forest on a store in the caller's
/// transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WritePath {
    Insert,
    Delete,
    InsertMany,
    InsertManyWithProof,
    DeleteAll,
    Pin,
    Unpin,
    ForestWithParent,
    SyncFrom,
    Follow,
}

const PATHS: [WritePath; 10] = [
    WritePath::Insert,
    WritePath::Delete,
    WritePath::InsertMany,
    WritePath::InsertManyWithProof,
    WritePath::DeleteAll,
    WritePath::Pin,
    WritePath::Unpin,
    WritePath::ForestWithParent,
    WritePath::SyncFrom,
    WritePath::Follow,
];

impl WritePath {
    fn name(self) -> &'static str {
        match self {
            WritePath::Insert => "insert",
            WritePath::Delete => "delete",
            WritePath::InsertMany => "insert_many",
            WritePath::InsertManyWithProof => "insert_many_with_proof",
            WritePath::DeleteAll => "delete_all",
            WritePath::Pin => "pin",
            WritePath::Unpin => "unpin",
            WritePath::ForestWithParent => "forest_with_parent",
            WritePath::SyncFrom => "sync_from",
            WritePath::Follow => "follow",
        }
    }

    fn from_name(name: &str) -> Option<WritePath> {
        PATHS.into_iter().find(|p| p.name() == name)
    }
}

/// Runs `path` on `tree` (its forest: `tree`'s store's; `peer`: the tree
/// it syncs and follows from) and returns the root it leaves.
async fn run_path<S, P>(
    tree: &Tree<S, Compacted>,
    peer: &Tree<P, Compacted>,
    path: WritePath,
) -> Res<ComputedNode>
where
    S: Writable + PinStore,
    P: JournalStore + Writable,
{
    let key = hkey("send-path", 1);
    let leaf = Leaf::new(b"spawned".to_vec(), 99);
    Ok(match path {
        WritePath::Insert => tree.insert(key, leaf).await?,
        WritePath::Delete => tree.delete(hkey("send-seed", 3)).await?,
        WritePath::InsertMany => {
            tree.insert_many([(key, leaf), (hkey("send-seed", 0), Leaf::empty())])
                .await?
        }
        WritePath::InsertManyWithProof => {
            tree.insert_many_with_proof([(key, leaf)]).await?.new_root
        }
        WritePath::DeleteAll => {
            tree.delete_all().await?;
            tree.root().await?
        }
        WritePath::Pin => {
            tree.pin("send-pin").await?;
            tree.insert(key, leaf).await?;
            tree.at_pin("send-pin").await?.root().await?
        }
        WritePath::Unpin => {
            tree.pin("send-pin").await?;
            assert!(tree.unpin("send-pin").await?, "the pin was there");
            tree.insert(key, leaf).await?
        }
        WritePath::ForestWithParent => {
            // The parent's root, over the child's new root: both written in
            // one commit.
            let child = tree
                .store()
                .namespace()
                .ok_or("a SQL handle names its namespace")?;
            let child = child.to_owned();
            let parent = format!("{child}-parent");
            let link = Link::children(&parent, [(child.clone(), Key([7; 32]))]);
            let forest =
                Forest::<S::Forest, Compacted>::new(tree.store().forest().clone()).with_link(link);
            let write = forest.insert_many([(child.as_str(), key, leaf)]).await?;
            let top = write.trees.iter().find(|t| *t.name == *parent);
            top.map(|t| t.new_root).ok_or("no parent in the write")?
        }
        WritePath::SyncFrom => {
            tree.sync_from(peer, &peer.root().await?).await?;
            tree.root().await?
        }
        WritePath::Follow => {
            tree.follow(peer, 100)
                .await?
                .ok_or("the peer's journal misses the root")?;
            tree.root().await?
        }
    })
}

/// A SQL store whose namespace can be written in a transaction of the
/// caller's: the engine's part of these tests.
trait CallerTransaction: Writable + PinStore + JournalStore + Send + Sync + 'static {
    /// Begins a write transaction as the README does, runs `path` on this
    /// namespace in it, commits. The trait asks for a `Send` future; each
    /// impl proves it for its concrete store type, which is what the
    /// compiler could not do for a caller's-transaction write before.
    fn path_in_transaction(
        self,
        peer: Self,
        path: WritePath,
    ) -> impl Future<Output = Res<ComputedNode>> + Send + 'static;

    /// A handle on namespace `name` of the same database.
    fn handle(&self, name: &str) -> Self;
}

impl CallerTransaction for SqliteStore {
    // `async fn` here still has to meet the trait's `Send + 'static`.
    async fn path_in_transaction(self, peer: Self, path: WritePath) -> Res<ComputedNode> {
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let tree = CompactedTree::new(self.in_transaction(&mut tx));
        let root = run_path(&tree, &CompactedTree::new(peer), path).await?;
        drop(tree);
        tx.commit().await?;
        Ok(root)
    }

    fn handle(&self, name: &str) -> Self {
        self.open_namespace(name)
    }
}

impl CallerTransaction for PostgresStore {
    // `async fn` here still has to meet the trait's `Send + 'static`.
    async fn path_in_transaction(self, peer: Self, path: WritePath) -> Res<ComputedNode> {
        let mut tx = self.pool().begin().await?;
        let tree = CompactedTree::new(self.in_transaction(&mut tx));
        let root = run_path(&tree, &CompactedTree::new(peer), path).await?;
        drop(tree);
        tx.commit().await?;
        Ok(root)
    }

    fn handle(&self, name: &str) -> Self {
        self.open_namespace(name)
    }
}

/// The namespaces of one run, under `prefix`: per path one to write in the
/// caller's transaction and one to write through the pool (the expected
/// root), both seeded alike; and the peer.
struct Namespaces<S> {
    store: S,
    prefix: String,
    peer: S,
}

impl<S: CallerTransaction> Namespaces<S> {
    async fn seed(store: S, prefix: String) -> Res<Self> {
        let seed: Vec<(Key, Leaf)> = (0..8)
            .map(|i| (hkey("send-seed", i), Leaf::new(vec![i as u8; 3], i + 1)))
            .collect();
        let peer = store.handle(&format!("{prefix}peer"));
        let out = Namespaces {
            store,
            prefix,
            peer,
        };
        for path in PATHS {
            for ns in [out.in_tx(path), out.in_pool(path)] {
                CompactedTree::new(ns).insert_many(seed.clone()).await?;
            }
        }
        // The peer's journal starts at the seed, where every tree stands,
        // so each can follow the peer's feed to its head.
        let peer = CompactedTree::new(out.peer.clone());
        peer.insert_many(seed).await?;
        out.peer.enable_journal().await?;
        let peer_leaves = (0..20).map(|i| (hkey("send-peer", i), Leaf::new(vec![9; 4], 2 * i + 1)));
        peer.insert_many(peer_leaves).await?;
        Ok(out)
    }

    fn in_tx(&self, path: WritePath) -> S {
        self.store
            .handle(&format!("{}{}", self.prefix, path.name()))
    }

    fn in_pool(&self, path: WritePath) -> S {
        self.store
            .handle(&format!("{}{}-pool", self.prefix, path.name()))
    }

    /// `path` through the pool, in a spawned task of its own.
    async fn expected(&self, path: WritePath) -> Res<ComputedNode> {
        let (pool, peer) = (self.in_pool(path), self.peer.clone());
        let task = tokio::spawn(async move {
            run_path(&CompactedTree::new(pool), &CompactedTree::new(peer), path).await
        });
        task.await?
    }

    /// Every path in the caller's transaction, each in a spawned task.
    async fn spawn_each(&self) -> Res<()> {
        for path in PATHS {
            let ns = self.in_tx(path);
            let task = tokio::spawn(ns.clone().path_in_transaction(self.peer.clone(), path));
            let root = task.await??;
            assert_eq!(root, self.expected(path).await?, "{}", path.name());
            if !matches!(path, WritePath::Pin | WritePath::ForestWithParent) {
                // Committed: a handle outside the transaction reads it.
                let now = CompactedTree::new(ns).root().await?;
                assert_eq!(now, root, "{}", path.name());
            }
        }
        Ok(())
    }

    /// Every path posted to an axum router whose handler writes in the
    /// caller's transaction; each answer is the expected root's hash.
    async fn serve_each(self) -> Res<()> {
        let mut router = axum::Router::new()
            .route("/write/{path}", axum::routing::post(handler::<S>))
            .with_state((self.store.clone(), self.prefix.clone(), self.peer.clone()));
        for path in PATHS {
            let request = Request::post(format!("/write/{}", path.name())).body(Body::empty())?;
            let response = router.call(request).await?;
            assert_eq!(response.status(), StatusCode::OK, "{}", path.name());
            let body = axum::body::to_bytes(response.into_body(), 1 << 16).await?;
            let want = self.expected(path).await?.hash.to_string();
            assert_eq!(std::str::from_utf8(&body)?, want, "{}", path.name());
        }
        Ok(())
    }
}

/// The handler a service writes: the write in a transaction of its own,
/// the new root's hash as the answer.
async fn handler<S: CallerTransaction + Clone>(
    State((store, prefix, peer)): State<(S, String, S)>,
    Path(name): Path<String>,
) -> Result<String, StatusCode> {
    let path = WritePath::from_name(&name).ok_or(StatusCode::NOT_FOUND)?;
    let ns = store.handle(&format!("{prefix}{}", path.name()));
    match ns.path_in_transaction(peer, path).await {
        Ok(root) => Ok(root.hash.to_string()),
        Err(_) => Err(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

async fn sqlite(tag: &str) -> Res<(TempDb, Namespaces<SqliteStore>)> {
    let db = TempDb::new(tag);
    let store = SqliteStore::open(&db.path).await?;
    let namespaces = Namespaces::seed(store, String::new()).await?;
    Ok((db, namespaces))
}

async fn postgres(url: &str, tag: &str) -> Res<Namespaces<PostgresStore>> {
    let store = PostgresStore::connect(url).await?;
    Namespaces::seed(store, format!("{}-", unique(tag))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_caller_transaction_writes_spawn() -> Res<()> {
    let (_db, namespaces) = sqlite("send-spawn").await?;
    namespaces.spawn_each().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_caller_transaction_writes_serve_from_axum() -> Res<()> {
    let (_db, namespaces) = sqlite("send-axum").await?;
    namespaces.serve_each().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_caller_transaction_writes_spawn() -> Res<()> {
    let Some(url) = pg_url("postgres_caller_transaction_writes_spawn") else {
        return Ok(());
    };
    postgres(&url, "send-spawn").await?.spawn_each().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_caller_transaction_writes_serve_from_axum() -> Res<()> {
    let Some(url) = pg_url("postgres_caller_transaction_writes_serve_from_axum") else {
        return Ok(());
    };
    postgres(&url, "send-axum").await?.serve_each().await
}
