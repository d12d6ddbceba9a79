//! tapd's universe federation protocol over gRPC (feature `grpc`): the
//! read face of `universerpc.Universe` that tapd's syncer calls (`Info`,
//! then `AssetRoots` or `QueryAssetRoots`, `AssetLeafKeys`, and
//! `QueryProof` per missing key, each proof checked against the root),
//! plus `MultiverseRoot`, `AssetLeaves` and `UniverseStats`, and
//! `InsertProof` (the push a
//! tapd node makes after a mint or transfer) for callers whose token has
//! the write scope, all served from a [`Multiverse`](ms_smt::Multiverse).
//!
//! The wire contract is `proto/universe.proto` (package `universerpc`)
//! and `proto/tapcommon.proto` (package `taprpc`): the reference's
//! messages, field numbers and method names for what is served (checked
//! against taproot-assets' own `.proto` files by the test
//! `grpc_conformance`). Pages are bounded as tapd bounds them
//! ([`MAX_PAGE_SIZE`], [`DEFAULT_PAGE_SIZE`]) and every answer as gRPC's
//! default receive limit ([`MAX_MESSAGE_BYTES`]).
//!
//! [`serve`] runs the service on its own listener, over HTTP/2: TLS with
//! ALPN `h2` ([`TlsIdentity::grpc_server_config`](crate::TlsIdentity::grpc_server_config);
//! tapd's own client skips certificate checks, so a self-signed identity
//! serves it) or plain TCP on loopback, with the HTTP face's connection
//! caps ([`ListenConfig`](crate::ListenConfig)) and its gate: the same
//! access rules, tokens, per-address and per-token rates and in-flight cap
//! ([`ServiceConfig`]), refusals in gRPC's words (`UNAUTHENTICATED`,
//! `PERMISSION_DENIED`, `RESOURCE_EXHAUSTED`, `UNAVAILABLE`).
//!
//! `QueryProof` calls that arrive while a proof read is running wait and
//! are answered together by the next one
//! ([`ProofReader`](ms_smt::multiverse::ProofReader): one read of the
//! roots and one of the paths for the whole batch;
//! [`UniverseService::with_proof_reads`] sets its bounds).
//!
//! [`UniversePeer`] is the other side: it mirrors a server that speaks
//! the protocol (this one, or a tapd node) into a local multiverse,
//! fetching only universes whose root differs and, within one, only the
//! leaves whose hash differs, each checked against the server's root
//! before it is written.
//!
//! Where this differs from tapd, and why:
//!
//! * Pages are in universe-key order (tapd: insertion order); both are
//!   stable, and a peer pages through all of it the same way.
//! * `asset_name` is empty and `AssetLeaf.asset` (field 1) and
//!   `AssetProofResponse.issuance_data` (field 7) are not sent: tapd
//!   decodes them from its asset tables. tapd's syncer reads neither.
//! * `QueryAssetRoots` of an asset ID does not fall back to the asset's
//!   group (tapd looks the group up in its asset tables).
//! * A group key is not checked to be a point on secp256k1.
//! * `amounts_by_asset_id` of a group sums each asset's leaves (tapd keeps
//!   the last leaf's amount per asset).
//! * `InsertProof` checks that the proof's last state is the leaf named by
//!   the key (asset ID or group key, script key, outpoint, proof type) and
//!   stores it; it does not verify the proof's chain (tapd does, against
//!   its chain backend). It needs a write token: tapd's own push sends
//!   none, so a stock tapd pushes only to servers that take it anonymously.
//! * A burn's leaf sums 1 (tapd: the burned amount).
//! * `UniverseStats` counts universes, group universes and the leaves of
//!   every universe (tapd: universe roots, group roots, and the proof
//!   insertions its event log holds); `num_total_syncs` is 0, as this
//!   server logs no sync events. `QueryAssetStats` and `QueryEvents`
//!   (asset names, types, genesis heights, daily events: tapd's asset and
//!   event tables) answer `UNIMPLEMENTED`.
//!
//! ```no_run
//! use ms_smt::Multiverse;
//! use ms_smt::store::MemoryStore;
//! use ms_smt_server::ListenConfig;
//! use ms_smt_server::grpc::{UniverseService, serve};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let multiverse = Multiverse::new(MemoryStore::new());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:10029").await?;
//! let service = UniverseService::new(multiverse);
//! serve(listener, service, ListenConfig::plain(), std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```

mod admission;
mod connect;
mod insert;
mod mirror;
pub mod proto;
mod request;
mod service;

pub use admission::{ServiceConfig, serve};
pub use mirror::{
    BadAnswer, Call, ConnectError, MirrorConfig, MirrorError, MirrorReport, UniversePeer,
};
pub use request::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
pub use service::{MAX_MESSAGE_BYTES, UniverseService};
