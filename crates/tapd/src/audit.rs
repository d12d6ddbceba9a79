//! Audit in place: the import's walk with every check and no target.

use crate::error::{Corruption, TapdError};
use crate::node::ComputedNode;
use crate::source::{Snapshot, TapdSource};
use crate::walk::{DISCARD_BATCH, Discard, Mode, WalkError, walk};

/// What an audit of one tapd namespace found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceAudit {
    /// The namespace.
    pub namespace: String,
    /// tapd's root (hash and the root row's sum); the empty root when the
    /// namespace has no root row.
    pub root: ComputedNode,
    /// Leaves the root reaches.
    pub leaves: u64,
    /// Rows of the namespace.
    pub rows: u64,
    /// Rows no root reaches.
    pub unreachable_rows: u64,
    /// Every problem found, in walk order.
    pub problems: Vec<Corruption>,
}

/// Audits tapd namespace `namespace` of `source`: walks it from its root,
/// checks every row, and carries on past problems where it can.
pub async fn audit_namespace(
    source: &TapdSource,
    namespace: &str,
) -> Result<NamespaceAudit, TapdError> {
    audit_snapshot(&mut source.snapshot(namespace).await?).await
}

/// [`audit_namespace`] on an open snapshot.
pub(crate) async fn audit_snapshot(snapshot: &mut Snapshot) -> Result<NamespaceAudit, TapdError> {
    let walked = walk(snapshot, Mode::Audit, &mut Discard, DISCARD_BATCH)
        .await
        .map_err(|e| match e {
            WalkError::Source(e) => e,
            WalkError::Sink(never) => match never {},
        })?;
    Ok(NamespaceAudit {
        namespace: snapshot.namespace().to_owned(),
        root: walked.root.unwrap_or(ComputedNode::empty_root()),
        leaves: walked.leaves,
        unreachable_rows: walked.unreachable(),
        rows: walked.rows,
        problems: walked.problems,
    })
}
