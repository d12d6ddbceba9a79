//! Import: a tapd namespace into an ms-smt tree, complete or not at all.
//!
//! The leaves are built into a staging namespace beside the target
//! (`"<target>\u{1f}tapd"`) with `insert_many` per batch; only when the
//! staging root and sum equal tapd's root row does the staging tree
//! become the target's, in one step ([`BulkStore::swap_in_from`]). On any
//! failure staging is cleared and forgotten
//! ([`BulkStore::forget_if_vacant`]), so the target database lists nothing
//! of the import, and the target is untouched; a process killed midway
//! leaves only staging, which the next import clears.
//!
//! The walk checks what costs one hash per row; the equality of the
//! rebuilt root then proves every leaf. Only when it does not hold is the
//! namespace walked again with every check, to name the row at fault.

use crate::audit::audit_snapshot;
use crate::error::{Corruption, ImportError, TapdError};
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::source::TapdSource;
use crate::store::BulkStore;
use crate::walk::{DISCARD_BATCH, Discard, LeafSink, Mode, WalkError, walk};
use ms_smt::Tree;
use ms_smt::TreeError;

/// Leaves per `insert_many` by default.
pub const DEFAULT_IMPORT_BATCH: usize = 50_000;

/// How to import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOptions {
    /// Replace a target namespace that holds another tree.
    pub replace: bool,
    /// Leaves per `insert_many`.
    pub batch: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            replace: false,
            batch: DEFAULT_IMPORT_BATCH,
        }
    }
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// The tapd namespace read.
    pub namespace: String,
    /// The root now in the target (tapd's).
    pub root: ComputedNode,
    /// Leaves imported.
    pub leaves: u64,
    /// Rows of the namespace.
    pub rows: u64,
    /// Rows no root reaches: counted, not imported.
    pub unreachable_rows: u64,
    /// True when the target already held this tree and nothing was written.
    pub unchanged: bool,
}

/// Hands the walk's batches to the inserting half of an import, so the
/// walk reads the next rows while `insert_many` builds the last ones.
struct Handoff(tokio::sync::mpsc::Sender<Vec<(Key, Leaf)>>);

impl LeafSink for Handoff {
    type Error = std::convert::Infallible;
    async fn take(&mut self, batch: Vec<(Key, Leaf)>) -> Result<(), Self::Error> {
        // The receiver lives in `walk_into`'s frame until the walk is done or
        // dropped, so the channel never closes under a send.
        let _ = self.0.send(batch).await;
        Ok(())
    }
}

/// The name of the staging namespace beside `name`.
fn staging_name(name: &str) -> String {
    format!("{name}\u{1f}tapd")
}

/// Imports tapd namespace `namespace` of `source` into `target` (a
/// namespace with no rows is tapd's empty tree: it imports as one). The
/// target must be empty, hold this very tree already (then nothing is
/// written), or `options.replace` must be set.
pub async fn import_namespace<S: BulkStore, L: Layout>(
    source: &TapdSource,
    namespace: &str,
    target: &Tree<S, L>,
    options: ImportOptions,
) -> Result<ImportReport, ImportError<S::Error>> {
    let mut snapshot = source.snapshot(namespace).await?;
    let tapd_root = snapshot.root().await?;
    let current = target.root().await.map_err(ImportError::Target)?;
    let target_name = target.store().name().to_owned();
    let report = |w: &crate::walk::Walked, root, unchanged| ImportReport {
        namespace: namespace.to_owned(),
        root,
        leaves: w.leaves,
        rows: w.rows,
        unreachable_rows: w.unreachable(),
        unchanged,
    };
    // Already there: check the source cheaply, write nothing.
    if tapd_root.is_some_and(|h| h == current.hash)
        || (tapd_root.is_none() && current == ComputedNode::empty_root())
    {
        let walked = walk(&mut snapshot, Mode::Import, &mut Discard, DISCARD_BATCH)
            .await
            .map_err(|e| match e {
                WalkError::Source(e) => ImportError::Source(e),
                WalkError::Sink(never) => match never {},
            })?;
        if walked.root.unwrap_or(ComputedNode::empty_root()) == current {
            return Ok(report(&walked, current, true));
        }
    }
    if current != ComputedNode::empty_root() && !options.replace {
        return Err(ImportError::TargetNotEmpty(target_name));
    }
    let staging_store = target
        .store()
        .open_namespace(&staging_name(&target_name))
        .map_err(|e| ImportError::Target(TreeError::Store(e)))?;
    let staging: Tree<S, L> = Tree::new(staging_store);
    staging.delete_all().await.map_err(ImportError::Target)?;
    let outcome = build(namespace, &mut snapshot, &staging, options).await;
    let walked = match outcome {
        Ok(w) => w,
        Err(e) => {
            abandon(&staging).await?;
            return Err(e);
        }
    };
    let root = walked.root.unwrap_or(ComputedNode::empty_root());
    if current != ComputedNode::empty_root() {
        target.delete_all().await.map_err(ImportError::Target)?;
    }
    if root != ComputedNode::empty_root() {
        let taken = target
            .store()
            .swap_in_from(staging.store(), &root)
            .await
            .map_err(|e| ImportError::Target(TreeError::Store(e)))?;
        if !taken {
            abandon(&staging).await?;
            return Err(ImportError::TargetNotEmpty(target_name));
        }
    }
    Ok(report(&walked, root, false))
}

