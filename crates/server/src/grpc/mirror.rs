//! The client side of tapd's universe protocol: [`UniversePeer`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ms_smt::multiverse::{LeafKey, MultiverseError, PageQuery, ProofType, Universe, UniverseLeaf};
use ms_smt::store::{ForestStore, MemoryStore};
use ms_smt::{CompactedTree, CompressedProof, ComputedNode, Hash, Key, Multiverse};
use ms_smt_tapd_proof::{FactsError, UniverseLeafFacts};
use prost::Message;
use rustls::pki_types::ServerName;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tonic::transport::{Channel, Endpoint};

use super::connect::TlsConnect;

use super::proto::taprpc::SortDirection;
use super::proto::universerpc as rpc;
use super::proto::universerpc::universe_client::UniverseClient;
use super::request::{self, marshal_id};
use super::service::MAX_MESSAGE_BYTES;
use super::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use crate::tls::{TlsError, Trust};

/// How a mirror round pages, fetches and commits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MirrorConfig {
    /// Universe roots per `AssetRoots` page (default [`DEFAULT_PAGE_SIZE`]).
    pub root_page: i32,
    /// Leaf keys per `AssetLeafKeys` page (default [`MAX_PAGE_SIZE`]: a key
    /// is ~140 bytes, so a full page stays under the message limit).
    pub key_page: i32,
    /// Leaves per `AssetLeaves` page (default [`DEFAULT_PAGE_SIZE`]; a
    /// server cuts a page short at its message limit, and the next page
    /// starts where it stopped).
    pub leaf_page: i32,
    /// `QueryProof` calls in flight at once (default 16).
    pub fetch_in_flight: usize,
    /// Leaves per commit (default 4,096; a universe is never split).
    pub batch_leaves: usize,
    /// When more than this fraction of a universe's leaves differ, it is
    /// fetched whole by pages instead of leaf by leaf (default 1/8).
    pub refetch_fraction: f64,
}

impl Default for MirrorConfig {
    fn default() -> Self {
        MirrorConfig {
            root_page: DEFAULT_PAGE_SIZE,
            key_page: MAX_PAGE_SIZE,
            leaf_page: DEFAULT_PAGE_SIZE,
            fetch_in_flight: 16,
            batch_leaves: 4_096,
            refetch_fraction: 0.125,
        }
    }
}

/// What one mirror round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorReport {
    /// Universes the server lists.
    pub universes: u64,
    /// Of them, already held with the server's root.
    pub unchanged: u64,
    /// Universes fetched whole (new here, or too different).
    pub fetched_whole: u64,
    /// Universes fetched leaf by leaf.
    pub fetched_by_leaf: u64,
    /// Leaves received.
    pub leaves_fetched: u64,
    /// Leaves written (new or changed).
    pub leaves_written: u64,
    /// Commits made.
    pub commits: u64,
    /// Universes whose root here still differs from the server's after
    /// the round: the mirror holds leaves the server no longer lists
    /// (mirrors never delete).
    pub diverged: u64,
    /// Bytes of the answers' protobuf messages (without HTTP/2 and TLS
    /// framing).
    pub bytes: u64,
    /// The round's wall time.
    pub elapsed: Duration,
}

/// Which call of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `AssetRoots`.
    AssetRoots,
    /// `AssetLeaves`.
    AssetLeaves,
    /// `AssetLeafKeys`.
    AssetLeafKeys,
    /// `QueryProof`.
    QueryProof,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Call::AssetRoots => "AssetRoots",
            Call::AssetLeaves => "AssetLeaves",
            Call::AssetLeafKeys => "AssetLeafKeys",
            Call::QueryProof => "QueryProof",
        })
    }
}

