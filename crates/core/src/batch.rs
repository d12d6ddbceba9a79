//! Batches of keys and leaves in tree order, one entry per key.

use alloc::vec::Vec;

use crate::key::Key;
use crate::leaf::Leaf;

/// One key of a batch with the leaf it should hold after the write.
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    /// The key.
    pub key: Key,
    /// The leaf it should hold (the empty leaf deletes).
    pub leaf: &'a Leaf,
}

/// The batch sorted in tree order with one item per key: when a key occurs
/// more than once the **last** occurrence wins, as a map built by inserting
/// the pairs in order would.
pub fn prepare(batch: &[(Key, Leaf)]) -> Vec<Item<'_>> {
    prepare_pairs(batch)
}

/// [`prepare`] of pairs that need not sit in one slice (several
/// submissions to one tree, in order).
pub fn prepare_pairs<'a>(pairs: impl IntoIterator<Item = &'a (Key, Leaf)>) -> Vec<Item<'a>> {
    let mut items: Vec<Item<'a>> = pairs
        .into_iter()
        .map(|(key, leaf)| Item { key: *key, leaf })
        .collect();
    // Stable: equal keys keep their input order, so the last one is last.
    items.sort_by(|a, b| a.key.tree_cmp(&b.key));
    let mut out: Vec<Item<'a>> = Vec::with_capacity(items.len());
    for item in items {
        match out.last_mut() {
            Some(last) if last.key == item.key => *last = item,
            _ => out.push(item),
        }
    }
    out
}

/// Keys sorted in tree order without duplicates.
pub fn sorted_keys(keys: &[Key]) -> Vec<Key> {
    let mut out = keys.to_vec();
    out.sort_unstable_by(|a, b| a.tree_cmp(b));
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sorted_in_tree_order_once() {
        let (a, b) = (Key([2; 32]), Key([1; 32]));
        // Bit 0: b has it set, a does not, so a comes first.
        assert_eq!(sorted_keys(&[b, a, b]), [a, b]);
    }
}
