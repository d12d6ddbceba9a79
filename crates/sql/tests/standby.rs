//! Reads on Postgres hot standbys with read-your-writes ([`ReplicaSet`]),
//! against the streaming standby `scripts/with-postgres.sh` starts
//! (`MSSMT_PG_STANDBY_URL`): snapshot reads at one root, commit tokens,
//! replay paused (lag), a standby restart and a promotion.
//!
//! Without `MSSMT_PG_URL`/`MSSMT_PG_STANDBY_URL` the tests print a SKIPPED
//! line, unless `MSSMT_REQUIRE_PG=1`, which makes a missing standby a
//! failure. The restart and promotion need the standby's directory
//! (`MSSMT_PG_STANDBY_DIR`, set by the script) and skip loudly without it.
//! Tests that pause or restart the shared standby hold [`EXCLUSIVE`] for
//! writing; the others hold it for reading. The promotion promotes a
//! standby of its own.
#![cfg(feature = "postgres")]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ms_smt::store::MemoryStore;

use ms_smt::{ComputedNode, FullTree, Key, Leaf, Position, Subtree};
use ms_smt_sql::{OnLag, ReadSnapshot, ReplicaSet, ServedBy, SqlStoreError};
use support::{assert_audit_clean, hkey, unique};
use tokio::sync::{RwLock, RwLockReadGuard};

/// Held for writing by the tests that stop or pause the shared standby.
static EXCLUSIVE: RwLock<()> = RwLock::const_new(());

const CLUSTER_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg-cluster.sh");

/// The primary's and the standby's URLs, or `None` (after printing why)
/// when the test skips; with `MSSMT_REQUIRE_PG=1` a missing one fails.
fn urls(test: &str) -> Option<(String, String)> {
    let primary = support::pg_url(test)?;
    match std::env::var("MSSMT_PG_STANDBY_URL") {
        Ok(url) if !url.is_empty() => Some((primary, url)),
        _ => {
            if std::env::var("MSSMT_REQUIRE_PG").as_deref() == Ok("1") {
                panic!(
                    "standby test {test} FAILED: MSSMT_PG_STANDBY_URL is not set but \
                     MSSMT_REQUIRE_PG=1 (run via scripts/with-postgres.sh)"
                );
            }
            eprintln!("standby test {test} SKIPPED: MSSMT_PG_STANDBY_URL is not set");
            None
        }
    }
}

/// A replica set on a fresh namespace of the two servers.
async fn replica_set(test: &str) -> Option<ReplicaSet> {
    let (primary, standby) = urls(test)?;
    let set = ReplicaSet::connect(&primary, &[standby.as_str()])
        .await
        .expect("connect");
    Some(set.open_namespace(&unique(test)))
}

/// A replica set for a test that leaves the shared standby running, with
/// [`EXCLUSIVE`] held for reading while the guard lives.
async fn shared_replica_set(test: &str) -> Option<(RwLockReadGuard<'static, ()>, ReplicaSet)> {
    let shared = EXCLUSIVE.read().await;
    Some((shared, replica_set(test).await?))
}

/// The shared standby's directory (`MSSMT_PG_STANDBY_DIR`), or `None`
/// after printing that `test`'s `case` skips because `why`.
fn standby_dir(test: &str, case: &str, why: &str) -> Option<String> {
    let dir = std::env::var("MSSMT_PG_STANDBY_DIR").ok();
    if dir.is_none() {
        eprintln!(
            "standby test {test} SKIPPED ({case} case only): MSSMT_PG_STANDBY_DIR is not set, so \
             {why}"
        );
    }
    dir
}

fn leaf(i: u64) -> Leaf {
    Leaf::new(format!("value {i}").into_bytes(), i + 1)
}

/// Reads `keys` through `snapshot` and checks every answer against the
/// snapshot's root: the tree's root is it, and every proof verifies.
/// Returns the leaves.
async fn checked_read(snapshot: &mut ReadSnapshot, keys: &[Key]) -> Vec<Leaf> {
    let root = snapshot.root();
    let tree = FullTree::new(snapshot.store());
    assert_eq!(tree.root().await.expect("root"), root);
    let leaves = tree.get_many(keys).await.expect("get_many");
    let proofs = tree.merkle_proofs(keys).await.expect("merkle_proofs");
    for ((key, leaf), proof) in keys.iter().zip(&leaves).zip(&proofs) {
        assert!(
            proof.verify(key, leaf, &root),
            "proof of {key:?} at {root:?}"
        );
    }
    leaves
}

