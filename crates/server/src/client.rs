//! [`HttpPeer`]: a remote namespace served by the federation server, as a
//! [`SyncPeer`] and a small client for its other routes.
//!
//! Nothing a peer sends is trusted: `sync_from` checks every `children`
//! pair against the parent it holds, and [`HttpPeer::proof`] verifies the
//! proof against the root it came with. A large `children` request is
//! split into requests of at most [`HttpPeer::max_prefixes`] prefixes
//! (the server's limit), answered in order.
//!
//! An `https://` peer is verified ([`Trust`]: the system's roots by
//! default, or a CA file, or one pinned certificate); a token
//! ([`HttpPeer::with_token`]) goes in `Authorization: Bearer`, and only
//! over TLS or to a loopback address.

use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::HeaderValue;
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::tls::{TlsError, Trust, trust_nothing};
use super::wire::{
    ChangesOut, ChildrenIn, ChildrenOut, CreatedOut, DEFAULT_MAX_PREFIXES, ErrorOut, LeafIn,
    ProofOut, RootOut, WireError, check_namespace,
};
use crate::descent::Subtree;
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::position::Position;
use crate::store::{ChangePage, Writable};
use ms_smt::Proof;
use ms_smt::Tree;
use ms_smt::{ProvenPage, SyncError, SyncPeer, SyncReport};

/// Default [`HttpPeer::max_response`]: 256 MiB.
pub const DEFAULT_MAX_RESPONSE: usize = 256 << 20;

/// Times [`HttpPeer::sync_into`] starts over when the remote root moves.
const SYNC_ATTEMPTS: u32 = 3;

/// Why a request to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The base URL is not `http://host:port` or `https://host:port`
    /// (no path).
    #[error("peer URL must look like https://host:port or http://host:port")]
    Url,
    /// The TLS configuration could not be made.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A token would travel in clear: plain HTTP to an address that is not
    /// loopback.
    #[error("a token is sent only over https (or plain http to loopback)")]
    TokenInClear,
    /// A body or name is not valid on the wire (ours or the peer's).
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The request could not be sent or answered.
    #[error("HTTP request failed: {0}")]
    Transport(#[from] hyper_util::client::legacy::Error),
    /// The answer's body could not be read.
    #[error("reading the answer failed: {0}")]
    Receive(#[source] hyper::Error),
    /// The answer's body is larger than [`HttpPeer::max_response`].
    #[error("the answer is larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The peer refused: its status and its `{"error"}` text.
    #[error("peer answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: StatusCode,
        /// The peer's own words (its JSON error, or the raw body).
        message: String,
    },
    /// The peer answered a different number of pairs than asked.
    #[error("asked about {asked} prefixes, the peer answered {answered}")]
    WrongCount {
        /// Prefixes in the request.
        asked: usize,
        /// Pairs in the answer.
        answered: usize,
    },
    /// A proof the peer sent does not verify against its root.
    #[error("the peer's proof does not verify against its root")]
    BadProof,
}

/// What an [`HttpPeer`] sent and received so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// HTTP requests made.
    pub requests: u64,
    /// Request body bytes sent.
    pub bytes_sent: u64,
    /// Answer body bytes received.
    pub bytes_received: u64,
}

impl PeerStats {
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &PeerStats) -> PeerStats {
        PeerStats {
            requests: self.requests.saturating_sub(earlier.requests),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
        }
    }
}

/// One namespace on a federation server, reached over HTTP/1.1, with TLS
/// for an `https://` URL.
pub struct HttpPeer {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// `http(s)://host:port/v1/{ns}`.
    base: String,
    /// True for `https://`.
    tls: bool,
    /// True when the host is a loopback address (or `localhost`).
    loopback: bool,
    /// `Bearer <token>`, marked sensitive.
    authorization: Option<HeaderValue>,
    max_prefixes: usize,
    max_response: usize,
    requests: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
}

impl std::fmt::Debug for HttpPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpPeer")
            .field("base", &self.base)
            .field("token", &self.authorization.is_some())
            .field("max_prefixes", &self.max_prefixes)
            .field("max_response", &self.max_response)
            .finish_non_exhaustive()
    }
}

/// A client over `trust` (plain HTTP too).
fn client(trust: &Trust) -> Result<Client<HttpsConnector<HttpConnector>, Full<Bytes>>, PeerError> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(trust.client_config()?)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

