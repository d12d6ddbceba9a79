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

/// Sorts `batch` in tree order and keeps one pair per key (the **last**,
/// as [`prepare`] does), in place: a write does this once on the way in,
/// and every later pass over the batch ([`prepare_pairs`], [`sorted_keys`])
/// then meets sorted input and only checks it.
pub fn normalize(batch: &mut Vec<(Key, Leaf)>) {
    if is_strictly_sorted(batch.iter().map(|(key, _)| key)) {
        return;
    }
    // Stable: equal keys keep their input order, so the last one is last.
    batch.sort_by(|a, b| a.0.tree_cmp(&b.0));
    let mut kept = 0usize;
    for next in 0..batch.len() {
        let same = kept
            .checked_sub(1)
            .is_some_and(|last| batch[last].0 == batch[next].0);
        if same {
            // A later pair of the kept key replaces it.
            batch.swap(kept - 1, next);
        } else {
            batch.swap(kept, next);
            kept += 1;
        }
    }
    batch.truncate(kept);
}

/// True when `keys` rise strictly in tree order (sorted, no key twice).
fn is_strictly_sorted<'a>(keys: impl IntoIterator<Item = &'a Key>) -> bool {
    let mut keys = keys.into_iter();
    let Some(mut prev) = keys.next() else {
        return true;
    };
    for key in keys {
        if prev.tree_cmp(key) != core::cmp::Ordering::Less {
            return false;
        }
        prev = key;
    }
    true
}

/// [`prepare`] of pairs that need not sit in one slice (several
/// submissions to one tree, in order). Pairs already in strict tree order
/// (a [`normalize`]d batch) are taken as they come, in one pass.
pub fn prepare_pairs<'a>(pairs: impl IntoIterator<Item = &'a (Key, Leaf)>) -> Vec<Item<'a>> {
    let mut items: Vec<Item<'a>> = pairs
        .into_iter()
        .map(|(key, leaf)| Item { key: *key, leaf })
        .collect();
    if is_strictly_sorted(items.iter().map(|it| &it.key)) {
        return items;
    }
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
    if is_strictly_sorted(keys) {
        return keys.to_vec();
    }
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

    /// `normalize` keeps what `prepare` keeps, in the same order, for
    /// batches with repeats, out of order and already sorted.
    #[test]
    fn normalize_matches_prepare() {
        let key = |b: u8| Key([b; 32]);
        let leaf = |v: u8| Leaf::new(alloc::vec![v], u64::from(v) + 1);
        let batches: [Vec<(Key, Leaf)>; 5] = [
            alloc::vec![],
            alloc::vec![(key(1), leaf(1))],
            alloc::vec![
                (key(2), leaf(1)),
                (key(1), leaf(2)),
                (key(2), leaf(3)),
                (key(3), leaf(4)),
                (key(2), leaf(5)),
                (key(1), leaf(6))
            ],
            alloc::vec![(key(5), leaf(1)), (key(5), leaf(2)), (key(5), leaf(3))],
            alloc::vec![(key(2), leaf(1)), (key(1), leaf(2)), (key(3), leaf(3))],
        ];
        for batch in batches {
            let want: Vec<(Key, Leaf)> = prepare(&batch)
                .iter()
                .map(|it| (it.key, it.leaf.clone()))
                .collect();
            let mut got = batch.clone();
            normalize(&mut got);
            assert_eq!(got, want, "batch {batch:?}");
            // Sorted input passes through every pass unchanged.
            let again: Vec<(Key, Leaf)> = prepare(&got)
                .iter()
                .map(|it| (it.key, it.leaf.clone()))
                .collect();
            assert_eq!(again, want);
        }
    }
}
