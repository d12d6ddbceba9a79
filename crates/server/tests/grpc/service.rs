//! The universe service over loopback, called with tonic's client as
//! tapd's syncer calls it: roots, keys and proofs, each proof verified
//! with ms-smt-core against the roots served, on the memory store and on
//! SQLite.

use std::collections::{BTreeMap, BTreeSet};

use ms_smt::multiverse::{LeafKey, OutPoint, ProofType, Universe, UniverseId, UniverseLeaf};
use ms_smt::store::{ForestStore, MemoryStore};
use ms_smt::{CompactedTree, CompressedProof, ComputedNode, Hash, Key, Leaf, Multiverse};
use ms_smt_server::ListenConfig;
use ms_smt_server::grpc::proto::taprpc::SortDirection;
use ms_smt_server::grpc::proto::universerpc::universe_client::UniverseClient;
use ms_smt_server::grpc::proto::universerpc::{self as rpc, asset_key, id};
use ms_smt_server::grpc::{MAX_PAGE_SIZE, UniverseService, serve};
use ms_smt_sql::SqliteStore;
use tonic::transport::Channel;
use tonic::{Code, Request};

const ASSET: [u8; 32] = [0xa1; 32];
const GROUP_KEY: [u8; 32] = [0x61; 32];

fn leaf_key(tag: u8, n: u8) -> LeafKey {
    let mut txid = [tag; 32];
    txid[0] = n;
    LeafKey {
        outpoint: OutPoint {
            txid,
            index: u32::from(n) * 3,
        },
        script_key: [n ^ tag; 32],
    }
}

fn leaf(tag: u8, n: u8, asset_id: [u8; 32], burn: bool) -> UniverseLeaf {
    UniverseLeaf {
        key: leaf_key(tag, n),
        asset_id,
        proof: [tag, n, 0x55].repeat(usize::from(n) + 1),
        amount: 100 + u64::from(n),
        burn,
    }
}

/// Three universes: an asset's issuance (30 leaves) and transfers (12,
/// one a burn), and a group's issuance (5 assets).
fn universes() -> Vec<(Universe, Vec<UniverseLeaf>)> {
    vec![
        (
            Universe::new(UniverseId::Asset(ASSET), ProofType::Issuance),
            (0..30).map(|n| leaf(1, n, ASSET, false)).collect(),
        ),
        (
            Universe::new(UniverseId::Asset(ASSET), ProofType::Transfer),
            (0..12).map(|n| leaf(2, n, ASSET, n == 7)).collect(),
        ),
        (
            Universe::new(UniverseId::Group(GROUP_KEY), ProofType::Issuance),
            (0..5).map(|n| leaf(3, n, [n + 10; 32], false)).collect(),
        ),
    ]
}

fn rpc_id(universe: &Universe) -> rpc::Id {
    let id = match universe.id {
        UniverseId::Asset(a) => id::Id::AssetId(a.to_vec()),
        UniverseId::Group(k) => id::Id::GroupKey(k.to_vec()),
    };
    rpc::Id {
        id: Some(id),
        proof_type: i32::from(universe.proof_type.number()),
    }
}

fn node(n: Option<&rpc::MerkleSumNode>) -> ComputedNode {
    let n = n.expect("a node");
    let hash: [u8; 32] = n.root_hash.as_slice().try_into().expect("32 bytes");
    ComputedNode::new(Hash(hash), u64::from_ne_bytes(n.root_sum.to_ne_bytes()))
}

/// The roots tapd's rules give, built apart: each universe tree, and the
/// multiverse leaf above it.
async fn reference_roots(
    all: &[(Universe, Vec<UniverseLeaf>)],
) -> (
    BTreeMap<String, ComputedNode>,
    BTreeMap<ProofType, ComputedNode>,
) {
    let mut roots = BTreeMap::new();
    let mut multiverse: BTreeMap<ProofType, Vec<(Key, Leaf)>> = BTreeMap::new();
    for (universe, leaves) in all {
        let tree = CompactedTree::new(MemoryStore::new());
        let root = tree
            .insert_many(
                leaves
                    .iter()
                    .map(|l| (l.key.universe_key(), l.leaf(universe.proof_type))),
            )
            .await
            .expect("universe");
        let sum = match universe.proof_type {
            ProofType::Issuance => 1,
            ProofType::Transfer => root.sum,
        };
        multiverse.entry(universe.proof_type).or_default().push((
            universe.multiverse_key(),
            Leaf::new(root.hash.0.to_vec(), sum),
        ));
        roots.insert(universe.namespace(), root);
    }
    let mut tops = BTreeMap::new();
    for (proof_type, leaves) in multiverse {
        let tree = CompactedTree::new(MemoryStore::new());
        tops.insert(
            proof_type,
            tree.insert_many(leaves).await.expect("multiverse"),
        );
    }
    (roots, tops)
}