/// True for `localhost` and loopback addresses.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl HttpPeer {
    /// The namespace `ns` of the server at `url` (`https://host:port`,
    /// verified against the system's roots, or `http://host:port`).
    pub fn new(url: &str, ns: &str) -> Result<Self, PeerError> {
        Self::with_trust_of(url, ns, None)
    }

    /// [`new`](Self::new), believing `trust` for an `https://` URL.
    pub fn with_trust(url: &str, ns: &str, trust: Trust) -> Result<Self, PeerError> {
        Self::with_trust_of(url, ns, Some(trust))
    }

    fn with_trust_of(url: &str, ns: &str, trust: Option<Trust>) -> Result<Self, PeerError> {
        check_namespace(ns)?;
        let uri: Uri = url.parse().map_err(|_| PeerError::Url)?;
        let scheme = uri.scheme_str();
        let ok = matches!(scheme, Some("http" | "https"))
            && uri.authority().is_some()
            && uri.query().is_none()
            && matches!(uri.path(), "" | "/");
        if !ok {
            return Err(PeerError::Url);
        }
        let tls = scheme == Some("https");
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let client = match (tls, trust) {
            (true, trust) => client(&trust.unwrap_or(Trust::SystemRoots))?,
            // Plain HTTP: the TLS side is never used, and trusts nothing.
            (false, _) => {
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(trust_nothing()?)
                    .https_or_http()
                    .enable_http1()
                    .build();
                Client::builder(TokioExecutor::new()).build(https)
            }
        };
        Ok(HttpPeer {
            client,
            base: format!(
                "{}://{authority}/v1/{ns}",
                if tls { "https" } else { "http" }
            ),
            tls,
            loopback: uri.host().is_some_and(is_loopback),
            authorization: None,
            max_prefixes: DEFAULT_MAX_PREFIXES,
            max_response: DEFAULT_MAX_RESPONSE,
            requests: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
        })
    }

    /// This peer sending `token` with every request (`Authorization:
    /// Bearer`). Refused for plain HTTP to an address that is not loopback,
    /// where it would travel in clear.
    pub fn with_token(mut self, token: &str) -> Result<Self, PeerError> {
        if !self.tls && !self.loopback {
            return Err(PeerError::TokenInClear);
        }
        let mut value =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| PeerError::Url)?;
        value.set_sensitive(true);
        self.authorization = Some(value);
        Ok(self)
    }

    /// Creates the remote namespace (an admin token's call); true when
    /// this call made it, false when it existed.
    pub async fn create_namespace(&self) -> Result<bool, PeerError> {
        let out: CreatedOut = self.call(Method::PUT, "", None::<&()>).await?;
        Ok(out.created)
    }

    /// This peer sending at most `n` prefixes per `children` request
    /// (default [`DEFAULT_MAX_PREFIXES`], the server's default limit).
    pub fn with_max_prefixes(mut self, n: usize) -> Self {
        self.max_prefixes = n.max(1);
        self
    }

    /// This peer refusing answers larger than `bytes`.
    pub fn with_max_response(mut self, bytes: usize) -> Self {
        self.max_response = bytes;
        self
    }

    /// Prefixes at most per `children` request.
    pub fn max_prefixes(&self) -> usize {
        self.max_prefixes
    }

    /// Answer bytes at most.
    pub fn max_response(&self) -> usize {
        self.max_response
    }

    /// What this peer has sent and received.
    pub fn stats(&self) -> PeerStats {
        PeerStats {
            requests: self.requests.load(Ordering::Relaxed),
            bytes_sent: self.sent.load(Ordering::Relaxed),
            bytes_received: self.received.load(Ordering::Relaxed),
        }
    }

    /// The remote namespace's root.
    pub async fn root(&self) -> Result<ComputedNode, PeerError> {
        let out: RootOut = self.call(Method::GET, "root", None::<&()>).await?;
        Ok(out.decode()?)
    }

    /// Writes `leaves` to the remote namespace (an empty leaf deletes);
    /// the root their write committed.
    pub async fn insert(&self, leaves: &[(Key, Leaf)]) -> Result<ComputedNode, PeerError> {
        let body: Vec<LeafIn> = leaves.iter().map(|(k, l)| LeafIn::new(k, l)).collect();
        let out: RootOut = self.call(Method::POST, "leaves", Some(&body)).await?;
        Ok(out.decode()?)
    }

    /// The remote root, the leaf at `key` (empty when absent) and its
    /// proof, checked to verify against that root.
    pub async fn proof(&self, key: &Key) -> Result<(ComputedNode, Leaf, Proof), PeerError> {
        let path = format!("proof/{}", key.to_hex());
        let out: ProofOut = self.call(Method::GET, &path, None::<&()>).await?;
        let (root, leaf, proof) = out.decode()?;
        if !proof.verify(key, &leaf, &root) {
            return Err(PeerError::BadProof);
        }
        Ok((root, leaf, proof))
    }

    /// The page of the remote change feed after version `since` with its
    /// update proof, checked against the page's start root: for a holder
    /// of that root alone. `Ok(None)` when the remote journal does not
    /// cover `since`.
    pub async fn proven_changes(
        &self,
        since: u64,
        limit: usize,
    ) -> Result<Option<ProvenPage>, PeerError> {
        let path = format!("changes?since={since}&limit={limit}&proof=1");
        let Some(out) = self.feed(&path).await? else {
            return Ok(None);
        };
        let (page, proof) = out.decode()?;
        let proof = proof.ok_or(PeerError::BadProof)?;
        let proven = ProvenPage { page, proof };
        proven
            .verify(&proven.page.from_root)
            .map_err(|_| PeerError::BadProof)?;
        Ok(Some(proven))
    }

    /// A `changes` request; `None` when the peer answers 410 (its journal
    /// does not cover the version or root asked for) or 404 (a server
    /// without the feed; an unknown namespace fails the diff walk's first
    /// read as well).
    async fn feed(&self, path: &str) -> Result<Option<ChangesOut>, PeerError> {
        match self.call(Method::GET, path, None::<&()>).await {
            Ok(out) => Ok(Some(out)),
            Err(PeerError::Status { status, .. })
                if status == StatusCode::GONE || status == StatusCode::NOT_FOUND =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Makes `local` equal to the remote namespace: reads the remote root,
    /// then [`Tree::sync_from`] this peer (through the remote change feed
    /// when its journal covers `local`'s root, else the diff walk). Starts
    /// over (up to three times in all) when the remote root moved during a
    /// diff walk, which writes nothing.
    pub async fn sync_into<S: Writable, L: Layout>(
        &self,
        local: &Tree<S, L>,
    ) -> Result<SyncReport, SyncError<S::Error, PeerError>> {
        let mut attempt = 1;
        loop {
            let root = self.root().await.map_err(SyncError::Peer)?;
            match local.sync_from(self, &root).await {
                Err(SyncError::Peer(PeerError::Status { status, .. }))
                    if status == StatusCode::CONFLICT && attempt < SYNC_ATTEMPTS =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// One request to `{base}/{path}` with `body` as JSON; the answer as `T`.
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, PeerError> {
        let bytes = match body {
            Some(b) => serde_json::to_vec(b).map_err(WireError::from)?,
            None => Vec::new(),
        };
        let url = match path {
            "" => self.base.clone(),
            path => format!("{}/{path}", self.base),
        };
        let uri: Uri = url.parse().map_err(|_| PeerError::Url)?;
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.sent.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(auth) = &self.authorization {
            request = request.header(hyper::header::AUTHORIZATION, auth.clone());
        }
        let request = request
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|_| PeerError::Url)?;
        let response = self.client.request(request).await?;
        let status = response.status();
        let answer = Limited::new(response.into_body(), self.max_response)
            .collect()
            .await
            // `Limited` fails with the body's own error or its limit's.
            .map_err(|e| match e.downcast::<hyper::Error>() {
                Ok(e) => PeerError::Receive(*e),
                Err(_) => PeerError::TooLarge {
                    limit: self.max_response,
                },
            })?
            .to_bytes();
        self.received
            .fetch_add(answer.len() as u64, Ordering::Relaxed);
        if !status.is_success() {
            let message = match serde_json::from_slice::<ErrorOut>(&answer) {
                Ok(e) => e.error,
                Err(_) => String::from_utf8_lossy(&answer).into_owned(),
            };
            return Err(PeerError::Status { status, message });
        }
        Ok(serde_json::from_slice(&answer).map_err(WireError::from)?)
    }
}

impl SyncPeer for HttpPeer {
    type Error = PeerError;

    async fn changes_from(
        &self,
        from: &ComputedNode,
        limit: usize,
    ) -> Result<Option<ChangePage>, PeerError> {
        let path = format!("changes?from={}&limit={limit}", hex::encode(from.hash.0));
        let Some(out) = self.feed(&path).await? else {
            return Ok(None);
        };
        Ok(Some(out.decode()?.0))
    }

    async fn children(
        &self,
        root: &ComputedNode,
        prefixes: &[Position],
    ) -> Result<Vec<[Subtree; 2]>, PeerError> {
        let mut out = Vec::with_capacity(prefixes.len());
        for part in prefixes.chunks(self.max_prefixes) {
            let request = ChildrenIn::new(root, part)?;
            let answer: ChildrenOut = self.call(Method::POST, "children", Some(&request)).await?;
            let pairs = answer.decode()?;
            if pairs.len() != part.len() {
                return Err(PeerError::WrongCount {
                    asked: part.len(),
                    answered: pairs.len(),
                });
            }
            out.extend(pairs);
        }
        Ok(out)
    }
}
