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

mod client;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod database;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod server;
pub mod wire;

pub use client::{DEFAULT_MAX_RESPONSE, HttpPeer, PeerError, PeerStats};
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub use database::Database;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use server::{
    DEFAULT_BODY_LIMIT, DEFAULT_MAX_CHANGES, ServeError, ServerConfig, forest_router, router, serve,
};
