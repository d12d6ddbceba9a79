//! Replays files in the official MS-SMT test-vector format (spec §6.2-6.3)
//! against a tree layout, a write path and a store. Shared by the `vectors`
//! example (the conformance CLI) and `tests/vectors.rs`.
#![allow(dead_code)] // each includer uses part of it

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use std::sync::atomic::{AtomicUsize, Ordering};

use ms_smt::store::{AuditStore, MemoryStore, TreeStore, Writable};

use ms_smt::{Compacted, ComputedNode, Full, Key, Layout, Leaf, Proof, Tree};
use ms_smt_sql::{PostgresStore, SqliteStore};
use serde::Deserialize;
use sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};

/// Top level of a vector file (Go `TestVectors`).
#[derive(Debug, Deserialize)]
pub struct VectorFile {
    pub all_tree_leaves: Vec<TestLeaf>,
    pub valid_test_cases: Option<Vec<ValidCase>>,
    pub error_test_cases: Option<Vec<ErrorCase>>,
}

/// One `{key, node}` entry.
#[derive(Debug, Deserialize)]
pub struct TestLeaf {
    pub key: String,
    pub node: TestNode,
}

/// A leaf: hex value, decimal sum.
#[derive(Debug, Deserialize)]
pub struct TestNode {
    pub value: String,
    pub sum: String,
}

/// A case that must succeed.
#[derive(Debug, Deserialize)]
pub struct ValidCase {
    pub root_hash: String,
    pub root_sum: String,
    pub inserted_leaves: Option<Vec<String>>,
    pub deleted_leaves: Option<Vec<String>>,
    pub replaced_leaves: Option<Vec<TestLeaf>>,
    pub inclusion_proofs: Option<Vec<TestProof>>,
    pub exclusion_proofs: Option<Vec<TestProof>>,
    #[serde(default)]
    pub comment: String,
}

/// A case whose last insert must fail.
#[derive(Debug, Deserialize)]
pub struct ErrorCase {
    pub inserted_leaves: Option<Vec<String>>,
    pub error: String,
    #[serde(default)]
    pub comment: String,
}

/// A key and its canonical compressed proof, hex.
#[derive(Debug, Deserialize)]
pub struct TestProof {
    pub proof_key: String,
    pub compressed_proof: String,
}

/// Which write path a replay takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePath {
    /// One `insert`/`delete` per leaf, per-key `merkle_proof`.
    Sequential,
    /// One `insert_many` per phase, one `merkle_proofs` for all proof keys.
    Batched,
}

impl fmt::Display for WritePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WritePath::Sequential => "sequential",
            WritePath::Batched => "batched",
        })
    }
}

/// The outcome of one case.
#[derive(Debug)]
pub struct CaseResult {
    pub name: String,
    pub failure: Option<String>,
    pub proofs_checked: usize,
}

fn parse_key(hex: &str) -> Result<Key, String> {
    hex.parse::<Key>()
        .map_err(|e| format!("bad key {hex:?}: {e}"))
}

fn parse_leaf(node: &TestNode) -> Result<Leaf, String> {
    let value = hex::decode(&node.value).map_err(|e| format!("bad value hex: {e}"))?;
    let sum = node
        .sum
        .parse::<u64>()
        .map_err(|e| format!("bad sum {:?}: {e}", node.sum))?;
    Ok(Leaf::new(value, sum))
}

/// Parses a vector file.
pub fn load(path: &Path) -> Result<VectorFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("not a vector file: {e}"))
}

/// `all_tree_leaves` parsed, in file order.
pub fn leaves(file: &VectorFile) -> Result<Vec<(Key, Leaf)>, String> {
    file.all_tree_leaves
        .iter()
        .map(|l| Ok((parse_key(&l.key)?, parse_leaf(&l.node)?)))
        .collect()
}

/// The leaves of `all_tree_leaves` whose keys `listed` names, in file order,
/// with their index in the file.
fn selected(
    all: &[(Key, Leaf)],
    listed: &Option<Vec<String>>,
) -> Result<Vec<(usize, Key, Leaf)>, String> {
    let listed: Vec<Key> = listed
        .iter()
        .flatten()
        .map(|k| parse_key(k))
        .collect::<Result<_, _>>()?;
    Ok(all
        .iter()
        .enumerate()
        .filter(|(_, (k, _))| listed.contains(k))
        .map(|(i, (k, l))| (i, *k, l.clone()))
        .collect())
}