/// What was wrong with an answer's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadAnswer {
    /// A root without its ID, or an ID that does not parse.
    #[error("a universe ID is missing or malformed")]
    Id,
    /// A root's ID without a proof type.
    #[error("a universe ID has no proof type")]
    ProofType,
    /// A node that is not 32 bytes of hash and a sum.
    #[error("a merkle-sum node is missing or malformed")]
    Node,
    /// A leaf key that does not parse.
    #[error("a leaf key is missing or malformed")]
    LeafKey,
    /// A `QueryProof` answer without its leaf.
    #[error("the answer has no asset leaf")]
    NoLeaf,
    /// An inclusion proof that does not decode.
    #[error("an inclusion proof does not decode")]
    InclusionProof,
}

/// Why a peer could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The address is not `host:port` with a host name or IP address.
    #[error("{address:?} is not host:port")]
    Address {
        /// What was given.
        address: String,
    },
    /// The endpoint does not parse as a URI.
    #[error("endpoint {endpoint:?} is not a URI")]
    Endpoint {
        /// What was given.
        endpoint: String,
        /// The parser's reason.
        #[source]
        source: tonic::transport::Error,
    },
    /// No connection could be made.
    #[error("connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The transport's reason.
        #[source]
        source: tonic::transport::Error,
    },
    /// The TLS configuration could not be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Why a mirror round stopped. What it committed before stays (and the
/// next round skips it).
#[derive(Debug, thiserror::Error)]
pub enum MirrorError<E: std::error::Error + 'static> {
    /// A call failed.
    #[error("{call}: {status}")]
    Status {
        /// The call.
        call: Call,
        /// The server's status.
        #[source]
        status: Box<tonic::Status>,
    },
    /// An answer was malformed.
    #[error("{call}: {problem}")]
    Answer {
        /// The call.
        call: Call,
        /// What was wrong.
        problem: BadAnswer,
    },
    /// A served proof does not decode.
    #[error("universe {namespace}: a served proof does not decode: {source}")]
    Proof {
        /// The universe's namespace.
        namespace: String,
        /// The decoder's reason.
        #[source]
        source: FactsError,
    },
    /// A served proof is of another universe.
    #[error("universe {namespace}: a served proof is of another universe ({found})")]
    OtherUniverse {
        /// The universe's namespace.
        namespace: String,
        /// The proof's universe namespace.
        found: String,
    },
    /// A proof served for a key is the proof of another leaf, or its leaf
    /// hash is not the one listed.
    #[error("universe {namespace}: the proof served for leaf {key} is not that leaf")]
    WrongLeaf {
        /// The universe's namespace.
        namespace: String,
        /// The key asked for (hex).
        key: String,
    },
    /// A leaf's inclusion proof does not lead to the server's root.
    #[error(
        "universe {namespace}: the inclusion proof of leaf {key} does not verify against the root"
    )]
    Inclusion {
        /// The universe's namespace.
        namespace: String,
        /// The leaf's key (hex).
        key: String,
    },
    /// The leaves served do not make the root the server gave: nothing of
    /// this universe was written.
    #[error(
        "universe {namespace}: the leaves served make root {got_hash}/{got_sum}, \
         the server's root is {expected_hash}/{expected_sum}"
    )]
    RootMismatch {
        /// The universe's namespace.
        namespace: String,
        /// The server's root hash.
        expected_hash: Hash,
        /// The server's root sum.
        expected_sum: u64,
        /// The hash the leaves make.
        got_hash: Hash,
        /// The sum they make.
        got_sum: u64,
    },
    /// The server's root changed during the round (its answers are of two
    /// states): run the round again.
    #[error("universe {namespace}: the server's root moved during the round")]
    Moved {
        /// The universe's namespace.
        namespace: String,
    },
    /// Checking a universe's leaves in memory failed.
    #[error("universe {namespace}: building the check tree: {source}")]
    Check {
        /// The universe's namespace.
        namespace: String,
        /// The tree's error.
        #[source]
        source: ms_smt::TreeError<ms_smt::store::MemoryError>,
    },
    /// The mirror's store failed.
    #[error(transparent)]
    Store(#[from] MultiverseError<E>),
}

