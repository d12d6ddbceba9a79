//! Pinned roots: a root kept readable under a name while writers move the
//! tree on.

use crate::node::ComputedNode;

/// A root kept readable under a name while writers move the tree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The pin's name, unique within its namespace.
    pub name: String,
    /// The root it holds.
    pub root: ComputedNode,
    /// The namespace's version when it was pinned: the number of commits
    /// the namespace had taken then. Reads at [`ReadAt::Version`](crate::store::ReadAt::Version) of it see
    /// `root`.
    pub version: u64,
}
