//! The trees a forest has met: one handle per namespace, with its place
//! in the links (its parent and how far up its chain goes), resolved once
//! per name and shared by every writer and read of the forest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::LinkSum;
use crate::error::{LinkError, TreeError};
use crate::key::Key;
use crate::proof::MAX_NESTED_LEVELS;
use crate::store::ForestStore;
use crate::tree::engine::Entry;
use crate::tree::forest::links::Links;

/// Where a name sits in its parent: the parent's name, its key there
/// and how its leaf is summed.
type Place = (String, Key, LinkSum);

/// Every tree met so far, by name.
#[derive(Debug)]
pub(crate) struct Registry<T> {
    links: Links,
    trees: Mutex<HashMap<Arc<str>, Arc<Entry<T>>>>,
}

impl<T> Registry<T> {
    /// An empty registry over `links`.
    pub fn new(links: Links) -> Self {
        Registry {
            links,
            trees: Mutex::new(HashMap::new()),
        }
    }

    /// The links.
    pub fn links(&self) -> &Links {
        &self.links
    }

    /// The tree `name`, its handle made by `store` and its parents
    /// resolved on first sight.
    pub fn resolve<S>(&self, store: &S, name: &str) -> Result<Arc<Entry<T>>, TreeError<S::Error>>
    where
        S: ForestStore<Tree = T>,
    {
        let mut trees = self.trees.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = trees.get(name) {
            return Ok(entry.clone());
        }
        // The names from `name` up to the first one already known (or a
        // top tree), each with where it sits in its parent.
        let mut path: Vec<(String, Option<Place>)> = Vec::new();
        let mut next = name.to_owned();
        loop {
            if path.len() > MAX_NESTED_LEVELS || path.iter().any(|(n, _)| *n == next) {
                return Err(LinkError::Cycle {
                    namespace: name.to_owned(),
                }
                .into());
            }
            if trees.contains_key(next.as_str()) {
                break;
            }
            let parent = self.links.parent_of(&next)?;
            let up = parent.as_ref().map(|p| p.name.to_string());
            path.push((next, parent.map(|p| (p.name.to_string(), p.key, p.sum))));
            match up {
                Some(up) => next = up,
                None => break,
            }
        }
        // Registered top down, so each parent exists before its child.
        let mut made = None;
        for (tree, parent) in path.into_iter().rev() {
            let parent = match parent {
                Some((p, key, sum)) => match trees.get(p.as_str()) {
                    Some(entry) => Some((entry.clone(), key, sum)),
                    None => {
                        return Err(LinkError::Cycle {
                            namespace: name.to_owned(),
                        }
                        .into());
                    }
                },
                None => None,
            };
            let level = parent.as_ref().map_or(0, |(p, _, _)| p.level + 1);
            if level > MAX_NESTED_LEVELS {
                return Err(LinkError::Cycle {
                    namespace: name.to_owned(),
                }
                .into());
            }
            let entry = Arc::new(Entry {
                id: trees.len(),
                store: store.tree(&tree).map_err(TreeError::Store)?,
                is_parent: self.links.is_parent(&tree),
                name: Arc::from(tree.as_str()),
                parent,
                level,
            });
            trees.insert(entry.name.clone(), entry.clone());
            made = Some(entry);
        }
        made.or_else(|| trees.get(name).cloned()).ok_or_else(|| {
            LinkError::Cycle {
                namespace: name.to_owned(),
            }
            .into()
        })
    }

    /// [`resolve`](Self::resolve) for a write: a parent tree is refused.
    pub fn resolve_write<S>(
        &self,
        store: &S,
        name: &str,
    ) -> Result<Arc<Entry<T>>, TreeError<S::Error>>
    where
        S: ForestStore<Tree = T>,
    {
        let entry = self.resolve(store, name)?;
        if entry.is_parent {
            return Err(LinkError::ParentWrite {
                namespace: name.to_owned(),
            }
            .into());
        }
        Ok(entry)
    }
}
