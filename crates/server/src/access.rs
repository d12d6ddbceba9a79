//! Who may do what on the federation server: bearer tokens with scopes over
//! namespace patterns, and public read.
//!
//! A token is `mssmt_` and 64 hex digits: 256 bits from the operating
//! system's randomness. The database keeps only its SHA-256 hash
//! ([`TokenRecord`]); the server looks a presented token up by that hash
//! and compares the hashes in constant time, so it never holds a usable
//! token. A token's [`Grants`] say what it may do: `read`, `write` or
//! `admin` over a namespace pattern (a name, a prefix ending in `*`, or
//! `*` for all), and `metrics` for the server's own figures. `admin`
//! includes `write`, which includes `read`.
//!
//! Without a token a caller is anonymous: it may read when public read is
//! on ([`AccessConfig::public_read`], the default) and do nothing else.
//! Revocation and expiry take effect without a restart: the server
//! remembers a token's row for at most [`AccessConfig::token_cache`]
//! (default 1 s) before it reads it again.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::tokens::{TokenRecord, TokenStore};
use ms_smt_sql::{SqlStore, SqlStoreError};

/// Prefix of every token.
pub const TOKEN_PREFIX: &str = "mssmt_";

/// Random bytes in a token (256 bits).
const TOKEN_BYTES: usize = 32;

/// Default [`AccessConfig::token_cache`]: how long a looked-up token row
/// is trusted before it is read again (the longest a revocation waits).
pub const DEFAULT_TOKEN_CACHE: Duration = Duration::from_secs(1);

/// Token rows remembered at most (beyond: the expired are dropped, then
/// all).
const MAX_CACHED_TOKENS: usize = 4_096;

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Roots, proofs, `children` and the change feed.
    Read,
    /// Inserting and deleting leaves (and reading).
    Write,
    /// Creating namespaces (and writing and reading).
    Admin,
    /// The server's own figures (no namespace data).
    Metrics,
}

impl Scope {
    /// True when a grant of `self` covers `wanted`.
    fn covers(self, wanted: Scope) -> bool {
        match (self, wanted) {
            // Metrics is neither above nor below the namespace scopes.
            (Scope::Metrics, _) | (_, Scope::Metrics) => self == wanted,
            (have, want) => have >= want,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
            Scope::Metrics => "metrics",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The namespaces a grant covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// Every namespace (`*`).
    All,
    /// The namespaces whose names start with this (`assets-*`).
    Prefix(String),
    /// The one namespace of this name.
    Exact(String),
}

impl Pattern {
    /// True when `name` is one of the namespaces this pattern covers.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::All => true,
            Pattern::Prefix(p) => name.starts_with(p.as_str()),
            Pattern::Exact(n) => name == n,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::All => f.write_str("*"),
            Pattern::Prefix(p) => write!(f, "{p}*"),
            Pattern::Exact(n) => f.write_str(n),
        }
    }
}

/// One permission: a scope over a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    /// What it allows.
    pub scope: Scope,
    /// Where (ignored for [`Scope::Metrics`], which is written `metrics:*`).
    pub pattern: Pattern,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.scope, self.pattern)
    }
}

/// Why grants or a token do not parse, or a token could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// A grant is not `SCOPE:PATTERN` with a known scope and a pattern of
    /// namespace characters (optionally ending in `*`).
    #[error(
        "grant {0:?} is not SCOPE:PATTERN (scope read, write, admin or metrics; pattern a \
         namespace name, a prefix ending in '*', or '*')"
    )]
    Grant(String),
    /// No grant given.
    #[error("a token needs at least one grant")]
    NoGrants,
    /// The operating system's randomness failed.
    #[error("no randomness from the operating system: {0}")]
    Random(getrandom::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] SqlStoreError),
}

/// What a token may do: its grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants(Vec<Grant>);

impl Grants {
    /// The grants `list`.
    pub fn new(list: Vec<Grant>) -> Self {
        Grants(list)
    }

    /// Every grant.
    pub fn list(&self) -> &[Grant] {
        &self.0
    }

