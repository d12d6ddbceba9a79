//! Who may call the universe service, how much, and how it is served: the
//! server's own accept loop ([`ListenConfig`]: TLS with ALPN `h2`, or
//! HTTP/2 with prior knowledge where plain is asked for; its connection
//! caps, handshake and idle timeouts, and a cap on streams per
//! connection), and before every call the gate the HTTP routes pass (in
//! flight, the bearer token in the `authorization` metadata, rates per
//! address and per token, a time limit), its refusals as gRPC statuses.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use ms_smt::store::ForestStore;
use tonic::Status;

use crate::access::AccessConfig;
use crate::gate::{Gate, Refusal, TokenCheck};
use crate::limits::Rate;
use crate::listener::{ListenConfig, Protocol, serve_as};
use crate::server::{ClientAddr, DEFAULT_MAX_IN_FLIGHT, DEFAULT_REQUEST_TIMEOUT, ServeError};

use super::service::UniverseService;

/// What the universe service takes, from whom, and how fast. The
/// defaults ([`ServiceConfig::default`]) are the HTTP server's: public
/// read on, tapd's 100 requests per second with a burst of 10 per client
/// address and per token ([`Rate::TAPD`]), 256 calls in flight, 30 s per
/// call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceConfig {
    /// Public read and how long a token row is trusted.
    pub access: AccessConfig,
    /// Calls per client address (`None`: unlimited).
    pub per_address: Option<Rate>,
    /// Calls per token (`None`: unlimited).
    pub per_token: Option<Rate>,
    /// Calls handled at once; beyond, `UNAVAILABLE`.
    pub max_in_flight: usize,
    /// A call's time limit; beyond, `DEADLINE_EXCEEDED`.
    pub request_timeout: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            access: AccessConfig::default(),
            per_address: Some(Rate::TAPD),
            per_token: Some(Rate::TAPD),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

impl ServiceConfig {
    /// Whether a call without a token may read.
    pub fn public_read(mut self, on: bool) -> Self {
        self.access.public_read = on;
        self
    }

    /// How long a token's row is trusted before it is read again.
    pub fn token_cache(mut self, ttl: Duration) -> Self {
        self.access.token_cache = ttl;
        self
    }

    /// The rate per client address.
    pub fn per_address(mut self, rate: Option<Rate>) -> Self {
        self.per_address = rate;
        self
    }

    /// The rate per token.
    pub fn per_token(mut self, rate: Option<Rate>) -> Self {
        self.per_token = rate;
        self
    }

    /// At most `n` calls handled at once.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// A call's time limit.
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }
}

/// What builds the service's token check once its configuration is
/// known (the token cache's time is part of it).
pub(crate) type TokenSource = Box<dyn FnOnce(&AccessConfig) -> Arc<dyn TokenCheck> + Send + Sync>;

/// The gate and the time limit the layer applies.
struct Gated {
    gate: Gate,
    request_timeout: Duration,
}

/// A refusal of the gate as the status a gRPC client reads (the words are
/// the HTTP server's).
fn refusal_status(refusal: Refusal) -> Status {
    let unauthenticated = matches!(
        refusal,
        Refusal::NoToken | Refusal::MalformedToken | Refusal::InvalidToken
    );
    let limited = matches!(refusal, Refusal::RateLimited(_));
    let words = ServeError::from(refusal).to_string();
    if unauthenticated {
        Status::unauthenticated(words)
    } else if limited {
        Status::resource_exhausted(format!("rate limiter: {words}"))
    } else {
        Status::unavailable(words)
    }
}

/// The layer every call passes: the gate, then the handler within the
/// time limit; the caller as the request's [`Principal`](crate::Principal)
/// extension.
async fn admit(State(gated): State<Arc<Gated>>, mut request: Request, next: Next) -> Response {
    let ip: Option<IpAddr> = request.extensions().get::<ClientAddr>().map(|a| a.0.ip());
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    let admitted = match gated.gate.admit(ip, authorization.as_deref()).await {
        Ok(admitted) => admitted,
        Err(refusal) => return refusal_status(refusal).into_http(),
    };
    request.extensions_mut().insert(admitted.principal.clone());
    let limit = gated.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => Status::deadline_exceeded(ServeError::Timeout(limit).to_string()).into_http(),
    }
}

impl<S> UniverseService<S>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
{
    /// The service behind its gate, as an axum router (HTTP/2 only, as
    /// gRPC is).
    pub fn into_router(mut self) -> axum::Router {
        let (config, tokens) = self.gate_parts();
        let gated = Arc::new(Gated {
            gate: Gate::new(
                tokens,
                config.access.public_read,
                config.per_address,
                config.per_token,
                config.max_in_flight,
            ),
            request_timeout: config.request_timeout,
        });
        tonic::service::Routes::new(self.into_server())
            .into_axum_router()
            .layer(from_fn_with_state(gated, admit))
    }
}

/// Serves `service` on `listener` as `listen` says (TLS with
/// [`TlsIdentity::grpc_server_config`](crate::TlsIdentity::grpc_server_config),
/// or plain HTTP/2 on loopback) until `shutdown` resolves; then stops
/// accepting and lets every open call finish.
pub async fn serve<S, F>(
    listener: tokio::net::TcpListener,
    service: UniverseService<S>,
    listen: ListenConfig,
    shutdown: F,
) -> std::io::Result<()>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
    F: std::future::Future<Output = ()> + Send,
{
    serve_as(
        listener,
        service.into_router(),
        listen,
        Protocol::Http2,
        shutdown,
    )
    .await
}
