//! The `universerpc.Universe` service over a [`Multiverse`].

use std::collections::HashMap;
use std::sync::Arc;

use ms_smt::multiverse::{
    KeyRecord, Multiverse, MultiverseError, PageQuery, ProofReader, ProofType, Universe, UniverseId,
};
use ms_smt::store::{ForestStore, MemoryStore};
use ms_smt::{CompactedTree, ComputedNode, Key};
use ms_smt_sql::{Dialect, SqlStore};
use prost::Message;
use tonic::{Request, Response, Status};

use crate::access::{Authority, Principal, Scope};
use crate::gate::{NoTokens, TokenCheck};
use crate::server::{ServeError, who};

use super::admission::{ServiceConfig, TokenSource};
use super::insert::leaf_from_proof;
use super::proto::universerpc::universe_server::{self, UniverseServer};
use super::proto::universerpc::{self as rpc};
use super::request::{self, RequestId};

/// The largest message the service sends or accepts: gRPC's default
/// receive limit (4 MiB), which tapd's client keeps. Paged answers stop
/// short of it and say `has_more`; a single proof above it is refused.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// What a paged answer leaves of [`MAX_MESSAGE_BYTES`] for framing.
const MESSAGE_SLACK: usize = 64 << 10;

/// tapd's `universe.ErrNoUniverseProofFound` (`universe/interface.go`).
const NO_PROOF: &str = "no universe proof found";

/// tapd's `tapdb.ErrNoMultiverseRoot` (`tapdb/multiverse.go`).
const NO_MULTIVERSE_ROOT: &str = "no multiverse root found";

/// The universe service: tapd's `universerpc.Universe` over a
/// [`Multiverse`]: the read face tapd's syncer calls (`Info`,
/// `MultiverseRoot`, `AssetRoots`, `QueryAssetRoots`, `AssetLeafKeys`,
/// `AssetLeaves`, `QueryProof`), `UniverseStats`, and `InsertProof` for a
/// caller whose token may write the universe
/// ([`with_tokens`](Self::with_tokens); without a token table no call
/// writes). Every other method of the reference's
/// service answers `UNIMPLEMENTED`.
///
/// Errors a request causes carry tapd's status (`UNKNOWN`, what grpc-go
/// gives a handler's plain error) and tapd's message; a store failure is
/// `INTERNAL`, and writers that kept moving the trees under a read
/// `UNAVAILABLE` (try again). The gate's refusals are `UNAUTHENTICATED`
/// (no, a malformed, or an invalid token), `PERMISSION_DENIED` (a token
/// without the scope), `RESOURCE_EXHAUSTED` (over a rate) and
/// `UNAVAILABLE` (busy).
pub struct UniverseService<S: ForestStore> {
    multiverse: Multiverse<S>,
    /// `QueryProof`s of concurrent calls, read together.
    proofs: ProofReader<S>,
    runtime_id: i64,
    config: ServiceConfig,
    tokens: Option<TokenSource>,
}

impl<S: ForestStore + std::fmt::Debug> std::fmt::Debug for UniverseService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UniverseService")
            .field("multiverse", &self.multiverse)
            .field("runtime_id", &self.runtime_id)
            .field("config", &self.config)
            .field("tokens", &self.tokens.is_some())
            .finish()
    }
}

/// A request's universe ID, or the status tapd answers a malformed one with
/// (the same words in every method that takes one).
fn universe_id(id: Option<&rpc::Id>) -> Result<request::RequestId, Status> {
    request::universe_id(id).map_err(|e| Status::unknown(format!("unmarshal universe id: {e}")))
}

/// A request's page, or tapd's refusal of it (the same words in every
/// paged method).
fn page(offset: i32, limit: i32) -> Result<(u64, u64), Status> {
    request::page(offset, limit).map_err(|e| Status::unknown(e.to_string()))
}

