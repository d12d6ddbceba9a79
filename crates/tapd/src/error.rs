//! What can go wrong reading, importing or exporting tapd trees.

use crate::hash::Hash;
use crate::position::Position;
use ms_smt::TreeError;

/// A fault found in a tapd namespace: what is wrong, and the node (hash
/// and position) where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Corruption {
    /// `mssmt_roots` names a root hash that has no row.
    #[error("{namespace}: the root {hash} has no row")]
    RootMissing {
        /// The namespace.
        namespace: String,
        /// The root hash it names.
        hash: Hash,
    },
    /// A branch points at a child that has no row (and is not the empty
    /// subtree of its height).
    #[error("{namespace}: no row for {hash} at {position:?}")]
    MissingRow {
        /// The namespace.
        namespace: String,
        /// The hash its parent holds.
        hash: Hash,
        /// Where it should sit.
        position: Position,
    },
    /// A leaf row whose key, value or sum does not hash to its hash key at
    /// the height where it sits.
    #[error(
        "{namespace}: leaf {hash} at {position:?} does not hash to its key (key, value or sum changed)"
    )]
    LeafMismatch {
        /// The namespace.
        namespace: String,
        /// The row's hash key.
        hash: Hash,
        /// Where it sits.
        position: Position,
    },
    /// A leaf row at a position its key does not lead to.
    #[error("{namespace}: leaf {hash} at {position:?} has a key that leads elsewhere")]
    WrongPosition {
        /// The namespace.
        namespace: String,
        /// The row's hash key.
        hash: Hash,
        /// Where it sits.
        position: Position,
    },
    /// A branch row whose children and sum do not hash to its hash key.
    #[error("{namespace}: branch {hash} at {position:?} does not hash to its key")]
    BranchHash {
        /// The namespace.
        namespace: String,
        /// The row's hash key.
        hash: Hash,
        /// Where it sits.
        position: Position,
    },
    /// A branch row whose stored sum is not its children's.
    #[error(
        "{namespace}: branch {hash} at {position:?} stores sum {stored}, its children hold {children}"
    )]
    BranchSum {
        /// The namespace.
        namespace: String,
        /// The row's hash key.
        hash: Hash,
        /// Where it sits.
        position: Position,
        /// The stored sum.
        stored: u64,
        /// The children's sums added up.
        children: u128,
    },
    /// A row that is neither a leaf (key and value) nor a branch (two
    /// 32-byte children), or a branch below the leaf level.
    #[error("{namespace}: row {hash} at {position:?} is malformed")]
    Malformed {
        /// The namespace.
        namespace: String,
        /// The row's hash key.
        hash: Hash,
        /// Where it sits.
        position: Position,
    },
    /// The tree rebuilt from the walked leaves has another root than
    /// tapd's, and no single row could be blamed.
    #[error("{namespace}: rebuilt root {got:?} differs from tapd's {expected:?}")]
    RootMismatch {
        /// The namespace.
        namespace: String,
        /// tapd's root.
        expected: crate::node::ComputedNode,
        /// The rebuilt root.
        got: crate::node::ComputedNode,
    },
}

/// Why a tapd database could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TapdError {
    /// The SQLite file does not exist.
    #[error("no such file: {0}")]
    NoSuchFile(std::path::PathBuf),
    /// The database has no `mssmt_nodes` / `mssmt_roots` tables.
    #[error("not a tapd database (no mssmt_nodes/mssmt_roots tables)")]
    NotTapd,
    /// The database failed.
    #[error("database: {0}")]
    Sql(#[from] sqlx::Error),
    /// A statement through the crate's SQL core failed.
    #[error("database: {0}")]
    Store(#[from] ms_smt_sql::SqlStoreError),
    /// The tree is damaged (boxed: it names a node, and keeps every
    /// result small).
    #[error(transparent)]
    Corrupt(Box<Corruption>),
}

impl From<Corruption> for TapdError {
    fn from(c: Corruption) -> Self {
        TapdError::Corrupt(Box::new(c))
    }
}

/// Why an import stopped; the target namespace is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum ImportError<E: std::error::Error + 'static> {
    /// Reading or checking the tapd source failed.
    #[error("tapd source: {0}")]
    Source(#[from] TapdError),
    /// The ms-smt target failed.
    #[error("target: {0}")]
    Target(#[source] TreeError<E>),
    /// The target namespace holds another tree and `replace` was not set.
    #[error("target namespace {0:?} is not empty (use replace)")]
    TargetNotEmpty(String),
}

/// Why an export stopped; the tapd database is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum ExportError<E: std::error::Error + 'static> {
    /// Writing the tapd database failed.
    #[error("tapd target: {0}")]
    Target(#[from] TapdError),
    /// Reading the ms-smt tree failed.
    #[error("source: {0}")]
    Source(#[source] TreeError<E>),
    /// The tapd namespace already has rows and `replace` was not set.
    #[error("tapd namespace {0:?} already exists (use replace)")]
    NamespaceExists(String),
    /// The tapd tables are missing and `create_schema` was not set.
    #[error("the tapd tables do not exist (use create_schema)")]
    NoSchema,
}
