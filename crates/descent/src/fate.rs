//! What a batch does to the stored compacted leaf its keys reach: the one
//! decision both the update and the walk that lifts beforehand take.

use crate::items::Item;
use crate::key::Key;
use crate::leaf::Leaf;

/// The compacted leaf at `key` under a subtree the batch `items` rewrites.
pub(crate) enum Fate<'a> {
    /// It stays as it is. `replaced`: a batch key names it (rewriting the
    /// same leaf, with every other key deleting), so its sum counts as
    /// replaced.
    Kept { replaced: bool },
    /// A batch key replaces it: the subtree is built from `items` alone.
    Replaced,
    /// It stays beside new keys: the subtree is built from these items.
    Joined(Vec<Item<'a>>),
}

/// The fate of the leaf `leaf` at `key` (full key) under `items`, which
/// are sorted in tree order.
pub(crate) fn fate<'a>(items: &[Item<'a>], key: Key, leaf: &'a Leaf) -> Fate<'a> {
    match items.binary_search_by(|it| it.key.tree_cmp(&key)) {
        Ok(hit) => {
            let others_empty = items
                .iter()
                .enumerate()
                .all(|(i, it)| i == hit || it.leaf.is_empty());
            if others_empty && items[hit].leaf == leaf {
                Fate::Kept { replaced: true }
            } else {
                Fate::Replaced
            }
        }
        // Deleting absent keys writes nothing (spec §9 B2).
        Err(_) if items.iter().all(|it| it.leaf.is_empty()) => Fate::Kept { replaced: false },
        Err(at) => {
            let mut merged = Vec::with_capacity(items.len() + 1);
            merged.extend_from_slice(&items[..at]);
            merged.push(Item { key, leaf });
            merged.extend_from_slice(&items[at..]);
            Fate::Joined(merged)
        }
    }
}
