//! Progress reports ([`ProgressSink`] on a tree), on the memory store and
//! SQLite: for `insert_many` (its three phases), `audit`, `copy_to` and
//! `copy_filter_to` (streamed and set-based), `export_trunk` /
//! `export_chunk` / `import`, `sync_from`, and the SQL schema upgrade.
//!
//! Each operation's reports are monotone (`done` never decreases), keep
//! their total, are throttled, and end with `done == total` (the last
//! report's total is `Some(done)`); the async watch receiver sees them.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::sync::{Arc, Mutex};

use ms_smt::store::{AuditStore, BulkStore, MemoryStore, Writable};

use ms_smt::{
    CompactedTree, FullTree, Key, Layout, Leaf, Progress, ProgressOperation, ProgressSink, Tree,
};
use ms_smt_sql::SqliteStore;
use support::stores::SqliteDb;
use support::{TempDb, hkey, unique};

/// A sink that keeps every report.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Progress>>>);

impl Recorder {
    fn sink(&self) -> ProgressSink {
        let into = self.0.clone();
        ProgressSink::new(move |p| into.lock().expect("recorder").push(*p))
    }

    /// Every report so far; forgets them.
    fn drain(&self) -> Vec<Progress> {
        std::mem::take(&mut *self.0.lock().expect("recorder"))
    }

    /// The reports of `operation` so far; forgets every report.
    fn take(&self, operation: ProgressOperation) -> Vec<Progress> {
        of(&self.drain(), operation)
    }
}

/// The reports of `operation` in `all`.
fn of(all: &[Progress], operation: ProgressOperation) -> Vec<Progress> {
    all.iter()
        .filter(|p| p.operation == operation)
        .copied()
        .collect()
}

/// Checks one run of an operation's reports: it starts at 0, never goes
/// back, keeps its total, reports at most `max` times, and ends with
/// `done == total == end`.
fn complete(reports: &[Progress], end: u64, max: usize) {
    let first = reports.first().expect("no reports");
    let last = reports.last().expect("no reports");
    assert_eq!(first.done, 0, "{reports:?}");
    assert!(
        reports.windows(2).all(|w| w[0].done <= w[1].done),
        "not monotone: {reports:?}"
    );
    let body = &reports[..reports.len() - 1];
    assert!(
        body.iter().all(|p| p.total == first.total),
        "total changed: {reports:?}"
    );
    if let Some(total) = first.total {
        assert!(body.iter().all(|p| p.done <= total), "{reports:?}");
    }
    assert_eq!((last.done, last.total), (end, Some(end)), "{reports:?}");
    assert!(
        reports.len() <= max,
        "{} reports: {reports:?}",
        reports.len()
    );
}

fn batch(tag: &str, from: u64, n: u64) -> Vec<(Key, Leaf)> {
    (from..from + n)
        .map(|i| (hkey(tag, i), Leaf::new(format!("v{i}").into_bytes(), i + 1)))
        .collect()
}

