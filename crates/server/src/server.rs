//! The federation server: an axum [`Router`] over the namespaces of one
//! SQL database, serving inserts, roots, proofs and the `children` reads
//! that [`Tree::sync_from`](crate::Tree::sync_from) needs, to callers it
//! has checked.
//!
//! Every request first passes the gate ([`gate`]): a cap on requests in
//! flight (503 beyond), the caller's [`Principal`] from its
//! `Authorization: Bearer` token (401 for a malformed, unknown, revoked or
//! expired one; 401 without one where public read is off), and rate limits
//! per client address and per token (429). Each route then asks for its
//! scope over its namespace (403 without it): `read` for roots, proofs,
//! `children` and the change feed, `write` for `POST /leaves`, `admin` for
//! `PUT /v1/{ns}`, which creates a namespace (a write never does), and
//! `metrics` (never public) for `GET /metrics`, the Prometheus text of
//! [`crate::metrics`]. A write
//! to a parent tree is refused (403) before anything is read. Bodies are
//! read only after those checks, with a cap on their size and on leaves
//! per POST, and parsed here, not by axum's extractors, so every refusal
//! is a 4xx (or 503) with `{"error": "..."}` that names no secret, and
//! nothing of a refused request is written.
//!
//! The server holds the database as one [`Forest`]: every namespace it has
//! served keeps one handle (its remembered nodes serve every request; at
//! most [`ServerConfig::max_open_namespaces`] are kept), and every
//! `POST /leaves`, whatever its namespace, goes through one store-wide
//! [`ForestWriter`](crate::ForestWriter): concurrent requests to any
//! namespaces share read phases and durable commits, and a forest with
//! links ([`forest_router`]) keeps its parent trees in step in the same
//! commits. A full writer queue answers 503 at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

use super::access::{AccessConfig, Authority, Principal, Scope};
use super::gate::{Gate, Refusal};
use super::limits::Rate;
use super::wire::{
    ChangesOut, ChildrenIn, ChildrenOut, CreatedOut, DEFAULT_MAX_PREFIXES, ErrorOut, LeafIn,
    ProofOut, RootOut, WireError, check_namespace, decode_key,
};
use crate::descent::UpdateBatch;
use crate::hash::Hash;
use crate::layout::Compacted;
use crate::metrics::{CONTENT_TYPE as METRICS_CONTENT_TYPE, Metrics};
use crate::node::ComputedNode;
use crate::store::{ForestStore, JournalStore, StoreStats, TreeStore, TreeUpdate};
use ms_smt::TreeError;
use ms_smt::{CompactedTree, Forest, ForestWriter, SubmitError, WriterConfig};
use ms_smt_sql::{Dialect, SqlStore, SqlStoreError};

/// Default [`ServerConfig::body_limit`]: 4 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 4 << 20;

/// Default [`ServerConfig::max_changes`]: changes per feed page at most.
pub const DEFAULT_MAX_CHANGES: usize = 10_000;

/// Default [`ServerConfig::max_leaves`]: leaves per `POST /leaves` at most.
pub const DEFAULT_MAX_LEAVES: usize = 10_000;

/// Default [`ServerConfig::max_in_flight`]: requests handled at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;

/// Default [`ServerConfig::request_timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Default [`ServerConfig::max_open_namespaces`].
pub const DEFAULT_MAX_OPEN_NAMESPACES: usize = 1_024;