fn err<E: fmt::Display>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Replays a valid case on `tree` (which must be empty).
pub async fn replay_valid<S: Writable + AuditStore, L: Layout>(
    tree: &Tree<S, L>,
    all: &[(Key, Leaf)],
    case: &ValidCase,
    path: WritePath,
) -> Result<usize, String> {
    let inserted = selected(all, &case.inserted_leaves)?;
    let deleted: Vec<Key> = case
        .deleted_leaves
        .iter()
        .flatten()
        .map(|k| parse_key(k))
        .collect::<Result<_, _>>()?;
    let replaced: Vec<(Key, Leaf)> = case
        .replaced_leaves
        .iter()
        .flatten()
        .map(|l| Ok((parse_key(&l.key)?, parse_leaf(&l.node)?)))
        .collect::<Result<_, String>>()?;

    // The leaf each key holds after the case's last write to it.
    let mut state: HashMap<Key, Leaf> = HashMap::new();
    let phases: [Vec<(Key, Leaf)>; 3] = [
        inserted.iter().map(|(_, k, l)| (*k, l.clone())).collect(),
        deleted.iter().map(|k| (*k, Leaf::empty())).collect(),
        replaced,
    ];
    for phase in &phases {
        match path {
            WritePath::Sequential => {
                for (k, l) in phase {
                    if l.is_empty() {
                        tree.delete(*k).await.map_err(err("delete"))?;
                    } else {
                        tree.insert(*k, l.clone()).await.map_err(err("insert"))?;
                    }
                }
            }
            WritePath::Batched => {
                tree.insert_many(phase.iter().cloned())
                    .await
                    .map_err(err("insert_many"))?;
            }
        }
        state.extend(phase.iter().cloned());
    }

    let root = tree.root().await.map_err(err("root"))?;
    let want_sum: u64 = case
        .root_sum
        .parse()
        .map_err(|e| format!("bad root_sum {:?}: {e}", case.root_sum))?;
    if root.hash.to_hex() != case.root_hash.to_lowercase() || root.sum != want_sum {
        return Err(format!(
            "root {} sum {} != expected {} sum {}",
            root.hash, root.sum, case.root_hash, want_sum
        ));
    }

    let mut checked = 0;
    for (proofs, inclusion) in [
        (&case.inclusion_proofs, true),
        (&case.exclusion_proofs, false),
    ] {
        let proofs = proofs.as_deref().unwrap_or_default();
        let keys: Vec<Key> = proofs
            .iter()
            .map(|p| parse_key(&p.proof_key))
            .collect::<Result<_, _>>()?;
        let generated: Vec<Proof> = match path {
            WritePath::Batched => tree
                .merkle_proofs(&keys)
                .await
                .map_err(err("merkle_proofs"))?,
            WritePath::Sequential => {
                let mut out = Vec::with_capacity(keys.len());
                for k in &keys {
                    out.push(tree.merkle_proof(k).await.map_err(err("merkle_proof"))?);
                }
                out
            }
        };
        for ((want, key), proof) in proofs.iter().zip(&keys).zip(&generated) {
            let leaf = if inclusion {
                state.get(key).cloned().unwrap_or_default()
            } else {
                Leaf::empty()
            };
            check_proof(key, &leaf, &root, proof, &want.compressed_proof).map_err(|e| {
                format!(
                    "{} proof for {key}: {e}",
                    if inclusion { "inclusion" } else { "exclusion" }
                )
            })?;
            checked += 1;
        }
    }
    Ok(checked)
}

fn check_proof(
    key: &Key,
    leaf: &Leaf,
    root: &ComputedNode,
    proof: &Proof,
    want_hex: &str,
) -> Result<(), String> {
    let encoded = hex::encode(proof.to_bytes());
    if encoded != want_hex.to_lowercase() {
        return Err(format!("encoding differs: got {encoded}"));
    }
    let bytes = hex::decode(want_hex).map_err(err("vector proof hex"))?;
    let decoded = Proof::from_bytes(&bytes).map_err(err("decode"))?;
    if !decoded.verify(key, leaf, root) {
        return Err("decoded proof does not verify".into());
    }
    if !proof.verify(key, leaf, root) {
        return Err("generated proof does not verify".into());
    }
    Ok(())
}