/// Empties and forgets the staging namespace of an import that failed, so
/// the target database lists nothing of it.
async fn abandon<S: BulkStore, L: Layout>(
    staging: &Tree<S, L>,
) -> Result<(), ImportError<S::Error>> {
    staging.delete_all().await.map_err(ImportError::Target)?;
    staging
        .store()
        .forget_if_vacant()
        .await
        .map_err(|e| ImportError::Target(TreeError::Store(e)))?;
    Ok(())
}

/// Walks the namespace into `staging` and checks the built root; on a
/// mismatch, walks it again with every check to name the row at fault.
async fn build<S: BulkStore, L: Layout>(
    namespace: &str,
    snapshot: &mut crate::source::Snapshot,
    staging: &Tree<S, L>,
    options: ImportOptions,
) -> Result<crate::walk::Walked, ImportError<S::Error>> {
    let walked = walk_into(snapshot, staging, options.batch).await?;
    let expected = walked.root.unwrap_or(ComputedNode::empty_root());
    let got = staging.root().await.map_err(ImportError::Target)?;
    if got == expected {
        return Ok(walked);
    }
    let audit = audit_snapshot(snapshot).await?;
    let first = audit
        .problems
        .into_iter()
        .next()
        .unwrap_or(Corruption::RootMismatch {
            namespace: namespace.to_owned(),
            expected,
            got,
        });
    Err(TapdError::from(first).into())
}

/// Walks `snapshot` into `staging`: the walk and the inserts overlap, the
/// walk reading at most one batch ahead, so memory stays at about two
/// batches.
async fn walk_into<S: BulkStore, L: Layout>(
    snapshot: &mut crate::source::Snapshot,
    staging: &Tree<S, L>,
    batch: usize,
) -> Result<crate::walk::Walked, ImportError<S::Error>> {
    let (handoff, mut batches) = tokio::sync::mpsc::channel(1);
    let walking = async move {
        let mut sink = Handoff(handoff);
        walk(snapshot, Mode::Import, &mut sink, batch).await
        // The sender drops here: the inserting half sees the end.
    };
    let inserting = async {
        while let Some(batch) = batches.recv().await {
            staging.insert_many(batch).await?;
        }
        Ok::<(), TreeError<S::Error>>(())
    };
    tokio::pin!(walking, inserting);
    let mut walked = None;
    loop {
        tokio::select! {
            biased;
            // A failed insert ends the import at once (the walk is dropped).
            inserted = &mut inserting => {
                inserted.map_err(ImportError::Target)?;
                break;
            }
            // A failed walk ends it too; a finished one lets the inserts drain.
            done = &mut walking, if walked.is_none() => {
                walked = Some(done.map_err(|e| match e {
                    WalkError::Source(e) => ImportError::Source(e),
                    WalkError::Sink(never) => match never {},
                })?);
            }
        }
    }
    let walked = match walked {
        Some(walked) => walked,
        // Not taken: the inserts end only after the walk drops its sender
        // (and `walked` is set as it does).
        None => (&mut walking).await.map_err(|e| match e {
            WalkError::Source(e) => ImportError::Source(e),
            WalkError::Sink(never) => match never {},
        })?,
    };
    Ok(walked)
}
