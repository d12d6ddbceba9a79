//! Copy and CopyFilter: a view's leaves into another tree.
//!
//! Like the reference's `Copy`, a copy merges into the target (its other
//! leaves stay; shared keys take the source's leaf), and any layout copies
//! into any layout. Unlike it, nothing is loaded into a map:
//!
//! * into an empty namespace of the same database and layout, the tree's rows are
//!   copied in one statement ([`BulkStore::copy_into`]), and CopyFilter
//!   then deletes the rejected keys with one `insert_many`, which rebuilds
//!   only the paths that held them (done in a staging namespace that then
//!   becomes the target's tree in one step, so nobody sees the unfiltered
//!   copy);
//! * otherwise the leaves stream through in pages, one `insert_many` per
//!   page.
//!
//! A copy of the current tree reads it page by page; copy from a pinned
//! view ([`Tree::at_pin`]) for a snapshot.

use std::any::Any;
use std::collections::HashSet;

use tracing::Span;
use tracing::field::Empty;

use crate::error::TreeError;
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::progress::ProgressOperation;
use crate::store::{BulkStore, TreeStore, Writable};
use crate::tree::traced::{ErrorKind, Traced};
use crate::tree::{Tree, View};

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError<S, T>
where
    S: std::error::Error + 'static,
    T: std::error::Error + 'static,
{
    /// Reading the source failed; nothing more was written.
    #[error("source: {0}")]
    Source(#[source] TreeError<S>),
    /// Writing the target failed.
    #[error("target: {0}")]
    Target(#[source] TreeError<T>),
    /// The staging namespace of a set-based CopyFilter (in the target's
    /// database) failed; the target is untouched.
    #[error("staging: {0}")]
    Staging(#[source] TreeError<S>),
    /// The filter failed on `key`; nothing was written.
    #[error("filter failed on key {key}: {source}")]
    Filter {
        /// The key.
        key: Key,
        /// The filter's error (boxed, so the error type does not carry the
        /// filter's).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl<S, T> ErrorKind for CopyError<S, T>
where
    S: std::error::Error + 'static,
    T: std::error::Error + 'static,
{
    fn kind(&self) -> &'static str {
        match self {
            CopyError::Source(_) => "source",
            CopyError::Target(_) => "target",
            CopyError::Staging(_) => "staging",
            CopyError::Filter { .. } => "filter",
        }
    }
}

/// What a copy did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyReport {
    /// The target's root afterwards.
    pub root: ComputedNode,
    /// Leaves the filter kept (all of them, for a plain copy; 0 when a
    /// set-based copy did not count them).
    pub kept: u64,
    /// Leaves the filter rejected.
    pub rejected: u64,
    /// True when the rows were copied inside the database.
    pub set_based: bool,
}

/// The name of the staging namespace beside `name` for `purpose`.
pub(crate) fn staging_name(name: &str, purpose: &str) -> String {
    format!("{name}\u{1f}{purpose}")
}

/// `target` as an `S`, when it is one (the set-based paths need both
/// handles in one store type).
fn same_store<S: 'static, T: 'static>(target: &T) -> Option<&S> {
    (target as &dyn Any).downcast_ref::<S>()
}

type CopyResult<S, T> =
    Result<CopyReport, CopyError<<S as TreeStore>::Error, <T as TreeStore>::Error>>;

impl<'t, S: BulkStore + 'static, L: Layout> View<'t, S, L> {
    /// Copies every leaf of this view into `target` (merging; see the
    /// module docs). Into an empty namespace of the same database and
    /// layout this is one statement.
    pub async fn copy_to<T: Writable + 'static, L2: Layout>(
        &self,
        target: &Tree<T, L2>,
    ) -> CopyResult<S, T> {
        let span = copy_span(self.tree.store(), target.store(), false);
        let traced = Traced::new(span, target.store());
        traced.run(target.store(), self.copy_all(target)).await
    }

    /// [`copy_to`](Self::copy_to), inside its span.
    async fn copy_all<T: Writable + 'static, L2: Layout>(
        &self,
        target: &Tree<T, L2>,
    ) -> CopyResult<S, T> {
        if L::KIND == L2::KIND
            && let Some(same) = same_store::<S, T>(target.store())
            && let Some(root) = self
                .tree
                .store()
                .copy_into(self.target.at, same)
                .await
                .map_err(|e| CopyError::Source(TreeError::Store(e)))?
        {
            return Ok(self.set_based(root, 0, 0));
        }
        self.stream_into(target, &HashSet::new(), 0, None).await
    }

    /// Copies the leaves `filter` keeps into `target` (merging). The
    /// filter runs over every leaf before anything is written; its first
    /// error aborts the copy. Into an empty namespace of the same database
    /// the rows are copied in one statement and the rejected keys deleted
    /// with one `insert_many` (when they are at most half), out of sight
    /// until the result replaces the empty target in one step.
    pub async fn copy_filter_to<T, L2, F, E>(
        &self,
        target: &Tree<T, L2>,
        filter: F,
    ) -> CopyResult<S, T>
    where
        T: Writable + 'static,
        L2: Layout,
        F: FnMut(&Key, &Leaf) -> Result<bool, E>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let span = copy_span(self.tree.store(), target.store(), true);
        let traced = Traced::new(span, target.store());
        traced
            .run(target.store(), self.copy_filtered(target, filter))
            .await
    }

    /// [`copy_filter_to`](Self::copy_filter_to), inside its span: the
    /// filter pass, then the copy of what it kept.
    async fn copy_filtered<T: Writable + 'static, L2: Layout, E>(
        &self,
        target: &Tree<T, L2>,
        filter: impl FnMut(&Key, &Leaf) -> Result<bool, E>,
    ) -> CopyResult<S, T>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let (rejected, kept) = self.filter_pass(filter).await?;
        let dropped = rejected.len() as u64;
        if dropped <= kept
            && L::KIND == L2::KIND
            && let Some(same) = same_store::<S, T>(target.store())
            && let Some(root) = self.copy_then_delete::<T, L2>(same, &rejected).await?
        {
            return Ok(self.set_based(root, kept, dropped));
        }
        let rejected: HashSet<Key> = rejected.into_iter().collect();
        let report = self
            .stream_into(target, &rejected, dropped, Some(kept))
            .await?;
        Ok(CopyReport { kept, ..report })
    }

    /// The report of a copy done inside the database (its one progress
    /// report, and its span's fields).
    fn set_based(&self, root: ComputedNode, kept: u64, rejected: u64) -> CopyReport {
        let meter = self
            .tree
            .progress
            .meter(ProgressOperation::Copy, Some(kept));
        meter.finish();
        record_report(kept, rejected, true);
        CopyReport {
            root,
            kept,
            rejected,
            set_based: true,
        }
    }

    /// Runs `filter` over every leaf: the keys it rejects, and how many it
    /// keeps.
    async fn filter_pass<T: std::error::Error + 'static, E>(
        &self,
        mut filter: impl FnMut(&Key, &Leaf) -> Result<bool, E>,
    ) -> Result<(Vec<Key>, u64), CopyError<S::Error, T>>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let mut rejected = Vec::new();
        let mut kept = 0u64;
        let mut leaves = self.leaves(..);
        let mut filtered = self.tree.progress.meter(ProgressOperation::Filter, None);
        while let Some(entry) = leaves.next().await.map_err(CopyError::Source)? {
            filtered.add(1);
            match filter(&entry.key, &entry.leaf) {
                Ok(true) => kept = kept.saturating_add(1),
                Ok(false) => rejected.push(entry.key),
                Err(source) => {
                    return Err(CopyError::Filter {
                        key: entry.key,
                        source: Box::new(source),
                    });
                }
            }
        }
        filtered.finish();
        Ok((rejected, kept))
    }

    /// The set-based CopyFilter: rows copied into a staging namespace of
    /// `target`'s database, the rejected keys deleted there, then the
    /// staging tree made `target`'s. `None` (nothing left behind) when the
    /// target is not empty or not in this database.
    async fn copy_then_delete<T: Writable, L2: Layout>(
        &self,
        target: &S,
        rejected: &[Key],
    ) -> Result<Option<ComputedNode>, CopyError<S::Error, T::Error>> {
        let staging_err = |e| CopyError::Staging(TreeError::Store(e));
        let staging = target
            .open_namespace(&staging_name(target.name(), "copy"))
            .map_err(staging_err)?;
        // Whatever an interrupted copy left there goes first.
        staging.delete_all().await.map_err(staging_err)?;
        if self
            .tree
            .store()
            .copy_into(self.target.at, &staging)
            .await
            .map_err(|e| CopyError::Source(TreeError::Store(e)))?
            .is_none()
        {
            return Ok(None);
        }
        let staging: Tree<S, L2> = Tree::new(staging);
        let root = staging
            .insert_many(rejected.iter().map(|k| (*k, Leaf::empty())))
            .await
            .map_err(CopyError::Staging)?;
        let taken = target
            .swap_in_from(staging.store(), &root)
            .await
            .map_err(staging_err)?;
        if !taken {
            staging.delete_all().await.map_err(CopyError::Staging)?;
            return Ok(None);
        }
        Ok(Some(root))
    }

    /// Streams the leaves not in `rejected` into `target`, a page per
    /// `insert_many`.
    async fn stream_into<T: Writable, L2: Layout>(
        &self,
        target: &Tree<T, L2>,
        rejected: &HashSet<Key>,
        dropped: u64,
        total: Option<u64>,
    ) -> CopyResult<S, T> {
        let mut copied = self.tree.progress.meter(ProgressOperation::Copy, total);
        let mut kept = 0u64;
        let mut root = target.root().await.map_err(CopyError::Target)?;
        let mut leaves = self.leaves(..);
        loop {
            let page = leaves.next_page().await.map_err(CopyError::Source)?;
            if page.is_empty() {
                break;
            }
            let batch: Vec<(Key, Leaf)> = page
                .into_iter()
                .filter(|e| !rejected.contains(&e.key))
                .map(|e| (e.key, e.leaf))
                .collect();
            kept = kept.saturating_add(batch.len() as u64);
            root = target.insert_many(batch).await.map_err(CopyError::Target)?;
            copied.set(kept);
        }
        copied.finish();
        record_report(kept, dropped, false);
        Ok(CopyReport {
            root,
            kept,
            rejected: dropped,
            set_based: false,
        })
    }
}

/// The span of a copy (DEBUG) from `source` into `target` (`filter`:
/// a [`View::copy_filter_to`]); its counters are the target store's.
fn copy_span<S: TreeStore, T: TreeStore>(source: &S, target: &T, filter: bool) -> Span {
    tracing::debug_span!(
        target: "ms_smt",
        "copy",
        namespace = source.namespace(),
        target_namespace = target.namespace(),
        filter,
        kept = Empty,
        rejected = Empty,
        set_based = Empty,
    )
}

/// Records what a copy did into its span (the current one).
fn record_report(kept: u64, rejected: u64, set_based: bool) {
    Span::current()
        .record("kept", kept)
        .record("rejected", rejected)
        .record("set_based", set_based);
}
