//! Writes the upgrade fixtures: a SQLite file and a Postgres database made
//! by this release's code, and what a later release must find in them.
//!
//! ```text
//! cargo run --release --all-features --example upgrade_fixture -- OUT_DIR [POSTGRES_URL]
//! ```
//!
//! Writes `OUT_DIR/sqlite.db` and `OUT_DIR/expected.json`; with a URL it
//! writes the same trees into that (empty) Postgres database, whose dump
//! (`pg_dump --inserts`) a caller saves beside them. Each database holds:
//! compacted and full trees, a tree of 2-level rows, a parent over three
//! children written in the same commits, a pinned root, a journal with two
//! versions in it, a tree emptied again, an access token that
//! authenticates and one revoked. `expected.json` lists every namespace's
//! root, leaf count, leaves, pins and journal, and each token's secret.

use std::error::Error;
use std::path::{Path, PathBuf};

use ms_smt::federation::access::{Grants, issue_token, unix_now};
use ms_smt::store::{
    JournalStore, PinStore, PostgresStore, SqliteStore, StratumHeight, TreeStore, Writable,
};
use ms_smt::{Compacted, CompactedTree, Forest, Full, FullTree, Key, Leaf, Link, Tree};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

type Res<T> = Result<T, Box<dyn Error>>;

fn key(tag: &str, i: u64) -> Key {
    Key(Sha256::digest(format!("{tag}/{i}").as_bytes()).into())
}

fn leaf(tag: &str, i: u64) -> Leaf {
    Leaf::new(format!("{tag} leaf {i}").into_bytes(), 1 + i * 7)
}

async fn leaves_json<S: TreeStore, L: ms_smt::Layout>(tree: &Tree<S, L>) -> Res<Value> {
    let mut out = Vec::new();
    for entry in tree.leaves(..).collect_all().await? {
        out.push(json!({
            "key": entry.key.to_string(),
            "value": hex::encode(&entry.leaf.value()),
            "sum": entry.leaf.sum().to_string(),
        }));
    }
    Ok(Value::Array(out))
}

/// What the fixture needs of a SQL store beyond the tree traits: the
/// engines' inherent methods.
trait FixtureStore: JournalStore + PinStore + Writable + 'static {
    fn ns(&self, name: &str) -> Self;
    fn with_height(self, height: StratumHeight) -> Self;
    async fn issue(&self, label: &str, grants: &Grants) -> Res<(String, String, String)>;
    async fn revoke(&self, id: &str) -> Res<()>;
}

// The engines' inherent methods (their connection type is the crate's own).
impl FixtureStore for SqliteStore {
    fn ns(&self, name: &str) -> Self {
        self.open_namespace(name)
    }
    fn with_height(self, height: StratumHeight) -> Self {
        self.with_stratum_height(height)
    }
    async fn issue(&self, label: &str, grants: &Grants) -> Res<(String, String, String)> {
        let token = issue_token(self, label, grants, None).await?;
        let secret = token.secret.expose().to_owned();
        Ok((token.record.id, secret, token.record.grants))
    }
    async fn revoke(&self, id: &str) -> Res<()> {
        self.revoke_token(id, unix_now()).await?;
        Ok(())
    }
}

impl FixtureStore for PostgresStore {
    fn ns(&self, name: &str) -> Self {
        self.open_namespace(name)
    }
    fn with_height(self, height: StratumHeight) -> Self {
        self.with_stratum_height(height)
    }
    async fn issue(&self, label: &str, grants: &Grants) -> Res<(String, String, String)> {
        let token = issue_token(self, label, grants, None).await?;
        let secret = token.secret.expose().to_owned();
        Ok((token.record.id, secret, token.record.grants))
    }
    async fn revoke(&self, id: &str) -> Res<()> {
        self.revoke_token(id, unix_now()).await?;
        Ok(())
    }
}