    /// True when some grant allows `scope` on namespace `ns` (`None`: a
    /// request about no namespace, which only [`Scope::Metrics`] is).
    pub fn allows(&self, scope: Scope, ns: Option<&str>) -> bool {
        self.0.iter().any(|g| {
            g.scope.covers(scope)
                && match ns {
                    Some(name) => g.pattern.matches(name),
                    None => scope == Scope::Metrics,
                }
        })
    }
}

impl fmt::Display for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

/// The longest exact namespace a grant names: room for a tapd universe's
/// namespace (`issuance-` or `transfer-` and 64 hex digits, 73 bytes) and
/// its index (`...-keys`), beyond the HTTP API's own names
/// ([`MAX_NAMESPACE_LEN`](crate::wire::MAX_NAMESPACE_LEN)).
pub const MAX_GRANT_PATTERN_LEN: usize = 128;

fn pattern_chars(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl FromStr for Grant {
    type Err = AccessError;

    fn from_str(s: &str) -> Result<Self, AccessError> {
        let bad = || AccessError::Grant(s.to_owned());
        let (scope, pattern) = s.trim().split_once(':').ok_or_else(bad)?;
        let scope = match scope {
            "read" => Scope::Read,
            "write" => Scope::Write,
            "admin" => Scope::Admin,
            "metrics" => Scope::Metrics,
            _ => return Err(bad()),
        };
        let pattern = match pattern {
            "*" => Pattern::All,
            p if scope == Scope::Metrics => return Err(AccessError::Grant(p.to_owned())),
            p => match p.strip_suffix('*') {
                Some(prefix) if !prefix.is_empty() && pattern_chars(prefix) => {
                    Pattern::Prefix(prefix.to_owned())
                }
                None if !p.is_empty() && p.len() <= MAX_GRANT_PATTERN_LEN && pattern_chars(p) => {
                    Pattern::Exact(p.to_owned())
                }
                _ => return Err(bad()),
            },
        };
        Ok(Grant { scope, pattern })
    }
}

impl FromStr for Grants {
    type Err = AccessError;

    /// Comma-separated grants: `read:*,write:assets-*`.
    fn from_str(s: &str) -> Result<Self, AccessError> {
        let list = s
            .split(',')
            .filter(|g| !g.trim().is_empty())
            .map(Grant::from_str)
            .collect::<Result<Vec<_>, _>>()?;
        if list.is_empty() {
            return Err(AccessError::NoGrants);
        }
        Ok(Grants(list))
    }
}

/// A token's secret, as the holder sends it. Its `Debug` shows nothing of
/// it; [`expose`](Self::expose) is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(..)")
    }
}

impl TokenSecret {
    /// A new token: 256 bits of the operating system's randomness.
    pub fn mint() -> Result<Self, AccessError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(AccessError::Random)?;
        Ok(TokenSecret(format!("{TOKEN_PREFIX}{}", hex::encode(bytes))))
    }

    /// A token as a client was given it (any text: a malformed one just
    /// matches no stored hash).
    pub fn new(secret: impl Into<String>) -> Self {
        TokenSecret(secret.into())
    }

    /// The secret, to send or to print once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SHA-256 hash the database keeps.
    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }
}