/// A universe server that speaks tapd's `universerpc.Universe` (this
/// crate's [`serve`](super::serve), or a tapd node), and mirrors it into a
/// [`Multiverse`].
///
/// One round: the server's universe roots (`AssetRoots`, paged); a
/// universe whose root the mirror already holds is skipped. A universe the
/// mirror lacks is fetched whole (`AssetLeaves`, paged), each leaf's key
/// and sum derived from its proof ([`UniverseLeafFacts`]), and the tree
/// those leaves make is checked against the server's root once, before
/// anything of it is written. A universe that differs is listed
/// (`AssetLeafKeys`, with each leaf's node hash) against the mirror's own
/// index; only leaves whose hash differs are fetched, one `QueryProof`
/// each (several in flight), each checked against the server's root by
/// its inclusion proof; when more than [`MirrorConfig::refetch_fraction`]
/// of a universe differs, it is fetched whole instead. Universes are
/// written with their multiverse leaves in commits of about
/// [`MirrorConfig::batch_leaves`] leaves, so an interrupted round loses
/// at most the batch in progress and the next round picks up where it
/// stopped (what landed now matches and is skipped).
///
/// What is trusted: the server's roots. A leaf is written only if its
/// proof decodes, names the leaf it is stored under and, with the others,
/// makes the root the server gave; the proof's chain (block header, anchor
/// transaction, witnesses) is not verified, as nowhere in this crate.
#[derive(Debug, Clone)]
pub struct UniversePeer {
    client: UniverseClient<Channel>,
    config: MirrorConfig,
}

/// The leaves fetched for one universe, before they are written.
type Fetched = Vec<UniverseLeaf>;

