//! Error types of the tree layer. Store errors stay typed inside
//! [`TreeError::Store`]; proof decoding has its own [`DecodeError`](crate::proof::DecodeError).

pub use ms_smt_core::error::{PlanError, SumOverflow};

/// Why a write through a forest's links ([`Link`](crate::Link)) cannot
/// be planned; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// A write named a parent tree directly: a parent's leaves follow its
    /// children's roots and are written by the forest alone.
    #[error("namespace {namespace:?} is a parent tree: its leaves follow its children")]
    ParentWrite {
        /// The parent namespace.
        namespace: String,
    },
    /// Two links claim the same child.
    #[error("namespace {child:?} is a child of both {first:?} and {second:?}")]
    TwoParents {
        /// The child namespace.
        child: String,
        /// One parent.
        first: String,
        /// Another.
        second: String,
    },
    /// Following parents from a namespace comes back to it (a rule that
    /// accepts its own parent, say), or goes up more than
    /// [`MAX_NESTED_LEVELS`](crate::proof::MAX_NESTED_LEVELS) levels.
    #[error("the parents of namespace {namespace:?} form a cycle or a chain too long")]
    Cycle {
        /// Where the walk up started.
        namespace: String,
    },
}

/// Errors of tree operations, generic over the store's own error type.
#[derive(Debug, thiserror::Error)]
pub enum TreeError<E: std::error::Error + 'static> {
    /// The descent rejected the operation; nothing was written.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[source] E),
    /// Other writers kept moving the root; the operation gave up after this
    /// many optimistic attempts and wrote nothing.
    #[error("gave up after {attempts} attempts: concurrent writers kept changing the root")]
    Contention {
        /// Attempts made.
        attempts: u32,
    },
    /// The forest's links refuse the write ([`LinkError`]).
    #[error(transparent)]
    Link(#[from] LinkError),
    /// No pin of that name exists in the tree's namespace.
    #[error("no pin named {name:?}")]
    NoSuchPin {
        /// The name asked for.
        name: String,
    },
    /// A request named a root the tree no longer has (serve such requests
    /// from a pinned root).
    #[error("the tree's root moved from {expected:?} to {current:?}")]
    RootMoved {
        /// The root the request named.
        expected: crate::node::ComputedNode,
        /// The tree's root now.
        current: crate::node::ComputedNode,
    },
    /// A request asked for the children of a leaf position (level 256).
    #[error("{position:?} is at the leaf level and has no children")]
    NoChildren {
        /// The position.
        position: crate::position::Position,
    },
    /// The store does not offer what the operation needs (for example a
    /// custom store without [`audit`](crate::store::AuditStore::audit)
    /// cannot be audited).
    #[error("the store does not support {operation}")]
    Unsupported {
        /// The operation.
        operation: &'static str,
    },
}

impl<E: std::error::Error + 'static> TreeError<E> {
    /// True when the operation was rejected because a sum would overflow u64.
    pub fn is_overflow(&self) -> bool {
        matches!(
            self,
            TreeError::Plan(PlanError::Overflow(_) | PlanError::BatchSumOverflow)
        )
    }
}