/// What a server accepts, from whom, how much, and how it writes. Every
/// field has a documented default ([`ServerConfig::default`]) and a
/// builder method.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerConfig {
    /// Request bodies larger than this are refused (413; default
    /// [`DEFAULT_BODY_LIMIT`]).
    pub body_limit: usize,
    /// Prefixes at most in one `children` request (more: 400; default
    /// [`DEFAULT_MAX_PREFIXES`]).
    pub max_prefixes: usize,
    /// Changes at most in one page of `GET /changes` (a larger `limit` is
    /// cut to it; a single larger version still comes whole; default
    /// [`DEFAULT_MAX_CHANGES`]).
    pub max_changes: usize,
    /// Leaves at most in one `POST /leaves` (more: 413; default
    /// [`DEFAULT_MAX_LEAVES`]).
    pub max_leaves: usize,
    /// Who may read, and how long a token's row is trusted.
    pub access: AccessConfig,
    /// Requests per client address (default [`Rate::TAPD`]; `None`: no
    /// limit). Charged for requests without a valid token; a request
    /// with a token is refused while its address's bucket is empty. A
    /// request whose turn is near waits for it (see `limits.rs`).
    pub per_address: Option<Rate>,
    /// Requests per token (default [`Rate::TAPD`]; `None`: no limit).
    pub per_token: Option<Rate>,
    /// Requests handled at once; beyond, 503 at once (default
    /// [`DEFAULT_MAX_IN_FLIGHT`]).
    pub max_in_flight: usize,
    /// The longest one request may take, body included; beyond, 503
    /// (default [`DEFAULT_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// Namespace handles kept (with their remembered nodes); others are
    /// served on a handle made for the request (default
    /// [`DEFAULT_MAX_OPEN_NAMESPACES`]).
    pub max_open_namespaces: usize,
    /// The store writer's grouping (its queue bound is the writes that
    /// wait; beyond, 503).
    pub writer: WriterConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            body_limit: DEFAULT_BODY_LIMIT,
            max_prefixes: DEFAULT_MAX_PREFIXES,
            max_changes: DEFAULT_MAX_CHANGES,
            max_leaves: DEFAULT_MAX_LEAVES,
            access: AccessConfig::default(),
            per_address: Some(Rate::TAPD),
            per_token: Some(Rate::TAPD),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_open_namespaces: DEFAULT_MAX_OPEN_NAMESPACES,
            writer: WriterConfig::default(),
        }
    }
}

impl ServerConfig {
    /// Bodies of at most `bytes`.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// At most `n` prefixes per `children` request.
    pub fn max_prefixes(mut self, n: usize) -> Self {
        self.max_prefixes = n.max(1);
        self
    }

    /// At most `n` changes per feed page.
    pub fn max_changes(mut self, n: usize) -> Self {
        self.max_changes = n.max(1);
        self
    }

    /// At most `n` leaves per POST.
    pub fn max_leaves(mut self, n: usize) -> Self {
        self.max_leaves = n.max(1);
        self
    }

    /// Reads without a token allowed (`true`, the default) or not.
    pub fn public_read(mut self, on: bool) -> Self {
        self.access.public_read = on;
        self
    }

    /// Token rows trusted for `ttl` before they are read again.
    pub fn token_cache(mut self, ttl: Duration) -> Self {
        self.access.token_cache = ttl;
        self
    }

    /// The rate per client address (`None`: unlimited).
    pub fn per_address(mut self, rate: Option<Rate>) -> Self {
        self.per_address = rate;
        self
    }

    /// The rate per token (`None`: unlimited).
    pub fn per_token(mut self, rate: Option<Rate>) -> Self {
        self.per_token = rate;
        self
    }

    /// At most `n` requests handled at once.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// A request may take at most `t`.
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }

    /// At most `n` namespace handles kept.
    pub fn max_open_namespaces(mut self, n: usize) -> Self {
        self.max_open_namespaces = n;
        self
    }

    /// The store writer's configuration.
    pub fn writer(mut self, writer: WriterConfig) -> Self {
        self.writer = writer;
        self
    }
}

/// The client's address, set on each request by [`serve`](super::serve)
/// (what the per-address limits count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

