//! Progress of long operations: a [`Progress`] value handed to a
//! [`ProgressSink`] the caller attaches to a tree
//! ([`Tree::with_progress`](crate::Tree::with_progress)).
//!
//! Reports are throttled (about a hundred per operation whose total is
//! known, a few hundred at most otherwise), so a sink may do real work,
//! and every report is also a `tracing` event (target
//! `ms_smt::progress`, level DEBUG). An operation that completes ends
//! with a report whose `total` is `Some(done)`; one that fails stops
//! reporting.

use std::sync::Arc;

use tokio::sync::watch;

/// What a [`Progress`] report counts, and in which unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProgressOperation {
    /// [`Tree::insert_many`](crate::Tree::insert_many)'s read phase, in
    /// leaves of the batch whose paths are read (total: the batch's
    /// distinct keys).
    InsertRead,
    /// The batch's descent, in leaves planned (total: distinct keys).
    InsertDescent,
    /// The batch's commit, in leaves committed (total: distinct keys).
    InsertCommit,
    /// [`Tree::audit`](crate::Tree::audit), in stored items checked: nodes
    /// on the memory store (total known), rows on SQL stores (total
    /// unknown until the end).
    Audit,
    /// [`View::copy_filter_to`](crate::View::copy_filter_to)'s filter pass,
    /// in leaves filtered (total unknown until the end).
    Filter,
    /// [`View::copy_to`](crate::View::copy_to) and
    /// [`View::copy_filter_to`](crate::View::copy_filter_to), in leaves
    /// written to the target (total known after a filter pass). A copy
    /// done inside the database reports once, at its end, with the leaves
    /// it counted (none for a plain copy).
    Copy,
    /// [`Tree::sync_from`](crate::Tree::sync_from), in subtrees fetched
    /// from the peer (total unknown until the end).
    Sync,
    /// [`View::export_trunk`](crate::View::export_trunk), in levels of the
    /// cut walked (total: the cut level).
    ExportTrunk,
    /// [`View::export_chunk`](crate::View::export_chunk), in leaves read
    /// (total unknown until the end).
    ExportChunk,
    /// An [`Import`](crate::Import), in chunks in (total: the trunk's
    /// chunks); resumed chunks count from the start.
    Import,
    /// A SQL store's schema upgrade, in migration steps applied (total:
    /// the steps this database still needed).
    SchemaUpgrade,
    /// `ms_smt_sql::SqlStore::count_leaves`, in
    /// rows read (total unknown until the end).
    CountLeaves,
}

/// One progress report: `done` units of `operation` out of `total`, when
/// the total is known. `done` never decreases within one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// What is counted (and its unit).
    pub operation: ProgressOperation,
    /// Units done so far.
    pub done: u64,
    /// Units in all, when known; `Some(done)` in an operation's last
    /// report.
    pub total: Option<u64>,
}

type Callback = dyn Fn(&Progress) + Send + Sync;

/// Where progress reports go: a callback, shared by every clone (cloning
/// is one reference count). The default sink drops reports (only the
/// `tracing` events remain).
#[derive(Clone, Default)]
pub struct ProgressSink {
    callback: Option<Arc<Callback>>,
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressSink")
            .field("attached", &self.callback.is_some())
            .finish()
    }
}

impl ProgressSink {
    /// A sink that calls `callback` with each report, on the task doing
    /// the work: keep it short (or hand the report on, as
    /// [`watch`](Self::watch) does).
    pub fn new(callback: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        ProgressSink {
            callback: Some(Arc::new(callback)),
        }
    }

    /// A sink that publishes the latest report on a watch channel, so async
    /// code can await updates (`receiver.changed().await`). Reports sent
    /// while nobody holds the receiver are kept as the latest value.
    pub fn watch() -> (Self, watch::Receiver<Option<Progress>>) {
        let (sender, receiver) = watch::channel(None);
        let sink = ProgressSink::new(move |progress| {
            sender.send_replace(Some(*progress));
        });
        (sink, receiver)
    }

    /// True when a callback is attached.
    pub fn is_attached(&self) -> bool {
        self.callback.is_some()
    }

    /// Hands `progress` to the callback and emits its `tracing` event.
    fn emit(&self, progress: &Progress) {
        tracing::debug!(
            target: "ms_smt::progress",
            operation = ?progress.operation,
            done = progress.done,
            total = progress.total,
            "progress"
        );
        if let Some(callback) = &self.callback {
            callback(progress);
        }
    }

