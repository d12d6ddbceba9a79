//! Namespace listings (`SqlStore::namespaces`) on both SQL engines: the
//! leaf count every commit keeps, damaged namespaces listed beside sound
//! ones, and the one-time count of namespaces written before the counts.
//!
//! * `counts_follow_every_write`: inserts, replacements, deletes, repeated
//!   keys, a store-writer group over several trees and their parent,
//!   copies (current and pinned), a clear and an import's swap: after each
//!   the listed count equals the model's, on both layouts.
//! * `damaged_namespaces_are_listed`: a root column of the wrong length, a
//!   root row flipped, a root row deleted, a stray root row under an
//!   empty tree, a bad height: each is its namespace's `NamespaceDamage`,
//!   and the sound namespace beside them is listed as usual.
//! * `uncounted_namespaces_are_counted_once`: a namespace turned back into
//!   one written before the counts (`leaves_since` set, changes counted
//!   since) is counted by `count_leaves` while writes go on; a damaged one
//!   is reported and left uncounted.
//!
//! Each runs in a database of its own (SQLite: a temporary file; Postgres:
//! a fresh schema of `MSSMT_PG_URL`, dropped at the end).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::collections::BTreeMap;
use std::str::FromStr;

use ms_smt::store::{BulkStore, ForestStore, PinStore, TreeStore};