struct Running {
    client: UniverseClient<Channel>,
    channel: Channel,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start<S>(multiverse: Multiverse<S>) -> Running
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = UniverseService::new(multiverse).with_runtime_id(4242);
    let task = tokio::spawn(serve(listener, service, ListenConfig::plain(), async {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    Running {
        client: UniverseClient::new(channel.clone()),
        channel,
        stop: Some(stop),
        task,
    }
}

impl Running {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("join").expect("serve");
    }
}

/// Every leaf entry of `universe`, paged as tapd's syncer pages them
/// (`fetchAllLeafEntries`: its sort direction is sent as wire value 0,
/// descending; offset moves by the page size until a page is empty).
async fn all_leaf_entries(
    client: &mut UniverseClient<Channel>,
    universe: &Universe,
    limit: i32,
) -> Vec<rpc::AssetLeafEntry> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let page = client
            .asset_leaf_keys(rpc::AssetLeafKeysRequest {
                id: Some(rpc_id(universe)),
                offset,
                limit,
                direction: SortDirection::Desc as i32,
            })
            .await
            .expect("leaf keys")
            .into_inner();
        #[allow(deprecated)]
        let legacy: Vec<rpc::AssetKey> = page.asset_keys.clone();
        let keys: Vec<rpc::AssetKey> = page
            .entries
            .iter()
            .map(|e| e.asset_key.clone().expect("key"))
            .collect();
        assert_eq!(legacy, keys, "asset_keys and entries list the same keys");
        if page.entries.is_empty() {
            assert!(!page.has_more);
            return out;
        }
        out.extend(page.entries);
        offset += limit;
    }
}

fn parse_key(key: &rpc::AssetKey) -> LeafKey {
    let Some(asset_key::Outpoint::OpStr(op)) = &key.outpoint else {
        panic!("tapd sends op_str: {key:?}");
    };
    let Some(asset_key::ScriptKey::ScriptKeyBytes(script)) = &key.script_key else {
        panic!("tapd sends script_key_bytes: {key:?}");
    };
    LeafKey {
        outpoint: OutPoint::parse(op).expect("outpoint"),
        script_key: script.as_slice().try_into().expect("x-only"),
    }
}