/// Every operation's progress on the namespaces `store` opens.
async fn check_progress<S: BulkStore + AuditStore + Clone + 'static>(store: &S, sql: bool) {
    let tag = unique("progress");
    let open = |name: &str| store.open_namespace(&unique(name)).expect("namespace");
    let recorder = Recorder::default();
    let tree = CompactedTree::new(open("src")).with_progress(recorder.sink());

    // insert_many: three phases, each 0 then the batch, whatever its size.
    let n = 3_000;
    tree.insert_many(batch(&tag, 0, n)).await.expect("insert");
    let all = recorder.drain();
    for operation in [
        ProgressOperation::InsertRead,
        ProgressOperation::InsertDescent,
        ProgressOperation::InsertCommit,
    ] {
        complete(&of(&all, operation), n, 2);
    }
    assert_eq!(
        all.last().map(|p| p.operation),
        Some(ProgressOperation::InsertCommit)
    );

    // audit: every stored item checked.
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean());
    let audit = recorder.take(ProgressOperation::Audit);
    complete(&audit, report.stored_items, 400);
    if sql {
        // Rows stream in: the total is unknown until the end.
        assert!(audit[..audit.len() - 1].iter().all(|p| p.total.is_none()));
        assert!(audit.len() > 2, "{audit:?}");
    } else {
        assert_eq!(audit[0].total, Some(report.stored_items));
    }

    // copy into the other layout: streamed, a page per insert_many.
    let target = FullTree::new(open("copy"));
    let copied = tree.view().copy_to(&target).await.expect("copy");
    assert!(!copied.set_based);
    complete(&recorder.take(ProgressOperation::Copy), n, 400);
    assert_eq!(
        target.root().await.expect("root"),
        tree.root().await.expect("root")
    );

    // copy_filter: the filter pass, then the kept leaves (total known).
    let odd = FullTree::new(open("filter"));
    let filtered = tree
        .view()
        .copy_filter_to(&odd, |_, leaf| Ok::<_, std::io::Error>(leaf.sum() % 2 == 1))
        .await
        .expect("copy_filter");
    let all = recorder.drain();
    complete(&of(&all, ProgressOperation::Filter), n, 400);
    let copy = of(&all, ProgressOperation::Copy);
    assert_eq!(filtered.kept, n / 2);
    assert_eq!(copy[0].total, Some(filtered.kept));
    complete(&copy, filtered.kept, 110);

    // A set-based copy (same layout, empty target of this database)
    // reports once, at its end.
    let same = CompactedTree::new(open("same"));
    let set = tree.view().copy_to(&same).await.expect("copy");
    if set.set_based {
        complete(&recorder.take(ProgressOperation::Copy), 0, 2);
    }

    // export and import.
    let level = 6;
    let view = tree.view();
    let trunk = view.export_trunk(level).await.expect("trunk");
    complete(
        &recorder.take(ProgressOperation::ExportTrunk),
        level as u64,
        level + 2,
    );
    let mut chunks = Vec::new();
    for (position, _) in &trunk.chunks {
        let chunk = view.export_chunk(*position).await.expect("chunk");
        let reports = recorder.take(ProgressOperation::ExportChunk);
        complete(&reports, chunk.leaves.len() as u64, 3 + chunk.leaves.len());
        chunks.push(chunk);
    }
    let into = CompactedTree::new(open("import")).with_progress(recorder.sink());
    let mut import = into.import(trunk.clone()).await.expect("import");
    for chunk in &chunks {
        import.add(chunk).await.expect("add");
    }
    assert_eq!(import.finish().await.expect("finish"), trunk.root);
    let reports = recorder.take(ProgressOperation::Import);
    complete(&reports, trunk.chunks.len() as u64, 110);
    assert_eq!(reports[0].total, Some(trunk.chunks.len() as u64));

    // sync: a tree that differs from the source in a few leaves.
    let local = CompactedTree::new(open("sync")).with_progress(recorder.sink());
    local
        .insert_many(batch(&tag, 0, 2_990))
        .await
        .expect("insert");
    local
        .insert_many(batch(&format!("{tag}/extra"), 0, 5))
        .await
        .expect("insert");
    recorder.take(ProgressOperation::Sync);
    let root = tree.root().await.expect("root");
    let synced = local.sync_from(&tree.view(), &root).await.expect("sync");
    assert_eq!(synced.root, root);
    let reports = recorder.take(ProgressOperation::Sync);
    assert!(synced.fetched > 0);
    complete(&reports, synced.fetched, 400);
}

/// The watch sink: an async task awaiting changes sees the operation's
/// reports, and the last value is the write's last phase, complete.
async fn check_watch<S: Writable + AuditStore + Clone + 'static, L: Layout>(store: S) {
    let (sink, mut receiver) = ProgressSink::watch();
    assert!(receiver.borrow().is_none());
    let tree: Tree<S, L> = Tree::new(store).with_progress(sink);
    let mut watcher = receiver.clone();
    let watched = tokio::spawn(async move {
        let mut seen = Vec::new();
        while watcher.changed().await.is_ok() {
            let Some(progress) = *watcher.borrow_and_update() else {
                continue;
            };
            seen.push(progress);
            if progress.operation == ProgressOperation::InsertCommit
                && progress.total == Some(progress.done)
                && progress.done > 0
            {
                break;
            }
        }
        seen
    });
    tree.insert_many(batch("watch", 0, 500))
        .await
        .expect("insert");
    let seen = tokio::time::timeout(std::time::Duration::from_secs(10), watched)
        .await
        .expect("the watcher saw the end")
        .expect("join");
    assert!(!seen.is_empty());
    let last = receiver.borrow_and_update().expect("a report");
    assert_eq!(
        (last.operation, last.done, last.total),
        (ProgressOperation::InsertCommit, 500, Some(500))
    );
    assert_eq!(seen.last(), Some(&last));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_memory() {
    check_progress(&MemoryStore::new(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_sqlite() {
    let db = SqliteDb::open("progress").await;
    check_progress(&db.store, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_memory() {
    check_watch::<_, ms_smt::Compacted>(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sqlite() {
    let db = SqliteDb::open("watch").await;
    check_watch::<_, ms_smt::Full>(db.store.open_namespace(&unique("watch"))).await;
}

/// A fresh SQLite database migrated step by step: one report per version,
/// ending with every step done; a second run has nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_upgrade_sqlite() {
    let file = TempDb::new("schema-progress");
    let pool = sqlx::SqlitePool::connect_with(SqliteStore::connect_options(&file.path))
        .await
        .expect("pool");
    let store = SqliteStore::from_pool(pool, "default");
    let recorder = Recorder::default();
    store
        .migrate_with_progress(&recorder.sink())
        .await
        .expect("migrate");
    let steps = recorder.take(ProgressOperation::SchemaUpgrade);
    let total = steps[0].total.expect("a known total");
    assert!(total >= 1);
    complete(&steps, total, total as usize + 2);
    assert_eq!(steps.len(), total as usize + 2, "one report per step");
    store
        .migrate_with_progress(&recorder.sink())
        .await
        .expect("migrate again");
    complete(&recorder.take(ProgressOperation::SchemaUpgrade), 0, 2);
}
