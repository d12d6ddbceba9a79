//! The end of an operation's `tracing` span: what the store did during it
//! (the counter deltas) and how it ended.
//!
//! Every operation span declares the fields recorded here as
//! `tracing::field::Empty`: `outcome` (`"ok"` or an error kind),
//! `error` (the error, displayed), `round_trips`, `nodes_read` and
//! `nodes_written`. Nothing is read or recorded when the span is disabled.

use std::fmt::Display;
use std::future::Future;

use tracing::{Instrument, Span};

use crate::error::{PlanError, TreeError};
use crate::store::{StoreStats, TreeStore};

/// A short, fixed name for an error, for the `outcome` field.
pub(crate) trait ErrorKind {
    /// The kind, e.g. `"store"` or `"contention"`.
    fn kind(&self) -> &'static str;
}

impl<E: std::error::Error + 'static> ErrorKind for TreeError<E> {
    fn kind(&self) -> &'static str {
        match self {
            TreeError::Plan(PlanError::Overflow(_) | PlanError::BatchSumOverflow) => "overflow",
            TreeError::Plan(PlanError::MissingNode { .. }) => "missing_node",
            TreeError::Plan(_) => "inconsistent",
            TreeError::Store(_) => "store",
            TreeError::Contention { .. } => "contention",
            TreeError::NoSuchPin { .. } => "no_such_pin",
            TreeError::RootMoved { .. } => "root_moved",
            TreeError::NoChildren { .. } => "no_children",
            TreeError::Unsupported { .. } => "unsupported",
        }
    }
}

/// An operation's span with the store counters at its start.
pub(crate) struct Traced {
    span: Span,
    /// `None` when the span is disabled.
    before: Option<StoreStats>,
}

impl Traced {
    /// Starts measuring `store` for `span`.
    pub(crate) fn new<S: TreeStore>(span: Span, store: &S) -> Self {
        let before = (!span.is_disabled()).then(|| store.stats());
        Traced { span, before }
    }

    /// The operation's span.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Runs `work` inside the span and records how it ended and what
    /// `store` did meanwhile.
    pub(crate) async fn run<S, T, E, F>(&self, store: &S, work: F) -> Result<T, E>
    where
        S: TreeStore,
        E: ErrorKind + Display,
        F: Future<Output = Result<T, E>>,
    {
        if self.before.is_none() {
            // No subscriber wants the span: run the work bare (entering a
            // disabled span on every poll is measurable on µs reads).
            return work.await;
        }
        let out = work.instrument(self.span.clone()).await;
        self.finish(store, &out);
        out
    }

    /// Records what `store` did since the start and `out`'s outcome into
    /// the span.
    pub(crate) fn finish<S: TreeStore, T, E: ErrorKind + Display>(
        &self,
        store: &S,
        out: &Result<T, E>,
    ) {
        let Some(before) = self.before else {
            return;
        };
        record_stats(&self.span, &store.stats().since(&before));
        record_outcome(&self.span, out);
    }
}

/// Records a counter delta into `span`'s `round_trips`, `nodes_read` and
/// `nodes_written` fields.
pub(crate) fn record_stats(span: &Span, delta: &StoreStats) {
    span.record("round_trips", delta.round_trips);
    span.record("nodes_read", delta.nodes_read);
    span.record("nodes_written", delta.nodes_written);
}

/// Records `out` into `span`'s `outcome` (and `error`) fields.
pub(crate) fn record_outcome<T, E: ErrorKind + Display>(span: &Span, out: &Result<T, E>) {
    match out {
        Ok(_) => span.record("outcome", "ok"),
        Err(e) => span
            .record("outcome", e.kind())
            .record("error", tracing::field::display(e)),
    };
}