/// Why a request was refused or failed; answered as `{"error": "..."}`
/// with the status [`ServeError::status`] gives. No variant carries a
/// token.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A body, field or name is not valid (400).
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The body is larger than [`ServerConfig::body_limit`] (413).
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body could not be read (cut short; 400).
    #[error("the request body could not be read")]
    BodyRead,
    /// More leaves than [`ServerConfig::max_leaves`] in one POST (413).
    #[error("{sent} leaves in one request; at most {limit}")]
    TooManyLeaves {
        /// Leaves sent.
        sent: usize,
        /// The limit.
        limit: usize,
    },
    /// The path does not parse (400).
    #[error("request path: {0}")]
    Path(#[from] PathRejection),
    /// A read or write named a namespace the database does not have (404).
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
    /// The request needs a token and came without one (401).
    #[error("this server needs a bearer token")]
    NoToken,
    /// The `Authorization` header is not `Bearer <token>` (401).
    #[error("the Authorization header must be 'Bearer <token>'")]
    MalformedToken,
    /// The token is unknown, revoked or expired (401; one answer for
    /// all three).
    #[error("the token is not valid (unknown, revoked or expired)")]
    InvalidToken,
    /// The caller may not do this (403).
    #[error("{who} may not {scope} namespace {namespace:?}")]
    Forbidden {
        /// "an anonymous caller" or "token `<id>`".
        who: String,
        /// What it asked to do.
        scope: Scope,
        /// Where.
        namespace: String,
    },
    /// The caller has no `metrics` scope and asked for `GET /metrics`
    /// (403; the figures are never public).
    #[error("{who} may not read the metrics")]
    MetricsForbidden {
        /// "an anonymous caller" or "token `<id>`".
        who: String,
    },
    /// A write named a parent tree, which only its children's writes
    /// change (403).
    #[error("namespace {namespace:?} is a parent tree: written only through its children")]
    ParentWrite {
        /// The parent.
        namespace: String,
    },
    /// Too many requests from this address or token (429).
    #[error("too many requests; retry in {retry_after_ms} ms")]
    RateLimited {
        /// When the next request is allowed, in milliseconds.
        retry_after_ms: u64,
    },
    /// The server is handling all the requests it takes at once, or the
    /// writer's queue is full (503).
    #[error("the server is busy; retry shortly")]
    Busy,
    /// The request took longer than [`ServerConfig::request_timeout`] (503).
    #[error("the request took longer than {0:?}")]
    Timeout(Duration),
    /// The token table could not be read (503).
    #[error("the access check failed")]
    AccessCheck(#[source] SqlStoreError),
    /// The tree failed or refused (409 when the root moved, 400 for a
    /// prefix at the leaves, 422 for a sum overflow, else 500).
    #[error(transparent)]
    Tree(#[from] TreeError<SqlStoreError>),
    /// The writer did not take the leaves (422 when rejected, 400 when
    /// refused, 503 when its queue is full, else 503).
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
            ServeError::Wire(_)
            | ServeError::TooManyPrefixes { .. }
            | ServeError::Query(_)
            | ServeError::BodyRead => StatusCode::BAD_REQUEST,
            ServeError::BodyTooLarge { .. } | ServeError::TooManyLeaves { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ServeError::NoToken | ServeError::MalformedToken | ServeError::InvalidToken => {
                StatusCode::UNAUTHORIZED
            }
            ServeError::Forbidden { .. }
            | ServeError::MetricsForbidden { .. }
            | ServeError::ParentWrite { .. } => StatusCode::FORBIDDEN,
            ServeError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ServeError::Busy | ServeError::Timeout(_) | ServeError::AccessCheck(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ServeError::NotCovered => StatusCode::GONE,
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
        let mut response = (self.status(), Json(body)).into_response();
        let headers = response.headers_mut();
        match &self {
            ServeError::NoToken => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ServeError::MalformedToken | ServeError::InvalidToken => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                );
            }
            ServeError::RateLimited { retry_after_ms } => {
                let secs = retry_after_ms.div_ceil(1_000).max(1);
                headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            ServeError::Busy | ServeError::Timeout(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

/// What every handler shares.
struct Shared<C: Dialect> {
    forest: Forest<SqlStore<C>, Compacted>,
    config: ServerConfig,
    /// The namespaces known to exist, at most `max_open_namespaces`.
    spaces: Mutex<HashMap<String, CompactedTree<SqlStore<C>>>>,
    /// The store writer, made on the first write.
    writer: OnceLock<ForestWriter<SqlStore<C>, Compacted>>,
    gate: Gate,
}

type Api<T> = Result<Json<T>, ServeError>;

impl<C: Dialect> Shared<C> {
    /// The tree `name` if the database has it (404 otherwise; unknown
    /// names are not remembered).
    async fn space(&self, name: &str) -> Result<CompactedTree<SqlStore<C>>, ServeError> {
        check_namespace(name)?;
        if let Some(space) = self.lock().get(name) {
            return Ok(space.clone());
        }
        let store = self.forest.store().open_namespace(name);
        if !store.exists().await.map_err(TreeError::Store)? {
            return Err(ServeError::UnknownNamespace {
                name: name.to_owned(),
            });
        }
        let mut spaces = self.lock();
        if spaces.len() >= self.config.max_open_namespaces {
            // Over the cap: served on a handle of its own, forgotten after.
            return Ok(CompactedTree::new(store));
        }
        let tree = self.forest.tree(name)?;
        Ok(spaces.entry(name.to_owned()).or_insert(tree).clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CompactedTree<SqlStore<C>>>> {
        self.spaces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when some link names `name` as its parent.
    fn is_parent(&self, name: &str) -> bool {
        self.forest.links().iter().any(|l| l.parent() == name)
    }

    /// The request's body, at most [`ServerConfig::body_limit`] bytes.
    async fn body(&self, headers: &HeaderMap, body: Body) -> Result<Bytes, ServeError> {
        let limit = self.config.body_limit;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ServeError::BodyTooLarge { limit });
        }
        match Limited::new(body, limit).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.is::<LengthLimitError>() => Err(ServeError::BodyTooLarge { limit }),
            Err(_) => Err(ServeError::BodyRead),
        }
    }
}

/// Refuses `principal` unless it may do `scope` on `ns` (where public read
/// is on, anyone reads, with a token or without).
fn require(
    principal: &Principal,
    scope: Scope,
    ns: &str,
    public_read: bool,
) -> Result<(), ServeError> {
    if principal.allows(scope, Some(ns)) || (public_read && scope == Scope::Read) {
        return Ok(());
    }
    Err(ServeError::Forbidden {
        who: who(principal),
        scope,
        namespace: ns.to_owned(),
    })
}

/// How a refusal names `principal` (never a secret).
pub(crate) fn who(principal: &Principal) -> String {
    match principal {
        Principal::Anonymous => "an anonymous caller".to_owned(),
        Principal::Token { id, .. } => format!("token {id}"),
    }
}

/// The gate every request passes before its handler: the in-flight cap,
/// the caller, the rate limits, and the request's time limit ([`admit`]),
/// then what a refusal says about its connection.
async fn gate<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    request: Request,
    next: Next,
) -> Response {
    // A refusal may leave the request's body unread, and hyper closes a
    // connection whose body it has not read whole after the answer; saying
    // so (`Connection: close`) keeps a client from sending its next request
    // on that socket (it failed with `IncompleteMessage` after a 413).
    let has_body = !request.body().is_end_stream();
    let mut response = admit(&shared, request, next).await;
    let status = response.status();
    if has_body && (status.is_client_error() || status.is_server_error()) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The in-flight cap, the caller, the rate limits ([`Gate::admit`]), and
/// the request's time limit; sets the [`Principal`] as a request
/// extension.
async fn admit<C: Dialect>(shared: &Shared<C>, mut request: Request, next: Next) -> Response {
    let ip = request
        .extensions()
        .get::<ClientAddr>()
        .map(|a| a.0.ip())
        .or_else(|| {
            request
                .extensions()
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|a| a.0.ip())
        });
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    let admitted = match shared.gate.admit(ip, authorization.as_deref()).await {
        Ok(admitted) => admitted,
        Err(refusal) => return ServeError::from(refusal).into_response(),
    };
    request.extensions_mut().insert(admitted.principal.clone());
    let limit = shared.config.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ServeError::Timeout(limit).into_response(),
    }
}

impl From<Refusal> for ServeError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Busy => ServeError::Busy,
            Refusal::RateLimited(retry) => ServeError::RateLimited {
                retry_after_ms: u64::try_from(retry.as_millis()).unwrap_or(u64::MAX),
            },
            Refusal::NoToken => ServeError::NoToken,
            Refusal::MalformedToken => ServeError::MalformedToken,
            Refusal::InvalidToken => ServeError::InvalidToken,
            Refusal::AccessCheck(e) => ServeError::AccessCheck(e),
        }
    }
}

/// The caller the gate set (none: the gate did not run, and nothing is
/// allowed).
fn principal_of(principal: Option<axum::Extension<Principal>>) -> Result<Principal, ServeError> {
    principal.map(|p| p.0).ok_or(ServeError::NoToken)
}

/// The caller as the gate set it, checked for `scope` over `ns`.
type Caller = Option<axum::Extension<Principal>>;

fn allowed(
    caller: Caller,
    scope: Scope,
    ns: &str,
    access: &AccessConfig,
) -> Result<Principal, ServeError> {
    check_namespace(ns)?;
    let principal = principal_of(caller)?;
    require(&principal, scope, ns, access.public_read)?;
    Ok(principal)
}

/// The body as `T`, or the refusal.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ServeError> {
    Ok(serde_json::from_slice(body).map_err(WireError::from)?)
}

