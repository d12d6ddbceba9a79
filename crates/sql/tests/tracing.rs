//! The crate's `tracing` spans, seen by a capturing subscriber installed on
//! the test's thread (a current-thread runtime, so the writer's task and
//! every future run there too).
//!
//! * `spans_*`: on the memory store, SQLite and Postgres, `insert_many`
//!   (with its `read`, `descent` and `commit` children), `merkle_proofs`,
//!   `audit` and the writer's groups carry the namespace, the batch size and
//!   the attempts; each operation span closes with one `finished` event
//!   carrying the store's counter deltas and an outcome (the capture reads
//!   its fields as the span's); a rejected batch ends with outcome
//!   `overflow` and its error.
//! * `schema_upgrade_*`: opening a fresh SQLite database (and migrating a
//!   Postgres one) runs inside a `schema_upgrade` span.
//! * `progress_events_*`: every progress report is a DEBUG event with
//!   target `ms_smt::progress`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use ms_smt_test_support as support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use ms_smt::store::{AuditStore, MemoryStore, Writable};
use ms_smt::{CompactedTree, FullTree, Key, Layout, Leaf, Tree, WriterConfig};
use support::stores::{SqliteDb, pg_store};
use support::{hkey, unique};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span or event as the subscriber saw it.
#[derive(Debug, Clone)]
struct Seen {
    meta: &'static Metadata<'static>,
    name: &'static str,
    target: String,
    level: tracing::Level,
    /// Index of the parent span in [`Log::spans`].
    parent: Option<usize>,
    fields: HashMap<&'static str, String>,
    /// For a span: how many `finished` events closed it (their fields are
    /// merged into `fields`).
    finished: usize,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    fn number(&self, name: &str) -> u64 {
        self.field(name)
            .unwrap_or_else(|| panic!("{} has no field {name}: {self:?}", self.name))
            .parse()
            .unwrap_or_else(|_| panic!("{}.{name} is not a number: {self:?}", self.name))
    }
}

#[derive(Debug, Default)]
struct Log {
    spans: Vec<Seen>,
    events: Vec<Seen>,
    /// The first span and event the queries look at (see [`Capture::clear`]).
    since: (usize, usize),
    /// The spans each thread is inside, innermost last.
    entered: HashMap<ThreadId, Vec<usize>>,
}

/// Records every span (with its fields as they are recorded) and event.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Log>>);

struct Fields<'a>(&'a mut HashMap<&'static str, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }
}

impl Capture {
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn seen(meta: &'static Metadata<'static>, parent: Option<usize>) -> Seen {
        Seen {
            meta,
            name: meta.name(),
            target: meta.target().to_owned(),
            level: *meta.level(),
            parent,
            fields: HashMap::new(),
            finished: 0,
        }
    }

    fn parent(log: &Log, explicit: Option<&Id>, contextual: bool) -> Option<usize> {
        match explicit {
            Some(id) => Some(id.into_u64() as usize - 1),
            None if contextual => log
                .entered
                .get(&std::thread::current().id())
                .and_then(|stack| stack.last().copied()),
            None => None,
        }
    }

    /// Every span named `name` since the last clear.
    fn spans(&self, name: &str) -> Vec<Seen> {
        let log = self.log();
        log.spans[log.since.0..]
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }

    /// Every progress event since the last clear.
    fn progress_events(&self) -> Vec<Seen> {
        let log = self.log();
        log.events[log.since.1..]
            .iter()
            .filter(|e| e.target == "ms_smt::progress")
            .cloned()
            .collect()
    }

    /// The one span named `name`.
    fn span(&self, name: &str) -> Seen {
        let mut found = self.spans(name);
        assert_eq!(found.len(), 1, "spans named {name}: {found:?}");
        found.remove(0)
    }