    /// A throttled reporter for one run of `operation`, reporting `done: 0`
    /// first when anyone listens.
    pub fn meter(&self, operation: ProgressOperation, total: Option<u64>) -> Meter {
        let on = self.is_attached()
            || tracing::enabled!(target: "ms_smt::progress", tracing::Level::DEBUG);
        let mut meter = Meter {
            sink: self.clone(),
            on,
            progress: Progress {
                operation,
                done: 0,
                total,
            },
            next: 0,
        };
        meter.report();
        meter
    }
}

/// Reports at most this many times per operation whose total is known.
const STEPS: u64 = 100;

/// Past the first units of an operation whose total is unknown, reports
/// when `done` has grown by a `1 / GROWTH` part since the last report.
const GROWTH: u64 = 16;

/// One operation's throttled reporter (see [`ProgressSink::meter`]); does
/// nothing when no sink is attached and no subscriber listens.
#[derive(Debug)]
pub struct Meter {
    sink: ProgressSink,
    on: bool,
    progress: Progress,
    /// The `done` at which the next report is due.
    next: u64,
}

impl Meter {
    /// A meter that reports nothing.
    pub fn off(operation: ProgressOperation) -> Meter {
        Meter {
            sink: ProgressSink::default(),
            on: false,
            progress: Progress {
                operation,
                done: 0,
                total: None,
            },
            next: u64::MAX,
        }
    }

    /// Counts `n` more units done.
    pub fn add(&mut self, n: u64) {
        self.set(self.progress.done.saturating_add(n));
    }

    /// Sets the units done (never lowering them); reports when due.
    pub fn set(&mut self, done: u64) {
        if !self.on || done <= self.progress.done {
            return;
        }
        self.progress.done = done;
        if done >= self.next {
            self.report();
        }
    }

    /// The last report: `total` becomes `Some(done)` (an operation whose
    /// total was known ends with everything done).
    pub fn finish(mut self) {
        if !self.on {
            return;
        }
        let done = self.progress.total.unwrap_or(self.progress.done);
        self.progress.done = self.progress.done.max(done);
        self.progress.total = Some(self.progress.done);
        self.sink.emit(&self.progress);
    }

    fn report(&mut self) {
        if !self.on {
            return;
        }
        self.sink.emit(&self.progress);
        let done = self.progress.done;
        let step = match self.progress.total {
            Some(total) => total / STEPS,
            None => done / GROWTH,
        };
        self.next = done.saturating_add(step.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn collect() -> (ProgressSink, Arc<Mutex<Vec<Progress>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let sink = ProgressSink::new(move |p| into.lock().unwrap().push(*p));
        (sink, seen)
    }

    /// The reports of a meter for `operation` (of `total`) that counts to
    /// 1,000,000 one at a time and finishes.
    fn a_million_ones(operation: ProgressOperation, total: Option<u64>) -> Vec<Progress> {
        let (sink, seen) = collect();
        let mut meter = sink.meter(operation, total);
        for _ in 0..1_000_000 {
            meter.add(1);
        }
        meter.finish();
        seen.lock().unwrap().clone()
    }

    #[test]
    fn a_known_total_reports_about_a_hundred_times_and_ends_complete() {
        let seen = a_million_ones(ProgressOperation::InsertDescent, Some(1_000_000));
        assert!(seen.len() <= 103, "{} reports", seen.len());
        assert!(seen.windows(2).all(|w| w[0].done <= w[1].done));
        assert_eq!(seen[0].done, 0);
        let last = seen.last().unwrap();
        assert_eq!((last.done, last.total), (1_000_000, Some(1_000_000)));
    }

    #[test]
    fn an_unknown_total_reports_geometrically_and_ends_with_its_count() {
        let seen = a_million_ones(ProgressOperation::Audit, None);
        assert!(seen.len() < 300, "{} reports", seen.len());
        assert!(seen[..seen.len() - 1].iter().all(|p| p.total.is_none()));
        let last = seen.last().unwrap();
        assert_eq!((last.done, last.total), (1_000_000, Some(1_000_000)));
    }

    #[test]
    fn done_never_goes_back() {
        let (sink, seen) = collect();
        let mut meter = sink.meter(ProgressOperation::Sync, None);
        meter.set(10);
        meter.set(4);
        meter.finish();
        let dones: Vec<u64> = seen.lock().unwrap().iter().map(|p| p.done).collect();
        assert_eq!(dones, [0, 10, 10]);
    }
}
