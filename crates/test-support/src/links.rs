//! Forests with one parent over a prefix of names, as the forest tests
//! build them.

use ms_smt::store::ForestStore;
use ms_smt::{Compacted, Forest, Key, Link};
use ms_smt_core::hash::sha256;

/// The key of child `name` in its parent.
pub fn child_key(name: &str) -> Key {
    Key(sha256(name.as_bytes()).0)
}

/// A forest whose parent `p` holds every namespace named `p/...`.
pub fn forest_of<S: ForestStore>(store: S, p: &str) -> Forest<S, Compacted> {
    let prefix = format!("{p}/");
    Forest::new(store).with_link(Link::rule(p, move |name| {
        name.starts_with(&prefix).then(|| child_key(name))
    }))
}