    /// The names of the children of the span at `index`.
    fn children(&self, index: usize) -> Vec<&'static str> {
        self.log()
            .spans
            .iter()
            .filter(|s| s.parent == Some(index))
            .map(|s| s.name)
            .collect()
    }

    fn index_of(&self, name: &str) -> usize {
        let log = self.log();
        let found: Vec<usize> = (log.since.0..log.spans.len())
            .filter(|i| log.spans[*i].name == name)
            .collect();
        assert_eq!(found.len(), 1, "spans named {name}");
        found[0]
    }

    /// Queries look only at what comes after this call.
    fn clear(&self) {
        let mut log = self.log();
        log.since = (log.spans.len(), log.events.len());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut log = self.log();
        let parent = Self::parent(&log, attrs.parent(), attrs.is_contextual());
        let mut seen = Self::seen(attrs.metadata(), parent);
        attrs.record(&mut Fields(&mut seen.fields));
        log.spans.push(seen);
        Id::from_u64(log.spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut log = self.log();
        let index = span.into_u64() as usize - 1;
        if let Some(seen) = log.spans.get_mut(index) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut log = self.log();
        let parent = Self::parent(&log, event.parent(), event.is_contextual());
        let mut seen = Self::seen(event.metadata(), parent);
        event.record(&mut Fields(&mut seen.fields));
        if let (Some(index), Some("finished")) = (parent, seen.field("message")) {
            let span = &mut log.spans[index];
            span.finished += 1;
            let fields = seen.fields.iter().filter(|(k, _)| **k != "message");
            span.fields.extend(fields.map(|(k, v)| (*k, v.clone())));
        }
        log.events.push(seen);
    }

    fn current_span(&self) -> tracing_core::span::Current {
        let log = self.log();
        let current = log
            .entered
            .get(&std::thread::current().id())
            .and_then(|stack| stack.last().copied());
        match current {
            Some(index) => tracing_core::span::Current::new(
                Id::from_u64(index as u64 + 1),
                log.spans[index].meta,
            ),
            None => tracing_core::span::Current::none(),
        }
    }

    fn enter(&self, span: &Id) {
        let mut log = self.log();
        let thread = std::thread::current().id();
        log.entered
            .entry(thread)
            .or_default()
            .push(span.into_u64() as usize - 1);
    }

    fn exit(&self, _: &Id) {
        let mut log = self.log();
        let thread = std::thread::current().id();
        if let Some(stack) = log.entered.get_mut(&thread) {
            stack.pop();
        }
    }
}

/// Runs `test` on a current-thread runtime with a fresh capture installed
/// for this thread.
fn captured<F: std::future::Future<Output = ()>>(test: impl FnOnce(Capture) -> F) {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(test(capture));
}

fn batch(tag: &str, n: u64) -> Vec<(Key, Leaf)> {
    (0..n)
        .map(|i| (hkey(tag, i), Leaf::new(format!("v{i}").into_bytes(), i + 1)))
        .collect()
}

/// Every span a person debugging these operations needs, with its fields.
async fn check_spans<S, L>(capture: &Capture, tree: &Tree<S, L>, namespace: &str)
where
    S: Writable + AuditStore + Clone + 'static,
    L: Layout + Send + Sync + 'static,
{
    let tag = unique("spans");
    capture.clear();
    tree.insert_many(batch(&tag, 50)).await.expect("insert");
    let insert = capture.span("insert_many");
    assert_eq!(insert.level, tracing::Level::DEBUG);
    assert_eq!(insert.target, "ms_smt");
    assert_eq!(insert.field("namespace"), Some(namespace));
    assert_eq!(insert.number("batch"), 50);
    assert_eq!(insert.field("prove"), Some("false"));
    assert_eq!(insert.number("attempts"), 1);
    assert_eq!(insert.finished, 1, "{insert:?}");
    assert_eq!(insert.field("outcome"), Some("ok"));
    assert_eq!(insert.field("error"), None);
    assert!(insert.number("round_trips") >= 2, "{insert:?}");
    assert!(insert.number("nodes_written") > 0, "{insert:?}");
    insert.number("nodes_read");
    let children = capture.children(capture.index_of("insert_many"));
    for phase in ["read", "descent", "commit"] {
        assert!(children.contains(&phase), "{phase} in {children:?}");
    }
    let commit = capture.span("commit");
    assert_eq!(commit.level, tracing::Level::TRACE);
    assert!(commit.number("inserts") > 0);

    // A rejected batch: outcome and error, nothing written.
    capture.clear();
    let overflow = vec![(hkey(&tag, 1_000), Leaf::new(b"big".to_vec(), u64::MAX))];
    assert!(tree.insert_many(overflow).await.is_err());
    let rejected = capture.span("insert_many");
    assert_eq!(rejected.finished, 1, "{rejected:?}");
    assert_eq!(rejected.field("outcome"), Some("overflow"));
    assert!(
        rejected
            .field("error")
            .is_some_and(|e| e.contains("u64::MAX"))
    );
    assert_eq!(rejected.number("nodes_written"), 0);

    capture.clear();
    let keys: Vec<Key> = (0..3).map(|i| hkey(&tag, i)).collect();
    tree.merkle_proofs(&keys).await.expect("proofs");
    let proofs = capture.span("merkle_proofs");
    assert_eq!(proofs.field("namespace"), Some(namespace));
    assert_eq!(proofs.number("keys"), 3);
    assert_eq!(proofs.field("pinned"), Some("false"));
    assert_eq!(proofs.number("attempts"), 1);
    assert_eq!(proofs.field("outcome"), Some("ok"));
    assert_eq!(proofs.number("nodes_written"), 0);
    assert!(proofs.number("round_trips") >= 1);
    let read = capture.children(capture.index_of("merkle_proofs"));
    assert!(
        read.contains(&"read") && read.contains(&"descent"),
        "{read:?}"
    );

    capture.clear();
    tree.get_many(&keys).await.expect("get");
    assert_eq!(capture.span("get_many").field("outcome"), Some("ok"));

    capture.clear();
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{report:?}");
    let audit = capture.span("audit");
    assert_eq!(audit.field("namespace"), Some(namespace));
    assert_eq!(audit.number("nodes"), report.stored_items);
    assert_eq!(audit.number("problems"), 0);
    assert_eq!(audit.field("outcome"), Some("ok"));

    capture.clear();
    let writer = tree.writer(WriterConfig::default());
    let submissions = (0..20u64).map(|i| {
        let writer = writer.clone();
        let tag = tag.clone();
        async move { writer.submit(batch(&format!("{tag}/w{i}"), 3)).await }
    });
    for answer in futures_join(submissions).await {
        answer.expect("submit");
    }
    writer.close().await;
    let groups = capture.spans("writer_group");
    assert!(!groups.is_empty());
    let mut leaves = 0;
    let mut submitted = 0;
    for group in &groups {
        assert_eq!(group.field("namespace"), Some(namespace));
        assert_eq!(group.field("outcome"), Some("ok"), "{group:?}");
        assert_eq!(group.number("rejected"), 0);
        assert!(group.number("inserts") > 0);
        group.number("attempts");
        leaves += group.number("leaves");
        submitted += group.number("submissions");
    }
    assert_eq!((submitted, leaves), (20, 60), "{groups:?}");
    let stats = writer.stats();
    assert_eq!(stats.groups, groups.len() as u64);
}