/// Replays an error case on `tree` (which must be empty): every insert
/// before the last leaf of `all_tree_leaves` succeeds, the one at the last
/// index fails with an error containing `case.error`. On the batched path the
/// one batch must be rejected and leave the tree unchanged.
pub async fn replay_error<S: Writable + AuditStore, L: Layout>(
    tree: &Tree<S, L>,
    all: &[(Key, Leaf)],
    case: &ErrorCase,
    path: WritePath,
) -> Result<(), String> {
    let inserted = selected(all, &case.inserted_leaves)?;
    let last = all.len().checked_sub(1).ok_or("all_tree_leaves is empty")?;
    if inserted.last().map(|(i, _, _)| *i) != Some(last) {
        return Err("error case does not insert the last leaf of all_tree_leaves".into());
    }
    let matches = |e: &dyn fmt::Display| {
        let text = e.to_string();
        if text.contains(&case.error) {
            Ok(())
        } else {
            Err(format!("error {text:?} does not contain {:?}", case.error))
        }
    };
    match path {
        WritePath::Sequential => {
            for (i, k, l) in &inserted {
                let res = tree.insert(*k, l.clone()).await;
                match (res, *i == last) {
                    (Ok(_), false) => {}
                    (Err(e), false) => return Err(format!("insert {i} failed early: {e}")),
                    (Ok(_), true) => {
                        return Err(format!("insert {i} succeeded, expected {:?}", case.error));
                    }
                    (Err(e), true) => matches(&e)?,
                }
            }
        }
        WritePath::Batched => {
            let before = tree.root().await.map_err(err("root"))?;
            match tree
                .insert_many(inserted.iter().map(|(_, k, l)| (*k, l.clone())))
                .await
            {
                Ok(_) => return Err(format!("batch succeeded, expected {:?}", case.error)),
                Err(e) => matches(&e)?,
            }
            let after = tree.root().await.map_err(err("root"))?;
            if before != after {
                return Err("rejected batch changed the root".into());
            }
            for (_, k, _) in &inserted {
                if !tree.get(k).await.map_err(err("get"))?.is_empty() {
                    return Err(format!("rejected batch wrote key {k}"));
                }
            }
        }
    }
    Ok(())
}

/// Counts of one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub passed: usize,
    pub failed: usize,
    pub proofs: usize,
}

impl Tally {
    pub fn add(&mut self, result: &CaseResult) {
        if result.failure.is_some() {
            self.failed += 1;
        } else {
            self.passed += 1;
        }
        self.proofs += result.proofs_checked;
    }
}

/// Replays every case of `file` with fresh trees from `fresh` (called once
/// per case; each call must return an empty tree).
pub async fn replay_file<S, L, F, Fut>(
    file_name: &str,
    file: &VectorFile,
    label: &str,
    path: WritePath,
    mut fresh: F,
) -> Vec<CaseResult>
where
    S: Writable + AuditStore,
    L: Layout,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Tree<S, L>, String>>,
{
    let mut out = Vec::new();
    let all = match leaves(file) {
        Ok(all) => all,
        Err(e) => {
            out.push(CaseResult {
                name: format!("{file_name} all_tree_leaves"),
                failure: Some(e),
                proofs_checked: 0,
            });
            return out;
        }
    };
    for (i, case) in file.valid_test_cases.iter().flatten().enumerate() {
        let name = format!(
            "{file_name} valid[{i}] {label} path={path} ({})",
            case.comment
        );
        let res = async { replay_valid(&fresh().await?, &all, case, path).await }.await;
        let (proofs_checked, failure) = match res {
            Ok(n) => (n, None),
            Err(e) => (0, Some(e)),
        };
        out.push(CaseResult {
            name,
            failure,
            proofs_checked,
        });
    }
    for (i, case) in file.error_test_cases.iter().flatten().enumerate() {
        let name = format!(
            "{file_name} error[{i}] {label} path={path} ({})",
            case.comment
        );
        let res = async { replay_error(&fresh().await?, &all, case, path).await }.await;
        out.push(CaseResult {
            name,
            failure: res.err(),
            proofs_checked: 0,
        });
    }
    out
}

/// Where the trees live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Sqlite,
    Postgres,
}

/// The databases of one run: one scratch SQLite file and one Postgres
/// connection, each case in a namespace of its own.
pub struct Stores {
    sqlite: Option<(SqliteStore, std::path::PathBuf)>,
    postgres: Option<PostgresStore>,
    used: std::sync::Mutex<Vec<String>>,
    run_id: String,
    counter: AtomicUsize,
}

