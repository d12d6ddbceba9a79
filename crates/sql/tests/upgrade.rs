//! Databases written by the released 0.1.0 (one crate; the server's access
//! tokens in the tree schema's migration 7 / 6) open with this release on
//! both engines with everything intact: the ledger gains its migration
//! sets, every tree's root, leaves, pins, journal and leaf count are what
//! the release wrote, every audit is clean, and the trees take writes.
//! (That a token minted then still authenticates is the server's test:
//! `crates/server/tests/upgrade.rs`.)
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use ms_smt::store::{JournalStore, PinStore, TreeStore, Writable};
use ms_smt::{Compacted, Full, Key, Layout, Leaf, Tree};
use ms_smt_sql::{LeafCount, PostgresStore, SchemaState, SqlStore, SqliteStore, TREE_SCHEMA};
use serde_json::Value;
use support::upgrade::{RestoredPostgres, expected, sqlite_copy};

const RELEASE: &str = "0.1.0";

fn text<'v>(v: &'v Value, field: &str) -> &'v str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

fn sum(v: &Value, field: &str) -> u64 {
    text(v, field).parse().expect("a sum")
}

/// The leaves of `tree` as the fixture lists them.
async fn leaves_of<S: TreeStore, L: Layout>(tree: &Tree<S, L>) -> Vec<(String, String, u64)> {
    let entries = tree.leaves(..).collect_all().await.expect("leaves");
    entries
        .into_iter()
        .map(|e| {
            let value = hex::encode(e.leaf.value());
            (e.key.to_string(), value, e.leaf.sum())
        })
        .collect()
}

/// One namespace against what the release wrote of it.
async fn check_tree<S, L>(tree: &Tree<S, L>, want: &Value, name: &str)
where
    S: Writable + PinStore + JournalStore + ms_smt::store::AuditStore,
    L: Layout,
{
    let root = tree.root().await.expect("root");
    assert_eq!(
        root.hash.to_string(),
        text(want, "root_hash"),
        "{name}: root"
    );
    assert_eq!(root.sum, sum(want, "root_sum"), "{name}: sum");
    let leaves: Vec<(String, String, u64)> = want["leaves"]
        .as_array()
        .expect("leaves")
        .iter()
        .map(|l| {
            (
                text(l, "key").into(),
                text(l, "value").into(),
                sum(l, "sum"),
            )
        })
        .collect();
    assert_eq!(leaves_of(tree).await, leaves, "{name}: leaves");
    let pins = tree.pins().await.expect("pins");
    let want_pins = want["pins"].as_array().expect("pins");
    assert_eq!(pins.len(), want_pins.len(), "{name}: pins");
    for (pin, w) in pins.iter().zip(want_pins) {
        assert_eq!(pin.name, text(w, "name"), "{name}: pin name");
        assert_eq!(
            Some(pin.version),
            w["version"].as_u64(),
            "{name}: pin version"
        );
        assert_eq!(
            pin.root.hash.to_string(),
            text(w, "root_hash"),
            "{name}: pin root"
        );
        let at_pin = tree.at_pin(&pin.name).await.expect("at pin");
        assert_eq!(
            at_pin.root().await.expect("pinned root"),
            pin.root,
            "{name}: pinned read"
        );
    }
    let journal = tree.store().journal().await.expect("journal");
    match want["journal"].as_object() {
        None => assert_eq!(journal, None, "{name}: no journal"),
        Some(w) => {
            let state = journal.expect("a journal");
            assert_eq!(
                Some(state.from_version),
                w["from_version"].as_u64(),
                "{name}: journal"
            );
            let page = tree.store().changes(state.from_version, 10_000).await;
            let changes = page.expect("changes").expect("a page").changes;
            let want_changes = w["changes"].as_array().expect("changes");
            assert_eq!(changes.len(), want_changes.len(), "{name}: journal changes");
            for (c, w) in changes.iter().zip(want_changes) {
                assert_eq!(Some(c.version), w["version"].as_u64());
                assert_eq!(c.key.to_string(), text(w, "key"));
                assert_eq!(hex::encode(c.old.value()), text(w, "old_value"));
                assert_eq!(c.old.sum(), sum(w, "old_sum"));
                assert_eq!(hex::encode(c.new.value()), text(w, "new_value"));
                assert_eq!(c.new.sum(), sum(w, "new_sum"));
            }
        }
    }
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{name}: {:?}", report.problems);
}

