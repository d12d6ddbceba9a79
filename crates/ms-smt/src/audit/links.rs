//! What an audit of a forest's links finds
//! ([`Forest::audit_links`](crate::Forest::audit_links)).

use crate::key::Key;
use crate::leaf::Leaf;

/// A parent leaf that does not follow its child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkProblem {
    /// The parent's leaf for a child is not `(child root hash, child root
    /// sum)` (or the link's fixed sum): the child was written around the
    /// forest, or the two were changed apart. An absent leaf is found
    /// empty.
    Mismatch {
        /// The parent namespace.
        parent: String,
        /// The child namespace.
        child: String,
        /// The child's key in the parent.
        key: Key,
        /// The leaf the child's root calls for.
        expected: Leaf,
        /// The leaf the parent holds.
        found: Leaf,
    },
    /// The parent holds a leaf at a key no child of its link has.
    Orphan {
        /// The parent namespace.
        parent: String,
        /// The leaf's key.
        key: Key,
    },
}

/// The result of an audit of a forest's links.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkAudit {
    /// Parent trees checked.
    pub parents: u64,
    /// Children checked (namespaces a link claims, written or not).
    pub children: u64,
    /// Everything that does not match, parent by parent.
    pub problems: Vec<LinkProblem>,
}

impl LinkAudit {
    /// True when every parent leaf follows its child and no parent holds a
    /// leaf of no child.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}