/// An operation's store error as a status: a write whose sums would
/// overflow is the request's fault (tapd's `mssmt.ErrIntegerOverflow`, a
/// plain handler error: `UNKNOWN`), writers that kept moving the trees are
/// `UNAVAILABLE` (try again), anything else is the server's (`INTERNAL`).
fn store_error<E: std::error::Error + 'static>(e: MultiverseError<E>) -> Status {
    match e {
        MultiverseError::Tree(ref tree) if tree.is_overflow() => Status::unknown(e.to_string()),
        MultiverseError::Contention { .. } => Status::unavailable(e.to_string()),
        other => Status::internal(other.to_string()),
    }
}

/// The `PERMISSION_DENIED` of a caller that may not write `namespace`.
fn forbidden(principal: &Principal, namespace: String) -> Status {
    Status::permission_denied(
        ServeError::Forbidden {
            who: who(principal),
            scope: Scope::Write,
            namespace,
        }
        .to_string(),
    )
}

/// tapd's `marshalMssmtNode`: the sum as Go's `int64(uint64)` (wrapping).
fn node(root: &ComputedNode) -> rpc::MerkleSumNode {
    rpc::MerkleSumNode {
        root_hash: root.hash.0.to_vec(),
        root_sum: i64::from_ne_bytes(root.sum.to_ne_bytes()),
    }
}

/// The encoded length of one repeated or map entry of `len` bytes.
fn entry_len(len: usize) -> usize {
    len + prost::length_delimiter_len(len) + 1
}

impl<S> UniverseService<S>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
{
    /// The service over `multiverse`, with a random runtime ID.
    pub fn new(multiverse: Multiverse<S>) -> Self {
        let mut bytes = [0u8; 8];
        // tapd's runtime ID is a non-negative pseudo-random int64; without
        // OS randomness, the clock's nanoseconds stand in.
        if getrandom::fill(&mut bytes).is_err() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            bytes = u64::try_from(nanos & u128::from(u64::MAX))
                .unwrap_or(0)
                .to_le_bytes();
        }
        let runtime_id = i64::from_le_bytes(bytes) & i64::MAX;
        UniverseService {
            proofs: ProofReader::new(multiverse.clone()),
            multiverse,
            runtime_id,
            config: ServiceConfig::default(),
            tokens: None,
        }
    }

    /// This service taking calls as `config` says.
    pub fn with_config(mut self, config: ServiceConfig) -> Self {
        self.config = config;
        self
    }

    /// This service checking bearer tokens against the token table of
    /// `store`'s database (the HTTP server's, [`TokenStore`](crate::TokenStore)):
    /// `InsertProof` needs `write` over the universe's namespace, and
    /// with public read off every call needs `read`.
    pub fn with_tokens<C: Dialect>(mut self, store: SqlStore<C>) -> Self {
        self.tokens = Some(Box::new(move |access| {
            Arc::new(Authority::new(store, access)) as Arc<dyn TokenCheck>
        }));
        self
    }

    /// What the gate needs: the configuration and the token check.
    pub(crate) fn gate_parts(&mut self) -> (ServiceConfig, Arc<dyn TokenCheck>) {
        let tokens = match self.tokens.take() {
            Some(make) => make(&self.config.access),
            None => Arc::new(NoTokens),
        };
        (self.config, tokens)
    }

    /// This service reading the proofs of concurrent `QueryProof` calls
    /// in at most `reads` reads at once of at most `batch` proofs each
    /// ([`ProofReader::with_bounds`]; the defaults are
    /// [`default_proof_reads`](ms_smt::multiverse::default_proof_reads)
    /// and [`DEFAULT_PROOF_BATCH`](ms_smt::multiverse::DEFAULT_PROOF_BATCH)).
    pub fn with_proof_reads(mut self, reads: usize, batch: usize) -> Self {
        self.proofs = ProofReader::with_bounds(self.multiverse.clone(), reads, batch);
        self
    }

    /// The reader of `QueryProof`'s proofs (its [`stats`](ProofReader::stats)
    /// say how many calls each read answered).
    pub fn proof_reader(&self) -> &ProofReader<S> {
        &self.proofs
    }

    /// This service answering `Info` with `runtime_id`.
    pub fn with_runtime_id(mut self, runtime_id: i64) -> Self {
        self.runtime_id = runtime_id;
        self
    }

    /// The runtime ID `Info` answers.
    pub fn runtime_id(&self) -> i64 {
        self.runtime_id
    }

    /// The service as a tonic server, messages bounded by
    /// [`MAX_MESSAGE_BYTES`] both ways.
    pub fn into_server(self) -> UniverseServer<Self> {
        UniverseServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// The root of `universe` as tapd marshals it (`marshalUniverseRoot`),
    /// with amounts per asset ID when asked for.
    async fn universe_root(
        &self,
        universe: &Universe,
        root: &ComputedNode,
        with_amounts: bool,
    ) -> Result<rpc::UniverseRoot, Status> {
        let mut amounts = HashMap::new();
        if with_amounts {
            match universe.id {
                // tapd: "for non-grouped assets, there's exactly one member,
                // the asset itself" (the root sum).
                UniverseId::Asset(id) => {
                    amounts.insert(hex::encode(id), root.sum);
                }
                UniverseId::Group(_) => {
                    let by_asset = self
                        .multiverse
                        .amounts_by_asset_id(universe)
                        .await
                        .map_err(store_error)?;
                    amounts.extend(by_asset.into_iter().map(|(id, sum)| (hex::encode(id), sum)));
                }
            }
        }
        Ok(rpc::UniverseRoot {
            id: Some(request::marshal_id(universe)),
            mssmt_root: Some(node(root)),
            asset_name: String::new(),
            amounts_by_asset_id: amounts,
        })
    }
}