/// Runs the futures concurrently on this task and returns their outputs.
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.expect("join"));
    }
    out
}

#[test]
fn spans_memory() {
    captured(async |capture| {
        let store = MemoryStore::new().open_namespace("traced").expect("ns");
        check_spans(&capture, &CompactedTree::new(store.clone()), "traced").await;
        let full = store.open_namespace("traced-full").expect("ns");
        check_spans(&capture, &FullTree::new(full), "traced-full").await;
    });
}

#[test]
fn spans_sqlite() {
    captured(async |capture| {
        let db = SqliteDb::open("tracing").await;
        let name = unique("traced");
        let store = db.store.open_namespace(&name);
        check_spans(&capture, &CompactedTree::new(store), &name).await;
    });
}

#[test]
fn spans_postgres() {
    captured(async |capture| {
        let Some(base) = pg_store("spans_postgres").await else {
            return;
        };
        let name = unique("traced");
        let store = base.open_namespace(&name);
        let tree = FullTree::new(store);
        check_spans(&capture, &tree, &name).await;
        tree.delete_all().await.expect("cleanup");
    });
}

#[test]
fn schema_upgrade_sqlite() {
    captured(async |capture| {
        let _db = SqliteDb::open("schema-span").await;
        let upgrade = capture.span("schema_upgrade");
        assert_eq!(upgrade.level, tracing::Level::INFO);
        assert_eq!(upgrade.finished, 1, "{upgrade:?}");
        assert_eq!(upgrade.field("outcome"), Some("ok"));
        let steps = upgrade.number("steps");
        assert!(steps >= 1, "a fresh database needs every step");
        assert_eq!(upgrade.number("applied"), steps);
        assert_eq!(upgrade.number("found"), 0);
        assert!(upgrade.number("newest") >= steps);
        // Migrating again finds every version in place.
        capture.clear();
        _db.store.migrate().await.expect("migrate");
        let again = capture.span("schema_upgrade");
        assert_eq!((again.number("steps"), again.number("applied")), (0, 0));
        assert_eq!(again.number("found"), upgrade.number("newest"));
    });
}

#[test]
fn schema_upgrade_postgres() {
    captured(async |capture| {
        let Some(store) = pg_store("schema_upgrade_postgres").await else {
            return;
        };
        capture.clear();
        store.migrate().await.expect("migrate");
        let upgrade = capture.span("schema_upgrade");
        assert_eq!(upgrade.field("outcome"), Some("ok"));
        assert_eq!(upgrade.number("found"), upgrade.number("newest"));
        assert_eq!(upgrade.number("steps"), 0);
    });
}