async fn exercise<S>(multiverse: Multiverse<S>)
where
    S: ForestStore + Clone + 'static,
    S::Tree: Clone + Send + Sync + 'static,
{
    let all = universes();
    for (universe, leaves) in &all {
        multiverse.insert(universe, leaves).await.expect("insert");
    }
    let (roots, tops) = reference_roots(&all).await;
    let mut running = start(multiverse).await;
    let client = &mut running.client;

    // Info: the runtime ID.
    let info = client
        .info(rpc::InfoRequest {})
        .await
        .expect("info")
        .into_inner();
    assert_eq!(info.runtime_id, 4242);

    // UniverseStats: 3 universes, 1 of a group, 30 + 12 + 5 leaves.
    let stats = client
        .universe_stats(rpc::StatsRequest {})
        .await
        .expect("universe stats")
        .into_inner();
    assert_eq!(
        (
            stats.num_total_assets,
            stats.num_total_groups,
            stats.num_total_syncs,
            stats.num_total_proofs
        ),
        (3, 1, 0, 47)
    );

    // MultiverseRoot: both types, tapd's layout; a filter of IDs.
    for proof_type in ProofType::ALL {
        let got = client
            .multiverse_root(rpc::MultiverseRootRequest {
                proof_type: i32::from(proof_type.number()),
                specific_ids: Vec::new(),
            })
            .await
            .expect("multiverse root")
            .into_inner();
        assert_eq!(node(got.multiverse_root.as_ref()), tops[&proof_type]);
    }
    let only_asset = client
        .multiverse_root(rpc::MultiverseRootRequest {
            proof_type: 1,
            specific_ids: vec![rpc::Id {
                id: Some(id::Id::AssetId(ASSET.to_vec())),
                proof_type: 0,
            }],
        })
        .await
        .expect("filtered")
        .into_inner();
    let alone = CompactedTree::new(MemoryStore::new());
    let asset_issuance = Universe::new(UniverseId::Asset(ASSET), ProofType::Issuance);
    let want = alone
        .insert(
            Key(ASSET),
            Leaf::new(roots[&asset_issuance.namespace()].hash.0.to_vec(), 1),
        )
        .await
        .expect("alone");
    assert_eq!(node(only_asset.multiverse_root.as_ref()), want);
    let err = client
        .multiverse_root(rpc::MultiverseRootRequest {
            proof_type: 0,
            specific_ids: Vec::new(),
        })
        .await
        .expect_err("unspecified");
    assert_eq!(
        (err.code(), err.message()),
        (Code::Unknown, "req.proof_type must be specified")
    );
    let err = client
        .multiverse_root(rpc::MultiverseRootRequest {
            proof_type: 1,
            specific_ids: vec![rpc::Id {
                id: Some(id::Id::AssetId(ASSET.to_vec())),
                proof_type: 2,
            }],
        })
        .await
        .expect_err("conflict");
    assert_eq!(
        err.message(),
        "req.specific_ids[0].proof_type=transfer conflicts with req.proof_type=issuance"
    );

    // AssetRoots: every universe once, whatever the page size and order,
    // with tapd's roots under tapd's names.
    for (limit, direction) in [
        (1, SortDirection::Asc),
        (2, SortDirection::Desc),
        (0, SortDirection::Asc),
    ] {
        let mut seen = BTreeMap::new();
        let mut offset = 0;
        loop {
            let page = client
                .asset_roots(rpc::AssetRootRequest {
                    with_amounts_by_id: true,
                    offset,
                    limit,
                    direction: direction as i32,
                })
                .await
                .expect("roots")
                .into_inner();
            let n = i32::try_from(page.universe_roots.len()).expect("small");
            for (name, root) in page.universe_roots {
                assert!(seen.insert(name, root).is_none(), "listed twice");
            }
            if !page.has_more {
                break;
            }
            offset += n;
        }
        assert_eq!(
            seen.keys().cloned().collect::<BTreeSet<_>>(),
            roots.keys().cloned().collect::<BTreeSet<_>>()
        );
        for (name, root) in &seen {
            assert_eq!(node(root.mssmt_root.as_ref()), roots[name], "{name}");
            let (universe, leaves) = all
                .iter()
                .find(|(u, _)| u.namespace() == *name)
                .expect("a universe");
            assert_eq!(root.id.as_ref(), Some(&rpc_id(universe)));
            let mut want: BTreeMap<String, u64> = BTreeMap::new();
            match universe.id {
                UniverseId::Asset(a) => {
                    want.insert(hex::encode(a), roots[name].sum);
                }
                UniverseId::Group(_) => {
                    for l in leaves {
                        *want.entry(hex::encode(l.asset_id)).or_default() +=
                            l.sum(universe.proof_type);
                    }
                }
            }
            let got: BTreeMap<String, u64> = root.amounts_by_asset_id.clone().into_iter().collect();
            assert_eq!(got, want, "{name}");
        }
    }
    let err = client
        .asset_roots(rpc::AssetRootRequest {
            with_amounts_by_id: false,
            offset: 0,
            limit: MAX_PAGE_SIZE + 1,
            direction: 0,
        })
        .await
        .expect_err("too large");
    assert_eq!(
        err.message(),
        "invalid page (offset=0, limit=16385): invalid request limit: 16385"
    );

    // QueryAssetRoots: both roots of the asset; an unknown asset has
    // tapd's empty roots.
    let both = client
        .query_asset_roots(rpc::AssetRootQuery {
            id: Some(rpc::Id {
                id: Some(id::Id::AssetIdStr(hex::encode(ASSET))),
                proof_type: 0,
            }),
        })
        .await
        .expect("query roots")
        .into_inner();
    let transfer = Universe::new(UniverseId::Asset(ASSET), ProofType::Transfer);
    assert_eq!(
        node(
            both.issuance_root
                .as_ref()
                .and_then(|r| r.mssmt_root.as_ref())
        ),
        roots[&asset_issuance.namespace()]
    );
    assert_eq!(
        node(
            both.transfer_root
                .as_ref()
                .and_then(|r| r.mssmt_root.as_ref())
        ),
        roots[&transfer.namespace()]
    );
    let none = client
        .query_asset_roots(rpc::AssetRootQuery {
            id: Some(rpc::Id {
                id: Some(id::Id::AssetId(vec![0xee; 32])),
                proof_type: 1,
            }),
        })
        .await
        .expect("query roots")
        .into_inner();
    assert_eq!(none.issuance_root, Some(rpc::UniverseRoot::default()));
    assert_eq!(none.transfer_root, Some(rpc::UniverseRoot::default()));

    // AssetLeafKeys and QueryProof, as the syncer runs them: every key,
    // then each proof checked against the root served.
    for (universe, leaves) in &all {
        let universe_root = roots[&universe.namespace()];
        let multiverse_root = tops[&universe.proof_type];
        for limit in [4, 512] {
            let entries = all_leaf_entries(client, universe, limit).await;
            let got: BTreeSet<LeafKey> = entries
                .iter()
                .map(|e| parse_key(e.asset_key.as_ref().expect("key")))
                .collect();
            let want: BTreeSet<LeafKey> = leaves.iter().map(|l| l.key).collect();
            assert_eq!(got.len(), entries.len(), "no key twice");
            assert_eq!(got, want, "{}", universe.namespace());
            for entry in &entries {
                let key = parse_key(entry.asset_key.as_ref().expect("key"));
                let leaf = leaves.iter().find(|l| l.key == key).expect("known");
                assert_eq!(
                    entry.leaf_node_hash,
                    leaf.leaf(universe.proof_type).hash().0.to_vec()
                );
            }
        }
        for l in leaves {
            let proof = client
                .query_proof(rpc::UniverseKey {
                    id: Some(rpc_id(universe)),
                    leaf_key: Some(rpc::AssetKey {
                        outpoint: Some(asset_key::Outpoint::Op(rpc::Outpoint {
                            hash_str: l.key.outpoint.txid_hex(),
                            index: i32::try_from(l.key.outpoint.index).expect("small"),
                        })),
                        script_key: Some(asset_key::ScriptKey::ScriptKeyStr(hex::encode(
                            l.key.script_key,
                        ))),
                    }),
                })
                .await
                .expect("proof")
                .into_inner();
            let served_root = node(
                proof
                    .universe_root
                    .as_ref()
                    .and_then(|r| r.mssmt_root.as_ref()),
            );
            assert_eq!(served_root, universe_root);
            let served = proof.asset_leaf.as_ref().expect("leaf").proof.clone();
            assert_eq!(served, l.proof);
            let tree_leaf = Leaf::new(served, l.sum(universe.proof_type));
            let inclusion = CompressedProof::decode(&proof.universe_inclusion_proof)
                .expect("decode")
                .decompress()
                .expect("decompress");
            assert!(inclusion.verify(&l.key.universe_key(), &tree_leaf, &served_root));
            let served_top = node(proof.multiverse_root.as_ref());
            assert_eq!(served_top, multiverse_root);
            let sum = match universe.proof_type {
                ProofType::Issuance => 1,
                ProofType::Transfer => served_root.sum,
            };
            let up = CompressedProof::decode(&proof.multiverse_inclusion_proof)
                .expect("decode")
                .decompress()
                .expect("decompress");
            assert!(up.verify(
                &universe.multiverse_key(),
                &Leaf::new(served_root.hash.0.to_vec(), sum),
                &served_top
            ));
        }
        // AssetLeaves: every proof once.
        let page = client
            .asset_leaves(rpc::AssetLeavesRequest {
                id: Some(rpc_id(universe)),
                offset: 0,
                limit: 0,
                direction: SortDirection::Asc as i32,
            })
            .await
            .expect("leaves")
            .into_inner();
        let got: BTreeSet<Vec<u8>> = page.leaves.into_iter().map(|l| l.proof).collect();
        let want: BTreeSet<Vec<u8>> = leaves.iter().map(|l| l.proof.clone()).collect();
        assert_eq!(got, want);
        assert!(!page.has_more);
    }

    // A proof type left unspecified finds the leaf in either universe.
    let transfer_leaf = &all[1].1[3];
    let found = client
        .query_proof(rpc::UniverseKey {
            id: Some(rpc::Id {
                id: Some(id::Id::AssetId(ASSET.to_vec())),
                proof_type: 0,
            }),
            leaf_key: Some(ms_smt_key(&transfer_leaf.key)),
        })
        .await
        .expect("either")
        .into_inner();
    assert_eq!(
        found.asset_leaf.expect("leaf").proof,
        transfer_leaf.proof.clone()
    );

    // tapd's errors, word for word.
    let missing = leaf_key(9, 9);
    let err = client
        .query_proof(rpc::UniverseKey {
            id: Some(rpc_id(&asset_issuance)),
            leaf_key: Some(ms_smt_key(&missing)),
        })
        .await
        .expect_err("absent");
    let uni = format!(
        "issuance-{0} (asset_id={0}, group_key=<nil>, proof_type=issuance)",
        hex::encode(ASSET)
    );
    let k = missing.universe_key().to_hex();
    assert_eq!(err.code(), Code::Unknown);
    assert_eq!(
        err.message(),
        format!(
            "query proof (uni={uni}, leaf_key={k}): no universe proof found (uni={uni}, leaf_key={k})"
        )
    );
    let err = client
        .asset_leaf_keys(rpc::AssetLeafKeysRequest {
            id: Some(rpc::Id {
                id: Some(id::Id::AssetId(ASSET.to_vec())),
                proof_type: 0,
            }),
            offset: 0,
            limit: 0,
            direction: 0,
        })
        .await
        .expect_err("unspecified");
    assert_eq!(
        err.message(),
        "proof type (req.id.proof_type) must be specified"
    );
    let err = client
        .query_proof(rpc::UniverseKey {
            id: None,
            leaf_key: None,
        })
        .await
        .expect_err("no id");
    assert_eq!(
        err.message(),
        "unmarshal universe key: universe_key.id: id must be set"
    );

    // A method of the reference's service that is not served.
    let mut grpc = tonic::client::Grpc::new(running.channel.clone());
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<rpc::InfoRequest, rpc::InfoResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/universerpc.Universe/DeleteAssetRoot",
    );
    let err = grpc
        .unary(Request::new(rpc::InfoRequest {}), path, codec)
        .await
        .expect_err("not served");
    assert_eq!(err.code(), Code::Unimplemented);

    running.stop().await;
}