use ms_smt::{
    Compacted, Forest, Full, Key, Layout, Leaf, Link, LinkSum, ProgressSink, Tree, WriterConfig,
};
use ms_smt_sql::{
    LeafCount, NamespaceDamage, NamespaceListing, PostgresStore, RecountProblem, SqlStoreError,
    SqliteStore,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use support::{TempDb, hkey, pg_url, unique};

/// One engine's store, with what these tests need of `SqlStore`.
trait Listed:
    TreeStore<Error = SqlStoreError>
    + BulkStore
    + PinStore
    + ForestStore<Tree = Self, Error = SqlStoreError>
    + Clone
    + Send
    + Sync
    + 'static
{
    fn named(&self, name: &str) -> Self;
    async fn listing(&self) -> Vec<NamespaceListing>;
    async fn recount(&self) -> Vec<ms_smt_sql::LeafRecount>;
    /// Runs `sql` (several statements) on the store's database.
    async fn exec(&self, sql: &str);
}

macro_rules! listed {
    ($store:ty) => {
        impl Listed for $store {
            fn named(&self, name: &str) -> Self {
                <$store>::open_namespace(self, name)
            }
            async fn listing(&self) -> Vec<NamespaceListing> {
                self.namespaces().await.expect("namespaces")
            }
            async fn recount(&self) -> Vec<ms_smt_sql::LeafRecount> {
                self.count_leaves(&ProgressSink::default())
                    .await
                    .expect("count_leaves")
            }
            async fn exec(&self, sql: &str) {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(self.pool())
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        }
    };
}
listed!(SqliteStore);
listed!(PostgresStore);

/// The listing of `name`.
async fn entry<S: Listed>(store: &S, name: &str) -> NamespaceListing {
    store
        .listing()
        .await
        .into_iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("{name} is not listed"))
}

/// The listed leaf count of `name` (which must be sound).
async fn count<S: Listed>(store: &S, name: &str) -> LeafCount {
    match entry(store, name).await.summary {
        Ok(s) => s.leaves,
        Err(e) => panic!("{name} listed as damaged: {e}"),
    }
}

/// Live leaves by key.
type Model = BTreeMap<Key, Leaf>;

fn apply(model: &mut Model, batch: &[(Key, Leaf)]) {
    for (k, l) in batch {
        if l.is_empty() {
            model.remove(k);
        } else {
            model.insert(*k, l.clone());
        }
    }
}

fn leaf(tag: &str, i: u64) -> Leaf {
    Leaf::new(format!("{tag}/{i}").into_bytes(), i + 1)
}

/// A batch over keys `0..span` of `tag`: new leaves, replacements, deletes
/// (some of absent keys) and repeated keys, from `rng`.
fn churn(rng: &mut StdRng, tag: &str, span: u64, n: usize) -> Vec<(Key, Leaf)> {
    (0..n)
        .map(|_| {
            let i = rng.gen_range(0..span);
            let l = if rng.gen_bool(0.3) {
                Leaf::empty()
            } else {
                leaf(tag, rng.gen_range(0..1000))
            };
            (hkey(tag, i), l)
        })
        .collect()
}

async fn counts_follow_every_write<S: Listed, L: Layout>(base: &S, seed: u64) {
    let lay = std::any::type_name::<L>();
    let mut rng = StdRng::seed_from_u64(seed);
    let name = unique("counts");
    let tree: Tree<S, L> = Tree::new(base.named(&name));
    assert!(
        store_lists_no(base, &name).await,
        "{lay}: listed before a write"
    );
    let mut model = Model::new();
    for round in 0..6 {
        let batch = churn(&mut rng, &name, 60, 50);
        tree.insert_many(batch.clone()).await.expect("write");
        apply(&mut model, &batch);
        assert_eq!(
            count(base, &name).await,
            LeafCount::Exact(model.len() as u64),
            "{lay}: round {round}"
        );
    }
    // A delete of an absent key and a replacement by the same leaf.
    let (k, l) = model
        .iter()
        .next()
        .map(|(k, l)| (*k, l.clone()))
        .expect("a leaf");
    tree.insert_many([(hkey("absent", 0), Leaf::empty()), (k, l)])
        .await
        .expect("no-op");
    assert_eq!(
        count(base, &name).await,
        LeafCount::Exact(model.len() as u64)
    );

    // Copies: the current tree, and a pinned one (not counted: a pin keeps
    // no count), into vacant namespaces.
    tree.pin("then").await.expect("pin");
    let pinned = model.len() as u64;
    let more = churn(&mut rng, &name, 60, 30);
    tree.insert_many(more.clone()).await.expect("write");
    apply(&mut model, &more);
    let copy: Tree<S, L> = Tree::new(base.named(&format!("{name}-copy")));
    tree.view().copy_to(&copy).await.expect("copy");
    assert_eq!(
        count(base, &format!("{name}-copy")).await,
        LeafCount::Exact(model.len() as u64),
        "{lay}: copy"
    );
    let old: Tree<S, L> = Tree::new(base.named(&format!("{name}-old")));
    tree.at_pin("then")
        .await
        .expect("at_pin")
        .copy_to(&old)
        .await
        .expect("copy at pin");
    assert!(
        matches!(
            count(base, &format!("{name}-old")).await,
            LeafCount::Uncounted { .. }
        ),
        "{lay}: a pinned copy is counted"
    );
    let counted = base.recount().await;
    let old_name = format!("{name}-old");
    let mine: Vec<_> = counted.iter().filter(|r| r.name == old_name).collect();
    assert_eq!(mine.len(), 1, "{lay}: {counted:?}");
    assert_eq!(mine[0].outcome, Ok(pinned), "{lay}");
    assert_eq!(count(base, &old_name).await, LeafCount::Exact(pinned));
    tree.unpin("then").await.expect("unpin");

    // Emptied by deletes, then cleared after a refill.
    let all: Vec<(Key, Leaf)> = model.keys().map(|k| (*k, Leaf::empty())).collect();
    tree.insert_many(all).await.expect("delete all");
    model.clear();
    assert_eq!(count(base, &name).await, LeafCount::Exact(0), "{lay}");
    let refill = churn(&mut rng, &name, 60, 40);
    tree.insert_many(refill.clone()).await.expect("refill");
    apply(&mut model, &refill);
    assert_eq!(
        count(base, &name).await,
        LeafCount::Exact(model.len() as u64)
    );
    tree.delete_all().await.expect("clear");
    assert_eq!(
        count(base, &name).await,
        LeafCount::Exact(0),
        "{lay}: clear"
    );

    // An import: built in a staging namespace, swapped in by a rename.
    let trunk = copy.view().export_trunk(2).await.expect("trunk");
    let mut import = tree.import(trunk.clone()).await.expect("import");
    for (position, _) in &trunk.chunks {
        let chunk = copy.view().export_chunk(*position).await.expect("chunk");
        import.add(&chunk).await.expect("add");
    }
    import.finish().await.expect("finish");
    let copied = count(base, &format!("{name}-copy")).await;
    assert_eq!(count(base, &name).await, copied, "{lay}: import");
    for n in [name.clone(), format!("{name}-copy"), old_name] {
        Tree::<S, L>::new(base.named(&n))
            .delete_all()
            .await
            .expect("cleanup");
    }
}

/// True when `name` is not listed.
async fn store_lists_no<S: Listed>(store: &S, name: &str) -> bool {
    store.listing().await.iter().all(|n| n.name != name)
}

/// A store-writer group over several trees and their parent: each tree's
/// count, and the parent's (one leaf per child).
async fn forest_counts<S: Listed>(base: &S, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let tag = unique("forest");
    let parent = format!("{tag}-parent");
    let children: Vec<String> = (0..4).map(|i| format!("{tag}-c{i}")).collect();
    let link = Link::children(
        &parent,
        children
            .iter()
            .enumerate()
            .map(|(i, c)| (c.clone(), hkey(&tag, 1000 + i as u64))),
    )
    .with_sum(LinkSum::Fixed(1));
    let forest = Forest::<S, Compacted>::new(base.clone()).with_link(link);
    let writer = forest.writer(WriterConfig::default());
    let mut models: Vec<Model> = vec![Model::new(); children.len()];
    for _ in 0..3 {
        let mut writes = Vec::new();
        for (c, child) in children.iter().enumerate().take(3) {
            for (k, l) in churn(&mut rng, child, 40, 20) {
                writes.push((child.clone(), k, l.clone()));
                apply(&mut models[c], &[(k, l)]);
            }
        }
        writer.submit(writes).await.expect("submit");
    }
    writer.close().await;
    for (child, model) in children.iter().zip(&models).take(3) {
        assert_eq!(
            count(base, child).await,
            LeafCount::Exact(model.len() as u64)
        );
    }
    assert!(store_lists_no(base, &children[3]).await);
    assert_eq!(count(base, &parent).await, LeafCount::Exact(3));
}

/// A root-hash column of the wrong length, a flipped and a deleted root
/// row, a stray root row and a bad height: each listed as its damage, the
/// sound namespace beside them as usual.
async fn damaged_namespaces_are_listed<S: Listed>(base: &S) {
    let tag = unique("damaged");
    let names: Vec<String> = ["column", "flipped", "deleted", "stray", "height", "sound"]
        .iter()
        .map(|n| format!("{tag}-{n}"))
        .collect();
    for (i, n) in names.iter().enumerate() {
        let tree: Tree<S, Full> = Tree::new(base.named(n));
        let batch: Vec<(Key, Leaf)> = (0..20).map(|j| (hkey(n, j), leaf(n, j))).collect();
        tree.insert_many(batch).await.expect("fill");
        if names[i].ends_with("stray") {
            // Emptied by deletes: no rows left; a root row is put back below.
            let all: Vec<(Key, Leaf)> = (0..20).map(|j| (hkey(n, j), Leaf::empty())).collect();
            tree.insert_many(all).await.expect("empty");
        }
    }
    let id = |n: &str| format!("(SELECT id FROM ms_smt_namespaces WHERE name = '{n}')");
    let sound = id(&names[5]);
    base.exec(&format!(
        "UPDATE ms_smt_namespaces SET root_hash = substr(root_hash, 1, 3) WHERE name = '{}';
         UPDATE ms_smt_strata SET body = (SELECT body FROM ms_smt_strata WHERE ns = {sound} \
             AND depth = 0) WHERE ns = {} AND depth = 0;
         DELETE FROM ms_smt_strata WHERE ns = {} AND depth = 0;
         INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
             SELECT {}, path, depth, body, version FROM ms_smt_strata \
             WHERE ns = {sound} AND depth = 0;
         UPDATE ms_smt_namespaces SET height = 9 WHERE name = '{}';",
        names[0],
        id(&names[1]),
        id(&names[2]),
        id(&names[3]),
        names[4]
    ))
    .await;
    let listing = base.listing().await;
    let damage = |n: &str| {
        listing
            .iter()
            .find(|l| l.name == n)
            .unwrap_or_else(|| panic!("{n} not listed"))
            .summary
            .clone()
    };
    assert_eq!(
        damage(&names[0]),
        Err(NamespaceDamage::RootColumn { len: 3 })
    );
    assert!(
        matches!(damage(&names[1]), Err(NamespaceDamage::RootMismatch { .. })),
        "{:?}",
        damage(&names[1])
    );
    assert_eq!(damage(&names[2]), Err(NamespaceDamage::MissingRootRow));
    assert_eq!(damage(&names[3]), Err(NamespaceDamage::StrayRootRow));
    assert_eq!(damage(&names[4]), Err(NamespaceDamage::StratumHeight(9)));
    let sound = damage(&names[5]).expect("the sound namespace");
    assert_eq!(sound.leaves, LeafCount::Exact(20));
    base.exec(&format!(
        "UPDATE ms_smt_namespaces SET height = 4 WHERE name = '{}'",
        names[4]
    ))
    .await;
}

/// Namespaces turned back into ones written before the counts: counted
/// once, with the writes made since the upgrade and during the count; a
/// namespace with a row that does not decode is reported and left
/// uncounted.
async fn uncounted_namespaces_are_counted_once<S: Listed>(base: &S, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let tag = unique("uncounted");
    let (a, b, bad) = (format!("{tag}-a"), format!("{tag}-b"), format!("{tag}-bad"));
    let mut models = [Model::new(), Model::new()];
    for (n, m) in [&a, &b].into_iter().zip(models.iter_mut()) {
        let batch = churn(&mut rng, n, 300, 400);
        Tree::<S, Compacted>::new(base.named(n))
            .insert_many(batch.clone())
            .await
            .expect("fill");
        apply(m, &batch);
    }
    let bad_tree: Tree<S, Compacted> = Tree::new(base.named(&bad));
    bad_tree
        .insert_many((0..50).map(|j| (hkey(&bad, j), leaf(&bad, j))))
        .await
        .expect("fill");
    // As the migration leaves them: counting since the current version.
    base.exec(&format!(
        "UPDATE ms_smt_namespaces SET leaves = 0, leaves_since = version \
         WHERE name IN ('{a}', '{b}', '{bad}')"
    ))
    .await;
    assert!(matches!(count(base, &a).await, LeafCount::Uncounted { .. }));
    // Writes after the upgrade: counted as changes until the count.
    let tree_a: Tree<S, Compacted> = Tree::new(base.named(&a));
    let after = churn(&mut rng, &a, 300, 100);
    tree_a.insert_many(after.clone()).await.expect("write");
    apply(&mut models[0], &after);
    // A row of `bad` below the root that does not decode.
    base.exec(&format!(
        "UPDATE ms_smt_strata SET body = substr(body, 1, 3) WHERE ns = \
         (SELECT id FROM ms_smt_namespaces WHERE name = '{bad}') AND depth = \
         (SELECT MAX(depth) FROM ms_smt_strata WHERE ns = \
             (SELECT id FROM ms_smt_namespaces WHERE name = '{bad}'))"
    ))
    .await;
    // A writer keeps writing `a` while the count runs.
    let writer_tree = tree_a.clone();
    let mut writer_rng = StdRng::seed_from_u64(seed ^ 1);
    let writes: Vec<Vec<(Key, Leaf)>> = (0..20)
        .map(|_| churn(&mut writer_rng, &a, 300, 10))
        .collect();
    let concurrent = writes.clone();
    let writing = tokio::spawn(async move {
        for batch in concurrent {
            writer_tree
                .insert_many(batch)
                .await
                .expect("concurrent write");
        }
    });
    let counted = base.recount().await;
    writing.await.expect("writer");
    for batch in &writes {
        apply(&mut models[0], batch);
    }
    let outcome = |n: &str| {
        counted
            .iter()
            .find(|r| r.name == n)
            .unwrap_or_else(|| panic!("{n} not counted: {counted:?}"))
            .outcome
            .clone()
    };
    assert!(outcome(&a).is_ok(), "{:?}", outcome(&a));
    assert_eq!(outcome(&b), Ok(models[1].len() as u64));
    assert!(
        matches!(outcome(&bad), Err(RecountProblem::Row(_))),
        "{:?}",
        outcome(&bad)
    );
    assert_eq!(
        count(base, &a).await,
        LeafCount::Exact(models[0].len() as u64)
    );
    assert_eq!(
        count(base, &b).await,
        LeafCount::Exact(models[1].len() as u64)
    );
    assert!(matches!(
        count(base, &bad).await,
        LeafCount::Uncounted { .. }
    ));
    // Counted ones stay exact under more writes; a second count has
    // nothing left but the damaged one.
    let more = churn(&mut rng, &b, 300, 100);
    Tree::<S, Compacted>::new(base.named(&b))
        .insert_many(more.clone())
        .await
        .expect("write");
    apply(&mut models[1], &more);
    assert_eq!(
        count(base, &b).await,
        LeafCount::Exact(models[1].len() as u64)
    );
    let again = base.recount().await;
    let names: Vec<&str> = again
        .iter()
        .map(|r| r.name.as_str())
        .filter(|n| n.starts_with(&tag))
        .collect();
    assert_eq!(names, [bad.as_str()]);
}

async fn all_scenarios<S: Listed>(base: &S, seed: u64) {
    counts_follow_every_write::<S, Compacted>(base, seed).await;
    counts_follow_every_write::<S, Full>(base, seed + 1).await;
    forest_counts(base, seed + 2).await;
    damaged_namespaces_are_listed(base).await;
    uncounted_namespaces_are_counted_once(base, seed + 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_listings() {
    let seed = support::test_seed();
    let file = TempDb::new("listing");
    let options = SqliteStore::connect_options(&file.path)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
    let store = SqliteStore::open_with(options).await.expect("open");
    all_scenarios(&store, seed).await;
    store.pool().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_listings() {
    let Some(url) = pg_url("listing::postgres_listings") else {
        return;
    };
    let seed = support::test_seed();
    let schema = support::sanitize(&unique("ms_smt_listing")).to_lowercase();
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&admin)
        .await
        .expect("create schema");
    let options = PgConnectOptions::from_str(&url)
        .expect("MSSMT_PG_URL")
        .options([("search_path", schema.as_str())]);
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .expect("schema pool");
    let store = PostgresStore::from_pool(pool, "default");
    store.migrate().await.expect("migrate");
    all_scenarios(&store, seed).await;
    store.pool().close().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&admin)
    .await
    .expect("drop schema");
    admin.close().await;
}
