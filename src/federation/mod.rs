//! Federation over HTTP (feature `http`): a server that exposes the
//! namespaces of a SQL database as JSON routes, and [`HttpPeer`], a remote
//! namespace as a [`SyncPeer`](crate::SyncPeer), so one universe brings
//! its trees level with another's by fetching only the subtrees that
//! differ, each checked against its parent's hash.
//!
//! ```text
//!   local tree ── sync_from ──► HttpPeer ── POST /v1/{ns}/children ──► router
//!        ▲                          │                                     │
//!        └── insert_many (once) ◄───┘ checked pairs        View::children ┘
//! ```
//!
//! Exposed to a network, the server denies by default: without access
//! configuration it serves reads only; tokens ([`access`]) grant
//! `read`, `write` and `admin` over namespace patterns; it speaks TLS
//! ([`TlsIdentity`], [`ListenConfig::tls`]) unless told to speak plain
//! HTTP; and it bounds what one client can cost (connections, header and
//! idle timeouts in [`ListenConfig`]; rate limits, body, leaf and work
//! caps in [`ServerConfig`]).

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod access;
mod client;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod database;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod limits;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod listener;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod server;
mod tls;
pub mod wire;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use access::{AccessConfig, Principal, Scope};
pub use client::{DEFAULT_MAX_RESPONSE, HttpPeer, PeerError, PeerStats};
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub use database::Database;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use limits::{MAX_RATE_WAIT, MAX_TRACKED_KEYS, Rate};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use listener::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PER_ADDRESS,
    ListenConfig, Transport, serve,
};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use server::{
    ClientAddr, DEFAULT_BODY_LIMIT, DEFAULT_MAX_CHANGES, DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_LEAVES,
    DEFAULT_MAX_OPEN_NAMESPACES, DEFAULT_REQUEST_TIMEOUT, ServeError, ServerConfig, forest_router,
    router, routes,
};
pub use tls::{TlsError, TlsIdentity, Trust};
