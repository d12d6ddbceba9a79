//! A tree as the write engine knows it: its store handle and its place in
//! the links (its parent, its key there, how far up its chain goes).

use std::sync::Arc;

use crate::LinkSum;
use crate::key::Key;

/// A tree's number among the trees a writer or forest has met (in the
/// order first met).
pub(crate) type TreeId = usize;

/// A tree of a write.
#[derive(Debug)]
pub(crate) struct Entry<T> {
    pub id: TreeId,
    pub name: Arc<str>,
    /// The store handle on its namespace.
    pub store: T,
    /// Its parent, its key there and how its leaf is summed.
    pub parent: Option<(Arc<Entry<T>>, Key, LinkSum)>,
    /// How many parents are above it (0: a top tree).
    pub level: usize,
    /// True when some link names it as a parent (only the forest writes it).
    pub is_parent: bool,
}

impl<T> Entry<T> {
    /// A tree with no parent and no children: what one tree's writes name.
    pub fn alone(name: &str, store: T) -> Arc<Self> {
        Arc::new(Entry {
            id: 0,
            name: Arc::from(name),
            store,
            parent: None,
            level: 0,
            is_parent: false,
        })
    }

    /// This tree and every tree above it, nearest first.
    pub fn chain(self: &Arc<Self>) -> impl Iterator<Item = &Arc<Entry<T>>> {
        std::iter::successors(Some(self), |e| e.parent.as_ref().map(|(p, _, _)| p))
    }
}