async fn leaves<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    caller: Caller,
    ns: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Api<RootOut> {
    let Path(ns) = ns?;
    allowed(caller, Scope::Write, &ns, &shared.config.access)?;
    if shared.is_parent(&ns) {
        return Err(ServeError::ParentWrite { namespace: ns });
    }
    let tree = shared.space(&ns).await?;
    let body = shared.body(&headers, body).await?;
    let batch: Vec<LeafIn> = parse(&body)?;
    let limit = shared.config.max_leaves;
    if batch.len() > limit {
        return Err(ServeError::TooManyLeaves {
            sent: batch.len(),
            limit,
        });
    }
    let batch = batch
        .iter()
        .map(LeafIn::decode)
        .collect::<Result<Vec<_>, _>>()?;
    if batch.is_empty() {
        return Ok(Json(RootOut::new(&tree.root().await?)));
    }
    let writer = shared
        .writer
        .get_or_init(|| shared.forest.writer(shared.config.writer));
    let ticket = writer
        .try_submit(
            batch
                .into_iter()
                .map(|(key, leaf)| (ns.as_str(), key, leaf)),
        )
        .map_err(|e| match e {
            SubmitError::Full => ServeError::Busy,
            e => ServeError::Submit(e),
        })?;
    let receipt = ticket.await?;
    let root = receipt.root(&ns).ok_or(TreeError::Unsupported {
        operation: "a receipt without its tree's root",
    })?;
    Ok(Json(RootOut::new(&root)))
}