/// A token's public id: the first 8 bytes of its hash, in hex.
pub fn token_id(hash: &[u8; 32]) -> String {
    hex::encode(&hash[..8])
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A token just made: its stored record and its secret (shown once).
#[derive(Debug)]
pub struct IssuedToken {
    /// What the database holds.
    pub record: TokenRecord,
    /// The secret, which nothing keeps.
    pub secret: TokenSecret,
}

/// Makes a token with `grants`, labelled `label`, expiring at `expires_at`
/// (seconds since the Unix epoch; `None`: never), and stores its hash in
/// `store`'s database.
pub async fn issue_token<C: ms_smt_sql::Dialect>(
    store: &SqlStore<C>,
    label: &str,
    grants: &Grants,
    expires_at: Option<i64>,
) -> Result<IssuedToken, AccessError> {
    if grants.0.is_empty() {
        return Err(AccessError::NoGrants);
    }
    let secret = TokenSecret::mint()?;
    let hash = secret.hash();
    let record = TokenRecord {
        id: token_id(&hash),
        hash,
        label: label.to_owned(),
        grants: grants.to_string(),
        created_at: unix_now(),
        expires_at,
        revoked_at: None,
    };
    TokenStore::open(store).await?.insert(&record).await?;
    Ok(IssuedToken { record, secret })
}

/// Constant-time equality of two hashes.
fn same_hash(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// How the server decides who may do what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessConfig {
    /// Whether a request without a token may read (default true). Off,
    /// every request needs a token with a read scope over its namespace.
    pub public_read: bool,
    /// How long a token's row is trusted before it is read again (default
    /// [`DEFAULT_TOKEN_CACHE`]); the longest a revocation or expiry waits
    /// to take effect. Zero reads the row on every request.
    pub token_cache: Duration,
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            public_read: true,
            token_cache: DEFAULT_TOKEN_CACHE,
        }
    }
}

/// Who sent a request.
#[derive(Debug, Clone)]
pub enum Principal {
    /// No token (allowed only where public read is on, and only to read).
    Anonymous,
    /// A valid token.
    Token {
        /// Its public id.
        id: Arc<str>,
        /// What it may do.
        grants: Arc<Grants>,
    },
}

impl Principal {
    /// True when this caller may do `scope` on namespace `ns` (`None`: a
    /// request about no namespace). The anonymous caller only reads, and
    /// only reaches a handler where public read is on.
    pub fn allows(&self, scope: Scope, ns: Option<&str>) -> bool {
        match self {
            Principal::Anonymous => scope == Scope::Read && ns.is_some(),
            Principal::Token { grants, .. } => grants.allows(scope, ns),
        }
    }
}

/// Why a presented token was not accepted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TokenRefusal {
    /// The `Authorization` header is not `Bearer <token>`.
    #[error("the Authorization header must be 'Bearer <token>'")]
    Malformed,
    /// No such token, revoked, or expired (one answer for all three).
    #[error("the token is not valid (unknown, revoked or expired)")]
    Invalid,
    /// The token table could not be read.
    #[error("the access check failed: {0}")]
    Store(#[from] SqlStoreError),
}

/// What a token row says: id, grants, expiry, revocation.
type Row = (Arc<str>, Arc<Grants>, Option<i64>, Option<i64>);

/// A token row as last read (`None`: no such token), and when.
struct Cached {
    record: Option<Row>,
    read_at: Instant,
}

/// The server's token checker: looks tokens up by hash in the database,
/// remembering each row for at most the configured time.
pub(crate) struct Authority<C: ms_smt_sql::Dialect> {
    store: SqlStore<C>,
    /// The token table, migrated on the first lookup.
    tokens: tokio::sync::OnceCell<TokenStore<C>>,
    ttl: Duration,
    cache: Mutex<HashMap<[u8; 32], Cached>>,
}

