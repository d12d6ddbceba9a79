//! The admission every request passes before its handler, on either face
//! of the server (the HTTP routes and the gRPC universe service): a cap on
//! requests in flight, the caller's [`Principal`] from its bearer token,
//! and rate limits per client address and per token. Each face says a
//! [`Refusal`] in its own words (an HTTP status, a gRPC status).

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

use super::access::{Authority, Principal, TokenRefusal};
use super::limits::{Rate, RateLimiter};
use ms_smt_sql::{Dialect, SqlStoreError};

/// A boxed future borrowing `'a`.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What looks a presented `Authorization` value up: the database's tokens
/// ([`Authority`]) or, for a face without a token table, `NoTokens`.
pub(crate) trait TokenCheck: Send + Sync {
    /// The caller whose `Authorization` header value is `header`.
    fn principal<'a>(&'a self, header: &'a [u8]) -> BoxFuture<'a, Result<Principal, TokenRefusal>>;
}

impl<C: Dialect> TokenCheck for Authority<C> {
    fn principal<'a>(&'a self, header: &'a [u8]) -> BoxFuture<'a, Result<Principal, TokenRefusal>> {
        Box::pin(Authority::principal(self, header))
    }
}

/// No token table: every presented token is unknown.
#[cfg(feature = "grpc")]
pub(crate) struct NoTokens;

#[cfg(feature = "grpc")]
impl TokenCheck for NoTokens {
    fn principal<'a>(&'a self, _: &'a [u8]) -> BoxFuture<'a, Result<Principal, TokenRefusal>> {
        Box::pin(async { Err(TokenRefusal::Invalid) })
    }
}

/// Why the gate turned a request away.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// All the requests the server takes at once are in flight.
    Busy,
    /// The address or token is over its rate; its turn comes in this long.
    RateLimited(Duration),
    /// Public read is off and the request carries no token.
    NoToken,
    /// The `Authorization` value is not `Bearer <token>`.
    MalformedToken,
    /// The token is unknown, revoked or expired.
    InvalidToken,
    /// The token table could not be read.
    AccessCheck(SqlStoreError),
}

/// A request the gate let through: its caller, and its place among the
/// requests in flight (given back on drop).
pub(crate) struct Admitted<'a> {
    /// Who sent it.
    pub principal: Principal,
    _permit: SemaphorePermit<'a>,
}

/// The gate: one per server face.
pub(crate) struct Gate {
    tokens: Arc<dyn TokenCheck>,
    per_address: Option<RateLimiter<Option<IpAddr>>>,
    per_token: Option<RateLimiter<Arc<str>>>,
    in_flight: Semaphore,
    public_read: bool,
}

impl Gate {
    /// A gate looking tokens up with `tokens`, at most `max_in_flight`
    /// requests at once, with the given rates.
    pub fn new(
        tokens: Arc<dyn TokenCheck>,
        public_read: bool,
        per_address: Option<Rate>,
        per_token: Option<Rate>,
        max_in_flight: usize,
    ) -> Self {
        Gate {
            tokens,
            per_address: per_address.map(RateLimiter::new),
            per_token: per_token.map(RateLimiter::new),
            in_flight: Semaphore::new(max_in_flight.max(1)),
            public_read,
        }
    }

    /// Lets a request from `ip` carrying `authorization` through, or says
    /// why not. A request waits for its rate's turn when that comes
    /// within [`MAX_RATE_WAIT`](super::MAX_RATE_WAIT).
    pub async fn admit(
        &self,
        ip: Option<IpAddr>,
        authorization: Option<&[u8]>,
    ) -> Result<Admitted<'_>, Refusal> {
        let permit = self.in_flight.try_acquire().map_err(|_| Refusal::Busy)?;
        let now = Instant::now();
        let principal = match authorization {
            Some(value) => {
                // An address spending its budget on bad tokens is refused
                // before its next token is looked up.
                if let Some(limiter) = &self.per_address
                    && !limiter.has(&ip, now)
                {
                    return Err(Refusal::RateLimited(Duration::from_millis(10)));
                }
                match self.tokens.principal(value).await {
                    Ok(principal) => principal,
                    Err(refusal) => {
                        if let Some(limiter) = &self.per_address {
                            let _ = limiter.take(&ip, now);
                        }
                        return Err(match refusal {
                            TokenRefusal::Malformed => Refusal::MalformedToken,
                            TokenRefusal::Invalid => Refusal::InvalidToken,
                            TokenRefusal::Store(e) => Refusal::AccessCheck(e),
                        });
                    }
                }
            }
            None => {
                if let Some(limiter) = &self.per_address {
                    wait_turn(limiter, &ip, now).await?;
                }
                if !self.public_read {
                    return Err(Refusal::NoToken);
                }
                Principal::Anonymous
            }
        };
        if let (Some(limiter), Principal::Token { id, .. }) = (&self.per_token, &principal) {
            wait_turn(limiter, id, now).await?;
        }
        Ok(Admitted {
            principal,
            _permit: permit,
        })
    }
}

/// Takes `key`'s turn in `limiter`, sleeping until it when it is near.
async fn wait_turn<K: std::hash::Hash + Eq + Clone>(
    limiter: &RateLimiter<K>,
    key: &K,
    now: Instant,
) -> Result<(), Refusal> {
    match limiter.take(key, now) {
        Ok(wait) if !wait.is_zero() => {
            tokio::time::sleep(wait).await;
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(retry) => Err(Refusal::RateLimited(retry)),
    }
}
