//! # ms-smt-server: federation over HTTP
//!
//! A server that exposes the namespaces of a SQL database as JSON routes,
//! and [`HttpPeer`], a remote namespace as a
//! [`SyncPeer`](ms_smt::SyncPeer), so one universe brings
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
//!
//! With feature `grpc`, the module `grpc` speaks tapd's own federation protocol,
//! the read face of the gRPC service `universerpc.Universe`, over a
//! [`Multiverse`](ms_smt::Multiverse).

#![warn(missing_docs)]

// The vocabulary of the crates below, at the paths this crate has always
// used (`crate::key::Key`, `crate::store::TreeStore`, ...).
use ms_smt::{proof, store};
use ms_smt_core::{key, leaf, node, position};
use ms_smt_descent as descent;
use ms_smt_descent::{hash, layout};

pub mod access;
mod client;
mod database;
mod gate;
#[cfg(feature = "grpc")]
pub mod grpc;
mod limits;
mod listener;
pub mod metrics;
mod server;
mod tls;
pub mod tokens;
pub mod wire;

pub use access::{AccessConfig, Principal, Scope};
pub use client::{DEFAULT_MAX_RESPONSE, HttpPeer, PeerError, PeerStats};
pub use database::DatabaseExt;
pub use limits::{MAX_RATE_WAIT, MAX_TRACKED_KEYS, Rate};
pub use listener::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PER_ADDRESS,
    DEFAULT_MAX_STREAMS, ListenConfig, Transport, serve,
};
pub use server::{
    ClientAddr, DEFAULT_BODY_LIMIT, DEFAULT_MAX_CHANGES, DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_LEAVES,
    DEFAULT_MAX_OPEN_NAMESPACES, DEFAULT_REQUEST_TIMEOUT, ServeError, ServerConfig, forest_router,
    router, routes,
};
pub use tls::{TlsError, TlsIdentity, Trust};
pub use tokens::{TOKENS_SCHEMA, TokenRecord, TokenStore};