impl<C: ms_smt_sql::Dialect> Authority<C> {
    /// A checker over `store`'s token table.
    pub fn new(store: SqlStore<C>, config: &AccessConfig) -> Self {
        Authority {
            store,
            tokens: tokio::sync::OnceCell::new(),
            ttl: config.token_cache,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The caller whose `Authorization` header value is `header`.
    pub async fn principal(&self, header: &[u8]) -> Result<Principal, TokenRefusal> {
        let text = std::str::from_utf8(header).map_err(|_| TokenRefusal::Malformed)?;
        let (kind, token) = text.trim().split_once(' ').ok_or(TokenRefusal::Malformed)?;
        if !kind.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
            return Err(TokenRefusal::Malformed);
        }
        let hash = TokenSecret::new(token.trim()).hash();
        let now = Instant::now();
        let cached = self.lock().get(&hash).and_then(|c| {
            (now.saturating_duration_since(c.read_at) < self.ttl).then(|| c.record.clone())
        });
        let record = match cached {
            Some(record) => record,
            None => {
                let tokens = self
                    .tokens
                    .get_or_try_init(|| TokenStore::open(&self.store))
                    .await?;
                let row = tokens.by_hash(&hash).await?;
                let record = row.filter(|r| same_hash(&r.hash, &hash)).map(|r| {
                    // Grants this crate wrote always parse; a row edited by
                    // hand into something else grants nothing.
                    let grants = r.grants.parse().unwrap_or_default();
                    (
                        Arc::<str>::from(r.id),
                        Arc::new(grants),
                        r.expires_at,
                        r.revoked_at,
                    )
                });
                self.remember(hash, record.clone(), now);
                record
            }
        };
        let Some((id, grants, expires_at, revoked_at)) = record else {
            return Err(TokenRefusal::Invalid);
        };
        let unix = unix_now();
        if revoked_at.is_some() || expires_at.is_some_and(|at| at <= unix) {
            return Err(TokenRefusal::Invalid);
        }
        Ok(Principal::Token { id, grants })
    }

    fn remember(&self, hash: [u8; 32], record: Option<Row>, now: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED_TOKENS {
            cache.retain(|_, c| now.saturating_duration_since(c.read_at) < self.ttl);
            if cache.len() >= MAX_CACHED_TOKENS {
                cache.clear();
            }
        }
        cache.insert(
            hash,
            Cached {
                record,
                read_at: now,
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_parse_print_and_allow() {
        let g: Grants = "read:*, write:assets-*,admin:one,metrics:*"
            .parse()
            .expect("parse");
        assert_eq!(g.to_string(), "read:*,write:assets-*,admin:one,metrics:*");
        assert!(g.allows(Scope::Read, Some("anything")));
        assert!(g.allows(Scope::Write, Some("assets-1")));
        assert!(!g.allows(Scope::Write, Some("asset")));
        assert!(!g.allows(Scope::Admin, Some("assets-1")));
        assert!(g.allows(Scope::Admin, Some("one")));
        assert!(g.allows(Scope::Write, Some("one")), "admin includes write");
        assert!(g.allows(Scope::Metrics, None));
        let read: Grants = "read:a".parse().expect("parse");
        assert!(!read.allows(Scope::Metrics, None));
        assert!(!read.allows(Scope::Write, Some("a")));
        assert!(!read.allows(Scope::Read, Some("b")));
        let metrics: Grants = "metrics:*".parse().expect("parse");
        assert!(!metrics.allows(Scope::Read, Some("a")));
        for bad in [
            "",
            "read",
            "read:",
            "owner:*",
            "read:a/b",
            "read:*x",
            "metrics:a",
            "write:a b",
        ] {
            assert!(bad.parse::<Grants>().is_err(), "{bad:?}");
        }
        // An exact name up to MAX_GRANT_PATTERN_LEN: a tapd universe's
        // namespace fits.
        let universe = format!("issuance-{}", "ab".repeat(32));
        let exact: Grants = format!("write:{universe}").parse().expect("parse");
        assert!(exact.allows(Scope::Write, Some(&universe)));
        assert!(!exact.allows(Scope::Write, Some(&format!("transfer-{}", "ab".repeat(32)))));
        let longest = "n".repeat(MAX_GRANT_PATTERN_LEN);
        assert!(format!("read:{longest}").parse::<Grants>().is_ok());
        assert!(format!("read:{longest}n").parse::<Grants>().is_err());
    }

    #[test]
    fn tokens_are_random_and_hide_in_debug() {
        let a = TokenSecret::mint().expect("mint");
        let b = TokenSecret::mint().expect("mint");
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), TOKEN_PREFIX.len() + 64);
        assert!(!format!("{a:?}").contains(&a.expose()[TOKEN_PREFIX.len()..]));
        assert_eq!(token_id(&a.hash()).len(), 16);
        assert!(same_hash(&a.hash(), &a.hash()));
        assert!(!same_hash(&a.hash(), &b.hash()));
    }
}