/// tapd's `marshalUniverseProofLeaf`: the leaf of `req` with its proofs,
/// refused when it would not fit in a message.
fn proof_response(
    req: rpc::UniverseKey,
    proof: &ms_smt::multiverse::UniverseProof,
    key_hex: &str,
) -> Result<rpc::AssetProofResponse, Status> {
    let response = rpc::AssetProofResponse {
        universe_root: Some(rpc::UniverseRoot {
            id: req.id.clone(),
            mssmt_root: Some(node(&proof.universe_root)),
            asset_name: String::new(),
            amounts_by_asset_id: HashMap::new(),
        }),
        req: Some(req),
        universe_inclusion_proof: proof.universe_proof.to_bytes(),
        asset_leaf: Some(rpc::AssetLeaf {
            proof: proof.leaf.value().to_vec(),
        }),
        multiverse_root: Some(node(&proof.multiverse_root)),
        multiverse_inclusion_proof: proof.multiverse_proof.to_bytes(),
    };
    if response.encoded_len() > MAX_MESSAGE_BYTES - MESSAGE_SLACK {
        return Err(Status::resource_exhausted(format!(
            "the proof of leaf {key_hex} is {} bytes, more than a message may carry",
            response.encoded_len()
        )));
    }
    Ok(response)
}