impl UniversePeer {
    /// A peer at `host:port` over TLS (ALPN `h2`), believing what `trust`
    /// says: a tapd node's `tls.cert` pinned ([`Trust::pinned_file`]), a CA,
    /// or the system's roots.
    pub async fn connect_tls(host_port: &str, trust: &Trust) -> Result<Self, ConnectError> {
        let bad = || ConnectError::Address {
            address: host_port.to_owned(),
        };
        let (host, _) = host_port.rsplit_once(':').ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|_| bad())?;
        let connector = TlsConnect::new(trust.client_config()?, name, host_port.to_owned());
        // tonic sees plain HTTP/2: the connector does the TLS.
        let channel = Self::endpoint(&format!("http://{host_port}"))?
            .connect_with_connector(connector)
            .await
            .map_err(|source| ConnectError::Connect {
                endpoint: format!("https://{host_port}"),
                source,
            })?;
        Ok(Self::over(channel))
    }

    /// A peer at `host:port` over plain HTTP/2 (loopback, or behind a
    /// TLS-terminating proxy).
    pub async fn connect_plain(host_port: &str) -> Result<Self, ConnectError> {
        let endpoint = format!("http://{host_port}");
        let channel = Self::endpoint(&endpoint)?
            .connect()
            .await
            .map_err(|source| ConnectError::Connect { endpoint, source })?;
        Ok(Self::over(channel))
    }

    fn endpoint(endpoint: &str) -> Result<Endpoint, ConnectError> {
        Endpoint::from_shared(endpoint.to_owned()).map_err(|source| ConnectError::Endpoint {
            endpoint: endpoint.to_owned(),
            source,
        })
    }

    /// A peer over an open channel.
    pub fn over(channel: Channel) -> Self {
        UniversePeer {
            client: UniverseClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            config: MirrorConfig::default(),
        }
    }

    /// This peer mirroring as `config` says.
    pub fn with_config(mut self, config: MirrorConfig) -> Self {
        self.config = config;
        self
    }

    /// One mirror round into `multiverse` (see [`UniversePeer`]).
    pub async fn mirror<S>(
        &self,
        multiverse: &Multiverse<S>,
    ) -> Result<MirrorReport, MirrorError<S::Error>>
    where
        S: ForestStore + Clone,
        S::Tree: Clone,
    {
        let started = Instant::now();
        let mut report = MirrorReport::default();
        let remote = self.roots(&mut report).await?;
        let mut plan = Vec::with_capacity(remote.len());
        for (universe, root) in remote {
            let local = multiverse.root(&universe).await?;
            plan.push((universe, root, local));
        }
        // The key listings of every changed universe, fetched ahead,
        // `fetch_in_flight` at a time, while the universes before them are
        // compared and written.
        let slots = Arc::new(Semaphore::new(self.config.fetch_in_flight.max(1)));
        let mut listings: BTreeMap<String, JoinHandle<Listed>> = BTreeMap::new();
        for (universe, root, local) in &plan {
            if local.is_some() && *local != Some(*root) {
                let (client, page, id) = (
                    self.client.clone(),
                    self.config.key_page,
                    marshal_id(universe),
                );
                let slots = slots.clone();
                listings.insert(
                    universe.namespace(),
                    tokio::spawn(async move {
                        // The semaphore is never closed.
                        let _slot = slots.acquire_owned().await.ok();
                        list_keys(client, page, id).await
                    }),
                );
            }
        }
        let mut batch: Vec<(Universe, Fetched)> = Vec::new();
        let mut batched = 0usize;
        let mut written: Vec<(Universe, ComputedNode)> = Vec::new();
        for (universe, root, local) in plan {
            report.universes += 1;
            if local == Some(root) {
                report.unchanged += 1;
                continue;
            }
            let leaves = match listings.remove(&universe.namespace()) {
                None => {
                    report.fetched_whole += 1;
                    self.whole(&universe, &root, None, &mut report).await?
                }
                Some(listing) => {
                    let listed = listing.await.unwrap_or_else(|_| {
                        // A listing task cannot panic short of a bug in
                        // tonic; count it as the call failing.
                        Err(ListError::Status(tonic::Status::internal(
                            "an AssetLeafKeys task stopped",
                        )))
                    });
                    let remote = Self::listed(listed, &mut report)?;
                    self.changed(multiverse, &universe, &root, remote, &mut report)
                        .await?
                }
            };
            batched += leaves.len();
            report.leaves_written += leaves.len() as u64;
            written.push((universe, root));
            batch.push((universe, leaves));
            if batched >= self.config.batch_leaves.max(1) {
                Self::commit(multiverse, &mut batch, &mut report).await?;
                batched = 0;
            }
        }
        Self::commit(multiverse, &mut batch, &mut report).await?;
        for (universe, root) in written {
            if multiverse.root(&universe).await? != Some(root) {
                report.diverged += 1;
            }
        }
        report.elapsed = started.elapsed();
        Ok(report)
    }

    async fn commit<S>(
        multiverse: &Multiverse<S>,
        batch: &mut Vec<(Universe, Fetched)>,
        report: &mut MirrorReport,
    ) -> Result<(), MirrorError<S::Error>>
    where
        S: ForestStore + Clone,
        S::Tree: Clone,
    {
        let writes: Vec<(Universe, &[UniverseLeaf])> = batch
            .iter()
            .filter(|(_, leaves)| !leaves.is_empty())
            .map(|(u, leaves)| (*u, leaves.as_slice()))
            .collect();
        if !writes.is_empty() {
            multiverse.insert_many(&writes).await?;
            report.commits += 1;
        }
        batch.clear();
        Ok(())
    }

    fn status<E: std::error::Error + 'static>(
        call: Call,
    ) -> impl Fn(tonic::Status) -> MirrorError<E> {
        move |status| MirrorError::Status {
            call,
            status: Box::new(status),
        }
    }

    /// Every universe root the server lists, in its order.
    async fn roots<E: std::error::Error + 'static>(
        &self,
        report: &mut MirrorReport,
    ) -> Result<Vec<(Universe, ComputedNode)>, MirrorError<E>> {
        let limit = self.config.root_page.clamp(1, MAX_PAGE_SIZE);
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let mut offset = 0i32;
        loop {
            let page = self
                .client
                .clone()
                .asset_roots(rpc::AssetRootRequest {
                    with_amounts_by_id: false,
                    offset,
                    limit,
                    direction: SortDirection::Asc as i32,
                })
                .await
                .map_err(Self::status(Call::AssetRoots))?
                .into_inner();
            report.bytes += page.encoded_len() as u64;
            let n = page.universe_roots.len();
            // A map on the wire: put each page in namespace order.
            let mut roots: Vec<(Universe, ComputedNode)> = Vec::with_capacity(n);
            for root in page.universe_roots.into_values() {
                let universe = universe_of(root.id.as_ref(), Call::AssetRoots)?;
                let node = node_of(root.mssmt_root.as_ref(), Call::AssetRoots)?;
                roots.push((universe, node));
            }
            roots.sort_by_key(|(u, _)| u.namespace());
            for (universe, node) in roots {
                if seen.insert(universe.namespace()) {
                    out.push((universe, node));
                }
            }
            match next_offset(offset, n, limit, page.has_more) {
                Some(next) => offset = next,
                None => return Ok(out),
            }
        }
    }

    /// Every leaf of `universe`, by pages, checked against `root` as a
    /// whole.
    async fn whole<E: std::error::Error + 'static>(
        &self,
        universe: &Universe,
        root: &ComputedNode,
        listed: Option<&RemoteKeys>,
        report: &mut MirrorReport,
    ) -> Result<Fetched, MirrorError<E>> {
        let limit = self.config.leaf_page.clamp(1, MAX_PAGE_SIZE);
        let mut leaves: BTreeMap<Key, UniverseLeaf> = BTreeMap::new();
        let mut offset = 0i32;
        loop {
            let page = self
                .client
                .clone()
                .asset_leaves(rpc::AssetLeavesRequest {
                    id: Some(marshal_id(universe)),
                    offset,
                    limit,
                    direction: SortDirection::Asc as i32,
                })
                .await
                .map_err(Self::status(Call::AssetLeaves))?
                .into_inner();
            report.bytes += page.encoded_len() as u64;
            let n = page.leaves.len();
            report.leaves_fetched += n as u64;
            for leaf in page.leaves {
                let leaf = leaf_of(universe, leaf.proof)?;
                leaves.insert(leaf.key.universe_key(), leaf);
            }
            match next_offset(offset, n, limit, page.has_more) {
                Some(next) => offset = next,
                None => break,
            }
        }
        let mut leaves: Vec<UniverseLeaf> = leaves.into_values().collect();
        let got = check_root(universe, &leaves).await?;
        if got != *root && universe.proof_type == ProofType::Transfer {
            // Burns sum their amount, and only the listed leaf hashes tell
            // which leaves are burns (listed already when the universe
            // changed; a new one is listed now).
            let fetched;
            let hashes = match listed {
                Some(keys) => keys,
                None => {
                    fetched = self.remote_keys(universe, report).await?;
                    &fetched
                }
            };
            for leaf in &mut leaves {
                if let Some((_, hash)) = hashes.get(&leaf.key.universe_key()) {
                    leaf.burn = burn_by_hash(leaf, hash);
                }
            }
            let again = check_root(universe, &leaves).await?;
            return if again == *root {
                Ok(leaves)
            } else {
                Err(mismatch(universe, root, &again))
            };
        }
        if got != *root {
            return Err(mismatch(universe, root, &got));
        }
        Ok(leaves)
    }

    /// The server's leaf keys of `universe`, each with its leaf hash.
    async fn remote_keys<E: std::error::Error + 'static>(
        &self,
        universe: &Universe,
        report: &mut MirrorReport,
    ) -> Result<RemoteKeys, MirrorError<E>> {
        let listed = list_keys(
            self.client.clone(),
            self.config.key_page,
            marshal_id(universe),
        )
        .await;
        Self::listed(listed, report)
    }

    /// A listing's keys, its bytes counted, or its error as the round's.
    fn listed<E: std::error::Error + 'static>(
        listed: Listed,
        report: &mut MirrorReport,
    ) -> Result<RemoteKeys, MirrorError<E>> {
        match listed {
            Ok((keys, bytes)) => {
                report.bytes += bytes;
                Ok(keys)
            }
            Err(ListError::Status(status)) => Err(Self::status(Call::AssetLeafKeys)(status)),
            Err(ListError::Answer(problem)) => Err(MirrorError::Answer {
                call: Call::AssetLeafKeys,
                problem,
            }),
        }
    }

    /// The leaves of `universe` whose hash here is not the server's:
    /// fetched leaf by leaf and proven against `root`, or, when many
    /// differ, the whole universe.
    async fn changed<S>(
        &self,
        multiverse: &Multiverse<S>,
        universe: &Universe,
        root: &ComputedNode,
        remote: RemoteKeys,
        report: &mut MirrorReport,
    ) -> Result<Fetched, MirrorError<S::Error>>
    where
        S: ForestStore + Clone,
        S::Tree: Clone,
    {
        let mut local: BTreeMap<Key, Hash> = BTreeMap::new();
        let limit = 16_384u64;
        let mut offset = 0u64;
        loop {
            let query = PageQuery {
                offset,
                limit,
                descending: false,
            };
            let page = multiverse.leaf_keys(universe, query).await?;
            let more = page.has_more(&query);
            offset += page.items.len() as u64;
            for record in page.items {
                local.insert(record.key.universe_key(), record.leaf_hash);
            }
            if !more {
                break;
            }
        }
        let missing: Vec<(LeafKey, Hash)> = remote
            .values()
            .filter(|(key, hash)| local.get(&key.universe_key()) != Some(hash))
            .copied()
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let many = missing.len() as f64 > self.config.refetch_fraction * remote.len() as f64;
        if many {
            report.fetched_whole += 1;
            let wanted: BTreeSet<Key> = missing.iter().map(|(k, _)| k.universe_key()).collect();
            let all = self.whole(universe, root, Some(&remote), report).await?;
            return Ok(all
                .into_iter()
                .filter(|l| wanted.contains(&l.key.universe_key()))
                .collect());
        }
        report.fetched_by_leaf += 1;
        let mut out = Vec::with_capacity(missing.len());
        let mut queue = missing.into_iter();
        let mut in_flight: JoinSet<
            Result<(rpc::AssetProofResponse, LeafKey, Hash), tonic::Status>,
        > = JoinSet::new();
        let id = marshal_id(universe);
        loop {
            while in_flight.len() < self.config.fetch_in_flight.max(1) {
                let Some((key, hash)) = queue.next() else {
                    break;
                };
                let mut client = self.client.clone();
                let request = rpc::UniverseKey {
                    id: Some(id.clone()),
                    leaf_key: Some(request::marshal_leaf_key(&key)),
                };
                in_flight.spawn(async move {
                    let answer = client.query_proof(request).await?.into_inner();
                    Ok((answer, key, hash))
                });
            }
            let Some(done) = in_flight.join_next().await else {
                break;
            };
            let Ok(done) = done else {
                // A fetch task cannot panic short of a bug in tonic; count
                // it as the call failing.
                return Err(Self::status(Call::QueryProof)(tonic::Status::internal(
                    "a QueryProof task stopped",
                )));
            };
            let (answer, key, hash) = done.map_err(Self::status(Call::QueryProof))?;
            report.bytes += answer.encoded_len() as u64;
            report.leaves_fetched += 1;
            out.push(proven_leaf(universe, root, &key, &hash, answer)?);
        }
        out.sort_by_key(|l| l.key.universe_key());
        Ok(out)
    }
}