/// `PUT /v1/{ns}` (admin): creates the namespace, empty; 201 when made,
/// 200 when it was there already.
async fn create<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    caller: Caller,
    ns: Result<Path<String>, PathRejection>,
) -> Result<(StatusCode, Json<CreatedOut>), ServeError> {
    let Path(ns) = ns?;
    allowed(caller, Scope::Admin, &ns, &shared.config.access)?;
    let store = shared.forest.store().open_namespace(&ns);
    if store.exists().await.map_err(TreeError::Store)? {
        return Ok((StatusCode::OK, Json(CreatedOut::new(&ns, false))));
    }
    // A batch that changes nothing: the commit creates the namespace's row
    // and writes no node (an empty tree stays empty whatever raced it).
    let empty = UpdateBatch::noop(ComputedNode::empty_root());
    let part = TreeUpdate {
        tree: &store,
        batch: &empty,
    };
    store
        .commit_trees(&[part])
        .await
        .map_err(TreeError::Store)?;
    Ok((StatusCode::CREATED, Json(CreatedOut::new(&ns, true))))
}

/// `GET /metrics`: the store writer's counters, each open namespace
/// handle's and every namespace's gauges, in the Prometheus text format
/// ([`crate::metrics`]). Needs the `metrics` scope (public read does not
/// cover it); the namespace listing costs O(namespaces).
async fn metrics<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    caller: Caller,
) -> Result<Response, ServeError> {
    let principal = principal_of(caller)?;
    if !principal.allows(Scope::Metrics, None) {
        return Err(ServeError::MetricsForbidden {
            who: who(&principal),
        });
    }
    let mut out = Metrics::new();
    if let Some(writer) = shared.writer.get() {
        out = out.writer("federation", &writer.stats());
    }
    let mut handles: Vec<(String, StoreStats)> = shared
        .lock()
        .iter()
        .map(|(name, tree)| (name.clone(), tree.store().stats()))
        .collect();
    handles.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, stats) in &handles {
        out = out.store(name, stats);
    }
    let listing = shared
        .forest
        .store()
        .namespaces()
        .await
        .map_err(TreeError::Store)?;
    let body = out.namespaces(&listing).render();
    Ok(([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response())
}

async fn root<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    caller: Caller,
    ns: Result<Path<String>, PathRejection>,
) -> Api<RootOut> {
    let Path(ns) = ns?;
    allowed(caller, Scope::Read, &ns, &shared.config.access)?;
    let tree = shared.space(&ns).await?;
    Ok(Json(RootOut::new(&tree.root().await?)))
}

