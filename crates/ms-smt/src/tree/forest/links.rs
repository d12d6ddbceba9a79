//! Parent trees: a declared link makes namespace P hold, for each of its
//! children, a leaf whose value is the child's root hash and whose sum is
//! the child's root sum (or a fixed sum), written in the same commit as
//! every change to the child (tapd's multiverse over its universes, a
//! root supply tree over its mint, burn and ignore trees).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::LinkSum;
use crate::error::LinkError;
use crate::key::Key;

/// A rule on names: `Some(key)` for a child, at that key.
type Rule = dyn Fn(&str) -> Option<Key> + Send + Sync;

/// Which namespaces are a link's children, and each one's key in the
/// parent.
#[derive(Clone)]
enum Children {
    /// A fixed list.
    Listed(Arc<BTreeMap<String, Key>>),
    /// A rule on names: `Some(key)` for a child.
    Rule(Arc<Rule>),
}

/// A declared link: namespace `parent` is the parent tree of a set of
/// child namespaces (a fixed list, or a rule on names), each at a key the
/// caller gives.
///
/// ```
/// use ms_smt::{Key, Link, LinkSum};
/// use sha2::{Digest, Sha256};
///
/// // A multiverse in the shape of tapd's issuance multiverse: one leaf per
/// // universe, keyed here by the hash of the part of the name after
/// // "issuance-", summing 1 per universe. (tapd keys it by the universe's
/// // 32 ID bytes themselves: `ms_smt::multiverse::multiverse_links`.)
/// let multiverse = Link::rule("multiverse-issuance", |name| {
///     let id = name.strip_prefix("issuance-")?;
///     Some(Key(Sha256::digest(id.as_bytes()).into()))
/// })
/// .with_sum(LinkSum::Fixed(1));
/// assert!(multiverse.key_of("issuance-abc").is_some());
/// assert!(multiverse.key_of("transfer-abc").is_none());
///
/// // A root supply tree over three sub-trees at fixed keys.
/// let supply = Link::children(
///     "supply-root",
///     [("mint", Key([1; 32])), ("burn", Key([2; 32])), ("ignore", Key([3; 32]))],
/// );
/// assert_eq!(supply.key_of("burn"), Some(Key([2; 32])));
/// ```
#[derive(Clone)]
pub struct Link {
    parent: Arc<str>,
    children: Children,
    sum: LinkSum,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("Link");
        out.field("parent", &self.parent).field("sum", &self.sum);
        match &self.children {
            Children::Listed(children) => out.field("children", children),
            Children::Rule(_) => out.field("children", &"<rule>"),
        };
        out.finish()
    }
}

impl Link {
    /// `parent` over a fixed list of children, each at its key.
    pub fn children<N: Into<String>>(
        parent: &str,
        children: impl IntoIterator<Item = (N, Key)>,
    ) -> Link {
        Link {
            parent: Arc::from(parent),
            children: Children::Listed(Arc::new(
                children.into_iter().map(|(n, k)| (n.into(), k)).collect(),
            )),
            sum: LinkSum::ChildRoot,
        }
    }

    /// `parent` over every namespace for which `rule` gives a key.
    pub fn rule(parent: &str, rule: impl Fn(&str) -> Option<Key> + Send + Sync + 'static) -> Link {
        Link {
            parent: Arc::from(parent),
            children: Children::Rule(Arc::new(rule)),
            sum: LinkSum::ChildRoot,
        }
    }

    /// This link with the parent's leaves summed by `sum` (default: the
    /// child's root sum).
    pub fn with_sum(mut self, sum: LinkSum) -> Link {
        self.sum = sum;
        self
    }

    /// The parent namespace.
    pub fn parent(&self) -> &str {
        &self.parent
    }

    /// How the parent's leaves are summed.
    pub fn sum(&self) -> LinkSum {
        self.sum
    }

    /// The key of `child` in the parent; `None` when it is not a child.
    pub fn key_of(&self, child: &str) -> Option<Key> {
        match &self.children {
            Children::Listed(children) => children.get(child).copied(),
            Children::Rule(rule) => rule(child),
        }
    }

    /// The children of a fixed list; `None` for a rule.
    pub(crate) fn listed(&self) -> Option<&BTreeMap<String, Key>> {
        match &self.children {
            Children::Listed(children) => Some(children),
            Children::Rule(_) => None,
        }
    }
}

/// Where a child sits in its parent.
#[derive(Debug, Clone)]
pub(crate) struct Parent {
    /// The parent namespace.
    pub name: Arc<str>,
    /// The child's key there.
    pub key: Key,
    /// How the child's leaf is summed.
    pub sum: LinkSum,
}

/// A forest's links.
#[derive(Debug, Clone, Default)]
pub(crate) struct Links(Arc<[Link]>);

impl Links {
    /// `links` plus `link`.
    pub fn with(&self, link: Link) -> Links {
        let mut all = self.0.to_vec();
        all.push(link);
        Links(all.into())
    }

    /// Every link.
    pub fn all(&self) -> &[Link] {
        &self.0
    }

    /// True when some link names `name` as its parent.
    pub fn is_parent(&self, name: &str) -> bool {
        self.0.iter().any(|l| &*l.parent == name)
    }

    /// The parent of `name`, if a link claims it; two links claiming it is
    /// an error.
    pub fn parent_of(&self, name: &str) -> Result<Option<Parent>, LinkError> {
        let mut found: Option<Parent> = None;
        for link in self.0.iter() {
            let Some(key) = link.key_of(name) else {
                continue;
            };
            if let Some(first) = &found {
                return Err(LinkError::TwoParents {
                    child: name.to_owned(),
                    first: first.name.to_string(),
                    second: link.parent.to_string(),
                });
            }
            found = Some(Parent {
                name: link.parent.clone(),
                key,
                sum: link.sum,
            });
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_has_one_parent() {
        let links = Links::default()
            .with(Link::children("p", [("a", Key([1; 32]))]))
            .with(Link::rule("q", |n| {
                n.starts_with('a').then_some(Key([2; 32]))
            }));
        assert!(matches!(
            links.parent_of("a"),
            Err(LinkError::TwoParents { .. })
        ));
        let parent = links.parent_of("ab").expect("one").expect("a parent");
        assert_eq!((&*parent.name, parent.key), ("q", Key([2; 32])));
        assert!(links.parent_of("b").expect("none").is_none());
        assert!(links.is_parent("p") && !links.is_parent("a"));
    }
}