/// The offset of the page after one of `n` entries asked from `offset`
/// with `limit`, or `None` when it was the last: empty, or short of its
/// limit with nothing more announced (a server may cut a page short at its
/// message limit and say `has_more`).
fn next_offset(offset: i32, n: usize, limit: i32, has_more: bool) -> Option<i32> {
    let full = n >= usize::try_from(limit).unwrap_or(usize::MAX);
    if n == 0 || !(has_more || full) {
        return None;
    }
    Some(offset.saturating_add(i32::try_from(n).unwrap_or(i32::MAX)))
}

/// A universe's leaf keys as the server lists them, by universe key.
type RemoteKeys = BTreeMap<Key, (LeafKey, Hash)>;

/// A key listing and its answers' bytes, or why it failed.
type Listed = Result<(RemoteKeys, u64), ListError>;

/// Why a key listing failed (made a [`MirrorError`] by the round).
enum ListError {
    Status(tonic::Status),
    Answer(BadAnswer),
}

/// Every leaf key of the universe `id` with its leaf hash, by
/// `AssetLeafKeys` pages of `key_page`, and the answers' bytes. A task of
/// its own, so it owns what it uses.
async fn list_keys(mut client: UniverseClient<Channel>, key_page: i32, id: rpc::Id) -> Listed {
    let limit = key_page.clamp(1, MAX_PAGE_SIZE);
    let mut out = BTreeMap::new();
    let mut bytes = 0u64;
    let mut offset = 0i32;
    loop {
        let page = client
            .asset_leaf_keys(rpc::AssetLeafKeysRequest {
                id: Some(id.clone()),
                offset,
                limit,
                direction: SortDirection::Asc as i32,
            })
            .await
            .map_err(ListError::Status)?
            .into_inner();
        bytes += page.encoded_len() as u64;
        let n = page.entries.len();
        for entry in page.entries {
            let key = request::leaf_key(entry.asset_key.as_ref())
                .map_err(|_| ListError::Answer(BadAnswer::LeafKey))?;
            let hash: [u8; 32] = entry
                .leaf_node_hash
                .as_slice()
                .try_into()
                .map_err(|_| ListError::Answer(BadAnswer::Node))?;
            out.insert(key.universe_key(), (key, Hash(hash)));
        }
        match next_offset(offset, n, limit, page.has_more) {
            Some(next) => offset = next,
            None => return Ok((out, bytes)),
        }
    }
}

