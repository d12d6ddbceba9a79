//! The federation server: an axum [`Router`] over the namespaces of one
//! SQL database, serving inserts, roots, proofs and the `children` reads
//! that [`Tree::sync_from`](crate::Tree::sync_from) needs.
//!
//! The server holds the database as one [`Forest`]: every namespace it has
//! touched keeps one handle (its remembered nodes serve every request),
//! and every `POST /leaves`, whatever its namespace, goes through one
//! store-wide [`ForestWriter`](crate::ForestWriter): concurrent requests
//! to any namespaces share read phases and durable commits, and a forest
//! with links ([`forest_router`]) keeps its parent trees in step in the
//! same commits (a POST to a parent tree is refused). Bodies are parsed
//! here, not by axum's extractors, so every
//! refusal (bad JSON or hex, a wrong length, a body over the limit, an
//! unknown namespace, route or method) is a 4xx with `{"error": "..."}`,
//! and nothing of a refused request is written.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;

use super::wire::{
    ChangesOut, ChildrenIn, ChildrenOut, DEFAULT_MAX_PREFIXES, ErrorOut, LeafIn, ProofOut, RootOut,
    WireError, check_namespace, decode_key,
};
use crate::error::TreeError;
use crate::hash::Hash;
use crate::layout::Compacted;
use crate::store::{Dialect, JournalStore, SqlStore, SqlStoreError};
use crate::tree::{CompactedTree, Forest, ForestWriter, SubmitError, WriterConfig};

/// Default [`ServerConfig::body_limit`]: 16 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 16 << 20;

/// Default [`ServerConfig::max_changes`]: changes per feed page at most.
pub const DEFAULT_MAX_CHANGES: usize = 10_000;

/// What a server accepts and how it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Request bodies larger than this are refused (413).
    pub body_limit: usize,
    /// Prefixes at most in one `children` request (more: 400).
    pub max_prefixes: usize,
    /// Changes at most in one page of `GET /changes` (a larger `limit` is
    /// cut to it; a single larger version still comes whole).
    pub max_changes: usize,
    /// The store writer's grouping.
    pub writer: WriterConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            body_limit: DEFAULT_BODY_LIMIT,
            max_prefixes: DEFAULT_MAX_PREFIXES,
            max_changes: DEFAULT_MAX_CHANGES,
            writer: WriterConfig::default(),
        }
    }
}