#[test]
fn progress_events_memory() {
    captured(async |capture| {
        let tree = CompactedTree::new(MemoryStore::new());
        tree.insert_many(batch("events", 40)).await.expect("insert");
        let events = capture.progress_events();
        for operation in ["InsertRead", "InsertDescent", "InsertCommit"] {
            let last = events
                .iter()
                .rfind(|e| e.field("operation") == Some(operation))
                .unwrap_or_else(|| panic!("no {operation} event in {events:?}"));
            assert_eq!(last.level, tracing::Level::DEBUG);
            assert_eq!(last.field("done"), Some("40"));
            assert_eq!(last.field("total"), Some("40"));
        }
        // They sit inside the operation's span.
        let insert = capture.index_of("insert_many");
        assert!(
            events.iter().all(|e| e.parent == Some(insert)),
            "{events:?}"
        );
    });
}

/// The universe operations' spans on the memory store: copy (plain and
/// filtered), diff, sync_from, export and import, each with its outcome;
/// an import into a namespace that is not empty ends `target_not_empty`.
#[test]
fn universe_spans_memory() {
    captured(async |capture| {
        let base = MemoryStore::new();
        let source = CompactedTree::new(base.open_namespace("source").expect("ns"));
        source
            .insert_many(batch("universe", 200))
            .await
            .expect("insert");
        let target = FullTree::new(base.open_namespace("copy").expect("ns"));

        capture.clear();
        let copied = source.view().copy_to(&target).await.expect("copy");
        let copy = capture.span("copy");
        assert_eq!(copy.field("namespace"), Some("source"));
        assert_eq!(copy.field("target_namespace"), Some("copy"));
        assert_eq!(copy.field("filter"), Some("false"));
        assert_eq!(copy.number("kept"), copied.kept);
        assert_eq!(copy.field("outcome"), Some("ok"));
        assert!(copy.number("nodes_written") > 0);
        // Its page writes are insert_many spans inside it.
        let inside = capture.children(capture.index_of("copy"));
        assert!(inside.contains(&"insert_many"), "{inside:?}");

        capture.clear();
        let odd = FullTree::new(base.open_namespace("odd").expect("ns"));
        source
            .view()
            .copy_filter_to(&odd, |_, leaf| Ok::<_, std::io::Error>(leaf.sum() % 2 == 1))
            .await
            .expect("copy_filter");
        let filtered = capture.span("copy");
        assert_eq!(filtered.field("filter"), Some("true"));
        assert_eq!(
            (filtered.number("kept"), filtered.number("rejected")),
            (100, 100)
        );

        capture.clear();
        let changes = odd
            .view()
            .diff(&target.view())
            .collect_all()
            .await
            .expect("diff");
        let pages = capture.spans("diff");
        assert!(!pages.is_empty());
        let entries: u64 = pages.iter().map(|p| p.number("entries")).sum();
        assert_eq!(entries, changes.len() as u64);
        assert!(pages.iter().all(|p| p.field("outcome") == Some("ok")));

        capture.clear();
        let root = source.root().await.expect("root");
        let report = odd.sync_from(&source.view(), &root).await.expect("sync");
        let sync = capture.span("sync_from");
        assert_eq!(sync.field("namespace"), Some("odd"));
        assert_eq!(sync.number("fetched"), report.fetched);
        assert_eq!(sync.number("upserts"), report.upserts);
        assert_eq!(sync.field("outcome"), Some("ok"));

        capture.clear();
        let trunk = source.view().export_trunk(3).await.expect("trunk");
        let cut = capture.span("export_trunk");
        assert_eq!(cut.number("level"), 3);
        assert_eq!(cut.number("chunks"), trunk.chunks.len() as u64);
        let into = CompactedTree::new(base.open_namespace("import").expect("ns"));
        let mut import = into.import(trunk.clone()).await.expect("import");
        for (position, _) in &trunk.chunks {
            let chunk = source.view().export_chunk(*position).await.expect("chunk");
            import.add(&chunk).await.expect("add");
        }
        import.finish().await.expect("finish");
        assert_eq!(capture.spans("export_chunk").len(), trunk.chunks.len());
        let steps: Vec<Seen> = capture.spans("import");
        let adds = steps
            .iter()
            .filter(|s| s.field("step") == Some("add"))
            .count();
        assert_eq!(adds, trunk.chunks.len());
        assert!(steps.iter().all(|s| s.field("outcome") == Some("ok")));

        // The namespace now holds the tree: another import is refused.
        capture.clear();
        assert!(into.import(trunk).await.is_err());
        let refused = capture.span("import");
        assert_eq!(refused.field("outcome"), Some("target_not_empty"));
        assert!(refused.field("error").is_some());
    });
}