/// The universe an answer's ID names (its proof type required).
fn universe_of<E: std::error::Error + 'static>(
    id: Option<&rpc::Id>,
    call: Call,
) -> Result<Universe, MirrorError<E>> {
    let id = request::universe_id(id).map_err(|_| MirrorError::Answer {
        call,
        problem: BadAnswer::Id,
    })?;
    let proof_type = id.proof_type.ok_or(MirrorError::Answer {
        call,
        problem: BadAnswer::ProofType,
    })?;
    Ok(id.universe(proof_type))
}

/// A node of an answer.
fn node_of<E: std::error::Error + 'static>(
    node: Option<&rpc::MerkleSumNode>,
    call: Call,
) -> Result<ComputedNode, MirrorError<E>> {
    let bad = || MirrorError::Answer {
        call,
        problem: BadAnswer::Node,
    };
    let node = node.ok_or_else(bad)?;
    let hash: [u8; 32] = node.root_hash.as_slice().try_into().map_err(|_| bad())?;
    Ok(ComputedNode::new(
        Hash(hash),
        u64::from_ne_bytes(node.root_sum.to_ne_bytes()),
    ))
}

/// The leaf `proof` makes in `universe`, or why it is not of it.
fn leaf_of<E: std::error::Error + 'static>(
    universe: &Universe,
    proof: Vec<u8>,
) -> Result<UniverseLeaf, MirrorError<E>> {
    let facts =
        UniverseLeafFacts::from_proof_bytes(&proof).map_err(|source| MirrorError::Proof {
            namespace: universe.namespace(),
            source,
        })?;
    if facts.namespace != universe.namespace() {
        return Err(MirrorError::OtherUniverse {
            namespace: universe.namespace(),
            found: facts.namespace,
        });
    }
    Ok(UniverseLeaf {
        key: request::leaf_key_of(&facts),
        asset_id: facts.asset_id,
        proof,
        amount: facts.amount,
        burn: false,
    })
}

