//! The end of an operation's `tracing` span: one DEBUG event, `finished`,
//! inside it, with how the operation ended and what the store did during it.
//!
//! The span's own fields say what the operation is (namespace, sizes) and
//! what it produced; the event carries the fields every operation shares:
//! `outcome` (`"ok"` or an error kind), `error` (the error, displayed, only
//! on failure), and the store's counter deltas `round_trips`, `nodes_read`
//! and `nodes_written`. Nothing is read or emitted when the span is disabled.

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
            TreeError::Link(_) => "link",
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

    /// Emits the span's `finished` event: `out`'s outcome and what `store`
    /// did since the start.
    pub(crate) fn finish<S: TreeStore, T, E: ErrorKind + Display>(
        &self,
        store: &S,
        out: &Result<T, E>,
    ) {
        let Some(before) = self.before else {
            return;
        };
        let delta = store.stats().since(&before);
        let (outcome, error) = match out {
            Ok(_) => ("ok", None),
            Err(e) => (e.kind(), Some(tracing::field::display(e))),
        };
        tracing::debug!(
            target: "ms_smt",
            parent: &self.span,
            outcome,
            error,
            round_trips = delta.round_trips,
            nodes_read = delta.nodes_read,
            nodes_written = delta.nodes_written,
            "finished"
        );
    }
}