impl Stores {
    /// Opens the databases `kinds` needs; Postgres from `pg_url`. Each SQL
    /// tree handle remembers up to `recent_nodes` nodes (0: every read goes
    /// to the database).
    pub async fn open(
        kinds: &[StoreKind],
        pg_url: Option<&str>,
        recent_nodes: usize,
    ) -> Result<Stores, String> {
        let run_id = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let sqlite = if kinds.contains(&StoreKind::Sqlite) {
            let path = std::env::temp_dir().join(format!("ms-smt-vectors-{run_id}.db"));
            // A scratch database: durability is not under test, so no fsync
            // and the rollback journal in memory (10,000 single commits on
            // a full tree touch ~256 random pages each; with WAL every one
            // is appended and checkpointed again).
            let options = SqliteStore::connect_options(&path)
                .journal_mode(SqliteJournalMode::Memory)
                .synchronous(SqliteSynchronous::Off);
            let store = SqliteStore::open_with(options)
                .await
                .map_err(|e| format!("cannot open SQLite {}: {e}", path.display()))?
                .with_recent_nodes(recent_nodes);
            Some((store, path))
        } else {
            None
        };
        let postgres = match (kinds.contains(&StoreKind::Postgres), pg_url) {
            (true, Some(url)) => Some(
                PostgresStore::connect(url)
                    .await
                    .map_err(|e| format!("cannot connect to MSSMT_PG_URL: {e}"))?
                    .with_recent_nodes(recent_nodes),
            ),
            (true, None) => return Err("the postgres store needs MSSMT_PG_URL".into()),
            _ => None,
        };
        Ok(Stores {
            sqlite,
            postgres,
            used: std::sync::Mutex::default(),
            run_id,
            counter: AtomicUsize::new(0),
        })
    }

    fn next_namespace(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let ns = format!("vectors-{}-{n}", self.run_id);
        if let Ok(mut used) = self.used.lock() {
            used.push(ns.clone());
        }
        ns
    }

    /// Replays every case of `file` on store `kind`, the chosen layouts and
    /// paths, a fresh tree per case; hands each result to `report`.
    #[allow(clippy::too_many_arguments)]
    pub async fn replay(
        &self,
        kind: StoreKind,
        name: &str,
        file: &VectorFile,
        full: bool,
        compacted: bool,
        paths: &[WritePath],
        report: &mut dyn FnMut(&CaseResult),
    ) {
        match kind {
            StoreKind::Memory => {
                replay_on(
                    name,
                    file,
                    "memory",
                    full,
                    compacted,
                    paths,
                    &MemoryStore::new,
                    report,
                )
                .await
            }
            StoreKind::Sqlite => {
                if let Some((db, _)) = &self.sqlite {
                    let fresh = || db.open_namespace(&self.next_namespace());
                    replay_on(name, file, "sqlite", full, compacted, paths, &fresh, report).await;
                }
            }
            StoreKind::Postgres => {
                if let Some(db) = &self.postgres {
                    let fresh = || db.open_namespace(&self.next_namespace());
                    replay_on(
                        name, file, "postgres", full, compacted, paths, &fresh, report,
                    )
                    .await;
                }
            }
        }
    }

    /// Removes the namespaces and the SQLite file this run created.
    pub async fn cleanup(self) {
        let used = self.used.lock().map(|u| u.clone()).unwrap_or_default();
        if let Some(db) = &self.postgres {
            for ns in &used {
                if let Err(e) = db.open_namespace(ns).delete_all().await {
                    eprintln!("warning: cannot remove Postgres namespace {ns}: {e}");
                }
            }
        }
        if let Some((db, path)) = self.sqlite {
            db.pool().close().await;
            for suffix in ["", "-wal", "-shm"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Replays `file` on the chosen layouts and paths with a fresh store from
/// `fresh` per case.
#[allow(clippy::too_many_arguments)]
async fn replay_on<S: Writable + AuditStore + 'static>(
    name: &str,
    file: &VectorFile,
    store_label: &str,
    full: bool,
    compacted: bool,
    paths: &[WritePath],
    fresh: &(dyn Fn() -> S + Sync),
    report: &mut dyn FnMut(&CaseResult),
) {
    for &wp in paths {
        let on = ReplayOn {
            name,
            file,
            store_label,
            path: wp,
            fresh,
        };
        if full {
            on.layout::<Full>("full", report).await;
        }
        if compacted {
            on.layout::<Compacted>("compacted", report).await;
        }
    }
}

/// One vector file on one kind of store along one write path.
struct ReplayOn<'a, S> {
    name: &'a str,
    file: &'a VectorFile,
    store_label: &'a str,
    path: WritePath,
    fresh: &'a (dyn Fn() -> S + Sync),
}

impl<S: Writable + AuditStore + 'static> ReplayOn<'_, S> {
    /// Replays the file on layout `L` (named `layout`), a fresh store per
    /// case, and reports each case.
    async fn layout<L: Layout>(&self, layout: &str, report: &mut dyn FnMut(&CaseResult)) {
        let label = format!("tree={layout} store={}", self.store_label);
        let results = replay_file(self.name, self.file, &label, self.path, || {
            let store = (self.fresh)();
            async move { Ok(Tree::<S, L>::new(store)) }
        })
        .await;
        results.iter().for_each(report);
    }
}