/// Whether `leaf` is a burn, by the hash the server lists for it: a burn
/// in a transfer universe sums its amount where a transfer sums 1.
fn burn_by_hash(leaf: &UniverseLeaf, hash: &Hash) -> bool {
    let as_burn = UniverseLeaf {
        burn: true,
        ..leaf.clone()
    };
    as_burn.leaf(ProofType::Transfer).hash() == *hash
        && leaf.leaf(ProofType::Transfer).hash() != *hash
}

/// A `QueryProof` answer for `key`, proven against `root`: the proof
/// names the leaf, its hash is the one listed, and its inclusion proof
/// leads to the root.
fn proven_leaf<E: std::error::Error + 'static>(
    universe: &Universe,
    root: &ComputedNode,
    key: &LeafKey,
    hash: &Hash,
    answer: rpc::AssetProofResponse,
) -> Result<UniverseLeaf, MirrorError<E>> {
    let namespace = universe.namespace();
    let served_root = node_of(
        answer
            .universe_root
            .as_ref()
            .and_then(|r| r.mssmt_root.as_ref()),
        Call::QueryProof,
    )?;
    if served_root != *root {
        return Err(MirrorError::Moved { namespace });
    }
    let proof = answer
        .asset_leaf
        .ok_or(MirrorError::Answer {
            call: Call::QueryProof,
            problem: BadAnswer::NoLeaf,
        })?
        .proof;
    let mut leaf = leaf_of(universe, proof)?;
    let universe_key = key.universe_key();
    if leaf.key.universe_key() != universe_key {
        return Err(MirrorError::WrongLeaf {
            namespace,
            key: universe_key.to_hex(),
        });
    }
    if universe.proof_type == ProofType::Transfer {
        leaf.burn = burn_by_hash(&leaf, hash);
    }
    let tree_leaf = leaf.leaf(universe.proof_type);
    if tree_leaf.hash() != *hash {
        return Err(MirrorError::WrongLeaf {
            namespace,
            key: universe_key.to_hex(),
        });
    }
    let inclusion = CompressedProof::decode(&answer.universe_inclusion_proof)
        .and_then(|p| p.decompress())
        .map_err(|_| MirrorError::Answer {
            call: Call::QueryProof,
            problem: BadAnswer::InclusionProof,
        })?;
    if !inclusion.verify(&universe_key, &tree_leaf, root) {
        return Err(MirrorError::Inclusion {
            namespace,
            key: universe_key.to_hex(),
        });
    }
    Ok(leaf)
}

