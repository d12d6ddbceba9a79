//! tapd's universe federation protocol over gRPC (feature `grpc`): the
//! read face of `universerpc.Universe` that tapd's syncer calls (`Info`,
//! then `AssetRoots` or `QueryAssetRoots`, `AssetLeafKeys`, and
//! `QueryProof` per missing key, each proof checked against the root),
//! plus `MultiverseRoot` and `AssetLeaves`, served from a
//! [`Multiverse`](ms_smt::Multiverse).
//!
//! The wire contract is `proto/universe.proto` (package `universerpc`)
//! and `proto/tapcommon.proto` (package `taprpc`): the reference's
//! messages, field numbers and method names for what is served (checked
//! against taproot-assets' own `.proto` files by the test
//! `grpc_conformance`). Pages are bounded as tapd bounds them
//! ([`MAX_PAGE_SIZE`], [`DEFAULT_PAGE_SIZE`]) and every answer as gRPC's
//! default receive limit ([`MAX_MESSAGE_BYTES`]).
//!
//! Where this differs from tapd, and why:
//!
//! * Pages are in universe-key order (tapd: insertion order); both are
//!   stable, and a peer pages through all of it the same way.
//! * `asset_name` is empty and `AssetLeaf.asset` (field 1) and
//!   `AssetProofResponse.issuance_data` (field 7) are not sent: they are
//!   decoded from the proof by tapd, and this crate does not decode
//!   proofs. tapd's syncer reads neither.
//! * `QueryAssetRoots` of an asset ID does not fall back to the asset's
//!   group (tapd looks the group up in its asset tables).
//! * A group key is not checked to be a point on secp256k1.
//! * `amounts_by_asset_id` of a group sums each asset's leaves (tapd keeps
//!   the last leaf's amount per asset).
//!
//! ```no_run
//! use ms_smt::Multiverse;
//! use ms_smt::store::MemoryStore;
//! use ms_smt_server::grpc::{UniverseService, serve};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let multiverse = Multiverse::new(MemoryStore::new());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:10029").await?;
//! serve(listener, UniverseService::new(multiverse), std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```

pub mod proto;
mod request;
mod service;

pub use request::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
pub use service::{MAX_MESSAGE_BYTES, UniverseService, serve};