/// Why a request was refused or failed; answered as `{"error": "..."}`
/// with the status [`ServeError::status`] gives.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A body, field or name is not valid (400).
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The body could not be read: over the limit (413) or cut short.
    #[error("request body: {0}")]
    Body(#[from] BytesRejection),
    /// The path does not parse (400).
    #[error("request path: {0}")]
    Path(#[from] PathRejection),
    /// A read named a namespace the database does not have (404).
    #[error("no namespace named {name:?}")]
    UnknownNamespace {
        /// The name.
        name: String,
    },
    /// A `children` request named more prefixes than the server takes (400).
    #[error("{asked} prefixes in one request; at most {limit}")]
    TooManyPrefixes {
        /// Prefixes asked about.
        asked: usize,
        /// [`ServerConfig::max_prefixes`].
        limit: usize,
    },
    /// The tree failed or refused (409 when the root moved, 400 for a
    /// prefix at the leaves, 422 for a sum overflow, else 500).
    #[error(transparent)]
    Tree(#[from] TreeError<SqlStoreError>),
    /// The writer did not take the leaves (422 when rejected, 400 when
    /// refused, as a write to a parent tree is, else 503).
    #[error(transparent)]
    Submit(#[from] SubmitError<SqlStoreError>),
    /// The change journal does not cover the version or root asked for
    /// (410): the journal is off, pruned past it, or restarted after it.
    #[error("the change journal does not cover that version")]
    NotCovered,
    /// A `changes` query is malformed (400).
    #[error("changes query: {0}")]
    Query(&'static str),
    /// No such route (404).
    #[error("no such route")]
    NoRoute,
    /// The route exists, the method does not (405).
    #[error("method not allowed")]
    Method,
}

impl ServeError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ServeError::Wire(_) | ServeError::TooManyPrefixes { .. } | ServeError::Query(_) => {
                StatusCode::BAD_REQUEST
            }
            ServeError::NotCovered => StatusCode::GONE,
            ServeError::Body(r) => r.status(),
            ServeError::Path(r) => r.status(),
            ServeError::UnknownNamespace { .. } | ServeError::NoRoute => StatusCode::NOT_FOUND,
            ServeError::Method => StatusCode::METHOD_NOT_ALLOWED,
            ServeError::Tree(TreeError::RootMoved { .. }) => StatusCode::CONFLICT,
            ServeError::Tree(TreeError::NoChildren { .. }) => StatusCode::BAD_REQUEST,
            ServeError::Tree(TreeError::Plan(_)) | ServeError::Submit(SubmitError::Rejected(_)) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ServeError::Tree(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ServeError::Submit(SubmitError::Refused(_)) => StatusCode::BAD_REQUEST,
            ServeError::Submit(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let body = ErrorOut {
            error: self.to_string(),
        };
        (self.status(), Json(body)).into_response()
    }
}

/// What every handler shares.
struct Shared<C: Dialect> {
    forest: Forest<SqlStore<C>, Compacted>,
    config: ServerConfig,
    /// The namespaces known to exist (or written to).
    spaces: Mutex<HashMap<String, CompactedTree<SqlStore<C>>>>,
    /// The store writer, made on the first write.
    writer: OnceLock<ForestWriter<SqlStore<C>, Compacted>>,
}

type Api<T> = Result<Json<T>, ServeError>;

impl<C: Dialect> Shared<C> {
    /// The tree `name`, on the forest's handle; for reads (`create` false)
    /// only if the database has it. Unknown names are not remembered.
    async fn space(
        &self,
        name: &str,
        create: bool,
    ) -> Result<CompactedTree<SqlStore<C>>, ServeError> {
        check_namespace(name)?;
        if let Some(space) = self.lock().get(name) {
            return Ok(space.clone());
        }
        if !create
            && !self
                .forest
                .store()
                .open_namespace(name)
                .exists()
                .await
                .map_err(TreeError::Store)?
        {
            return Err(ServeError::UnknownNamespace {
                name: name.to_owned(),
            });
        }
        let tree = self.forest.tree(name)?;
        Ok(self.lock().entry(name.to_owned()).or_insert(tree).clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CompactedTree<SqlStore<C>>>> {
        self.spaces.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The body as `T`, or the refusal.
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ServeError> {
    Ok(serde_json::from_slice(&body?).map_err(WireError::from)?)
}

async fn leaves<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    ns: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Api<RootOut> {
    let Path(ns) = ns?;
    check_namespace(&ns)?;
    let batch = parse::<Vec<LeafIn>>(body)?
        .iter()
        .map(LeafIn::decode)
        .collect::<Result<Vec<_>, _>>()?;
    let tree = shared.space(&ns, true).await?;
    if batch.is_empty() {
        return Ok(Json(RootOut::new(&tree.root().await?)));
    }
    let writer = shared
        .writer
        .get_or_init(|| shared.forest.writer(shared.config.writer));
    let receipt = writer
        .submit(
            batch
                .into_iter()
                .map(|(key, leaf)| (ns.as_str(), key, leaf)),
        )
        .await?;
    let root = receipt.root(&ns).ok_or(TreeError::Unsupported {
        operation: "a receipt without its tree's root",
    })?;
    Ok(Json(RootOut::new(&root)))
}

async fn root<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    ns: Result<Path<String>, PathRejection>,
) -> Api<RootOut> {
    let Path(ns) = ns?;
    let tree = shared.space(&ns, false).await?;
    Ok(Json(RootOut::new(&tree.root().await?)))
}

async fn proof<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Api<ProofOut> {
    let Path((ns, key)) = path?;
    let key = decode_key(&key)?;
    let tree = shared.space(&ns, false).await?;
    let (root, leaf, proof) = tree.view().leaf_with_proof(&key).await?;
    Ok(Json(ProofOut::new(&root, &leaf, &proof)))
}

async fn children<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    ns: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Api<ChildrenOut> {
    let Path(ns) = ns?;
    check_namespace(&ns)?;
    let request: ChildrenIn = parse(body)?;
    let limit = shared.config.max_prefixes;
    if request.prefixes.len() > limit {
        return Err(ServeError::TooManyPrefixes {
            asked: request.prefixes.len(),
            limit,
        });
    }
    let (root, prefixes) = request.decode()?;
    let tree = shared.space(&ns, false).await?;
    let pairs = tree.view().children(&root, &prefixes).await?;
    Ok(Json(ChildrenOut::new(&pairs)))
}

/// What a `changes` query asks: from a version or a root, how many
/// changes, with a proof or not.
struct ChangesQuery {
    since: Option<u64>,
    from: Option<Hash>,
    limit: Option<usize>,
    proof: bool,
}

impl ChangesQuery {
    fn parse(query: Option<&str>) -> Result<Self, ServeError> {
        let mut q = ChangesQuery {
            since: None,
            from: None,
            limit: None,
            proof: false,
        };
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "since" => {
                    q.since = Some(value.parse().map_err(|_| ServeError::Query("since"))?);
                }
                "from" => q.from = Some(Hash(decode_key(value)?.0)),
                "limit" => {
                    q.limit = Some(value.parse().map_err(|_| ServeError::Query("limit"))?);
                }
                "proof" => q.proof = matches!(value, "1" | "true"),
                _ => return Err(ServeError::Query("unknown parameter")),
            }
        }
        if q.since.is_some() == q.from.is_some() {
            return Err(ServeError::Query("give exactly one of since and from"));
        }
        Ok(q)
    }
}

async fn changes<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    ns: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Api<ChangesOut> {
    let Path(ns) = ns?;
    let q = ChangesQuery::parse(query.as_deref())?;
    let tree = shared.space(&ns, false).await?;
    let limit = q
        .limit
        .unwrap_or(shared.config.max_changes)
        .clamp(1, shared.config.max_changes);
    let since = match (q.since, q.from) {
        (Some(since), _) => Some(since),
        (None, Some(hash)) => tree
            .store()
            .version_of(&hash)
            .await
            .map_err(TreeError::Store)?,
        (None, None) => None,
    };
    let Some(since) = since else {
        return Err(ServeError::NotCovered);
    };
    if q.proof {
        let proven = tree.proven_changes(since, limit).await?;
        let proven = proven.ok_or(ServeError::NotCovered)?;
        Ok(Json(ChangesOut::new(&proven.page, Some(&proven.proof))))
    } else {
        let page = tree.changes(since, limit).await?;
        Ok(Json(ChangesOut::new(
            &page.ok_or(ServeError::NotCovered)?,
            None,
        )))
    }
}

/// The federation API over the namespaces of `store`'s database (see the
/// module docs and [`wire`](super::wire) for the routes and bodies).
pub fn router<C: Dialect>(store: SqlStore<C>, config: ServerConfig) -> Router {
    forest_router(Forest::new(store), config)
}

/// [`router`] over `forest`: its links' parent trees are kept in step with
/// every write, and served read-only.
pub fn forest_router<C: Dialect>(
    forest: Forest<SqlStore<C>, Compacted>,
    config: ServerConfig,
) -> Router {
    let shared = Arc::new(Shared {
        forest,
        config,
        spaces: Mutex::new(HashMap::new()),
        writer: OnceLock::new(),
    });
    Router::new()
        .route("/v1/{ns}/leaves", post(leaves::<C>))
        .route("/v1/{ns}/root", get(root::<C>))
        .route("/v1/{ns}/proof/{key}", get(proof::<C>))
        .route("/v1/{ns}/children", post(children::<C>))
        .route("/v1/{ns}/changes", get(changes::<C>))
        .fallback(async || ServeError::NoRoute)
        .method_not_allowed_fallback(async || ServeError::Method)
        .layer(DefaultBodyLimit::max(config.body_limit))
        .with_state(shared)
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
