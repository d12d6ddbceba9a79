//! The audit of a forest's links: every parent leaf against its child's
//! root.

use std::collections::BTreeMap;

use crate::audit::links::{LinkAudit, LinkProblem};
use crate::error::TreeError;
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::store::ForestStore;
use crate::tree::Forest;

impl<S: ForestStore, L: Layout> Forest<S, L>
where
    S::Tree: Clone,
{
    /// Checks every link: each child's leaf in its parent must be
    /// `(child root hash, child root sum)` (or the link's fixed sum), a
    /// child that holds a tree must have one, and the parent must hold no
    /// leaf of a key no child has. A rule's children are the store's
    /// namespaces it accepts ([`ForestStore::names`]); a child never
    /// written (an empty tree and no leaf) is fine.
    ///
    /// Reads each parent's leaves and its children's roots; run it while
    /// no writer works the forest (or expect a write between the two reads
    /// to show as a mismatch). Repairs nothing.
    pub async fn audit_links(&self) -> Result<LinkAudit, TreeError<S::Error>> {
        let links = self.links().to_vec();
        let names = if links.iter().any(|l| l.listed().is_none()) {
            self.store().names().await.map_err(TreeError::Store)?
        } else {
            Vec::new()
        };
        let mut audit = LinkAudit::default();
        for link in links {
            let parent = link.parent().to_owned();
            let children: Vec<(String, Key)> = match link.listed() {
                Some(listed) => listed.iter().map(|(n, k)| (n.clone(), *k)).collect(),
                None => names
                    .iter()
                    .filter(|n| **n != parent)
                    .filter_map(|n| link.key_of(n).map(|k| (n.clone(), k)))
                    .collect(),
            };
            let roots = self
                .roots(&children.iter().map(|(n, _)| n).collect::<Vec<_>>())
                .await?;
            let mut leaves: BTreeMap<Key, Leaf> = self
                .tree(&parent)?
                .view()
                .leaves(..)
                .collect_all()
                .await?
                .into_iter()
                .map(|e| (e.key, e.leaf))
                .collect();
            audit.parents += 1;
            for ((child, key), root) in children.into_iter().zip(roots) {
                audit.children += 1;
                let found = leaves.remove(&key).unwrap_or_else(Leaf::empty);
                if root == ComputedNode::empty_root() && found.is_empty() {
                    continue;
                }
                let expected = link.sum().leaf(&root);
                if found != expected {
                    audit.problems.push(LinkProblem::Mismatch {
                        parent: parent.clone(),
                        child,
                        key,
                        expected,
                        found,
                    });
                }
            }
            audit
                .problems
                .extend(leaves.into_keys().map(|key| LinkProblem::Orphan {
                    parent: parent.clone(),
                    key,
                }));
        }
        Ok(audit)
    }
}