/// Everything the release wrote into `store`'s database is there.
async fn check_database<C: ms_smt_sql::Dialect>(store: &SqlStore<C>, want: &Value)
where
    SqlStore<C>: Writable + PinStore + JournalStore + ms_smt::store::AuditStore,
{
    assert_eq!(
        store.schema_state().await.expect("state"),
        SchemaState::Current
    );
    let listing = store.namespaces().await.expect("namespaces");
    let namespaces = want["namespaces"].as_object().expect("namespaces");
    for (name, w) in namespaces {
        let ns = store.open_namespace(name);
        match text(w, "layout") {
            "full" => check_tree(&Tree::<_, Full>::new(ns), w, name).await,
            _ => check_tree(&Tree::<_, Compacted>::new(ns), w, name).await,
        }
        let listed = listing.iter().find(|l| l.name == *name).expect("listed");
        let summary = listed.summary.as_ref().expect("sound");
        let leaves = w["leaves"].as_array().expect("leaves").len() as u64;
        assert_eq!(
            summary.leaves,
            LeafCount::Exact(leaves),
            "{name}: leaf count"
        );
    }
    // The trees take writes, and the journal records them.
    let assets = Tree::<_, Compacted>::new(store.open_namespace("assets"));
    let before = assets
        .store()
        .journal()
        .await
        .expect("journal")
        .expect("on");
    let key = Key([0xab; 32]);
    assets
        .insert(key, Leaf::new(b"after the upgrade".to_vec(), 5))
        .await
        .expect("a write after the upgrade");
    let after = assets
        .store()
        .journal()
        .await
        .expect("journal")
        .expect("on");
    assert_eq!(after.head_version, before.head_version + 1);
    let report = assets.audit().await.expect("audit");
    assert!(report.is_clean(), "after a write: {:?}", report.problems);
}

/// The ledger's rows of the tree schema: every version the release
/// applied, the retired token version among them, each with this crate's
/// checksum.
async fn check_ledger(rows: Vec<(String, i64, Option<Vec<u8>>)>, engine: &'static str) {
    let list = match engine {
        "sqlite" => TREE_SCHEMA.sqlite,
        _ => TREE_SCHEMA.postgres,
    };
    let tree: Vec<(i64, Vec<u8>)> = rows
        .iter()
        .filter(|(set, _, _)| set == TREE_SCHEMA.name)
        .map(|(_, v, c)| (*v, c.clone().expect("a checksum")))
        .collect();
    let want: Vec<(i64, Vec<u8>)> = list
        .iter()
        .map(|m| (m.version, m.checksum().to_vec()))
        .collect();
    assert_eq!(tree, want, "{engine}: the tree schema's ledger rows");
    assert!(
        rows.iter().all(|(set, _, _)| set == TREE_SCHEMA.name),
        "{engine}: only the tree schema has run here"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_of_the_release_opens_intact() {
    let want = expected(RELEASE);
    let file = sqlite_copy(RELEASE);
    let store = SqliteStore::open(&file.path)
        .await
        .expect("open the release's file");
    check_database(&store, &want["sqlite"]).await;
    let rows: Vec<(String, i64, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT migration_set, version, checksum FROM ms_smt_migrations \
         ORDER BY migration_set, version",
    )
    .fetch_all(store.pool())
    .await
    .expect("ledger");
    check_ledger(rows, "sqlite").await;
    let tokens: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ms_smt_tokens")
        .fetch_one(store.pool())
        .await
        .expect("the tokens are still there");
    assert_eq!(tokens, 2);
    store.pool().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_dump_of_the_release_opens_intact() {
    let Some(url) = support::pg_url("a_postgres_dump_of_the_release_opens_intact") else {
        return;
    };
    let want = expected(RELEASE);
    let restored = RestoredPostgres::load(&url, RELEASE).await;
    let store = PostgresStore::connect(&restored.url)
        .await
        .expect("open the release's dump");
    check_database(&store, &want["postgres"]).await;
    let rows: Vec<(String, i64, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT migration_set, version, checksum FROM ms_smt_migrations \
         ORDER BY migration_set, version",
    )
    .fetch_all(store.pool())
    .await
    .expect("ledger");
    check_ledger(rows, "postgres").await;
    let tokens: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ms_smt_tokens")
        .fetch_one(store.pool())
        .await
        .expect("the tokens are still there");
    assert_eq!(tokens, 2);
    store.pool().close().await;
    restored.drop_database().await;
}