/// The root `leaves` make as `universe`'s tree.
async fn check_root<E: std::error::Error + 'static>(
    universe: &Universe,
    leaves: &[UniverseLeaf],
) -> Result<ComputedNode, MirrorError<E>> {
    if leaves.is_empty() {
        return Ok(ComputedNode::empty_root());
    }
    let tree = CompactedTree::new(MemoryStore::new());
    tree.insert_many(
        leaves
            .iter()
            .map(|l| (l.key.universe_key(), l.leaf(universe.proof_type))),
    )
    .await
    .map_err(|source| MirrorError::Check {
        namespace: universe.namespace(),
        source,
    })
}

fn mismatch<E: std::error::Error + 'static>(
    universe: &Universe,
    expected: &ComputedNode,
    got: &ComputedNode,
) -> MirrorError<E> {
    MirrorError::RootMismatch {
        namespace: universe.namespace(),
        expected_hash: expected.hash,
        expected_sum: expected.sum,
        got_hash: got.hash,
        got_sum: got.sum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ms_smt::multiverse::OutPoint;

    #[test]
    fn a_burn_is_told_by_its_hash() {
        let leaf = UniverseLeaf {
            key: LeafKey {
                outpoint: OutPoint {
                    txid: [1; 32],
                    index: 2,
                },
                script_key: [3; 32],
            },
            asset_id: [4; 32],
            proof: vec![5, 6, 7],
            amount: 900,
            burn: false,
        };
        let burned = UniverseLeaf {
            burn: true,
            ..leaf.clone()
        };
        let transfer_hash = leaf.leaf(ProofType::Transfer).hash();
        let burn_hash = burned.leaf(ProofType::Transfer).hash();
        assert!(!burn_by_hash(&leaf, &transfer_hash));
        assert!(burn_by_hash(&leaf, &burn_hash));
        assert!(!burn_by_hash(&leaf, &Hash([0; 32])));
    }
}