/// Writes the fixture's trees into `store`'s database; returns what they hold.
async fn write_trees<S: FixtureStore>(store: &S) -> Res<Value> {
    let mut namespaces = serde_json::Map::new();

    // A compacted tree with a pin, then a journal over two more versions.
    let assets = CompactedTree::new(store.ns("assets"));
    assets
        .insert_many((0..200).map(|i| (key("assets", i), leaf("assets", i))))
        .await?;
    assets.pin("v1").await?;
    assets.store().enable_journal().await?;
    assets
        .insert_many((200..300).map(|i| (key("assets", i), leaf("assets", i))))
        .await?;
    assets
        .insert_many((0..20).map(|i| (key("assets", i * 3), Leaf::empty())))
        .await?;

    // A full-layout tree.
    let full = FullTree::new(store.ns("full-tree"));
    full.insert_many((0..50).map(|i| (key("full", i), leaf("full", i))))
        .await?;

    // Rows of 2 levels.
    let height = StratumHeight::new(2).ok_or("height 2")?;
    let tall = CompactedTree::new(store.ns("short-rows").with_height(height));
    tall.insert_many((0..40).map(|i| (key("short", i), leaf("short", i))))
        .await?;

    // A parent over three children, written in the same commits.
    let link = Link::rule("multiverse", |ns| {
        let id = ns.strip_prefix("issuance-")?;
        Some(Key(Sha256::digest(id.as_bytes()).into()))
    });
    let forest = Forest::<_, Compacted>::new(store.forest().clone()).with_link(link);
    for (n, child) in ["issuance-a", "issuance-b", "issuance-c"].iter().enumerate() {
        let n = n as u64;
        forest
            .insert_many((0..10 + n).map(|i| (*child, key(child, i), leaf(child, i))))
            .await?;
    }

    // Emptied again.
    let emptied = CompactedTree::new(store.ns("emptied"));
    emptied
        .insert_many((0..5).map(|i| (key("emptied", i), leaf("emptied", i))))
        .await?;
    emptied
        .insert_many((0..5).map(|i| (key("emptied", i), Leaf::empty())))
        .await?;

    for name in [
        "assets",
        "full-tree",
        "short-rows",
        "multiverse",
        "issuance-a",
        "issuance-b",
        "issuance-c",
        "emptied",
    ] {
        let ns = store.ns(name);
        let layout = if name == "full-tree" { "full" } else { "compacted" };
        let (root, leaves) = if layout == "full" {
            let tree = Tree::<_, Full>::new(ns.clone());
            (tree.root().await?, leaves_json(&tree).await?)
        } else {
            let tree = Tree::<_, Compacted>::new(ns.clone());
            (tree.root().await?, leaves_json(&tree).await?)
        };
        let pins: Vec<Value> = Tree::<_, Compacted>::new(ns.clone())
            .pins()
            .await?
            .into_iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "version": p.version,
                    "root_hash": p.root.hash.to_string(),
                    "root_sum": p.root.sum.to_string(),
                })
            })
            .collect();
        let journal = match ns.journal().await? {
            None => Value::Null,
            Some(state) => {
                let page = ns.changes(state.from_version, 10_000).await?;
                let changes: Vec<Value> = page
                    .map(|p| p.changes)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| {
                        json!({
                            "version": c.version,
                            "key": c.key.to_string(),
                            "old_value": hex::encode(&c.old.value()),
                            "old_sum": c.old.sum().to_string(),
                            "new_value": hex::encode(&c.new.value()),
                            "new_sum": c.new.sum().to_string(),
                        })
                    })
                    .collect();
                json!({ "from_version": state.from_version, "changes": changes })
            }
        };
        namespaces.insert(
            name.to_owned(),
            json!({
                "layout": layout,
                "root_hash": root.hash.to_string(),
                "root_sum": root.sum.to_string(),
                "leaves": leaves,
                "pins": pins,
                "journal": journal,
            }),
        );
    }

    // Tokens: one that authenticates, one revoked.
    let grants: Grants = "read:*,write:assets".parse()?;
    let mut tokens = Vec::new();
    for (label, revoked) in [("fixture reader-writer", false), ("fixture revoked", true)] {
        let (id, secret, grants) = store.issue(label, &grants).await?;
        if revoked {
            store.revoke(&id).await?;
        }
        tokens.push(json!({
            "id": id,
            "secret": secret,
            "label": label,
            "grants": grants,
            "revoked": revoked,
        }));
    }
    Ok(json!({ "namespaces": namespaces, "tokens": tokens }))
}

#[tokio::main]
async fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().ok_or("usage: upgrade_fixture OUT_DIR [POSTGRES_URL]")?);
    std::fs::create_dir_all(&out)?;
    let db: &Path = &out.join("sqlite.db");
    ms_smt::test_utils::remove_sqlite_files(db);
    let sqlite = SqliteStore::open(db).await?;
    let mut expected = serde_json::Map::new();
    expected.insert("sqlite".into(), write_trees(&sqlite).await?);
    expected.insert("sqlite_schema".into(), json!(format!("{:?}", sqlite.schema_state().await?)));
    sqlite.pool().close().await;
    if let Some(url) = args.next() {
        let pg = PostgresStore::connect(&url).await?;
        expected.insert("postgres".into(), write_trees(&pg).await?);
        expected.insert("postgres_schema".into(), json!(format!("{:?}", pg.schema_state().await?)));
        pg.pool().close().await;
    }
    expected.insert(
        "written_by".into(),
        json!(format!("ms-smt {}", env!("CARGO_PKG_VERSION"))),
    );
    let text = serde_json::to_string_pretty(&Value::Object(expected))?;
    std::fs::write(out.join("expected.json"), text + "\n")?;
    Ok(())
}