/// `key` as tapd's client sends it (`marshalLeafKey`).
fn ms_smt_key(key: &LeafKey) -> rpc::AssetKey {
    rpc::AssetKey {
        outpoint: Some(asset_key::Outpoint::OpStr(key.outpoint.to_string())),
        script_key: Some(asset_key::ScriptKey::ScriptKeyBytes(
            key.script_key.to_vec(),
        )),
    }
}

#[tokio::test]
async fn serves_tapds_syncer_on_the_memory_store() {
    exercise(Multiverse::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn serves_tapds_syncer_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("universes.db");
    let store = SqliteStore::open(path.to_str().expect("utf-8"))
        .await
        .expect("open");
    exercise(Multiverse::new(store)).await;
}

#[tokio::test]
async fn a_large_page_stays_under_the_message_limit() {
    // 40 leaves of 200 KiB: a page of all of them would be 8 MB.
    let multiverse = Multiverse::new(MemoryStore::new());
    let universe = Universe::new(UniverseId::Asset(ASSET), ProofType::Issuance);
    let leaves: Vec<UniverseLeaf> = (0..40)
        .map(|n| UniverseLeaf {
            proof: vec![n; 200 << 10],
            ..leaf(4, n, ASSET, false)
        })
        .collect();
    multiverse.insert(&universe, &leaves).await.expect("insert");
    let mut running = start(multiverse).await;
    let page = running
        .client
        .asset_leaves(rpc::AssetLeavesRequest {
            id: Some(rpc_id(&universe)),
            offset: 0,
            limit: 40,
            direction: SortDirection::Asc as i32,
        })
        .await
        .expect("leaves")
        .into_inner();
    assert!(page.has_more);
    assert!(!page.leaves.is_empty() && page.leaves.len() < 40);
    let rest = running
        .client
        .asset_leaves(rpc::AssetLeavesRequest {
            id: Some(rpc_id(&universe)),
            offset: i32::try_from(page.leaves.len()).expect("small"),
            limit: 40,
            direction: SortDirection::Asc as i32,
        })
        .await
        .expect("leaves")
        .into_inner();
    let mut got: BTreeSet<Vec<u8>> = page.leaves.into_iter().map(|l| l.proof).collect();
    got.extend(rest.leaves.into_iter().map(|l| l.proof));
    assert!(
        got.len() > 20,
        "the second page goes on where the first stopped"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_tapds_syncer_on_postgres() {
    // A database of its own: the multiverse trees are shared by every
    // universe in a database, and the other test binaries write into the
    // shared test database at the same time.
    let Some(admin) = ms_smt_test_support::pg_url("serves_tapds_syncer_on_postgres") else {
        return;
    };
    let db =
        ms_smt_test_support::scratch_postgres::ScratchPostgres::create(&admin, "grpc_syncer").await;
    let store = db.connect().await;
    exercise(Multiverse::new(store.clone())).await;
    db.drop_after(store).await;
}