async fn proof<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    caller: Caller,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Api<ProofOut> {
    let Path((ns, key)) = path?;
    allowed(caller, Scope::Read, &ns, &shared.config.access)?;
    let key = decode_key(&key)?;
    let tree = shared.space(&ns).await?;
    let (root, leaf, proof) = tree.view().leaf_with_proof(&key).await?;
    Ok(Json(ProofOut::new(&root, &leaf, &proof)))
}

async fn children<C: Dialect>(
    State(shared): State<Arc<Shared<C>>>,
    caller: Caller,
    ns: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Api<ChildrenOut> {
    let Path(ns) = ns?;
    allowed(caller, Scope::Read, &ns, &shared.config.access)?;
    let tree = shared.space(&ns).await?;
    let request: ChildrenIn = parse(&shared.body(&headers, body).await?)?;
    let limit = shared.config.max_prefixes;
    if request.prefixes.len() > limit {
        return Err(ServeError::TooManyPrefixes {
            asked: request.prefixes.len(),
            limit,
        });
    }
    let (root, prefixes) = request.decode()?;
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
    caller: Caller,
    ns: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Api<ChangesOut> {
    let Path(ns) = ns?;
    allowed(caller, Scope::Read, &ns, &shared.config.access)?;
    let q = ChangesQuery::parse(query.as_deref())?;
    let tree = shared.space(&ns).await?;
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
/// module docs and [`wire`](super::wire) for the routes and bodies), with
/// access checked against the database's tokens.
pub fn router<C: Dialect>(store: SqlStore<C>, config: ServerConfig) -> Router {
    forest_router(Forest::new(store), config)
}

/// [`router`] over `forest`: its links' parent trees are kept in step with
/// every write, and served read-only (a write to a parent is 403).
pub fn forest_router<C: Dialect>(
    forest: Forest<SqlStore<C>, Compacted>,
    config: ServerConfig,
) -> Router {
    routes(forest, config, Router::new())
}

/// [`forest_router`] with `extra` routes (e.g. a health check) merged in
/// before the gate, so they get the same caller, limits and time bound;
/// each checks its own scope on the request's [`Principal`] extension.
pub fn routes<C: Dialect>(
    forest: Forest<SqlStore<C>, Compacted>,
    config: ServerConfig,
    extra: Router,
) -> Router {
    let admission = Gate::new(
        Arc::new(Authority::new(forest.store().clone(), &config.access)),
        config.access.public_read,
        config.per_address,
        config.per_token,
        config.max_in_flight,
    );
    let shared = Arc::new(Shared {
        forest,
        config,
        spaces: Mutex::new(HashMap::new()),
        writer: OnceLock::new(),
        gate: admission,
    });
    Router::new()
        .route("/v1/{ns}", put(create::<C>))
        .route("/v1/{ns}/leaves", post(leaves::<C>))
        .route("/v1/{ns}/root", get(root::<C>))
        .route("/v1/{ns}/proof/{key}", get(proof::<C>))
        .route("/v1/{ns}/children", post(children::<C>))
        .route("/v1/{ns}/changes", get(changes::<C>))
        .route("/metrics", get(metrics::<C>))
        .with_state(shared.clone())
        .merge(extra)
        .fallback(async || ServeError::NoRoute)
        .method_not_allowed_fallback(async || ServeError::Method)
        .layer(from_fn_with_state(shared, gate::<C>))
}