#[tonic::async_trait]
impl<S> universe_server::Universe for UniverseService<S>
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
{
    async fn multiverse_root(
        &self,
        request: Request<rpc::MultiverseRootRequest>,
    ) -> Result<Response<rpc::MultiverseRootResponse>, Status> {
        let req = request.into_inner();
        let proof_type = match request::proof_type(req.proof_type) {
            Err(e) => {
                return Err(Status::unknown(format!(
                    "invalid req.proof_type ({}): {e}",
                    req.proof_type
                )));
            }
            Ok(None) => return Err(Status::unknown("req.proof_type must be specified")),
            Ok(Some(proof_type)) => proof_type,
        };
        let mut ids = Vec::with_capacity(req.specific_ids.len());
        for (idx, rpc_id) in req.specific_ids.iter().enumerate() {
            let id = request::universe_id(Some(rpc_id))
                .map_err(|e| Status::unknown(format!("parse req.specific_ids[{idx}]: {e}")))?;
            let id_type = id.proof_type.unwrap_or(proof_type);
            if id_type != proof_type {
                return Err(Status::unknown(format!(
                    "req.specific_ids[{idx}].proof_type={id_type} conflicts with \
                     req.proof_type={proof_type}"
                )));
            }
            ids.push(id.id);
        }
        let root = if ids.is_empty() {
            let root = self
                .multiverse
                .multiverse_root(proof_type)
                .await
                .map_err(store_error)?;
            if root == ComputedNode::empty_root() {
                return Err(Status::unknown(format!(
                    "fetch root (proof_type={proof_type}, filter_count=0): {NO_MULTIVERSE_ROOT}"
                )));
            }
            root
        } else {
            // tapd's Archive.MultiverseRoot: the multiverse leaves of the
            // IDs, in a tree of their own.
            let leaves = self
                .multiverse
                .multiverse_leaves(proof_type, &ids)
                .await
                .map_err(store_error)?;
            let tree = CompactedTree::new(MemoryStore::new());
            tree.insert_many(leaves.into_iter().map(|(id, leaf)| (Key(id.bytes()), leaf)))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
        };
        Ok(Response::new(rpc::MultiverseRootResponse {
            multiverse_root: Some(node(&root)),
        }))
    }

    async fn asset_roots(
        &self,
        request: Request<rpc::AssetRootRequest>,
    ) -> Result<Response<rpc::AssetRootResponse>, Status> {
        let req = request.into_inner();
        let (offset, limit) = page(req.offset, req.limit)?;
        let query = PageQuery {
            offset,
            limit,
            descending: request::descending(req.direction),
        };
        let page = self
            .multiverse
            .universes(query)
            .await
            .map_err(store_error)?;
        let mut has_more = page.has_more(&query);
        let mut budget = MAX_MESSAGE_BYTES - MESSAGE_SLACK;
        let mut universe_roots = HashMap::with_capacity(page.items.len());
        for (universe, root) in &page.items {
            let key = universe.namespace();
            let value = self
                .universe_root(universe, root, req.with_amounts_by_id)
                .await?;
            let len = entry_len(entry_len(key.len()) + entry_len(value.encoded_len()));
            if len > budget {
                has_more = true;
                break;
            }
            budget -= len;
            universe_roots.insert(key, value);
        }
        Ok(Response::new(rpc::AssetRootResponse {
            universe_roots,
            has_more,
        }))
    }

    async fn query_asset_roots(
        &self,
        request: Request<rpc::AssetRootQuery>,
    ) -> Result<Response<rpc::QueryRootResponse>, Status> {
        let req = request.into_inner();
        let id = universe_id(req.id.as_ref())?;
        let mut roots = Vec::with_capacity(2);
        for proof_type in ProofType::ALL {
            let universe = id.universe(proof_type);
            // tapd answers a universe it does not have with an empty root.
            let root = match self.multiverse.root(&universe).await.map_err(store_error)? {
                Some(root) => self.universe_root(&universe, &root, false).await?,
                None => rpc::UniverseRoot::default(),
            };
            roots.push(root);
        }
        let transfer_root = roots.pop();
        let issuance_root = roots.pop();
        Ok(Response::new(rpc::QueryRootResponse {
            issuance_root,
            transfer_root,
        }))
    }

    async fn asset_leaf_keys(
        &self,
        request: Request<rpc::AssetLeafKeysRequest>,
    ) -> Result<Response<rpc::AssetLeafKeyResponse>, Status> {
        let req = request.into_inner();
        let id = universe_id(req.id.as_ref())?;
        let Some(proof_type) = id.proof_type else {
            return Err(Status::unknown(
                "proof type (req.id.proof_type) must be specified",
            ));
        };
        let (offset, limit) = page(req.offset, req.limit)?;
        let query = PageQuery {
            offset,
            limit,
            descending: request::descending(req.direction),
        };
        let page = self
            .multiverse
            .leaf_keys(&id.universe(proof_type), query)
            .await
            .map_err(store_error)?;
        let mut has_more = page.has_more(&query);
        let mut budget = MAX_MESSAGE_BYTES - MESSAGE_SLACK;
        let mut asset_keys = Vec::with_capacity(page.items.len());
        let mut entries = Vec::with_capacity(page.items.len());
        for KeyRecord { key, leaf_hash, .. } in &page.items {
            let asset_key = request::marshal_leaf_key(key);
            let entry = rpc::AssetLeafEntry {
                asset_key: Some(asset_key.clone()),
                leaf_node_hash: leaf_hash.0.to_vec(),
            };
            let len = entry_len(asset_key.encoded_len()) + entry_len(entry.encoded_len());
            if len > budget {
                has_more = true;
                break;
            }
            budget -= len;
            asset_keys.push(asset_key);
            entries.push(entry);
        }
        // tapd fills both: readers older than `entries` read `asset_keys`.
        #[allow(deprecated)]
        let response = rpc::AssetLeafKeyResponse {
            asset_keys,
            has_more,
            entries,
        };
        Ok(Response::new(response))
    }

    async fn asset_leaves(
        &self,
        request: Request<rpc::AssetLeavesRequest>,
    ) -> Result<Response<rpc::AssetLeafResponse>, Status> {
        let req = request.into_inner();
        let id = universe_id(req.id.as_ref())?;
        let (offset, limit) = page(req.offset, req.limit)?;
        // tapd reads an unspecified proof type's universe, which never
        // holds a leaf.
        let Some(proof_type) = id.proof_type else {
            return Ok(Response::new(rpc::AssetLeafResponse::default()));
        };
        let query = PageQuery {
            offset,
            limit,
            descending: request::descending(req.direction),
        };
        let page = self
            .multiverse
            .leaves(&id.universe(proof_type), query)
            .await
            .map_err(store_error)?;
        let mut has_more = page.has_more(&query);
        let mut budget = MAX_MESSAGE_BYTES - MESSAGE_SLACK;
        let mut leaves = Vec::with_capacity(page.items.len());
        for (_, leaf) in &page.items {
            let asset_leaf = rpc::AssetLeaf {
                proof: leaf.value().to_vec(),
            };
            let len = entry_len(asset_leaf.encoded_len());
            if len > budget {
                has_more = true;
                break;
            }
            budget -= len;
            leaves.push(asset_leaf);
        }
        Ok(Response::new(rpc::AssetLeafResponse { leaves, has_more }))
    }

    async fn query_proof(
        &self,
        request: Request<rpc::UniverseKey>,
    ) -> Result<Response<rpc::AssetProofResponse>, Status> {
        let req = request.into_inner();
        let (id, leaf_key) = request::universe_key(&req)
            .map_err(|e| Status::unknown(format!("unmarshal universe key: {e}")))?;
        let candidates: &[ProofType] = match id.proof_type {
            None => &ProofType::ALL,
            Some(ProofType::Issuance) => &[ProofType::Issuance],
            Some(ProofType::Transfer) => &[ProofType::Transfer],
        };
        let mut found = None;
        let mut last: RequestId = id;
        for proof_type in candidates {
            last = id.with_type(*proof_type);
            let universe = id.universe(*proof_type);
            if let Some(proof) = self
                .proofs
                .proof(&universe, &leaf_key)
                .await
                .map_err(store_error)?
            {
                found = Some(proof);
                break;
            }
        }
        let key_hex = leaf_key.universe_key().to_hex();
        let Some(proof) = found else {
            // tapd's queryProof error, wrapped by QueryProof.
            return Err(Status::unknown(format!(
                "query proof (uni={}, leaf_key={key_hex}): {NO_PROOF} (uni={}, leaf_key={key_hex})",
                id.for_log(),
                last.for_log(),
            )));
        };
        proof_response(req, &proof, &key_hex).map(Response::new)
    }

    async fn insert_proof(
        &self,
        request: Request<rpc::AssetProof>,
    ) -> Result<Response<rpc::AssetProofResponse>, Status> {
        // The gate set the caller; served without it (tonic's own server),
        // the call is anonymous and writes nothing.
        let principal = request
            .extensions()
            .get::<Principal>()
            .cloned()
            .unwrap_or(Principal::Anonymous);
        if matches!(principal, Principal::Anonymous) {
            return Err(Status::unauthenticated(ServeError::NoToken.to_string()));
        }
        let req = request.into_inner();
        let key = req
            .key
            .ok_or_else(|| Status::unknown("unmarshal universe key: universe_key must be set"))?;
        let (id, leaf_key) = request::universe_key(&key)
            .map_err(|e| Status::unknown(format!("unmarshal universe key: {e}")))?;
        let key_hex = leaf_key.universe_key().to_hex();
        // The scope first, from the key alone, before a byte of the proof
        // is decoded: a caller that may write neither universe the key can
        // name (one, or both when its proof type is unspecified) is refused
        // as such, whatever it sent.
        let candidates: Vec<Universe> = match id.proof_type {
            Some(proof_type) => vec![id.universe(proof_type)],
            None => ProofType::ALL.iter().map(|t| id.universe(*t)).collect(),
        };
        if !candidates
            .iter()
            .any(|u| principal.allows(Scope::Write, Some(&u.namespace())))
        {
            let first = candidates
                .first()
                .map(Universe::namespace)
                .unwrap_or_default();
            return Err(forbidden(&principal, first));
        }
        let proof = req.asset_leaf.map(|l| l.proof);
        let checked = match &proof {
            None => Err(super::insert::InsertRefusal::NoLeaf),
            Some(proof) => leaf_from_proof(id, leaf_key, proof),
        };
        let (universe, leaf) = checked.map_err(|e| {
            Status::unknown(format!(
                "unmarshal asset leaf (uni={}, leaf_key={key_hex}): {e}",
                id.for_log()
            ))
        })?;
        let namespace = universe.namespace();
        if !principal.allows(Scope::Write, Some(&namespace)) {
            return Err(forbidden(&principal, namespace));
        }
        self.multiverse
            .insert(&universe, std::slice::from_ref(&leaf))
            .await
            .map_err(store_error)?;
        let written = self
            .multiverse
            .proof(&universe, &leaf_key)
            .await
            .map_err(store_error)?
            .ok_or_else(|| Status::internal(format!("leaf {key_hex} written but not found")))?;
        // tapd answers with the key as the universe holds it: the proof
        // type filled in.
        let mut answer_key = key;
        if let Some(rpc_id) = answer_key.id.as_mut() {
            rpc_id.proof_type = i32::from(universe.proof_type.number());
        }
        proof_response(answer_key, &written, &key_hex).map(Response::new)
    }

    async fn info(
        &self,
        _request: Request<rpc::InfoRequest>,
    ) -> Result<Response<rpc::InfoResponse>, Status> {
        Ok(Response::new(rpc::InfoResponse {
            runtime_id: self.runtime_id,
        }))
    }

    async fn universe_stats(
        &self,
        _request: Request<rpc::StatsRequest>,
    ) -> Result<Response<rpc::StatsResponse>, Status> {
        let stats = self.multiverse.stats().await.map_err(store_error)?;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Ok(Response::new(rpc::StatsResponse {
            num_total_assets: count(stats.universes),
            num_total_groups: count(stats.group_universes),
            // tapd counts the proofs it served to syncers in an event log;
            // this server keeps none.
            num_total_syncs: 0,
            num_total_proofs: count(stats.leaves),
        }))
    }
}