/// Runs `body` on its own task and then `after`, even when `body` panics
/// (whose panic is then raised again): the shared standby is resumed and
/// clones are removed whatever the test found.
async fn then<F: std::future::Future<Output = ()> + Send + 'static>(
    body: F,
    after: impl std::future::Future<Output = ()>,
) {
    let outcome = tokio::spawn(body).await;
    after.await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn sql(url: &str, statement: &str) {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    pool.close().await;
}

fn cluster(args: &[&str]) -> String {
    let out = std::process::Command::new(CLUSTER_SCRIPT)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run scripts/pg-cluster.sh");
    assert!(out.status.success(), "pg-cluster.sh {args:?} failed");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned()
}

/// The port of a `postgres://user@host:PORT/db` URL.
fn port_of(url: &str) -> String {
    let after = url.rsplit_once(':').expect("port").1;
    after.split('/').next().expect("port").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_on_the_standby_answers_at_its_root() {
    let Some((_shared, set)) = shared_replica_set("standby_reads").await else {
        return;
    };
    // The default 2 s wait, then a silent fallback to the primary, would
    // let a slow replay (a loaded machine) fail the standby check below:
    // wait as the other tests do, and fail loudly if the standby lags.
    let set = set.with_wait(Duration::from_secs(10)).on_lag(OnLag::Error);
    let writer = FullTree::new(set.primary().clone());
    let keys: Vec<Key> = (0..300).map(|i| hkey("reads", i)).collect();
    let root = writer
        .insert_many(keys.iter().enumerate().map(|(i, k)| (*k, leaf(i as u64))))
        .await
        .expect("write");
    let token = set.commit_token().await.expect("token");
    let mut snapshot = set.read(Some(token)).await.expect("read");
    assert_eq!(snapshot.served_by(), ServedBy::Standby(0));
    assert_eq!(snapshot.root(), root);
    let absent: Vec<Key> = (0..20).map(|i| hkey("absent", i)).collect();
    let leaves = checked_read(&mut snapshot, &keys).await;
    for (i, l) in leaves.iter().enumerate() {
        assert_eq!(*l, leaf(i as u64));
    }
    assert!(
        checked_read(&mut snapshot, &absent)
            .await
            .iter()
            .all(Leaf::is_empty)
    );
    {
        let tree = FullTree::new(snapshot.store());
        let view = tree.view();
        let mixed: Vec<Key> = keys[..50].iter().chain(&absent).copied().collect();
        let (at, proof, found) = view.multi_proof(&mixed).await.expect("multi_proof");
        assert_eq!(at, root);
        assert!(proof.verify(&found, &root));
        let mut leaves = tree.leaves(..);
        let mut count = 0;
        while let Some(entry) = leaves.next().await.expect("leaves") {
            assert_eq!(writer.get(&entry.key).await.expect("get"), entry.leaf);
            count += 1;
        }
        assert_eq!(count, keys.len());
        let children = view
            .children(&root, &[Position::ROOT])
            .await
            .expect("children");
        assert!(Subtree::check_children(
            &Position::ROOT,
            &root,
            &children[0]
        ));
        let trunk = view.export_trunk(4).await.expect("export");
        assert_eq!(trunk.root, root);
        trunk.check().expect("trunk");
        let chunk = view.export_chunk(trunk.chunks[0].0).await.expect("chunk");
        chunk.check(&trunk).expect("chunk");
        // Writes through a snapshot fail: it is read-only.
        assert!(tree.insert(hkey("nope", 0), leaf(0)).await.is_err());
    }
    snapshot.finish().await.expect("finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_with_the_token_always_sees_the_write() {
    let Some((_shared, set)) = shared_replica_set("standby_ryw").await else {
        return;
    };
    // Errors instead of falling back, so every read below is the standby's.
    let set = set.with_wait(Duration::from_secs(10)).on_lag(OnLag::Error);
    let writer = FullTree::new(set.primary().clone());
    for i in 0..50 {
        let key = hkey("ryw", i);
        let written = writer.insert(key, leaf(i)).await.expect("write");
        let token = set.commit_token().await.expect("token");
        let mut snapshot = set.read(Some(token)).await.expect("read");
        assert_eq!(snapshot.served_by(), ServedBy::Standby(0));
        assert_eq!(snapshot.root(), written, "write {i}");
        let got = checked_read(&mut snapshot, &[key, hkey("ryw", 0)]).await;
        assert_eq!(got, vec![leaf(i), leaf(0)], "write {i}");
        snapshot.finish().await.expect("finish");
    }
}

/// The primary's WAL insert position, in bytes.
async fn insert_lsn(pool: &sqlx::PgPool) -> u64 {
    let (lsn,): (i64,) =
        sqlx::query_as("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8")
            .fetch_one(pool)
            .await
            .expect("insert lsn");
    u64::try_from(lsn).expect("lsn")
}

/// Commits a transaction whose WAL is a logical message of `pad` bytes and
/// its commit record, returning the insert position after it.
async fn padded_commit(pool: &sqlx::PgPool, pad: u64) -> u64 {
    sqlx::query("SELECT pg_logical_emit_message(true, 'ms-smt-test', repeat('x', $1::int4))")
        .bind(i32::try_from(pad).expect("pad"))
        .execute(pool)
        .await
        .expect("message");
    insert_lsn(pool).await
}

/// A commit whose record ends exactly at a WAL page's end: Postgres then
/// reports the insert position past the next page's header, which a
/// standby's replay never reaches (it stops at the page end). The token
/// must still be one the standby reaches. The padding is sized from a
/// measured commit; other writers on the cluster can move the position in
/// between, so it retries until a commit lands on the boundary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_right_after_a_wal_page_end_is_reached() {
    const BLOCK: u64 = 8192;
    const PAGE_HEADER: u64 = 24;
    const BASE: u64 = 512;
    let Some((_shared, set)) = shared_replica_set("standby_page_end").await else {
        return;
    };
    let set = set.with_wait(Duration::from_secs(10)).on_lag(OnLag::Error);
    let pool = set.primary().pool().clone();
    let mut token = None;
    for _ in 0..200 {
        let before = insert_lsn(&pool).await;
        let after = padded_commit(&pool, BASE).await;
        let used = after - before;
        let left = BLOCK - after % BLOCK;
        if before / BLOCK != after / BLOCK || left < used {
            continue;
        }
        // Past 255 bytes of data, a record's size grows word for word with
        // the padding.
        let end = padded_commit(&pool, BASE + left - used).await;
        if end % BLOCK != PAGE_HEADER {
            continue;
        }
        let taken = set.commit_token().await.expect("token");
        // Nothing was written in between: the token saw the page end.
        if insert_lsn(&pool).await == end {
            token = Some(taken);
            break;
        }
    }
    let token = token.expect("no commit landed on a WAL page end in 200 tries");
    let snapshot = set.read(Some(token)).await.expect("read at a page end");
    assert_eq!(snapshot.served_by(), ServedBy::Standby(0));
    snapshot.finish().await.expect("finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_a_read_sees_one_whole_root() {
    let Some((_shared, set)) = shared_replica_set("standby_mix").await else {
        return;
    };
    const BATCHES: u64 = 40;
    const PER_BATCH: u64 = 16;
    let key = |b: u64, j: u64| hkey("mix", b * PER_BATCH + j);
    let keys: Vec<Key> = (0..BATCHES)
        .flat_map(|b| (0..PER_BATCH).map(move |j| key(b, j)))
        .collect();
    // The root after each batch, in order (index 0: the empty tree),
    // computed beforehand in memory: the standby can replay a batch before
    // the writer has its root back, so roots the writer recorded as it
    // went could lag the reads.
    let roots = {
        let model = FullTree::new(MemoryStore::new());
        let mut roots = vec![ComputedNode::empty_root()];
        for b in 0..BATCHES {
            let batch = (0..PER_BATCH).map(|j| (key(b, j), leaf(b)));
            roots.push(model.insert_many(batch).await.expect("memory"));
        }
        Arc::new(roots)
    };
    let writer = {
        let (store, roots) = (set.primary().clone(), roots.clone());
        tokio::spawn(async move {
            let tree = FullTree::new(store);
            for b in 0..BATCHES {
                let root = tree
                    .insert_many((0..PER_BATCH).map(|j| (key(b, j), leaf(b))))
                    .await
                    .expect("write");
                assert_eq!(root, roots[b as usize + 1], "the root of batch {b}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let done = writer.is_finished();
        let mut snapshot = set.read(None).await.expect("read");
        let leaves = checked_read(&mut snapshot, &keys).await;
        // Batches 0..n whole, none after: never part of a batch.
        let n = leaves.iter().take_while(|l| !l.is_empty()).count();
        assert_eq!(n as u64 % PER_BATCH, 0, "a batch seen in part");
        assert!(
            leaves[n..].iter().all(Leaf::is_empty),
            "a later batch without an earlier one"
        );
        let batches = n / PER_BATCH as usize;
        assert_eq!(
            roots.get(batches).copied(),
            Some(snapshot.root()),
            "the root of {batches} batches"
        );
        seen.insert(batches);
        snapshot.finish().await.expect("finish");
        if done {
            break;
        }
    }
    writer.await.expect("writer");
    eprintln!("reads without a token saw {} distinct roots", seen.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_standby_falls_back_or_fails_as_configured() {
    let _alone = EXCLUSIVE.write().await;
    let Some((_, standby_url)) = urls("standby_lag") else {
        return;
    };
    let Some(set) = replica_set("standby_lag").await else {
        return;
    };
    // The standby first replays everything so far (the schema included).
    let caught_up = set.commit_token().await.expect("token");
    let snapshot = set.read(Some(caught_up)).await.expect("catch up");
    assert_eq!(snapshot.served_by(), ServedBy::Standby(0));
    snapshot.finish().await.expect("finish");
    let url = standby_url.clone();
    sql(&url, "SELECT pg_wal_replay_pause()").await;
    let body = async move {
        let set = set.with_wait(Duration::from_millis(300));
        let writer = FullTree::new(set.primary().clone());
        let key = hkey("lag", 0);
        let written = writer.insert(key, leaf(7)).await.expect("write");
        let token = set.commit_token().await.expect("token");
        let started = std::time::Instant::now();
        match set.clone().on_lag(OnLag::Error).read(Some(token)).await {
            Err(SqlStoreError::StandbyBehind {
                standby: 0,
                token: t,
                replayed,
                waited,
            }) => {
                assert_eq!(t, token);
                assert!(replayed < token);
                assert!(waited >= Duration::from_millis(300));
            }
            other => panic!("expected StandbyBehind, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the wait is bounded"
        );
        let mut snapshot = set.read(Some(token)).await.expect("fallback");
        assert_eq!(snapshot.served_by(), ServedBy::Primary);
        assert_eq!(snapshot.root(), written);
        assert_eq!(checked_read(&mut snapshot, &[key]).await, vec![leaf(7)]);
        snapshot.finish().await.expect("finish");
        // Without a token the paused standby answers at its older root.
        let mut snapshot = set.read(None).await.expect("read");
        assert_eq!(snapshot.served_by(), ServedBy::Standby(0));
        assert_ne!(snapshot.root(), written);
        assert!(checked_read(&mut snapshot, &[key]).await[0].is_empty());
        snapshot.finish().await.expect("finish");
        sql(&standby_url, "SELECT pg_wal_replay_resume()").await;
        let mut snapshot = set
            .on_lag(OnLag::Error)
            .with_wait(Duration::from_secs(10))
            .read(Some(token))
            .await
            .expect("read after resume");
        assert_eq!(snapshot.served_by(), ServedBy::Standby(0));
        assert_eq!(checked_read(&mut snapshot, &[key]).await, vec![leaf(7)]);
        snapshot.finish().await.expect("finish");
    };
    then(body, async {
        sql(&url, "SELECT pg_wal_replay_resume()").await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_survive_a_standby_restart() {
    let _alone = EXCLUSIVE.write().await;
    let Some((_, standby_url)) = urls("standby_restart") else {
        return;
    };
    let Some(dir) = standby_dir(
        "standby_restart",
        "restart",
        "the standby cannot be restarted from here",
    ) else {
        return;
    };
    let Some(set) = replica_set("standby_restart").await else {
        return;
    };
    let port = port_of(&standby_url);
    cluster(&["stop", &dir]);
    let body = {
        let (dir, port) = (dir.clone(), port.clone());
        async move {
            let set = set.with_wait(Duration::from_secs(10));
            let writer = FullTree::new(set.primary().clone());
            let key = hkey("restart", 0);
            let written = writer.insert(key, leaf(3)).await.expect("write");
            let token = set.commit_token().await.expect("token");
            // Down: the primary answers, or the read fails, as configured.
            let snapshot = set.read(Some(token)).await.expect("fallback");
            assert_eq!(snapshot.served_by(), ServedBy::Primary);
            snapshot.finish().await.expect("finish");
            assert!(matches!(
                set.clone().on_lag(OnLag::Error).read(None).await,
                Err(SqlStoreError::Database(_))
            ));
            cluster(&["start", &dir, &port]);
            // Back: after its pool drops the dead connections, the
            // standby answers again, with the write made while it was down.
            let set = set.on_lag(OnLag::Error);
            let mut served = None;
            for _ in 0..100 {
                if let Ok(mut snapshot) = set.read(Some(token)).await {
                    assert_eq!(snapshot.root(), written);
                    assert_eq!(checked_read(&mut snapshot, &[key]).await, vec![leaf(3)]);
                    served = Some(snapshot.served_by());
                    snapshot.finish().await.expect("finish");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(served, Some(ServedBy::Standby(0)));
        }
    };
    then(body, async {
        // Started again if the test left it down.
        if sqlx::PgPool::connect(&standby_url).await.is_err() {
            cluster(&["start", &dir, &port]);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_takes_writes_and_audits_clean() {
    let _shared = EXCLUSIVE.read().await;
    let Some((primary_url, _)) = urls("standby_promote") else {
        return;
    };
    if standby_dir(
        "standby_promote",
        "promotion",
        "the primary is not the script's and no standby of it can be made here",
    )
    .is_none()
    {
        return;
    }
    // A standby of its own, so the shared one stays a standby.
    let dir = cluster(&["standby", &port_of(&primary_url)]);
    let body = {
        let dir = dir.clone();
        async move {
            let url = cluster(&["start", &dir]);
            let db = primary_url.rsplit('/').next().expect("database");
            let url = format!("{}/{db}", url.trim_end_matches("/postgres"));
            let name = unique("standby_promote");
            let set = ReplicaSet::connect(&primary_url, &[url.as_str()])
                .await
                .expect("connect")
                .open_namespace(&name)
                .with_wait(Duration::from_secs(10))
                .on_lag(OnLag::Error);
            let keys: Vec<Key> = (0..200).map(|i| hkey("promote", i)).collect();
            let writer = FullTree::new(set.primary().clone());
            writer
                .insert_many(keys[..100].iter().map(|k| (*k, leaf(1))))
                .await
                .expect("write");
            let token = set.commit_token().await.expect("token");
            let mut snapshot = set.read(Some(token)).await.expect("read");
            assert_eq!(snapshot.served_by(), ServedBy::Standby(0));
            assert_eq!(checked_read(&mut snapshot, &keys[..1]).await, vec![leaf(1)]);
            snapshot.finish().await.expect("finish");
            sql(&url, "SELECT pg_promote()").await;
            // The old standby is a primary now: it takes writes.
            let promoted = ms_smt_sql::PostgresStore::connect(&url)
                .await
                .expect("connect promoted")
                .open_namespace(&name);
            let tree = FullTree::new(promoted);
            tree.insert_many(keys[100..].iter().map(|k| (*k, leaf(2))))
                .await
                .expect("write on the promoted server");
            assert_audit_clean(&tree, "promoted").await;
            let leaves = tree.get_many(&keys).await.expect("get_many");
            assert!(leaves[..100].iter().all(|l| *l == leaf(1)));
            assert!(leaves[100..].iter().all(|l| *l == leaf(2)));
            // A set reading it serves it without waiting for replay.
            let mut snapshot = set.read(Some(token)).await.expect("read promoted");
            assert_eq!(snapshot.served_by(), ServedBy::Standby(0));
            assert_eq!(snapshot.root(), tree.root().await.expect("root"));
            checked_read(&mut snapshot, &keys).await;
            snapshot.finish().await.expect("finish");
            let old = FullTree::new(set.primary().clone())
                .get(&keys[150])
                .await
                .expect("primary");
            assert!(
                old.is_empty(),
                "the old primary never saw the promoted server's writes"
            );
        }
    };
    then(body, async {
        cluster(&["destroy", &dir]);
    })
    .await;
}
